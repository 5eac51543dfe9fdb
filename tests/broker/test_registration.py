"""The broker keeps itself registered with the NameServer, serves the topic table it registers
(GET_ALL_TOPIC_CONFIG), and a broker.conf configures it."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from _support import address, broker_and_client, create_topic, is_routed, run, running_broker

from cometmq.broker import BrokerConfig
from cometmq.client import AdminClient
from cometmq.errors import ConfigError
from cometmq.namesrv import NameServer
from cometmq.namesrv.route_info import RegisterResult, RouteInfoManager
from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.remoting import RemotingClient
from cometmq.store import FlushDiskType
from waiting import wait_until


async def not_routed(namesrv: str, topic: str) -> bool:
    return not await is_routed(namesrv, topic)


@pytest.mark.parametrize(("period_ms", "still_routed"), [(200, True), (60_000, False)])
def test_periodic_registration_keeps_the_broker_alive(
    tmp_path: Path, period_ms: int, still_routed: bool
) -> None:
    async def scenario() -> None:
        namesrv = NameServer("127.0.0.1", 0, broker_expiry_s=1.5, scan_interval_s=0.05)
        await namesrv.start()
        addr = f"127.0.0.1:{namesrv.port}"
        async with running_broker(tmp_path, namesrvAddr=addr, registerNameServerPeriod=period_ms) as broker:
            client = RemotingClient()
            await create_topic(client, address(broker), "Kept", 2)
            await client.close()
            # Registered at once after the topic was created, not at the next period.
            await wait_until(lambda: is_routed(addr, "Kept"), message="the topic routed")
            if still_routed:
                await asyncio.sleep(2.0)  # longer than the NameServer's expiry
                assert await is_routed(addr, "Kept")
            else:
                await wait_until(lambda: not_routed(addr, "Kept"), message="the broker expired")
        await namesrv.stop()

    asyncio.run(scenario())


def test_a_created_topic_is_registered_alone_and_the_name_server_keeps_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bodies: list[set[str]] = []
    register_broker = RouteInfoManager.register_broker

    def recording(routes: RouteInfoManager, **fields: Any) -> RegisterResult:
        bodies.append(set(fields["body"].topic_configs))
        return register_broker(routes, **fields)

    monkeypatch.setattr(RouteInfoManager, "register_broker", recording)

    async def scenario() -> None:
        namesrv = NameServer("127.0.0.1", 0)
        await namesrv.start()
        addr = f"127.0.0.1:{namesrv.port}"
        async with running_broker(tmp_path, namesrvAddr=addr, registerNameServerPeriod=60_000) as broker:
            assert bodies and "TBW102" in bodies[0]  # the whole table at start
            client = RemotingClient()
            for topic in ("First", "Second"):
                await create_topic(client, address(broker), topic, 2)
                await wait_until(lambda topic=topic: is_routed(addr, topic), message=f"{topic} routed")
            await client.close()
            assert bodies[-1] == {"Second"}
            for topic in ("First", "TBW102"):
                assert await is_routed(addr, topic), topic
        await namesrv.stop()

    asyncio.run(scenario())


def test_over_a_new_connection_the_whole_table_is_registered_again(tmp_path: Path) -> None:
    # A NameServer forgets a broker whose connection closed (and everything when it restarts): the
    # registration after a topic change then cannot hold that topic only.
    async def scenario() -> None:
        namesrv = NameServer("127.0.0.1", 0)
        await namesrv.start()
        addr = f"127.0.0.1:{namesrv.port}"
        async with running_broker(tmp_path, namesrvAddr=addr, registerNameServerPeriod=60_000) as broker:
            client = RemotingClient()
            await create_topic(client, address(broker), "First", 2)
            await wait_until(lambda: is_routed(addr, "First"), message="First routed")
            broker._namesrv_client.close_connection(addr)
            await wait_until(lambda: not_routed(addr, "First"), message="the broker forgotten")
            await create_topic(client, address(broker), "Second", 2)
            await wait_until(lambda: is_routed(addr, "Second"), message="Second routed")
            await client.close()
            assert await is_routed(addr, "First")
        await namesrv.stop()

    asyncio.run(scenario())


def test_broker_conf_is_read_with_rocketmq_keys_and_flags_override_it(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# a RocketMQ broker.conf\n"
        "brokerClusterName = ProdCluster\n"
        "brokerName=broker-b\n"
        "listenPort: 10921\n"
        "storePathRootDir=/var/rocketmq/store\n"
        "autoCreateTopicEnable=false\n"
        "mappedFileSizeCommitLog=104857600\n"
        "flushDiskType=SYNC_FLUSH\n"
        "someKeyCometMQDoesNotUse=1\n"
    )
    config = BrokerConfig.from_file(conf)
    assert (config.broker_cluster_name, config.broker_name, config.listen_port) == (
        "ProdCluster",
        "broker-b",
        10921,
    )
    assert config.store_path_root_dir == "/var/rocketmq/store"
    assert config.auto_create_topic_enable is False
    assert config.mapped_file_size_commit_log == 104857600
    assert config.flush_disk_type is FlushDiskType.SYNC_FLUSH
    config.update({"listen_port": 20000, "store_path_root_dir": str(tmp_path)})  # what CLI flags do
    assert config.listen_port == 20000 and config.store_path_root_dir == str(tmp_path)
    assert config.broker_name == "broker-b"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("listenPort=ten\n", "listenPort='ten' is not a valid int"),
        ("flushDiskType=SOMETIMES\n", "flushDiskType"),
    ],
)
def test_bad_broker_conf_values_are_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(text)
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_file(conf)


def test_all_topic_config_lists_every_topic_with_its_queues_and_the_table_version(tmp_path: Path) -> None:
    # What RocketMQ's admin tools read (TopicConfigSerializeWrapper); the same table the broker registers.
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            listing = RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG)
            before = json.loads((await client.invoke(addr, listing)).body)
            await create_topic(client, addr, "Listed", 3)
            after = json.loads((await client.invoke(addr, listing)).body)
            listed = after["topicConfigTable"]["Listed"]
            assert (listed["readQueueNums"], listed["writeQueueNums"], listed["perm"]) == (3, 3, 6)
            assert "Listed" not in before["topicConfigTable"]
            assert after["dataVersion"]["counter"] > before["dataVersion"]["counter"]

    run(scenario())


def test_a_second_broker_with_a_taken_name_and_id_is_refused_and_the_first_stays_routed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        namesrv = NameServer("127.0.0.1", 0)
        await namesrv.start()
        addr = f"127.0.0.1:{namesrv.port}"
        try:
            async with running_broker(tmp_path / "first", namesrvAddr=addr, brokerName="broker-x") as first:
                with caplog.at_level(logging.WARNING, logger="cometmq.broker"):
                    async with running_broker(tmp_path / "second", namesrvAddr=addr, brokerName="broker-x"):
                        pass  # it registered when it started, and unregisters as it stops
                [refusal] = [
                    r.getMessage() for r in caplog.records if "refused the registration" in r.getMessage()
                ]
                assert f"registered at {first.config.broker_addr}" in refusal
                async with AdminClient(addr) as admin:
                    info = await admin.cluster_info()
                assert info.broker_addr_table["broker-x"].broker_addrs == {0: first.config.broker_addr}
        finally:
            await namesrv.stop()

    asyncio.run(scenario())
