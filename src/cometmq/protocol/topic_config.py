"""TopicConfig, the per-topic settings a broker keeps and registers with the NameServer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cometmq.protocol.naming import PERM_READ, PERM_WRITE

DEFAULT_QUEUE_NUMS = 16  # RocketMQ's TopicConfig default when a request does not say


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
        return cls(
            topic_name=str(obj["topicName"]),
            read_queue_nums=int(obj.get("readQueueNums", DEFAULT_QUEUE_NUMS)),
            write_queue_nums=int(obj.get("writeQueueNums", DEFAULT_QUEUE_NUMS)),
            perm=int(obj.get("perm", PERM_READ | PERM_WRITE)),
            topic_filter_type=str(obj.get("topicFilterType", "SINGLE_TAG")),
            topic_sys_flag=int(obj.get("topicSysFlag", obj.get("topicSynFlag", 0))),
            order=bool(obj.get("order", False)),
        )

    @property
    def queue_nums(self) -> int:
        """Queues that exist on disk: a queue id must be below this."""
        return max(self.read_queue_nums, self.write_queue_nums)
