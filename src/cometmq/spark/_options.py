"""The connector's options, parsed once on the driver (pure: no I/O).

Named like Spark's Kafka source where the idea is the same. Spark hands options over in a
case-insensitive dict with lower-cased keys; every value is a string.
"""

from __future__ import annotations

import datetime
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from cometmq.client import security_options
from cometmq.errors import OptionError
from cometmq.spark._offsets import EARLIEST, LATEST, from_json

__all__ = [
    "READ_OPTION_NAMES",
    "ConnectOptions",
    "ReadOptions",
    "WriteOptions",
    "parse_duration_ms",
    "parse_timestamp_ms",
    "unknown_read_options",
]

DEFAULT_NAMESRV = "127.0.0.1:9876"
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Kafka's maxTriggerDelay default, 15m
# The sink's defaults are RocketMQ's producer's: sendMsgTimeout 3 s, retryTimesWhenSendFailed 2.
DEFAULT_SEND_TIMEOUT_MS = 3000
DEFAULT_SEND_RETRIES = 2
DEFAULT_RETRY_BACKOFF_MS = 1000
# Bounds on what a user sets, so that a typo (an extra zero or three) fails at once rather than
# planning millions of partitions, retrying for hours or waiting for weeks.
MAX_MIN_PARTITIONS = 10_000
MAX_RETRIES = 100
MAX_WAIT_MS = 86_400_000  # a day: timeouts, retry intervals and backoffs


CONNECT_OPTION_NAMES = ("accessKey", "secretKey", "tls", "tlsCaFile", "tlsCertFile", "tlsKeyFile")


@dataclass(frozen=True, slots=True)
class ConnectOptions:
    """How every client the source or sink makes (on the driver and on the executors) reaches the
    servers: ``accessKey``/``secretKey`` sign its requests, ``tls`` (true/false) with ``tlsCaFile``,
    ``tlsCertFile``, ``tlsKeyFile`` (paths that must exist on every executor too) turn TLS on. Plain
    strings, so that it pickles to the executors; the secret stays out of its repr."""

    access_key: str = ""
    secret_key: str = field(default="", repr=False)
    tls: bool = False
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> ConnectOptions:
        """From the lower-cased options."""
        access_key = opts.get("accesskey", "").strip()
        secret_key = opts.get("secretkey", "")
        if bool(access_key) != bool(secret_key):
            raise OptionError("the options 'accessKey' and 'secretKey' go together: give both or neither")
        ca, cert, key = (
            opts.get(name, "").strip() or None for name in ("tlscafile", "tlscertfile", "tlskeyfile")
        )
        if key and not cert:
            raise OptionError("the option 'tlsKeyFile' needs 'tlsCertFile'")
        return cls(
            access_key=access_key,
            secret_key=secret_key,
            tls=_bool(opts, "tls", bool(ca or cert)),
            tls_ca_file=ca,
            tls_cert_file=cert,
            tls_key_file=key,
        )

    def client_options(self) -> dict[str, Any]:
        """``credentials=…, tls=…`` for a client's constructor."""
        return security_options(
            self.access_key,
            self.secret_key,
            self.tls,
            self.tls_ca_file,
            self.tls_cert_file,
            self.tls_key_file,
        )


# Every option a read takes, as documented (Spark hands them over lower-cased): messages name them
# so, and an option that is none of these is warned about.
READ_OPTION_NAMES = (
    "namesrv", "topic", "topicPattern", "subExpression", "startingOffsets", "startingOffsetsByTimestamp",
    "startingTimestamp", "endingOffsets", "endingTimestamp", "maxOffsetsPerTrigger", "minOffsetsPerTrigger",
    "maxTriggerDelay", "minPartitions", "failOnDataLoss", "failOnMissingTopic", "includeProperties",
    "requestTimeoutMs", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "pushFilters",
    *CONNECT_OPTION_NAMES,
)  # fmt: skip
_DOCUMENTED = {name.lower(): name for name in READ_OPTION_NAMES}
DEFAULT_REQUEST_TIMEOUT_MS = 10_000
DEFAULT_FETCH_RETRIES = 3
DEFAULT_FETCH_RETRY_INTERVAL_MS = 1000


