"""The connector's options, parsed once on the driver (pure: no I/O).

Named like Spark's Kafka source where the idea is the same. Spark hands options over in a
case-insensitive dict with lower-cased keys; every value is a string.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cometmq.client import security_options
from cometmq.errors import OptionError

__all__ = ["ConnectOptions", "ReadOptions", "WriteOptions", "parse_duration_ms", "parse_timestamp_ms"]

DEFAULT_NAMESRV = "127.0.0.1:9876"
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Kafka's maxTriggerDelay default, 15m
# The sink's defaults are RocketMQ's producer's: sendMsgTimeout 3 s, retryTimesWhenSendFailed 2.
DEFAULT_SEND_TIMEOUT_MS = 3000
DEFAULT_SEND_RETRIES = 2
DEFAULT_RETRY_BACKOFF_MS = 1000


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


@dataclass(frozen=True, slots=True)
class ReadOptions:
    namesrv: str
    topics: tuple[str, ...]
    topic_pattern: re.Pattern[str] | None
    sub_expression: str
    starting_offsets: str | None  # "earliest", "latest", JSON, or None for the default
    starting_timestamp: int | None
    ending_offsets: str
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    fail_on_data_loss: bool
    include_properties: bool
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
        max_per_trigger = _positive_int(opts, "maxoffsetspertrigger")
        min_per_trigger = _positive_int(opts, "minoffsetspertrigger")
        if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
            raise OptionError(
                f"minOffsetsPerTrigger ({min_per_trigger}) is larger than "
                f"maxOffsetsPerTrigger ({max_per_trigger})"
            )
        starting_ts = opts.get("startingtimestamp")
        return cls(
            namesrv=opts.get("namesrv", DEFAULT_NAMESRV).strip() or DEFAULT_NAMESRV,
            topics=topics,
            topic_pattern=compiled,
            sub_expression=expression,
            starting_offsets=_offsets_spec(opts, "startingoffsets"),
            starting_timestamp=parse_timestamp_ms(starting_ts, "startingTimestamp") if starting_ts else None,
            ending_offsets=_offsets_spec(opts, "endingoffsets") or "latest",
            max_offsets_per_trigger=max_per_trigger,
            min_offsets_per_trigger=min_per_trigger,
            max_trigger_delay_ms=parse_duration_ms(opts["maxtriggerdelay"], "maxTriggerDelay")
            if "maxtriggerdelay" in opts
            else DEFAULT_MAX_TRIGGER_DELAY_MS,
            fail_on_data_loss=_bool(opts, "failondataloss", True),
            include_properties=_bool(opts, "includeproperties", False),
            connect=ConnectOptions.parse(opts),
        )


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
        retries = _whole_number(opts, "retries")
        return cls(
            namesrv=opts.get("namesrv", DEFAULT_NAMESRV).strip() or DEFAULT_NAMESRV,
            topic=opts.get("topic", "").strip() or None,
            producer_group=opts.get("producergroup", "").strip() or "cometmq-spark-writer",
            connect=ConnectOptions.parse(opts),
            send_timeout_ms=send_timeout_ms,
            retries=DEFAULT_SEND_RETRIES if retries is None else retries,
            retry_backoff_ms=_duration(opts, "retryBackoff", DEFAULT_RETRY_BACKOFF_MS),
        )


def _offsets_spec(opts: Mapping[str, str], name: str) -> str | None:
    value = opts.get(name)
    if value is None or not value.strip():
        return None
    value = value.strip()
    if value.lower() in ("earliest", "latest"):
        return value.lower()
    if not value.startswith("{"):
        raise OptionError(f"{name} must be 'earliest', 'latest' or JSON offsets per queue, not {value!r}")
    return value


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    value = opts.get(name)
    if value is None or not value.strip():
        return None
    try:
        number = int(value)
    except ValueError:
        raise OptionError(f"{name} must be a whole number, not {value!r}") from None
    if number <= 0:
        raise OptionError(f"{name} must be positive, not {number}")
    return number


def _whole_number(opts: Mapping[str, str], name: str) -> int | None:
    """Option ``name`` (given in its documented case; looked up in lower case) as an int >= 0."""
    value = opts.get(name.lower())
    if value is None or not value.strip():
        return None
    try:
        number = int(value)
    except ValueError:
        raise OptionError(f"{name} must be a whole number, not {value!r}") from None
    if number < 0:
        raise OptionError(f"{name} must not be negative, not {number}")
    return number


def _duration(opts: Mapping[str, str], name: str, default_ms: int) -> int:
    """Option ``name`` (in its documented case) as milliseconds, ``default_ms`` when not given."""
    value = opts.get(name.lower())
    if value is None or not value.strip():
        return default_ms
    return parse_duration_ms(value, name)


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    value = opts.get(name)
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
