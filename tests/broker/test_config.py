"""Reading broker.conf: keys CometMQ does not know are named in a warning with the closest known key,
RocketMQ keys CometMQ does not use pass quietly, enum settings are parsed once into enums, and the
store's configuration is derived from the broker's."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.broker import Broker, BrokerConfig, BrokerRole
from cometmq.client import AdminClient
from cometmq.errors import ConfigError
from cometmq.store import FlushDiskType, StoreConfig
from processes import TEST_BROKER_CONF, broker_address, cometmq, start_standalone

# What RocketMQ 4.9 ships in distribution/conf: the broker.conf of the quick start, a slave of
# 2m-2s-async, a master of 2m-2s-sync, and a DLedger node.
ROCKETMQ_CONFS = {
    "broker.conf": (
        "brokerClusterName = DefaultCluster\nbrokerName = broker-a\nbrokerId = 0\ndeleteWhen = 04\n"
        "fileReservedTime = 48\nbrokerRole = ASYNC_MASTER\nflushDiskType = ASYNC_FLUSH\n"
    ),
    "2m-2s-async/broker-a-s.properties": (
        "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=1\ndeleteWhen=04\n"
        "fileReservedTime=48\nbrokerRole=SLAVE\nflushDiskType=ASYNC_FLUSH\n"
    ),
    "2m-2s-sync/broker-a.properties": (
        "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\ndeleteWhen=04\n"
        "fileReservedTime=48\nbrokerRole=SYNC_MASTER\nflushDiskType=ASYNC_FLUSH\n"
    ),
    "dledger/broker-n0.conf": (
        "brokerClusterName = RaftCluster\nbrokerName=RaftNode00\nlistenPort=30911\n"
        "namesrvAddr=127.0.0.1:9876\nstorePathRootDir=/tmp/rmqstore/node00\n"
        "storePathCommitLog=/tmp/rmqstore/node00/commitlog\nenableDLegerCommitLog=true\n"
        "dLegerGroup=RaftNode00\ndLegerPeers=n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913\n"
        "dLegerSelfId=n0\nsendMessageThreadPoolNums=16\n"
    ),
}


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


def test_a_mistyped_key_is_named_with_the_closest_key_and_the_broker_runs_with_the_default(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(TEST_BROKER_CONF + "flushDiskTyp=SYNC_FLUSH\n")
    server, namesrv = start_standalone(tmp_path / "data", conf)
    try:

        async def flush_disk_type() -> str:
            async with AdminClient(namesrv) as admin:
                return (await admin.broker_runtime_info(broker_address(server)))["flushDiskType"]

        assert asyncio.run(flush_disk_type()) == "ASYNC_FLUSH"
        warnings = [line for line in server.log().splitlines() if "unknown key" in line]
        assert len(warnings) == 1 and " WARNING " in warnings[0], server.log()
        assert warnings[0].endswith(
            f"unknown key flushDiskTyp in {conf}, ignored (did you mean flushDiskType?)"
        )
    finally:
        server.terminate()


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("brokerIp1", "unknown key brokerIp1 in {conf}, ignored (did you mean brokerIP1?)"),
        ("deletewhen", "unknown key deletewhen in {conf}, ignored (did you mean deleteWhen?)"),
        ("haListenPorts", "unknown key haListenPorts in {conf}, ignored (did you mean haListenPort?)"),
        ("colour", "unknown key colour in {conf}, ignored"),
    ],
)
def test_each_unknown_key_is_one_warning_and_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, key: str, message: str
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=broker-b\n{key}=10.0.0.1\n")
    config = BrokerConfig.from_file(conf)
    assert warnings_of(caplog) == [message.format(conf=conf)]
    assert config == BrokerConfig(broker_name="broker-b")


@pytest.mark.parametrize("name", sorted(ROCKETMQ_CONFS))
def test_the_configurations_rocketmq_ships_give_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(ROCKETMQ_CONFS[name])
    caplog.set_level(logging.INFO)
    config = BrokerConfig.from_file(conf)
    assert warnings_of(caplog) == []
    assert config.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert isinstance(config.broker_role, BrokerRole)
    if name.startswith("dledger"):
        # The keys of features CometMQ has not are listed once, at info.
        assert caplog.messages == [
            f"RocketMQ keys not used by CometMQ in {conf}, ignored: storePathCommitLog, "
            "enableDLegerCommitLog, dLegerGroup, dLegerPeers, dLegerSelfId, sendMessageThreadPoolNums"
        ]


def test_enum_settings_are_read_as_enums(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("flushDiskType=SYNC_FLUSH\nbrokerRole = SLAVE\n")
    config = BrokerConfig.from_file(conf)
    assert config.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.broker_role is BrokerRole.SLAVE
    config.update({"broker_role": BrokerRole.SYNC_MASTER})  # an enum member, from Python, as it is
    assert config.broker_role is BrokerRole.SYNC_MASTER
    config.update({"store_path_root_dir": str(tmp_path)})
    broker = Broker(config)
    assert broker.sync_flush is True
    assert broker.runtime_info()["flushDiskType"] == "SYNC_FLUSH"
    assert broker.runtime_info()["brokerRole"] == "SYNC_MASTER"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("flushDiskType=sync_flush", "flushDiskType='sync_flush' is not one of ASYNC_FLUSH, SYNC_FLUSH"),
        ("brokerRole=MASTER", "brokerRole='MASTER' is not one of ASYNC_MASTER, SYNC_MASTER, SLAVE"),
    ],
)
def test_a_bad_enum_value_is_one_error_naming_the_key_and_the_allowed_values(
    tmp_path: Path, line: str, message: str
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(line + "\n")
    with pytest.raises(ConfigError) as raised:
        BrokerConfig.from_file(conf)
    assert str(raised.value) == message
    # The command refuses to start, in one line.
    result = cometmq("broker", "-c", str(conf), "-n", "127.0.0.1:9", "--data-dir", str(tmp_path / "data"))
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [f"cometmq: error: {message}"]


# Every setting of the store, under its broker.conf key, with a value other than its default; and
# the store's name for it.
STORE_SETTINGS = {
    "mappedFileSizeCommitLog": ("mapped_file_size_commitlog", "2097152", 2097152),
    "mappedFileSizeConsumeQueue": ("mapped_file_size_consume_queue", "40000", 40000),
    "flushDiskType": ("flush_disk_type", "SYNC_FLUSH", FlushDiskType.SYNC_FLUSH),
    "flushIntervalCommitLog": ("flush_interval_commitlog_ms", "250", 250),
    "flushCommitLogLeastPages": ("flush_commitlog_least_pages", "256", 256),
    "syncFlushTimeout": ("sync_flush_timeout_ms", "1500", 1500),
    "maxMessageSize": ("max_message_size", "1048576", 1048576),
    "enabledAppendPropCRC": ("enabled_append_prop_crc", "true", True),
    "forceVerifyPropCRC": ("force_verify_prop_crc", "true", True),
    "messageDelayLevel": ("message_delay_level", "1s 2s 3s", "1s 2s 3s"),
    "messageIndexEnable": ("message_index_enable", "false", False),
    "maxIndexNum": ("max_index_num", "1000", 1000),
    "fileReservedTime": ("file_reserved_time", "48", 48),
    "deleteWhen": ("delete_when", "02;14", "02;14"),
    "diskMaxUsedSpaceRatio": ("disk_max_used_space_ratio", "70", 70),
    "diskSpaceCleanForciblyRatio": ("disk_space_clean_forcibly_ratio", "80", 80),
    "diskSpaceWarningLevelRatio": ("disk_space_warning_level_ratio", "88", 88),
    "cleanFileForciblyEnable": ("clean_file_forcibly_enable", "false", False),
    "deleteFileBatchMax": ("delete_file_batch_max", "3", 3),
}


def test_the_store_gets_every_setting_it_shares_with_the_broker(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    settings = "".join(f"{key}={text}\n" for key, (_, text, _) in STORE_SETTINGS.items())
    conf.write_text(settings + f"storePathRootDir={tmp_path / 'data'}\n")

    def probe(path: Path) -> float:
        return 0.5

    store = Broker(BrokerConfig.from_file(conf), disk_usage_probe=probe).store._config
    defaults = StoreConfig(tmp_path)
    for key, (field, _, value) in STORE_SETTINGS.items():
        assert getattr(defaults, field) != value, f"{key}: pick a value other than the default"
        assert getattr(store, field) == value, key
    assert store.root_dir == tmp_path / "data"
    assert store.disk_usage_probe is probe
    # Nothing the store has is left out of the list above (a new setting must reach the store).
    fields = {field for field, _, _ in STORE_SETTINGS.values()}
    assert set(StoreConfig.__dataclass_fields__) == fields | {"root_dir", "disk_usage_probe"}


class Recorded(logging.Handler):
    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


# Keys that neither CometMQ nor RocketMQ have: none of theirs starts with "x".
@given(key=st.from_regex(r"x[A-Za-z0-9_]{0,30}", fullmatch=True), value=st.text(max_size=20))
def test_any_unknown_key_is_one_warning_and_leaves_the_config_as_it_was(key: str, value: str) -> None:
    recorded = Recorded(logging.WARNING)
    logger = logging.getLogger("cometmq.broker")
    logger.addHandler(recorded)
    try:
        config = BrokerConfig()
        config.update({key: value})
    finally:
        logger.removeHandler(recorded)
    assert config == BrokerConfig()
    assert len(recorded.messages) == 1 and recorded.messages[0].startswith(f"unknown key {key} in ")


def test_a_broker_listens_where_it_is_reached_unless_listen_host_says_otherwise() -> None:
    config = BrokerConfig()
    assert config.bind_host == "127.0.0.1"  # nothing said: this machine only, as the name server
    config.update({"brokerIP1": "10.1.2.3"})
    assert config.bind_host == "10.1.2.3"
    config.update({"listenHost": "0.0.0.0"})
    assert config.bind_host == "0.0.0.0"


def test_the_transaction_keys_are_read_with_rocketmq_5_defaults() -> None:
    config = BrokerConfig()
    assert (config.transaction_time_out, config.transaction_check_interval) == (6000, 30_000)
    assert (config.transaction_check_max, config.reject_transaction_message) == (15, False)
    config.update({"transactionTimeOut": "100", "transactionCheckInterval": "50", "transactionCheckMax": "3"})
    config.update({"rejectTransactionMessage": "true"})
    assert (config.transaction_time_out, config.transaction_check_interval) == (100, 50)
    assert (config.transaction_check_max, config.reject_transaction_message) == (3, True)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("transactionTimeOut", "0", "transactionTimeOut 0 is not in 1..604800000"),
        ("transactionCheckInterval", "-5", "transactionCheckInterval -5 is not in 1..86400000"),
        ("transactionCheckMax", "1000000", "transactionCheckMax 1000000 is not in 1..10000"),
    ],
)
def test_a_transaction_key_out_of_bounds_is_refused_by_name(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        BrokerConfig().update({key: value})
    assert str(raised.value) == message
