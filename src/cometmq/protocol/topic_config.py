"""TopicConfig, the per-topic settings a broker keeps and registers with the NameServer."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Final

from cometmq.protocol.jsonbody import BodyError, as_object, java_bool, java_int, java_string
from cometmq.protocol.naming import PERM_READ, PERM_WRITE, topic_filter_type_error

DEFAULT_QUEUE_NUMS = 16  # RocketMQ's TopicConfig default when a request does not say
# The most read or write queues a topic of a CometMQ broker may have: one created by
# UPDATE_AND_CREATE_TOPIC, a group's retry topic (retryQueueNums), one loaded from topics.json. Each
# queue costs a consume-queue directory and a line in every stats answer. (A name server keeps what
# brokers register, whose topics may have more.)
MAX_QUEUE_NUMS: Final = 1024
# A topic's perm holds RocketMQ's three bits, read, write and inherit (PermName.isValid: below 8).
MAX_PERM: Final = 0x7


class TopicMessageType(enum.Enum):
    """RocketMQ 5's TopicMessageType: the messages a topic is for (attribute ``message.type``). A 5.x
    client sends FIFO, delay and transactional messages only to a topic whose route accepts them."""

    UNSPECIFIED = "UNSPECIFIED"
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"


MESSAGE_TYPE_ATTRIBUTE: Final = "message.type"

# Topic attributes (RocketMQ 5's TopicConfig.attributes): each name a topic may carry and the values it
# takes. `deduplication` is CometMQ's (true or false: whether sends to the topic are deduplicated,
# over the broker's deduplicationEnable); the others are RocketMQ's, kept and registered but unused.
DEDUPLICATION_ATTRIBUTE: Final = "deduplication"
# RocketMQ 5's TopicAttributes.QUEUE_TYPE_ATTRIBUTE: SimpleCQ (the default) or BatchCQ, whose queues take a
# batch sent as one record and one unit (docs/store.md). Not changeable once the topic exists.
QUEUE_TYPE_ATTRIBUTE: Final = "queue.type"
BATCH_CQ: Final = "BatchCQ"
SIMPLE_CQ: Final = "SimpleCQ"
TOPIC_ATTRIBUTES: Final[dict[str, frozenset[str]]] = {
    DEDUPLICATION_ATTRIBUTE: frozenset({"true", "false"}),
    MESSAGE_TYPE_ATTRIBUTE: frozenset(kind.value for kind in TopicMessageType),
    QUEUE_TYPE_ATTRIBUTE: frozenset({BATCH_CQ, SIMPLE_CQ}),
    "cleanup.policy": frozenset({"DELETE", "COMPACTION"}),
}


def _unknown_attribute(name: str) -> str:
    return f"unknown topic attribute {name!r} (known: {', '.join(sorted(TOPIC_ATTRIBUTES))})"


def attribute_error(name: str, value: str) -> str | None:
    """Why *name* = *value* is not a topic attribute this broker takes; None if it is one."""
    values = TOPIC_ATTRIBUTES.get(name)
    if values is None:
        return _unknown_attribute(name)
    if value not in values:
        return f"topic attribute {name} takes {' or '.join(sorted(values))}, not {value!r}"
    return None


def parse_attribute_changes(text: str) -> dict[str, str | None]:
    """RocketMQ 5's attribute syntax, ``+name=value,+other=value,-name``: each name and its new value,
    None for a name removed. ValueError says what is wrong: an item without ``+`` or ``-``, a ``+``
    without a value, a name given twice, an unknown name or value."""
    changes: dict[str, str | None] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        sign, rest = item[0], item[1:]
        if sign == "+":
            name, equals, value = rest.partition("=")
            if not equals or not name:
                raise ValueError(f"attribute {item!r} is not +name=value")
            problem = attribute_error(name, value)
            if problem is not None:
                raise ValueError(problem)
        elif sign == "-":
            name, value = rest, None
            if not name or "=" in name:
                raise ValueError(f"attribute {item!r} is not -name")
            if name not in TOPIC_ATTRIBUTES:
                raise ValueError(_unknown_attribute(name))
        else:
            raise ValueError(f"attribute {item!r} starts with neither + (set) nor - (remove)")
        if name in changes:
            raise ValueError(f"attribute {name} is given twice")
        changes[name] = value
    return changes


def altered_attributes(current: dict[str, str], changes: dict[str, str | None]) -> dict[str, str]:
    """*current* with *changes* applied (RocketMQ's alterCurrentAttributes): ValueError for removing a
    name the topic does not carry."""
    altered = dict(current)
    for name, value in changes.items():
        if value is not None:
            altered[name] = value
        elif altered.pop(name, None) is None:
            raise ValueError(f"attribute {name} cannot be removed: the topic does not carry it")
    return altered


@dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = DEFAULT_QUEUE_NUMS
    write_queue_nums: int = DEFAULT_QUEUE_NUMS
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The object RocketMQ writes for a TopicConfig (keys as in Java, alphabetical); RocketMQ 5's
        ``attributes`` only when the topic carries any (what a 4.x reader expects otherwise)."""
        obj: dict[str, Any] = {"attributes": dict(self.attributes)} if self.attributes else {}
        obj |= {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TopicConfig:
        """From a topic table (topics.json, a broker's registration); :class:`BodyError` for a field
        that is not of its Java type or out of its range."""
        what = "TopicConfig"

        def queue_nums(key: str) -> int:
            return java_int(obj, key, what, default=DEFAULT_QUEUE_NUMS, minimum=0)

        # RocketMQ up to 4.8 spelled topicSysFlag topicSynFlag.
        sys_flag = java_int(obj, "topicSynFlag", what, default=0)
        return cls(
            topic_name=java_string(obj, "topicName", what),
            read_queue_nums=queue_nums("readQueueNums"),
            write_queue_nums=queue_nums("writeQueueNums"),
            perm=java_int(obj, "perm", what, default=PERM_READ | PERM_WRITE, minimum=0, maximum=MAX_PERM),
            topic_filter_type=java_string(
                obj, "topicFilterType", what, default="SINGLE_TAG", name_rule=topic_filter_type_error
            ),
            topic_sys_flag=java_int(obj, "topicSysFlag", what, default=sys_flag),
            order=java_bool(obj, "order", what, default=False),
            attributes=_attributes(obj, what),
        )

    @property
    def is_batch_cq(self) -> bool:
        """Whether the topic's queues are batch consume queues (``queue.type`` BatchCQ)."""
        return self.attributes.get(QUEUE_TYPE_ATTRIBUTE) == BATCH_CQ

    @property
    def message_type(self) -> TopicMessageType:
        """The topic's ``message.type``; NORMAL when it carries none (RocketMQ's getTopicMessageType).
        A value this broker does not know (another broker's table) reads as UNSPECIFIED."""
        value = self.attributes.get(MESSAGE_TYPE_ATTRIBUTE)
        if value is None:
            return TopicMessageType.NORMAL
        try:
            return TopicMessageType(value)
        except ValueError:
            return TopicMessageType.UNSPECIFIED

    @property
    def queue_nums(self) -> int:
        """Queues that exist on disk: a queue id must be below this."""
        return max(self.read_queue_nums, self.write_queue_nums)


def _attributes(obj: dict[str, Any], what: str) -> dict[str, str]:
    """RocketMQ 5's ``attributes`` of a TopicConfig: names and values as text. Names this broker does
    not know are kept (another broker's table may carry them) but do nothing here."""
    raw = obj.get("attributes")
    if raw is None:
        return {}
    table = as_object(raw, f"{what} field attributes")
    attributes = {}
    for name, value in table.items():
        if not isinstance(value, str):
            raise BodyError(f"the {what} attribute {name} is not a Java String")
        attributes[name] = value
    return attributes