@dataclass(frozen=True, slots=True)
class ReadOptions:
    namesrv: str
    topics: tuple[str, ...]
    topic_pattern: re.Pattern[str] | None
    sub_expression: str
    starting_offsets: str | None  # "earliest", "latest", JSON, or None for the default
    starting_offsets_by_timestamp: str | None  # JSON of a store time (ms) per queue
    starting_timestamp: int | None
    ending_offsets: str | None  # "latest", JSON, or None for the default (latest; batch only)
    ending_timestamp: int | None
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    fail_on_data_loss: bool
    fail_on_missing_topic: bool
    include_properties: bool
    request_timeout_ms: int
    fetch_retries: int
    fetch_retry_interval_ms: int
    push_filters: bool
    connect: ConnectOptions

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        opts = {k.lower(): v for k, v in options.items()}
        topics = tuple(t.strip() for t in opts.get("topic", "").split(",") if t.strip())
        pattern = opts.get("topicpattern", "").strip()
        if bool(topics) == bool(pattern):
            raise OptionError("give exactly one of the options 'topic' (comma-separated) and 'topicPattern'")
        compiled = None
        if pattern:
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise OptionError(f"topicPattern {pattern!r} is not a regular expression: {exc}") from None
        expression = opts.get("subexpression", "*").strip() or "*"
        max_per_trigger = _positive_int(opts, "maxOffsetsPerTrigger")
        min_per_trigger = _positive_int(opts, "minOffsetsPerTrigger")
        if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
            raise OptionError(
                f"minOffsetsPerTrigger ({min_per_trigger}) is larger than "
                f"maxOffsetsPerTrigger ({max_per_trigger})"
            )
        ending_offsets = _offsets_spec(opts, "endingOffsets")
        if ending_offsets == "earliest":
            raise OptionError(
                "endingOffsets cannot be 'earliest': the range would be empty (as in Spark's Kafka source)"
            )
        return cls(
            namesrv=opts.get("namesrv", DEFAULT_NAMESRV).strip() or DEFAULT_NAMESRV,
            topics=topics,
            topic_pattern=compiled,
            sub_expression=expression,
            starting_offsets=_offsets_spec(opts, "startingOffsets"),
            starting_offsets_by_timestamp=_json_spec(opts, "startingOffsetsByTimestamp"),
            starting_timestamp=_timestamp(opts, "startingTimestamp"),
            ending_offsets=ending_offsets,
            ending_timestamp=_timestamp(opts, "endingTimestamp"),
            max_offsets_per_trigger=max_per_trigger,
            min_offsets_per_trigger=min_per_trigger,
            max_trigger_delay_ms=parse_duration_ms(opts["maxtriggerdelay"], "maxTriggerDelay")
            if "maxtriggerdelay" in opts
            else DEFAULT_MAX_TRIGGER_DELAY_MS,
            min_partitions=_positive_int(opts, "minPartitions", MAX_MIN_PARTITIONS),
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            fail_on_missing_topic=_bool(opts, "failOnMissingTopic", True),
            include_properties=_bool(opts, "includeProperties", False),
            request_timeout_ms=_positive_int(opts, "requestTimeoutMs", MAX_WAIT_MS)
            or DEFAULT_REQUEST_TIMEOUT_MS,
            fetch_retries=_whole(opts, "fetchOffset.numRetries", DEFAULT_FETCH_RETRIES, MAX_RETRIES),
            fetch_retry_interval_ms=_whole(
                opts, "fetchOffset.retryIntervalMs", DEFAULT_FETCH_RETRY_INTERVAL_MS, MAX_WAIT_MS
            ),
            push_filters=_bool(opts, "pushFilters", False),
            connect=ConnectOptions.parse(opts),
        )

    def check_batch(self) -> None:
        """What a batch read refuses, as Spark's Kafka source does: a start at the queues' ends, an
        end at their starts."""
        if self.starting_offsets == "latest":
            raise OptionError("startingOffsets cannot be 'latest' in a batch read: the range would be empty")
        for name, value, forbidden, word in (
            ("startingOffsets", self.starting_offsets, LATEST, "latest"),
            ("endingOffsets", self.ending_offsets, EARLIEST, "earliest"),
        ):
            if value is None or not value.startswith("{"):
                continue
            named = sorted(queue for queue, offset in from_json(value, name).items() if offset == forbidden)
            if named:
                raise OptionError(
                    f"{name} cannot be {forbidden} ({word}) in a batch read, as given for "
                    f"{', '.join(map(str, named))}"
                )

    def check_stream(self) -> None:
        """What a streaming read refuses: an end (a stream reads on), as Spark's Kafka source does."""
        for name, value in (
            ("endingOffsets", self.ending_offsets),
            ("endingTimestamp", self.ending_timestamp),
        ):
            if value is not None:
                raise OptionError(f"{name} is for batch reads only: a streaming read has no end")


