"""The connector's options, parsed once on the driver (pure: no I/O).

Named like Spark's Kafka source where the idea is the same. Spark hands options over in a
case-insensitive dict with lower-cased keys; every value is a string.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass

from cometmq.errors import OptionError

__all__ = ["ReadOptions", "WriteOptions", "parse_duration_ms", "parse_timestamp_ms"]

DEFAULT_NAMESRV = "127.0.0.1:9876"
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Kafka's maxTriggerDelay default, 15m


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
        )


@dataclass(frozen=True, slots=True)
class WriteOptions:
    namesrv: str
    topic: str | None  # for rows without a topic column (or with a null topic)
    producer_group: str

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        opts = {k.lower(): v for k, v in options.items()}
        return cls(
            namesrv=opts.get("namesrv", DEFAULT_NAMESRV).strip() or DEFAULT_NAMESRV,
            topic=opts.get("topic", "").strip() or None,
            producer_group=opts.get("producergroup", "").strip() or "cometmq-spark-writer",
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
