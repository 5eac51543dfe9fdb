"""Topic and group naming rules, permissions and the system topics RocketMQ reserves."""

from __future__ import annotations

import re
from collections.abc import Callable

from cometmq.errors import RequestRefused
from cometmq.protocol.codes import ResponseCode

TOPIC_MAX_LENGTH = 127
# Groups use the topic characters; RocketMQ caps group names at 255 characters.
GROUP_MAX_LENGTH = 255
_TOPIC_CHARS = re.compile(r"[%|a-zA-Z0-9_-]+")
_legal_chars = _TOPIC_CHARS.fullmatch

DEFAULT_TOPIC = "TBW102"  # the template topic clients fall back to for auto-create (RocketMQ's name)
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
BENCHMARK_TOPIC = "BenchmarkTest"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TIMER_TOPIC = "rmq_sys_wheel_timer"  # RocketMQ 5's TimerMessageStore.TIMER_TOPIC
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
        TIMER_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)

# RocketMQ's tools group (MixAll.TOOLS_CONSUMER_GROUP): reading a topic for a tool commits nothing.
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
# Groups RocketMQ's brokers and tools use for themselves (MixAll), not groups of users' consumers.
SYSTEM_GROUPS = frozenset(
    {
        TOOLS_CONSUMER_GROUP,
        "FILTERSRV_CONSUMER",
        "__MONITOR_CONSUMER",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
        "CID_ONSAPI_PULL",
        "CID_RMQ_SYS_TRANS",
    }
)

PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1


def topic_name_error(topic: str) -> str | None:
    """Why ``topic`` is not a legal topic name (RocketMQ's wording), or None if it is."""
    # Checked on every send and pull: a legal name costs one match and a length (bench/broker_send.py).
    if _legal_chars(topic) is not None and len(topic) <= TOPIC_MAX_LENGTH:
        return None
    return _name_error(
        topic, "topic", TOPIC_MAX_LENGTH, "The specified topic is longer than topic max length."
    )


def group_name_error(group: str) -> str | None:
    """Why ``group`` is not a legal consumer or producer group name, or None if it is."""
    if _legal_chars(group) is not None and len(group) <= GROUP_MAX_LENGTH:
        return None
    too_long = f"The specified name is longer than {GROUP_MAX_LENGTH} characters."
    return _name_error(group, "name", GROUP_MAX_LENGTH, too_long)


def _name_error(name: str, noun: str, max_length: int, too_long: str) -> str | None:
    if not name or not name.strip():
        return f"The specified {noun} is blank."
    if _legal_chars(name) is None:
        return f"The specified {noun} contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(name) > max_length:
        return too_long
    return None


def stored_topic_name_error(topic: str) -> str | None:
    """Why ``topic`` cannot name a topic a broker keeps, or None if it can: a topic a client may create
    (:func:`topic_name_error`), or a group's retry or dead-letter topic, whose length follows from the
    group name's limit rather than the topic's."""
    if _legal_chars(topic) is not None and len(topic) <= TOPIC_MAX_LENGTH:
        return None
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if topic.startswith(prefix) and len(topic) > len(prefix):
            return group_name_error(topic[len(prefix) :])
    return topic_name_error(topic)


def text_error(text: str) -> str | None:
    """Why ``text`` cannot be kept as a name (client id, broker or cluster name, KV namespace or key), or
    None if it can. JSON may carry a lone UTF-16 surrogate (an escaped ``\\ud800``): Python reads it,
    but no file or frame written as UTF-8 can hold it."""
    if text.isascii():
        return None
    try:
        text.encode()
    except UnicodeEncodeError:
        return "The specified name is not valid text: it holds a lone UTF-16 surrogate."
    return None


# RocketMQ's TopicFilterType: the only values a topic's filter type may take.
TOPIC_FILTER_TYPES = frozenset({"SINGLE_TAG", "MULTI_TAG"})


def topic_filter_type_error(text: str) -> str | None:
    """Why ``text`` is not a topic filter type, or None if it is one."""
    if text in TOPIC_FILTER_TYPES:
        return None
    return "The topic filter type must be SINGLE_TAG or MULTI_TAG."


def broker_address_error(text: str) -> str | None:
    """Why ``text`` cannot be a broker's address, ``host:port`` (the name server hands it to clients,
    who connect to it), or None if it can."""
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        return "The broker address must be host:port, with a port from 1 to 65535."
    if any(c.isspace() for c in host):
        return "The broker address must not hold spaces."
    return text_error(host)


def printable(name: str) -> str:
    """``name`` as a remark or a log line can show it: what UTF-8 cannot hold written as escapes."""
    return name.encode("utf-8", "backslashreplace").decode()


# Why a name is refused, or None: topic_name_error, stored_topic_name_error, group_name_error, text_error.
NameRule = Callable[[str], str | None]


def name_remark(what: str, name: str, problem: str) -> str:
    """The remark refusing a name, worded as RocketMQ's broker refuses a topic: ``topic[a b]: reason``."""
    return f"{what}[{printable(name)[:300]}]: {problem}"


def check_name(what: str, name: str, rule: NameRule) -> None:
    """Refuse a request carrying ``name`` (a body's field *what*) if *rule* refuses it: SYSTEM_ERROR, as
    RocketMQ answers a bad topic."""
    problem = rule(name)
    if problem is not None:
        raise RequestRefused(ResponseCode.SYSTEM_ERROR, name_remark(what, name, problem))


def is_system_topic(topic: str, extra: frozenset[str] | set[str] = frozenset()) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX) or topic in extra


def topic_kind(topic: str, cluster_and_broker_names: set[str] | frozenset[str] = frozenset()) -> str:
    """What a topic is for: ``user``, or one of the kinds of system topic: ``retry`` and
    ``dead-letter`` (a consumer group's), ``cluster`` (a cluster's or broker's name, which RocketMQ's
    brokers register as topics), ``system`` (the brokers' own)."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "retry"
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return "dead-letter"
    if topic in cluster_and_broker_names:
        return "cluster"
    if is_system_topic(topic) or topic.upper().startswith(SYSTEM_TOPIC_PREFIX.upper()):
        return "system"
    return "user"


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
