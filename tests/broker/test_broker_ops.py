"""What operators ask a running broker through AdminClient: its settings (GET_BROKER_CONFIG,
UPDATE_BROKER_CONFIG), its producers (GET_PRODUCER_CONNECTION_LIST), copying a group's offsets
(CLONE_GROUP_OFFSET) and its per-topic and per-group counters (VIEW_BROKER_STATS_DATA)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import pytest
from _support import (
    address,
    broker_config,
    commit_request,
    create_topic,
    is_routed,
    name_server,
    pull,
    run,
    running_broker,
    send_request,
)

from cometmq.broker import Broker
from cometmq.broker._offsets import ConsumerOffsetManager
from cometmq.client import AdminClient, Message, Producer
from cometmq.errors import BrokerError, ConfigError
from cometmq.javaprops import parse_properties
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_stats import StatsName, group_stats_key
from cometmq.remoting import RemotingClient
from waiting import wait_until


@contextlib.asynccontextmanager
async def broker_with_name_server(data_dir: Path, **settings: str) -> AsyncIterator[tuple[str, Broker]]:
    """A name server and a broker registered with it: the name server's address, and the broker."""
    async with (
        name_server() as (_, namesrv),
        running_broker(data_dir, namesrvAddr=namesrv, **settings) as broker,
    ):
        yield namesrv, broker


async def _routed(namesrv: str, topic: str) -> None:
    await wait_until(lambda: is_routed(namesrv, topic), message=f"{topic} routed")


def test_config_get_answers_the_settings_in_effect_as_properties_without_secrets(tmp_path: Path) -> None:
    async def scenario() -> None:
        secret = '{"accessKey": "inner", "secretKey": "inner-secret-key"}'
        async with running_broker(
            tmp_path,
            brokerName="broker-ops",
            defaultTopicQueueNums="3",
            innerClientAuthenticationCredentials=secret,
        ) as broker:
            client = RemotingClient()
            try:
                response = await client.invoke(
                    address(broker), RemotingCommand(code=RequestCode.GET_BROKER_CONFIG)
                )
            finally:
                await client.close()
            assert response.code == ResponseCode.SUCCESS
            text = response.body.decode()
            settings = parse_properties(text)
            assert settings["brokerName"] == "broker-ops"
            assert settings["defaultTopicQueueNums"] == "3"
            assert settings["storePathRootDir"] == str(tmp_path)
            assert settings["flushDiskType"] == "ASYNC_FLUSH"
            assert settings["longPollingEnable"] == "true"
            assert "inner-secret-key" not in text and "innerClientAuthenticationCredentials" not in settings
            assert set(json.loads(response.ext_fields["version"])) == {"counter", "timestamp"}

    run(scenario())


def test_config_set_applies_at_once_and_a_restart_keeps_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_with_name_server(tmp_path) as (namesrv, broker):
            addr = address(broker)
            async with AdminClient(namesrv) as admin:
                before = json.loads((await _config_answer(addr)).ext_fields["version"])["counter"]
                await admin.update_broker_config(
                    addr, {"shortPollingTimeMills": "250", "autoCreateSubscriptionGroup": "false"}
                )
                settings = await admin.broker_config(addr)
                after = json.loads((await _config_answer(addr)).ext_fields["version"])["counter"]
            assert settings["shortPollingTimeMills"] == "250"
            assert broker.config.short_polling_time_mills == 250
            assert broker.groups.auto_create is False
            assert after == before + 1
            kept = parse_properties((tmp_path / "config" / "broker.properties").read_text())
            assert kept == {"shortPollingTimeMills": "250", "autoCreateSubscriptionGroup": "false"}
            # A restart with the same broker.conf: the change still holds.
            restarted = Broker(broker_config(tmp_path))
            assert restarted.config.short_polling_time_mills == 250
            assert restarted.groups.auto_create is False

    run(scenario())


