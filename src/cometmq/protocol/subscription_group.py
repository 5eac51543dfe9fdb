"""A consumer group's settings, RocketMQ's SubscriptionGroupConfig (docs/protocol.md#subscription-groups):
what the broker keeps in subscriptionGroup.json and administrators send with
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "groupName": self.group_name,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SubscriptionGroupConfig:
        """Lenient as fastjson: numbers and booleans may come as strings; unknown keys are ignored."""

        def flag(key: str, default: bool) -> bool:
            value = obj.get(key, default)
            return value if isinstance(value, bool) else str(value).lower() == "true"

        return cls(
            group_name=str(obj["groupName"]),
            consume_enable=flag("consumeEnable", True),
            consume_from_min_enable=flag("consumeFromMinEnable", True),
            consume_broadcast_enable=flag("consumeBroadcastEnable", True),
            retry_queue_nums=int(obj.get("retryQueueNums", 1)),
            retry_max_times=int(obj.get("retryMaxTimes", 16)),
            broker_id=int(obj.get("brokerId", 0)),
            which_broker_when_consume_slowly=int(obj.get("whichBrokerWhenConsumeSlowly", 1)),
            notify_consumer_ids_changed_enable=flag("notifyConsumerIdsChangedEnable", True),
        )
