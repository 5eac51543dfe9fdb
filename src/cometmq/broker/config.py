"""Broker configuration under RocketMQ's own key names, so a RocketMQ ``broker.conf`` works as is."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cometmq.broker._javaprops import read_properties
from cometmq.errors import ConfigError
from cometmq.store import parse_delay_levels, parse_delete_when

DEFAULT_DATA_DIR = Path.home() / ".cometmq" / "data"


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


@dataclass(slots=True)
class BrokerConfig:
    """Every setting the broker reads. Attribute ``listen_port`` is RocketMQ key ``listenPort``."""

    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = 0
    broker_ip1: str = "127.0.0.1"  # the address advertised to clients (RocketMQ's brokerIP1)
    listen_port: int = 10911
    listen_host: str = "0.0.0.0"  # not a RocketMQ key: the interface to bind (RocketMQ binds all)
    namesrv_addr: str = ""
    store_path_root_dir: str = field(default_factory=lambda: str(DEFAULT_DATA_DIR))
    flush_disk_type: str = "ASYNC_FLUSH"
    broker_role: str = "ASYNC_MASTER"
    broker_permission: int = 6
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    mapped_file_size_commit_log: int = 1 << 30
    mapped_file_size_consume_queue: int = 300_000 * 20
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    sync_flush_timeout: int = 5000
    # ms between writes of consumerOffset.json; commits of the last interval are lost by a crash
    flush_consumer_offset_interval: int = 5000
    max_message_size: int = 4 * 1024 * 1024
    # RocketMQ 5's record CRC, off by default (docs/store.md, "Record CRC").
    enabled_append_prop_crc: bool = False
    force_verify_prop_crc: bool = False
    # Delay of each level of delayed messages (DELAY=1 is the first); see broker/_schedule.py.
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    # The message index behind QUERY_MESSAGE (docs/store.md, "Index").
    message_index_enable: bool = True
    max_index_num: int = 20_000_000
    # Retention and the disk guard (docs/store.md, "Retention and the disk guard").
    file_reserved_time: int = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85
    disk_space_warning_level_ratio: int = 90
    clean_file_forcibly_enable: bool = True
    delete_file_batch_max: int = 10
    clean_resource_interval: int = 10_000
    register_name_server_period: int = 30_000
    long_polling_enable: bool = True
    # SQL92 property filters (docs/filters.md); off by default as in RocketMQ, on in `cometmq standalone`.
    enable_property_filter: bool = False
    short_polling_time_mills: int = 1000
    # Not a RocketMQ key: µs the event loop keeps polling after each read or write instead of sleeping
    # (cometmq/remoting/busypoll.py); 0, the default, never. Lower latency for a busy CPU meanwhile.
    busy_poll_micros: int = 0
    region_id: str = "DefaultRegion"
    trace_on: bool = True

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    def update(self, values: dict[str, Any]) -> None:
        """Apply settings given by RocketMQ key (``listenPort``) or attribute name (``listen_port``).

        Unknown keys are ignored, as RocketMQ ignores keys it does not know; a value of the wrong
        type raises ConfigError naming the key.
        """
        fields = {f.name: f for f in dataclasses.fields(self)}
        for key, value in values.items():
            name = key if key in fields else _snake(key)
            if name not in fields or value is None:
                continue
            current = getattr(self, name)
            try:
                if isinstance(current, bool):
                    converted: Any = (
                        value if isinstance(value, bool) else str(value).strip().lower() == "true"
                    )
                elif isinstance(current, int):
                    converted = int(value)
                else:
                    converted = str(value)
            except ValueError:
                raise ConfigError(f"{key}={value!r} is not a valid {type(current).__name__}") from None
            setattr(self, name, converted)
        if self.flush_disk_type not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            raise ConfigError(
                f"flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH, not {self.flush_disk_type!r}"
            )
        try:
            parse_delete_when(self.delete_when)
            if not parse_delay_levels(self.message_delay_level):
                raise ValueError("messageDelayLevel names no delay level")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    @classmethod
    def from_file(cls, path: str | Path, defaults: dict[str, Any] | None = None) -> BrokerConfig:
        """A config from a RocketMQ ``broker.conf`` (Java properties), on top of *defaults*."""
        try:
            values = read_properties(path)
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        config = cls()
        config.update(defaults or {})
        config.update(values)
        return config
