"""Broker roles: a slave learns its master from the NameServer's answer to its registration, copies the
master's topics, groups, consumer offsets and delay offsets (SlaveSynchronize), refuses sends and
admin writes naming its master, keeps offsets committed to it, and delivers no delayed messages; pull
answers suggest a broker by RocketMQ 4.9.8's rule; the role settings are checked at start."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from _support import (
    address,
    broker_config,
    commit_request,
    create_topic,
    held_pulls,
    name_server,
    pull,
    pull_request,
    query_offset_request,
    run,
    running_broker,
    send,
    send_request,
)

from cometmq.broker import Broker, BrokerRole
from cometmq.cli import _servers
from cometmq.cli._main import build_parser
from cometmq.errors import ConfigError
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.protocol.namesrv_headers import RegisterBrokerRequestHeader
from cometmq.protocol.route import RegisterBrokerBody
from cometmq.remoting import Connection, Dispatcher, RemotingClient, RemotingServer, RequestHandler
from processes import cometmq
from waiting import wait_until

# Short enough that a test sees a copy at once, long enough not to load the machine.
SYNC_PERIOD_S = 0.1


@contextlib.asynccontextmanager
async def running(data_dir: Path, **settings: Any) -> AsyncIterator[Broker]:
    """A broker with *settings* (broker.conf keys) copying its master's metadata every SYNC_PERIOD_S,
    registering every 0.5 s (a registration lost on a loaded machine is soon made again)."""
    config = broker_config(data_dir, **{"registerNameServerPeriod": 500, **settings})
    broker = Broker(config, slave_sync_period_s=SYNC_PERIOD_S)
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


def slave_settings(namesrv: str, broker_id: int = 1, **more: Any) -> dict[str, Any]:
    return {"namesrvAddr": namesrv, "brokerRole": "SLAVE", "brokerId": broker_id, **more}


@contextlib.asynccontextmanager
async def master_and_slave(base: Path) -> AsyncIterator[tuple[Broker, Broker]]:
    """A name server, and a master and its slave (id 1) registered with it, in *base*/master and
    *base*/slave."""
    async with (
        name_server() as (_, ns_addr),
        running(base / "master", namesrvAddr=ns_addr) as master,
        running(base / "slave", **slave_settings(ns_addr)) as slave,
    ):
        yield master, slave


def put_group(group: str, **settings: Any) -> RemotingCommand:
    body = json.dumps({"groupName": group, **settings}).encode()
    return RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)


# registration ---------------------------------------------------------------------------------------


def test_the_registration_answer_gives_the_slave_its_masters_addresses_and_their_changes_are_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        caplog.set_level(logging.INFO, logger="cometmq.broker")
        async with (
            name_server() as (namesrv, ns_addr),
            running(tmp_path / "slave", **slave_settings(ns_addr)) as slave,
        ):
            assert slave.is_slave
            assert (slave.master_addr, slave.master_ha_addr) == (None, None)  # no master yet
            async with running(tmp_path / "master", namesrvAddr=ns_addr) as master:
                master_addr = master.config.broker_addr
                await wait_until(lambda: slave.master_addr == master_addr, message="the master learned")
                # What the master advertised as its HA address, as the NameServer recorded it.
                ha_addr = namesrv.routes.broker_live_table[master_addr].ha_server_addr
                assert slave.master_ha_addr == ha_addr
                assert not master.is_slave and master.master_addr is None
                assert f"the master of broker-a is {master_addr} (HA {ha_addr})" in caplog.messages
            # The master unregistered: the slave hears the group has none, and keeps the HA address
            # (RocketMQ's slave keeps trying the last one).
            await wait_until(lambda: slave.master_addr is None, message="the master forgotten")
            assert slave.master_ha_addr == ha_addr
            assert "the NameServer names no master of broker-a any more" in caplog.messages

    run(scenario())


# SlaveSynchronize ---------------------------------------------------------------------------------------


def test_topics_groups_and_offsets_made_on_the_master_are_copied_to_the_slave(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with master_and_slave(tmp_path) as (master, slave):
            client = RemotingClient()
            master_addr, slave_addr = address(master), address(slave)
            assert (await create_topic(client, master_addr, "Orders", 3)).code == ResponseCode.SUCCESS
            response = await client.invoke(master_addr, put_group("Billing", retryMaxTimes=5))
            assert response.code == ResponseCode.SUCCESS
            await send(client, master_addr, "Orders", b"one", 1)
            committed = await client.invoke(master_addr, commit_request("Billing", "Orders", 1, 1))
            assert committed.code == ResponseCode.SUCCESS
            # A delayed message (level 1, 1 s) moves the master's delay offset when delivered.
            parked = await client.invoke(master_addr, send_request("Orders", b"later", 0, {"DELAY": "1"}))
            assert parked.code == ResponseCode.SUCCESS
            await wait_until(lambda: master.schedule.offsets.get(1) == 1, message="the delayed message sent")
            # A timer message settles the first unit of the master's timer queue when delivered.
            timed = await client.invoke(
                master_addr, send_request("Orders", b"timed", 0, {"TIMER_DELAY_MS": "50"})
            )
            assert timed.code == ResponseCode.SUCCESS
            await wait_until(
                lambda: master.timer.settled.first_unsettled == 1, message="the timer message sent"
            )
            # An offset committed to the slave alone (while its master was away) is kept.
            await wait_until(lambda: "Orders" in slave.topics.topics, message="the topic copied")
            kept = await client.invoke(slave_addr, commit_request("Audit", "Orders", 2, 7))
            assert kept.code == ResponseCode.SUCCESS

            await wait_until(lambda: "Billing" in slave.groups.groups, message="the group copied")
            await wait_until(lambda: slave.schedule.offsets == {1: 1}, message="the delay offset copied")
            await wait_until(
                lambda: slave.timer.settled.first_unsettled == 1, message="the timer progress copied"
            )

            async def offset_on_slave(group: str, queue_id: int) -> int:
                response = await client.invoke(slave_addr, query_offset_request(group, "Orders", queue_id))
                return int(response.ext_fields["offset"]) if response.code == ResponseCode.SUCCESS else -1

            async def copied() -> bool:
                return await offset_on_slave("Billing", 1) == 1

            await wait_until(copied, message="the committed offset copied")
            assert await offset_on_slave("Audit", 2) == 7
            assert slave.topics.topics["Orders"].read_queue_nums == 3
            assert slave.groups.groups["Billing"].retry_max_times == 5
            assert slave.topics.data_version == master.topics.data_version
            # Written to the slave's own files, as a restart would read them.
            config_dir = tmp_path / "slave" / "config"
            await wait_until(
                lambda: '"Orders@Billing"' in (config_dir / "consumerOffset.json").read_text(),
                message="consumerOffset.json written",
            )
            assert "Orders" in json.loads((config_dir / "topics.json").read_text())["topicConfigTable"]
            assert (
                "Billing"
                in json.loads((config_dir / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
            )
            assert json.loads((config_dir / "delayOffset.json").read_text()) == {"offsetTable": {"1": 1}}
            assert json.loads((config_dir / "timerProgress.json").read_text()) == {
                "base": 0,
                "settled": "AQ==",
            }
            await client.close()

    run(scenario())


def test_get_all_consumer_offset_answers_every_committed_offset_in_rocketmqs_form(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(tmp_path) as broker:
            client = RemotingClient()
            addr = address(broker)
            await create_topic(client, addr, "T", 4)
            for queue_id, offset in ((3, 30), (0, 5)):
                await client.invoke(addr, commit_request("G", "T", queue_id, offset))
            response = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_ALL_CONSUMER_OFFSET))
            assert response.code == ResponseCode.SUCCESS
            # Queue ids unquoted, as fastjson writes a Map<Integer, Long>.
            assert response.body == b'{"offsetTable":{"T@G":{0:5,3:30}}}'
            assert fastjson.loads(response.body) == {"offsetTable": {"T@G": {"0": 5, "3": 30}}}
            await client.close()

    run(scenario())


class ScriptedMaster:
    """A master that answers the four SlaveSynchronize requests, consumer offsets with an error while
    ``refusing``; registered with the NameServer as broker-a's id 0."""

    def __init__(self) -> None:
        self.refusing = True
        self.refusals = 0
        self.server = RemotingServer(
            Dispatcher(
                {
                    RequestCode.GET_ALL_TOPIC_CONFIG: self._answer(
                        b'{"dataVersion":{},"topicConfigTable":{}}'
                    ),
                    RequestCode.GET_ALL_CONSUMER_OFFSET: self._offsets,
                    RequestCode.GET_ALL_DELAY_OFFSET: self._answer(b'{"offsetTable":{}}'),
                    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self._answer(
                        b'{"dataVersion":{},"subscriptionGroupTable":{}}'
                    ),
                }
            ),
            "127.0.0.1",
            0,
        )

    @staticmethod
    def _answer(body: bytes) -> RequestHandler:
        return lambda conn, request: request.response(body=body)

    def _offsets(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        if self.refusing:
            self.refusals += 1
            return request.response(ResponseCode.SYSTEM_ERROR, "No consumer offset in this broker")
        return request.response(body=b'{"offsetTable":{"T@G":{0:4}}}')

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def register(self, client: RemotingClient, namesrv: str) -> None:
        header = RegisterBrokerRequestHeader(
            broker_name="broker-a",
            broker_addr=self.addr,
            cluster_name="DefaultCluster",
            ha_server_addr=f"127.0.0.1:{self.server.port + 1}",
            broker_id=0,
        )
        request = RemotingCommand(
            code=RequestCode.REGISTER_BROKER, ext_fields=header.encode(), body=RegisterBrokerBody().encode()
        )
        assert (await client.invoke(namesrv, request)).code == ResponseCode.SUCCESS


def test_a_master_answering_an_error_is_logged_once_not_every_round(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        caplog.set_level(logging.INFO, logger="cometmq.broker")
        master = ScriptedMaster()
        await master.server.start()
        client = RemotingClient()
        async with name_server() as (_, ns_addr):
            await master.register(client, ns_addr)
            async with running(tmp_path, **slave_settings(ns_addr)) as slave:
                assert slave.master_addr == master.addr
                await wait_until(lambda: master.refusals >= 3, message="three rounds refused")
                master.refusing = False
                await wait_until(lambda: slave.offsets.query("G", "T", 0) == 4, message="the offsets copied")
                copying = [m for m in caplog.messages if "copy" in m and "consumer offsets" in m]
                assert copying == [
                    f"cannot copy consumer offsets from the master {master.addr}: it answered code 1: "
                    "No consumer offset in this broker",
                    f"copying consumer offsets from the master {master.addr} works again",
                ]
        await client.close()
        await master.server.stop()

    run(scenario())


# what a slave refuses and keeps ----------------------------------------------------------------------


SENDS = {
    "SEND_MESSAGE": send_request("T", b"x", v2=False),
    "SEND_MESSAGE_V2": send_request("T", b"x"),
    "SEND_BATCH_MESSAGE": RemotingCommand(
        code=RequestCode.SEND_BATCH_MESSAGE,
        ext_fields=send_request("T", b"", batch="true").ext_fields,
        body=encode_batch_body([BatchEntry(0, b"x", "")]),
    ),
    "CONSUMER_SEND_MSG_BACK": RemotingCommand(
        code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields={"offset": "0", "group": "G", "delayLevel": "0"}
    ),
}
ADMIN_WRITES = {
    "UPDATE_AND_CREATE_TOPIC": RemotingCommand(
        code=RequestCode.UPDATE_AND_CREATE_TOPIC,
        ext_fields={
            "topic": "T",
            "defaultTopic": "TBW102",
            "readQueueNums": "4",
            "writeQueueNums": "4",
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
        },
    ),
    "DELETE_TOPIC_IN_BROKER": RemotingCommand(
        code=RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields={"topic": "T"}
    ),
    "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP": put_group("G"),
    "DELETE_SUBSCRIPTIONGROUP": RemotingCommand(
        code=RequestCode.DELETE_SUBSCRIPTIONGROUP, ext_fields={"groupName": "G"}
    ),
}


async def assert_refused(client: RemotingClient, addr: str, slave_name: str, master: str) -> None:
    for name, request in SENDS.items():
        response = await client.invoke(addr, request)
        assert response.code == ResponseCode.SERVICE_NOT_AVAILABLE, name
        assert response.remark == (
            f"broker broker-a at {slave_name} is a slave of {master}: a slave stores no messages sent to "
            "it; send them to the master"
        ), name
    for name, request in ADMIN_WRITES.items():
        response = await client.invoke(addr, request)
        assert response.code == ResponseCode.SYSTEM_ERROR, name
        assert response.remark == (
            f"broker broker-a at {slave_name} is a slave of {master}: topics and subscription groups "
            "cannot be changed on a slave; run the command on the master"
        ), name


def test_a_slave_refuses_sends_and_admin_writes_naming_its_master(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        # Without a NameServer the slave knows no master.
        async with running(tmp_path / "alone", brokerRole="SLAVE", brokerId=1) as alone:
            await assert_refused(client, address(alone), alone.config.broker_addr, "an unknown master")
            assert "T" not in alone.topics.topics and "G" not in alone.groups.groups
        async with master_and_slave(tmp_path) as (master, slave):
            await assert_refused(client, address(slave), slave.config.broker_addr, master.config.broker_addr)
            # The master takes the same requests.
            response = await client.invoke(address(master), SENDS["SEND_MESSAGE_V2"])
            assert response.code == ResponseCode.SUCCESS, response.remark
        await client.close()

    run(scenario())


@contextlib.asynccontextmanager
async def demoted_master(
    data_dir: Path, **settings: Any
) -> AsyncIterator[tuple[Broker, str, RemotingClient]]:
    """A broker that ran as a master (a message in topic Other, then 2 in topic T's queue 0) started
    again in its data directory as a slave (id 1, no NameServer) with *settings*."""
    client = RemotingClient()
    async with running_broker(data_dir) as master:
        await send(client, address(master), "Other", b"older")
        await create_topic(client, address(master), "T", 1)
        for body in (b"first", b"second"):
            await send(client, address(master), "T", body)
    async with running(data_dir, brokerRole="SLAVE", brokerId=1, **settings) as slave:
        try:
            yield slave, address(slave), client
        finally:
            await client.close()


def test_a_slave_keeps_committed_offsets_but_not_a_pulls_commit(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with demoted_master(tmp_path) as (slave, addr, client):
            committed = await client.invoke(addr, commit_request("G", "T", 0, 1))
            assert committed.code == ResponseCode.SUCCESS
            request = pull_request("T", 0, 1)
            request.ext_fields.update(sysFlag=str(0x4 | 0x1), commitOffset="2")  # FLAG_COMMIT_OFFSET
            response = await client.invoke(addr, request)
            assert response.code == ResponseCode.SUCCESS  # a slave serves pulls
            assert slave.offsets.query("G", "T", 0) == 1

    run(scenario())


def test_a_slave_delivers_no_delayed_messages(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        async with running_broker(tmp_path, messageDelayLevel="1h") as master:
            await create_topic(client, address(master), "Later", 1)
            parked = await client.invoke(address(master), send_request("Later", b"x", 0, {"DELAY": "1"}))
            assert parked.code == ResponseCode.SUCCESS
        # Due at once under a 0 s level: a master delivers it as soon as its schedule service runs.
        async with running(tmp_path, messageDelayLevel="0s", brokerRole="SLAVE", brokerId=1) as slave:
            # A round trip, so that a delivery task started with the broker would have had its turn.
            response, _ = await pull(client, address(slave), "Later", 0, 0)
            assert response.code == ResponseCode.PULL_NOT_FOUND
            assert slave.store.max_offset("Later", 0) == 0
            assert slave.schedule.offsets == {}
        async with running_broker(tmp_path, messageDelayLevel="0s") as master:
            await wait_until(
                lambda: master.store.max_offset("Later", 0) == 1, message="delivered by a master"
            )
        await client.close()

    run(scenario())


# which broker a pull suggests -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slave_read", "ratio", "suggested"),
    [("true", 0, 1), ("true", 40, 0), ("false", 0, 0)],
    ids=["far-behind", "in-memory", "slave-read-off"],
)
def test_a_master_suggests_the_slave_to_a_consumer_far_behind_when_slave_reads_are_on(
    tmp_path: Path, slave_read: str, ratio: int, suggested: int
) -> None:
    # accessMessageInMemoryMaxRatio 0: any byte of the commit log past what the consumer reads is too
    # far; 40: the machine's RAM is far more than the few bytes here.
    async def scenario() -> None:
        settings = {"slaveReadEnable": slave_read, "accessMessageInMemoryMaxRatio": ratio}
        async with running(tmp_path, **settings) as broker:
            client = RemotingClient()
            addr = address(broker)
            await create_topic(client, addr, "T", 1)
            for body in (b"a", b"b", b"c"):
                await send(client, addr, "T", body)
            response, records = await pull(client, addr, "T", 0, 0, max_nums=1)
            assert response.code == ResponseCode.SUCCESS and len(records) == 1
            assert int(response.ext_fields["suggestWhichBrokerId"]) == suggested
            await client.close()

    run(scenario())


def test_the_groups_broker_ids_are_what_a_pull_suggests(tmp_path: Path) -> None:
    async def scenario() -> None:
        settings = {"slaveReadEnable": "true", "accessMessageInMemoryMaxRatio": 0}
        async with running(tmp_path, **settings) as broker:
            client = RemotingClient()
            addr = address(broker)
            await create_topic(client, addr, "T", 1)
            await send(client, addr, "T", b"a")
            await client.invoke(addr, put_group("Slow", whichBrokerWhenConsumeSlowly=2))
            response, _ = await pull(client, addr, "T", 0, 0, group="Slow")
            assert int(response.ext_fields["suggestWhichBrokerId"]) == 2
            await client.close()

    run(scenario())


@pytest.mark.parametrize("offset_check", [False, True])
def test_a_slave_corrects_a_pulls_offset_only_with_offset_check_in_slave(
    tmp_path: Path, offset_check: bool
) -> None:
    async def scenario() -> None:
        settings = {"offsetCheckInSlave": str(offset_check).lower()}
        async with demoted_master(tmp_path, **settings) as (_, addr, client):
            response, _ = await pull(client, addr, "T", 0, 100)  # past the queue's end (2)
            header = response.ext_fields
            if offset_check:
                assert (response.code, int(header["nextBeginOffset"])) == (ResponseCode.PULL_OFFSET_MOVED, 2)
            else:
                # RocketMQ's slave keeps the consumer where it is and sends it back to the group's broker.
                assert response.code == ResponseCode.PULL_RETRY_IMMEDIATELY
                assert int(header["nextBeginOffset"]) == 100
            assert int(header["suggestWhichBrokerId"]) == 0

    run(scenario())


def test_a_slave_serves_a_topic_it_holds_messages_of_before_its_config_is_copied(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        async with running_broker(tmp_path) as master:
            await create_topic(client, address(master), "Fresh", 2)
            for body in (b"one", b"two"):
                await send(client, address(master), "Fresh", body, queue_id=1)
        for table in (tmp_path / "config").glob("topics.json*"):  # as if the master died before the copy
            table.unlink()
        async with running(tmp_path, brokerRole="SLAVE", brokerId=1) as slave:
            assert slave.topics.get("Fresh") is None
            response, records = await pull(client, address(slave), "Fresh", 1, 0)
            assert response.code == ResponseCode.SUCCESS
            assert [record.body for record in records] == [b"one", b"two"]
            response, _ = await pull(client, address(slave), "Fresh", 0, 0)
            assert response.code != ResponseCode.TOPIC_NOT_EXIST  # an empty queue of the topic
            response, _ = await pull(client, address(slave), "Unknown", 0, 0)
            assert response.code == ResponseCode.TOPIC_NOT_EXIST
        await client.close()

    run(scenario())


def test_a_slave_no_longer_serves_a_topic_its_master_deleted(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with master_and_slave(tmp_path) as (master, slave):
            client = RemotingClient()
            master_addr, slave_addr = address(master), address(slave)
            await create_topic(client, master_addr, "Gone", 1)
            await send(client, master_addr, "Gone", b"copied")
            await wait_until(lambda: "Gone" in slave.topics.topics, message="the topic copied")
            await wait_until(lambda: slave.store.max_offset("Gone", 0) == 1, message="the message copied")
            deleted = await client.invoke(
                master_addr,
                RemotingCommand(code=RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields={"topic": "Gone"}),
            )
            assert deleted.code == ResponseCode.SUCCESS
            await wait_until(lambda: "Gone" not in slave.topics.topics, message="the deletion copied")
            # The slave still holds the message, but serves the topic no more, as its master.
            assert slave.store.max_offset("Gone", 0) == 1
            response, _ = await pull(client, slave_addr, "Gone", 0, 0)
            assert response.code == ResponseCode.TOPIC_NOT_EXIST
            await client.close()

    run(scenario())


def test_a_slave_holds_a_long_poll_outside_its_queue_instead_of_answering_retry_at_once(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with demoted_master(tmp_path) as (slave, addr, client):
            # Past the queue's end (2), as a consumer that read on the master further than the slave has
            # copied: answered PULL_RETRY_IMMEDIATELY only when the hold ends, not at once.
            answer = asyncio.ensure_future(client.invoke(addr, pull_request("T", 0, 100, suspend_ms=1_000)))
            await wait_until(lambda: held_pulls(slave) == 1, message="the pull to be held")
            response = await answer
            assert response.code == ResponseCode.PULL_RETRY_IMMEDIATELY
            assert int(response.ext_fields["nextBeginOffset"]) == 100
            assert held_pulls(slave) == 0

    run(scenario())


def test_a_slave_with_slave_reads_keeps_a_consumer_far_behind_and_returns_a_caught_up_one(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        for ratio, suggested in ((0, 1), (40, 0)):
            settings = {"slaveReadEnable": "true", "accessMessageInMemoryMaxRatio": ratio}
            async with demoted_master(tmp_path / str(ratio), **settings) as (_, addr, client):
                response, records = await pull(client, addr, "T", 0, 0)
                assert [record.body for record in records] == [b"first", b"second"]
                assert int(response.ext_fields["suggestWhichBrokerId"]) == suggested

    run(scenario())


# role settings ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("broker_id", [0, -1])
def test_a_slave_without_an_id_of_1_or_more_does_not_start(tmp_path: Path, broker_id: int) -> None:
    config = broker_config(tmp_path, brokerRole="SLAVE", brokerId=broker_id)
    with pytest.raises(ConfigError) as raised:
        Broker(config)
    assert str(raised.value) == (
        f"brokerRole=SLAVE needs brokerId 1 or more (0 is the master's id), not {broker_id} "
        "(set brokerId, or --broker-id)"
    )
    assert not (tmp_path / "commitlog").exists()  # nothing was opened


@pytest.mark.parametrize("role", ["ASYNC_MASTER", "SYNC_MASTER"])
def test_a_masters_id_is_0_whatever_was_set(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, role: str
) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.broker")
    broker = Broker(broker_config(tmp_path, brokerRole=role, brokerId=3))
    assert broker.config.broker_id == 0
    assert caplog.messages == [f"brokerId 3 set to 0: a {role} is its group's id 0"]


@pytest.mark.parametrize("ratio", [-1, 101])
def test_access_message_in_memory_max_ratio_is_a_percentage(tmp_path: Path, ratio: int) -> None:
    with pytest.raises(ConfigError, match=f"accessMessageInMemoryMaxRatio {ratio} is not a percentage"):
        broker_config(tmp_path, accessMessageInMemoryMaxRatio=ratio)


def test_role_flags_set_the_role_and_id_over_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerRole=ASYNC_MASTER\nbrokerId=0\nslaveReadEnable=true\n")
    args = build_parser().parse_args(
        ["broker", "-c", str(conf), "--role", "SLAVE", "--broker-id", "2", "--data-dir", str(tmp_path)]
    )
    config = _servers._broker_config(args)
    assert (config.broker_role, config.broker_id, config.slave_read_enable) == (BrokerRole.SLAVE, 2, True)
    assert tuple(role.value for role in BrokerRole) == _servers.BROKER_ROLES


def test_the_broker_command_refuses_a_slave_without_an_id_and_an_unknown_role(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    result = cometmq("broker", "--role", "SLAVE", "-n", "127.0.0.1:9", "--data-dir", data)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "cometmq: error: brokerRole=SLAVE needs brokerId 1 or more (0 is the master's id), not 0 "
        "(set brokerId, or --broker-id)"
    ]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["broker", "--role", "MASTER"])


# runtime info -----------------------------------------------------------------------------------------


def test_runtime_info_gives_the_role_and_the_newest_messages_store_time(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(tmp_path / "empty") as empty:
            assert empty.runtime_info()["lastMessageStoreTimestamp"] == "0"
        # Read back after a restart, from the files: the newest message of all topics.
        async with demoted_master(tmp_path / "data") as (slave, addr, client):
            response = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO))
            info = fastjson.loads(response.body)["table"]
            _, records = await pull(client, addr, "T", 0, 0)
            assert info["brokerRole"] == "SLAVE"
            assert info["lastMessageStoreTimestamp"] == str(records[-1].store_timestamp)
            assert info["commitLogMaxOffset"] == str(slave.store.commitlog_max_offset)

    run(scenario())


def test_a_slave_keeps_its_own_delivery_progress_until_it_holds_the_copies_its_master_counts(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with running(tmp_path, brokerRole="SLAVE", brokerId=1) as slave:
            log_end = slave.store.commitlog_max_offset
            ahead = {
                "offsetTable": {"1": 5},
                "timerProgress": {"base": 0, "settled": "Aw=="},
                "deliveredEnd": log_end + 100,
            }
            slave.slave_sync._adopt_delay_offsets(ahead, "a master ahead of it")
            assert slave.schedule.offsets == {} and 0 not in slave.timer.settled
            slave.slave_sync._adopt_delay_offsets(
                {**ahead, "deliveredEnd": log_end}, "a master it caught up with"
            )
            assert slave.schedule.offsets == {1: 5}
            assert slave.timer.settled.first_unsettled == 2

    run(scenario())


def test_a_restarted_master_counts_its_whole_log_as_delivered_for_its_slaves(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(tmp_path) as master:
            client = RemotingClient()
            addr = address(master)
            assert (await create_topic(client, addr, "Orders", 1)).code == ResponseCode.SUCCESS
            await send(client, addr, "Orders", b"one", 0)
            await client.close()
        # Its progress files may count copies a slave has not received: until it delivers again,
        # a slave must hold the whole log it restarted with before it adopts them.
        async with running(tmp_path) as master:
            client = RemotingClient()
            response = await client.invoke(
                address(master), RemotingCommand(code=RequestCode.GET_ALL_DELAY_OFFSET)
            )
            assert fastjson.loads(response.body)["deliveredEnd"] == master.store.commitlog_max_offset > 0
            await client.close()

    run(scenario())