async def _config_answer(addr: str) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(addr, RemotingCommand(code=RequestCode.GET_BROKER_CONFIG))
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("body", "code", "named"),
    [
        (
            "storePathRootDir=/tmp/elsewhere\nlongPollingEnable=false\n",
            ResponseCode.NO_PERMISSION,
            "storePathRootDir",
        ),
        ("listenPort=1\n", ResponseCode.NO_PERMISSION, "listenPort"),
        ("longPollingEnable=false\nbrokerPermission=9\n", ResponseCode.INVALID_PARAMETER, "brokerPermission"),
        ("transactionCheckMax=many\n", ResponseCode.INVALID_PARAMETER, "transactionCheckMax"),
        ("autoCreateTopicEnable=maybe\n", ResponseCode.INVALID_PARAMETER, "autoCreateTopicEnable='maybe'"),
        (
            "loadSummaryIntervl=30\n",
            ResponseCode.NO_PERMISSION,
            "unknown key loadSummaryIntervl (did you mean",
        ),
    ],
)
def test_config_set_refuses_a_key_or_value_it_cannot_take_and_changes_nothing(
    tmp_path: Path, body: str, code: int, named: str
) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            client = RemotingClient()
            try:
                request = RemotingCommand(code=RequestCode.UPDATE_BROKER_CONFIG, body=body.encode())
                response = await client.invoke(address(broker), request)
            finally:
                await client.close()
            assert response.code == code
            assert named in (response.remark or "")
            assert broker.config.long_polling_enable is True
            assert broker.config.store_path_root_dir == str(tmp_path)
            assert not (tmp_path / "config" / "broker.properties").exists()

    run(scenario())