def unknown_read_options(options: Mapping[str, str]) -> list[str]:
    """The options a read does not take, sorted, each as given with the documented option its name
    is close to: Spark hands the options over lower-cased, so ``startingoffset (did you mean
    startingOffsets?)`` shows the spelling to use."""
    unknown = []
    for name in sorted(name for name in options if name.lower() not in _DOCUMENTED):
        close = difflib.get_close_matches(name.lower(), _DOCUMENTED, n=1, cutoff=0.8)
        unknown.append(f"{name} (did you mean {_DOCUMENTED[close[0]]}?)" if close else name)
    return unknown


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """The sink's options. ``sendTimeout`` bounds one attempt to send a batch of rows to its queue;
    ``retries`` is how many more attempts a failure that may pass (no answer, a broker not serving)
    gets on that queue, ``retryBackoff`` apart."""

    namesrv: str
    topic: str | None  # for rows without a topic column (or with a null topic)
    producer_group: str
    connect: ConnectOptions
    send_timeout_ms: int = DEFAULT_SEND_TIMEOUT_MS
    retries: int = DEFAULT_SEND_RETRIES
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        opts = {k.lower(): v for k, v in options.items()}
        send_timeout_ms = _duration(opts, "sendTimeout", DEFAULT_SEND_TIMEOUT_MS)
        if send_timeout_ms <= 0:
            raise OptionError(f"sendTimeout must be positive, not {opts['sendtimeout']!r}")
        return cls(
            namesrv=opts.get("namesrv", DEFAULT_NAMESRV).strip() or DEFAULT_NAMESRV,
            topic=opts.get("topic", "").strip() or None,
            producer_group=opts.get("producergroup", "").strip() or "cometmq-spark-writer",
            connect=ConnectOptions.parse(opts),
            send_timeout_ms=send_timeout_ms,
            retries=_whole(opts, "retries", DEFAULT_SEND_RETRIES, MAX_RETRIES),
            retry_backoff_ms=_duration(opts, "retryBackoff", DEFAULT_RETRY_BACKOFF_MS),
        )


def _offsets_spec(opts: Mapping[str, str], name: str) -> str | None:
    value = opts.get(name.lower())
    if value is None or not value.strip():
        return None
    value = value.strip()
    if value.lower() in ("earliest", "latest"):
        return value.lower()
    if not value.startswith("{"):
        raise OptionError(f"{name} must be 'earliest', 'latest' or JSON offsets per queue, not {value!r}")
    from_json(value, name)
    return value


def _json_spec(opts: Mapping[str, str], name: str) -> str | None:
    """JSON per queue (checked here, kept as given): a value of -2/-1 is refused as no time."""
    value = opts.get(name.lower(), "").strip()
    if not value:
        return None
    negative = sorted(q for q, off in from_json(value, name).items() if off < 0)
    if negative:
        raise OptionError(f"{name}: the time of {negative[0]} must be ms since the epoch (0 or more)")
    return value


def _timestamp(opts: Mapping[str, str], name: str) -> int | None:
    value = opts.get(name.lower(), "")
    return parse_timestamp_ms(value, name) if value.strip() else None


def _positive_int(opts: Mapping[str, str], name: str, most: int | None = None) -> int | None:
    number = _whole(opts, name, None, most)
    if number is not None and number <= 0:
        raise OptionError(f"{name} must be positive, not {number}")
    return number


@overload
def _whole(opts: Mapping[str, str], name: str, default: int, most: int | None = None) -> int: ...
@overload
def _whole(opts: Mapping[str, str], name: str, default: None, most: int | None = None) -> int | None: ...
def _whole(opts: Mapping[str, str], name: str, default: int | None, most: int | None = None) -> int | None:
    value = opts.get(name.lower())
    if value is None or not value.strip():
        return default
    try:
        number = int(value)
    except ValueError:
        raise OptionError(f"{name} must be a whole number, not {value!r}") from None
    if number < 0:
        raise OptionError(f"{name} must be 0 or more, not {number}")
    _check_at_most(name, number, most)
    return number


def _check_at_most(name: str, number: int, most: int | None) -> None:
    if most is not None and number > most:
        raise OptionError(f"{name} must be at most {most}, not {number}")


def _duration(opts: Mapping[str, str], name: str, default_ms: int) -> int:
    """Option ``name`` (in its documented case) as milliseconds, ``default_ms`` when not given; a
    day at most."""
    value = opts.get(name.lower())
    if value is None or not value.strip():
        return default_ms
    millis = parse_duration_ms(value, name)
    _check_at_most(f"{name} (in ms)", millis, MAX_WAIT_MS)
    return millis


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    value = opts.get(name.lower())
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise OptionError(f"{name} must be true or false, not {value!r}")
    return lowered == "true"


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d|milliseconds?|seconds?|minutes?|hours?|days?)?\s*$", re.I)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str, name: str) -> int:
    """``500ms``, ``30s``, ``15m``, ``1h``, ``2 days``; a bare number is milliseconds."""
    match = _DURATION.match(text)
    if match is None:
        raise OptionError(f"{name} must be a duration like 30s, 15m or 1h, not {text!r}")
    unit = (match.group(2) or "ms").lower()
    key = "ms" if unit.startswith("milli") or unit == "ms" else unit[0]
    return int(match.group(1)) * _UNIT_MS[key]


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def parse_timestamp_ms(text: str, name: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 time (UTC unless it says otherwise)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise OptionError(f"{name} must be ms since the epoch or an ISO-8601 time, not {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    # Integer arithmetic: timestamp() * 1000 in floats can lose a millisecond.
    return (moment - _EPOCH) // datetime.timedelta(milliseconds=1)
