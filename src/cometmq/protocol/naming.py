"""Topic and group naming rules, permissions and the system topics RocketMQ reserves."""

from __future__ import annotations

import re

TOPIC_MAX_LENGTH = 127
# Groups use the topic characters; RocketMQ caps group names at 255 characters.
GROUP_MAX_LENGTH = 255
_TOPIC_CHARS = re.compile(r"[%|a-zA-Z0-9_-]+")

DEFAULT_TOPIC = "TBW102"  # the template topic clients fall back to for auto-create (RocketMQ's name)
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
BENCHMARK_TOPIC = "BenchmarkTest"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

SYSTEM_TOPICS = frozenset(
    {
        DEFAULT_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        TRACE_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)

# Topics clients may never send to directly (broker answers NO_PERMISSION).
SEND_FORBIDDEN_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)

PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1


def topic_name_error(topic: str) -> str | None:
    """Why ``topic`` is not a legal topic name (RocketMQ's wording), or None if it is."""
    return _name_error(
        topic, "topic", TOPIC_MAX_LENGTH, "The specified topic is longer than topic max length."
    )


def group_name_error(group: str) -> str | None:
    """Why ``group`` is not a legal consumer or producer group name, or None if it is."""
    too_long = f"The specified name is longer than {GROUP_MAX_LENGTH} characters."
    return _name_error(group, "name", GROUP_MAX_LENGTH, too_long)


def _name_error(name: str, noun: str, max_length: int, too_long: str) -> str | None:
    if not name or not name.strip():
        return f"The specified {noun} is blank."
    if not _TOPIC_CHARS.fullmatch(name):
        return f"The specified {noun} contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(name) > max_length:
        return too_long
    return None


def is_system_topic(topic: str, extra: frozenset[str] | set[str] = frozenset()) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX) or topic in extra


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def perm_text(perm: int) -> str:
    """``perm`` as RocketMQ tools print it, e.g. ``RW-`` (read, write, no inherit)."""
    return (
        ("R" if perm & PERM_READ else "-")
        + ("W" if perm & PERM_WRITE else "-")
        + ("X" if perm & PERM_INHERIT else "-")
    )