def test_a_read_only_broker_permission_set_at_run_time_refuses_sends(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            addr = address(broker)
            client = RemotingClient()
            try:
                assert (await create_topic(client, addr, "OpsPerm", 1)).code == ResponseCode.SUCCESS
                request = RemotingCommand(code=RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=4\n")
                assert (await client.invoke(addr, request)).code == ResponseCode.SUCCESS
                refused = await client.invoke(addr, send_request("OpsPerm", b"x"))
            finally:
                await client.close()
            assert refused.code == ResponseCode.NO_PERMISSION

    run(scenario())


def test_a_broker_permission_set_at_run_time_reaches_the_routes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_with_name_server(tmp_path) as (namesrv, broker):
            addr = address(broker)
            async with AdminClient(namesrv) as admin:
                await admin.create_topic("OpsRoutePerm", queues=2)
                await _routed(namesrv, "OpsRoutePerm")

                async def perms() -> list[int]:
                    return [queues.perm for queues in (await admin.topic_route("OpsRoutePerm")).queue_datas]

                assert await perms() == [6]
                await admin.update_broker_config(addr, {"brokerPermission": "4"})
                await wait_until(lambda: _equal(perms(), [4]), message="the route read only")
                await admin.update_broker_config(addr, {"brokerPermission": "6"})
                await wait_until(lambda: _equal(perms(), [6]), message="the route writable again")
            # The broker's own table keeps each topic's permission.
            topic = broker.topics.get("OpsRoutePerm")
            assert topic is not None and topic.perm == 6

    run(scenario())


async def _equal(found: Awaitable[object], expected: object) -> bool:
    return await found == expected


def test_auto_create_settings_changed_at_run_time_apply_to_the_next_unknown_topic(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_with_name_server(tmp_path, autoCreateTopicEnable="false") as (namesrv, broker):
            addr = address(broker)
            client = RemotingClient()
            try:
                refused = await client.invoke(addr, send_request("OpsAutoOff", b"x"))
                assert refused.code == ResponseCode.TOPIC_NOT_EXIST
                async with AdminClient(namesrv) as admin:
                    await admin.update_broker_config(
                        addr, {"autoCreateTopicEnable": "true", "defaultTopicQueueNums": "2"}
                    )
                    await _routed(namesrv, "TBW102")  # clients send to unknown topics by its route
                    sent = await client.invoke(
                        addr, send_request("OpsAutoOn", b"x", defaultTopicQueueNums="8")
                    )
                    assert sent.code == ResponseCode.SUCCESS, sent.remark
                    created = broker.topics.get("OpsAutoOn")
                    assert created is not None and created.write_queue_nums == 2
                    await admin.update_broker_config(addr, {"autoCreateTopicEnable": "false"})
                assert broker.topics.get("TBW102") is None
                refused = await client.invoke(addr, send_request("OpsAutoOffAgain", b"x"))
                assert refused.code == ResponseCode.TOPIC_NOT_EXIST
            finally:
                await client.close()

    run(scenario())


def test_two_changes_of_one_key_keep_the_later_however_their_writes_are_ordered(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            write_first = broker.change_settings({"shortPollingTimeMills": "100"})
            write_second = broker.change_settings(
                {"shortPollingTimeMills": "900", "longPollingEnable": "false"}
            )
            write_second()  # two executor threads may take the lock in either order
            write_first()
            kept = parse_properties(broker.runtime_settings_path.read_text())
            assert kept == {"shortPollingTimeMills": "900", "longPollingEnable": "false"}
            assert broker.config.short_polling_time_mills == 900

    run(scenario())


def test_a_key_that_cannot_change_at_run_time_in_the_kept_settings_names_the_file(tmp_path: Path) -> None:
    kept = tmp_path / "config" / "broker.properties"
    kept.parent.mkdir(parents=True)
    kept.write_text("shortPollingTimeMills=250\nlistenPort=1\n")
    with pytest.raises(ConfigError) as refused:
        Broker(broker_config(tmp_path))
    assert str(kept) in str(refused.value)
    assert "listenPort" in str(refused.value) and "delete that line" in str(refused.value)


def test_a_value_that_is_not_a_boolean_in_the_kept_settings_names_the_key_and_the_file(
    tmp_path: Path,
) -> None:
    kept = tmp_path / "config" / "broker.properties"
    kept.parent.mkdir(parents=True)
    kept.write_text("autoCreateTopicEnable=maybe\n")
    with pytest.raises(ConfigError) as refused:
        Broker(broker_config(tmp_path))
    assert str(kept) in str(refused.value)
    assert "autoCreateTopicEnable='maybe' is not a boolean: give true or false" in str(refused.value)


def test_producer_connections_lists_the_producers_of_a_group(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_with_name_server(tmp_path, brokerName="broker-ops") as (namesrv, broker):
            admin = AdminClient(namesrv)
            producer = RemotingClient()
            try:
                await admin.start()
                await admin.create_topic("OpsProduced", queues=2)
                await _routed(namesrv, "OpsProduced")
                # A Java producer's heartbeat: its group in producerDataSet.
                body = {"clientID": "10.0.0.7@ops", "producerDataSet": [{"groupName": "ops-producers"}]}
                beat = RemotingCommand(
                    code=RequestCode.HEART_BEAT, body=json.dumps(body).encode(), language="JAVA"
                )
                assert (await producer.invoke(address(broker), beat)).code == ResponseCode.SUCCESS
                [found] = await admin.producer_connections("ops-producers", "OpsProduced")
                assert (found.client_id, found.language, found.broker_names) == (
                    "10.0.0.7@ops",
                    "JAVA",
                    ["broker-ops"],
                )
                assert found.client_addr.startswith("127.0.0.1:")
                with pytest.raises(BrokerError) as refused:
                    await admin.producer_connections("ops-nobody", "OpsProduced")
                assert "ops-nobody" in (refused.value.remark or "")
            finally:
                await producer.close()
                await admin.close()

    run(scenario())


def test_clone_offsets_gives_the_destination_the_source_offsets(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_with_name_server(tmp_path) as (namesrv, broker):
            addr = address(broker)
            client = RemotingClient()
            try:
                assert (await create_topic(client, addr, "OpsClone", 2)).code == ResponseCode.SUCCESS
                await _routed(namesrv, "OpsClone")
                for queue_id in (0, 1):
                    for _ in range(3):
                        assert (await client.invoke(addr, send_request("OpsClone", b"m", queue_id))).code == 0
                await client.invoke(addr, commit_request("ops-src", "OpsClone", 0, 2))
                await client.invoke(addr, commit_request("ops-src", "OpsClone", 1, 3))
                await client.invoke(addr, commit_request("ops-dst", "OpsClone", 0, 0))
            finally:
                await client.close()
            async with AdminClient(namesrv) as admin:
                await admin.clone_group_offsets("ops-src", "ops-dst", "OpsClone")
                progress = await admin.consume_progress("ops-dst", "OpsClone")
            offsets = {q.queue_id: q.consumer_offset for q in progress.queues}
            assert offsets == {0: 2, 1: 3}
            # On disk before the answer.
            stored = json.loads((tmp_path / "config" / "consumerOffset.json").read_text())
            assert stored["offsetTable"]["OpsClone@ops-dst"] == {"0": 2, "1": 3}

    run(scenario())


def test_stats_data_counts_a_topic_and_a_group_per_request_and_per_message(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_with_name_server(tmp_path) as (namesrv, broker):
            addr = address(broker)
            async with AdminClient(namesrv) as admin:
                await admin.create_topic("OpsStats", queues=1)
                await _routed(namesrv, "OpsStats")
                async with Producer("ops-stats", namesrv) as producer:
                    batch = [Message("OpsStats", b"x" * 10) for _ in range(4)]
                    await producer.send_batch(batch)
                    await producer.send_batch(batch[:2])
                client = RemotingClient()
                try:
                    _, records = await pull(client, addr, "OpsStats", 0, 0, group="ops-readers")
                finally:
                    await client.close()
                assert len(records) == 6

                put = await admin.broker_stats(addr, StatsName.TOPIC_PUT_NUMS, "OpsStats")
                assert (put.minute.sum, put.hour.sum, put.day.sum) == (6, 6, 6)
                assert put.minute.avgpt == 3.0  # two sends
                assert put.minute.tps > 0 and put.today == 6
                size = await admin.broker_stats(addr, StatsName.TOPIC_PUT_SIZE, "OpsStats")
                assert size.minute.sum == broker.stats.put_by_topic["OpsStats"][1] > 60
                got = await admin.broker_stats(
                    addr, StatsName.GROUP_GET_NUMS, group_stats_key("OpsStats", "ops-readers")
                )
                assert (got.minute.sum, got.minute.avgpt) == (6, 6.0)
                with pytest.raises(BrokerError) as missing:
                    await admin.broker_stats(addr, StatsName.TOPIC_PUT_NUMS, "OpsNothing")
                assert missing.value.code == ResponseCode.SYSTEM_ERROR
                assert "OpsNothing" in (missing.value.remark or "")

                [traffic] = await admin.traffic(["OpsStats"])
                assert (traffic.in_today, traffic.groups) == (6, [])

    run(scenario())


def test_broker_consume_stats_lists_every_group_s_queues_and_their_lag(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_with_name_server(tmp_path, brokerName="broker-ops") as (namesrv, broker):
            addr = address(broker)
            client = RemotingClient()
            try:
                assert (await create_topic(client, addr, "OpsLag", 1)).code == ResponseCode.SUCCESS
                for _ in range(5):
                    assert (await client.invoke(addr, send_request("OpsLag", b"m"))).code == 0
                await client.invoke(addr, commit_request("ops-slow", "OpsLag", 0, 1))
                await client.invoke(addr, commit_request("ops-fast", "OpsLag", 0, 5))
            finally:
                await client.close()
            async with AdminClient(namesrv) as admin:
                found = await admin.broker_consume_stats(addr)
                ordered_only = await admin.broker_consume_stats(addr, order_only=True)
            lags = {p.group: [(q.topic, q.broker_name, q.queue_id, q.lag) for q in p.queues] for p in found}
            assert lags["ops-slow"] == [("OpsLag", "broker-ops", 0, 4)]
            assert lags["ops-fast"] == [("OpsLag", "broker-ops", 0, 0)]
            assert all(not p.queues for p in ordered_only)

    run(scenario())


def test_topics_by_group_gives_every_group_the_topics_topics_of_gives_it(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.offsets.update({"T2@G1": {0: 1}, "T1@G1": {0: 1}, "T1@G2": {0: 1}})
    assert offsets.topics_by_group() == {"G1": ["T1", "T2"], "G2": ["T1"]}
    assert offsets.topics_by_group()["G1"] == offsets.topics_of("G1")
