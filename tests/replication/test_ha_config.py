"""The HA keys of broker.conf: defaults, RocketMQ 4.9's name of the gap limit, the HA port."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from pathlib import Path

import pytest

from cometmq.broker import BrokerConfig
from cometmq.errors import ConfigError
from cometmq.replication import ReplicationConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from _support import running_broker


def test_defaults_are_rocketmqs() -> None:
    config = BrokerConfig()
    assert config.replication_config() == ReplicationConfig(
        master_address="",
        heartbeat_interval_ms=5000,
        housekeeping_interval_ms=20_000,
        transfer_batch_size=32768,
        max_gap_not_in_sync=268_435_456,
        slave_timeout_ms=3000,
        segment_size=1 << 30,
        broker_id=0,
        all_ack_in_sync=True,
        max_time_slave_not_catchup_ms=15_000,
    )
    assert config.min_in_sync_replicas == 1


def test_failover_ha_keys_are_read() -> None:
    config = BrokerConfig()
    config.update(
        {
            "brokerId": "2",
            "minInSyncReplicas": "2",
            "allAckInSyncStateSet": "false",
            "haMaxTimeSlaveNotCatchup": "4000",
        }
    )
    assert config.min_in_sync_replicas == 2
    replication = config.replication_config()
    assert (replication.broker_id, replication.all_ack_in_sync) == (2, False)
    assert replication.max_time_slave_not_catchup_ms == 4000


def test_both_names_of_the_gap_limit_are_read() -> None:
    config = BrokerConfig()
    config.update({"haSlaveFallbehindMax": "1000"})
    assert config.replication_config().max_gap_not_in_sync == 1000
    config.update({"haMaxGapNotInSync": "2000"})
    assert config.replication_config().max_gap_not_in_sync == 2000


def test_the_ha_port_is_the_next_port_unless_given() -> None:
    config = BrokerConfig()
    config.update({"listenPort": "10911"})
    assert config.ha_port == 10912
    config.update({"haListenPort": "20000"})
    assert config.ha_port == 20000
    config.update({"haListenPort": "-1", "listenPort": "0"})
    assert config.ha_port == 0  # the OS picks both


def test_the_last_port_leaves_no_default_ha_port() -> None:
    config = BrokerConfig()
    config.update({"listenPort": "65535"})
    with pytest.raises(ConfigError, match="set haListenPort"):
        _ = config.ha_port
    config.update({"haListenPort": "20000"})
    assert config.ha_port == 20000


@pytest.mark.parametrize(
    "key",
    [
        "slaveTimeout",
        "haTransferBatchSize",
        "haSendHeartbeatInterval",
        "minInSyncReplicas",
        "haMaxTimeSlaveNotCatchup",
    ],
)
def test_a_setting_that_is_not_positive_is_refused(key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        BrokerConfig().update({key: "0"})


def test_ha_keys_are_read_not_ignored(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.broker")
    BrokerConfig().update({"brokerIP2": "x"})
    assert "not used" in caplog.text  # a key that is ignored says so
    caplog.clear()
    BrokerConfig().update({"haMasterAddress": "10.0.0.1:10912", "haListenPort": "10912"})
    assert "not used" not in caplog.text


def test_an_ha_port_in_use_is_one_clear_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            with pytest.raises(ConfigError, match=f"HA port 127.0.0.1:{port} \\(haListenPort"):
                async with running_broker(tmp_path, haListenPort=port):
                    pass
        # The data directory was given up: a broker can start on it again.
        async with running_broker(tmp_path) as broker:
            assert broker.ha_server is not None and broker.ha_server.port != 0

    asyncio.run(scenario())
