"""TopicConfig, the per-topic settings a broker keeps and registers with the NameServer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from cometmq.protocol.jsonbody import java_bool, java_int, java_string
from cometmq.protocol.naming import PERM_READ, PERM_WRITE, topic_filter_type_error

DEFAULT_QUEUE_NUMS = 16  # RocketMQ's TopicConfig default when a request does not say
# The most read or write queues a topic of a CometMQ broker may have: one created by
# UPDATE_AND_CREATE_TOPIC, a group's retry topic (retryQueueNums), one loaded from topics.json. Each
# queue costs a consume-queue directory and a line in every stats answer. (A name server keeps what
# brokers register, whose topics may have more.)
MAX_QUEUE_NUMS: Final = 1024
# A topic's perm holds RocketMQ's three bits, read, write and inherit (PermName.isValid: below 8).
MAX_PERM: Final = 0x7


@dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = DEFAULT_QUEUE_NUMS
    write_queue_nums: int = DEFAULT_QUEUE_NUMS
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        """The object RocketMQ writes for a TopicConfig (keys as in Java, alphabetical)."""
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

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
        )

    @property
    def queue_nums(self) -> int:
        """Queues that exist on disk: a queue id must be below this."""
        return max(self.read_queue_nums, self.write_queue_nums)
