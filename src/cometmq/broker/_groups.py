"""Subscription group configs (subscriptionGroup.json): auto-created on first use by default."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cometmq.broker._json_config import load_json_config, save_json_config

log = logging.getLogger("cometmq.broker")


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


class SubscriptionGroupManager:
    def __init__(self, config_dir: Path, auto_create: bool) -> None:
        self._path = config_dir / "subscriptionGroup.json"
        self._auto_create = auto_create
        self.groups: dict[str, SubscriptionGroupConfig] = {}

    def load(self) -> None:
        obj = load_json_config(self._path)
        if obj is None:
            return
        for name, raw in (obj.get("subscriptionGroupTable") or {}).items():
            try:
                self.groups[name] = SubscriptionGroupConfig.from_json(raw)
            except (KeyError, TypeError, ValueError) as exc:
                log.error("skipping unreadable group %r in %s: %s", name, self._path, exc)

    def persist(self) -> None:
        table = {name: group.to_json() for name, group in self.groups.items()}
        save_json_config(self._path, {"subscriptionGroupTable": table})

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        config = self.groups.get(group)
        if config is None and self._auto_create:
            config = SubscriptionGroupConfig(group)
            self.groups[group] = config
            log.info("auto-created subscription group %s", group)
            self.persist()
        return config

    def put(self, config: SubscriptionGroupConfig) -> None:
        self.groups[config.group_name] = config
        self.persist()

    def delete(self, group: str) -> bool:
        if self.groups.pop(group, None) is None:
            return False
        self.persist()
        return True
