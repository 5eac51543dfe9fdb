"""A broker configured with nothing (no broker.conf keys, no flags) gets RocketMQ 4.x's store defaults,
and hands them to its store."""

from __future__ import annotations

from pathlib import Path

import pytest

from cometmq.broker import Broker, BrokerConfig
from cometmq.cli._main import build_parser
from cometmq.cli._servers import _broker_config
from cometmq.store import FlushDiskType, StoreConfig

# BrokerConfig attribute (RocketMQ's key in snake case: flushDiskType, ...) → RocketMQ's default.
DEFAULTS = {
    "flush_disk_type": FlushDiskType.ASYNC_FLUSH,
    "flush_interval_commit_log": 500,
    "flush_commit_log_least_pages": 4,
    "sync_flush_timeout": 5000,
    "mapped_file_size_commit_log": 1_073_741_824,
    "mapped_file_size_consume_queue": 300_000 * 20,
    "file_reserved_time": 72,
    "delete_when": "04",
    "disk_max_used_space_ratio": 75,
    "disk_space_clean_forcibly_ratio": 85,
    "disk_space_warning_level_ratio": 90,
}


def configured_with_nothing(how: str, tmp_path: Path) -> BrokerConfig:
    if how == "constructed":
        return BrokerConfig(store_path_root_dir=str(tmp_path / "data"))
    conf = tmp_path / "broker.conf"
    conf.write_text("# nothing set\n")
    if how == "broker.conf":
        return BrokerConfig.from_file(conf, {"storePathRootDir": str(tmp_path / "data")})
    # `cometmq broker` with no file and no setting flag, through the parser and loader it uses.
    args = build_parser().parse_args(["broker", "--data-dir", str(tmp_path / "data")])
    return _broker_config(args)


@pytest.mark.parametrize("how", ["constructed", "broker.conf", "command line"])
def test_a_broker_configured_with_nothing_gets_rocketmq_defaults(how: str, tmp_path: Path) -> None:
    config = configured_with_nothing(how, tmp_path)
    assert {name: getattr(config, name) for name in DEFAULTS} == DEFAULTS
    # The store gets them all: its config is a default one (whose values tests/store/test_defaults.py
    # holds to RocketMQ's).
    store = Broker(config).store._config
    assert store == StoreConfig(store.root_dir)
