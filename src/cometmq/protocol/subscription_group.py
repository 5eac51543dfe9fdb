"""A consumer group's settings, RocketMQ's SubscriptionGroupConfig (docs/protocol.md#subscription-groups):
what the broker keeps in subscriptionGroup.json and administrators send with
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cometmq.protocol.jsonbody import java_bool, java_int, java_long, java_string
from cometmq.protocol.naming import group_name_error
from cometmq.protocol.topic_config import MAX_QUEUE_NUMS


@dataclass(slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    # RocketMQ 5: the group consumes FIFO — an order pop hands a queue's messages to one consumer and
    # holds the queue until they are settled (docs/protocol.md#subscription-groups).
    consume_message_orderly: bool = False
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
            "consumeMessageOrderly": self.consume_message_orderly,
            "groupName": self.group_name,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SubscriptionGroupConfig:
        """Lenient as fastjson (numbers and booleans may come as strings; unknown keys are ignored),
        strict on meaning: :class:`BodyError` for a field not of its Java type or out of its range."""
        what = "SubscriptionGroupConfig"

        def flag(key: str) -> bool:
            return java_bool(obj, key, what, default=True)

        return cls(
            group_name=java_string(obj, "groupName", what, name_rule=group_name_error),
            consume_enable=flag("consumeEnable"),
            consume_from_min_enable=flag("consumeFromMinEnable"),
            consume_broadcast_enable=flag("consumeBroadcastEnable"),
            consume_message_orderly=java_bool(obj, "consumeMessageOrderly", what, default=False),
            # 0: the group's failed messages are dropped, not retried (as RocketMQ).
            retry_queue_nums=java_int(
                obj, "retryQueueNums", what, default=1, minimum=0, maximum=MAX_QUEUE_NUMS
            ),
            retry_max_times=java_int(obj, "retryMaxTimes", what, default=16, minimum=0),
            broker_id=java_long(obj, "brokerId", what, default=0, minimum=0),
            which_broker_when_consume_slowly=java_long(
                obj, "whichBrokerWhenConsumeSlowly", what, default=1, minimum=0
            ),
            notify_consumer_ids_changed_enable=flag("notifyConsumerIdsChangedEnable"),
        )
