"""Subscription group configs (subscriptionGroup.json): auto-created on first use by default,
created, changed, listed and deleted by administrators (docs/protocol.md#subscription-groups)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from cometmq.broker._json_config import MetadataFile, check_stored_name, load_json_table, read_entries
from cometmq.protocol.naming import group_name_error
from cometmq.protocol.route import DataVersion
from cometmq.protocol.subscription_group import SubscriptionGroupConfig

__all__ = ["SubscriptionGroupConfig", "SubscriptionGroupManager", "max_reconsume_times"]

log = logging.getLogger("cometmq.broker")


def _read_group(name: str, raw: Any) -> SubscriptionGroupConfig:
    config = SubscriptionGroupConfig.from_json(raw)
    for group in {name, config.group_name}:
        check_stored_name("group", group, group_name_error)
    return config


class SubscriptionGroupManager:
    def __init__(self, config_dir: Path, auto_create: bool) -> None:
        self._path = config_dir / "subscriptionGroup.json"
        self._file = MetadataFile(self._path)
        self.auto_create = auto_create
        self.groups: dict[str, SubscriptionGroupConfig] = {}
        # Bumped on every change, as RocketMQ's SubscriptionGroupManager (slaves compare it).
        self.data_version = DataVersion(timestamp=int(time.time() * 1000))

    def load(self) -> None:
        loaded = load_json_table(self._path, "subscriptionGroupTable", "group", _read_group)
        if loaded is None:
            return
        obj, groups = loaded
        self.groups.update(groups)
        if "dataVersion" in obj:  # files written before it was kept have none
            try:
                self.data_version = DataVersion.from_json(obj["dataVersion"])
            except (TypeError, ValueError) as exc:
                log.error("unreadable dataVersion in %s: %s", self._path, exc)

    def wrapper(self) -> dict[str, Any]:
        """RocketMQ's SubscriptionGroupWrapper: what the file holds and GET_ALL_SUBSCRIPTIONGROUP_CONFIG
        answers."""
        return {
            "dataVersion": self.data_version.to_json(),
            "subscriptionGroupTable": {name: group.to_json() for name, group in sorted(self.groups.items())},
        }

    def persist(self) -> None:
        """Write subscriptionGroup.json; a failure is logged, and the broker's housekeeping writes the
        table again while ``write_pending`` (``MetadataFile``): an auto-created group works at once,
        written or not."""
        self._file.save(self.wrapper())

    @property
    def write_pending(self) -> bool:
        """Whether the file is older than the table (its last write failed)."""
        return self._file.pending

    def _changed(self) -> None:
        self.data_version.next_version()
        self.persist()

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's settings; never creates one."""
        return self.groups.get(group)

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        config = self.groups.get(group)
        if config is None and self.auto_create:
            config = SubscriptionGroupConfig(group)
            self.groups[group] = config
            log.info("auto-created subscription group %s", group)
            self._changed()
        return config

    def put(self, config: SubscriptionGroupConfig) -> None:
        """Create or replace a group's settings (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)."""
        old = self.groups.get(config.group_name)
        self.groups[config.group_name] = config
        log.info("subscription group %s %s: %s", config.group_name, "updated" if old else "created", config)
        self._changed()

    def adopt(self, version: DataVersion, table: Any, source: str) -> bool:
        """A slave takes its master's groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG's, from *source*) when
        their version differs from this one: the whole table is replaced, and written. Whether it was
        taken."""
        if version == self.data_version:
            return False
        self.groups = read_entries(table, "group", _read_group, source)
        self.data_version = DataVersion(version.timestamp, version.counter)
        self.persist()
        return True

    def delete(self, group: str) -> bool:
        if self.groups.pop(group, None) is None:
            return False
        log.info("subscription group %s deleted", group)
        self._changed()
        return True


# MQVersion V3_4_9: only requests of this version or later may override the group's retryMaxTimes.
MAX_RECONSUME_TIMES_VERSION = 121


def max_reconsume_times(config: SubscriptionGroupConfig, version: int, asked: int | None) -> int:
    """How often a message of the group may be redelivered before it is dead: the group's
    retryMaxTimes, or what a client of version ≥ 121 *asked* for in its request header. Java clients
    send their setting's meaning, never -1 ("the default"): a negative ask is taken as no ask rather
    than as "dead at once"."""
    if version >= MAX_RECONSUME_TIMES_VERSION and asked is not None and asked >= 0:
        return asked
    return config.retry_max_times
