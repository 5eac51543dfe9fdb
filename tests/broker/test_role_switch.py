"""Switching a running broker's role (NOTIFY_BROKER_ROLE_CHANGED, ``Broker.become_master`` and
``become_slave``): the processor table, the NameServer's entries, replication, delayed delivery and the
HA port follow the role; a SYNC send waiting for a slave when its master is demoted is answered; what
cannot be switched is refused with a reason."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from _support import (
    address,
    broker_config,
    broker_entries,
    create_topic,
    name_server,
    run,
    send_request,
)

from cometmq.broker import Broker, BrokerRole
from cometmq.cli import _servers
from cometmq.cli._main import build_parser
from cometmq.errors import ConfigError
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import NotifyBrokerRoleChangedRequestHeader
from cometmq.protocol.ha import encode_report
from cometmq.remoting import Connection, RemotingClient, RemotingServer
from waiting import wait_until


@contextlib.asynccontextmanager
async def running(data_dir: Path, **settings: Any) -> AsyncIterator[Broker]:
    """A broker with *settings* (broker.conf keys), registering every 0.5 s and copying its master's
    metadata every 0.1 s."""
    broker = Broker(
        broker_config(data_dir, registerNameServerPeriod=500, **settings), slave_sync_period_s=0.1
    )
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


def role_changed(master_address: str, epoch: int = 0) -> RemotingCommand:
    header = NotifyBrokerRoleChangedRequestHeader(master_address=master_address, master_epoch=epoch)
    return RemotingCommand(code=RequestCode.NOTIFY_BROKER_ROLE_CHANGED, ext_fields=header.encode())


def test_a_master_and_its_slave_swap_roles_by_hand_and_the_name_server_and_replication_follow(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        async with (
            name_server() as (namesrv, ns_addr),
            # brokerId 2: the id it registers under once demoted (a master registers as 0).
            running(tmp_path / "a", namesrvAddr=ns_addr, brokerId=2) as first,
            running(tmp_path / "b", namesrvAddr=ns_addr, brokerRole="SLAVE", brokerId=1) as second,
        ):
            first_addr, second_addr = address(first), address(second)
            first_ha_port = first.ha_port
            assert first.epoch == 1 and first.registered_id == 0
            await wait_until(
                lambda: broker_entries(namesrv) == {0: first_addr, 1: second_addr}, message="both in"
            )
            assert (await create_topic(client, first_addr, "Orders", 1)).code == ResponseCode.SUCCESS
            for i in range(5):
                sent = await client.invoke(first_addr, send_request("Orders", b"before %d" % i))
                assert sent.code == ResponseCode.SUCCESS, sent.remark
            await wait_until(
                lambda: (
                    second.store.replica_end() == first.store.replica_end()
                    and "Orders" in second.topics.topics
                ),
                message="the slave holds the master's log and topic",
            )

            demoted = await client.invoke(first_addr, role_changed(second_addr, 2))
            assert demoted.code == ResponseCode.SUCCESS, demoted.remark
            assert first.is_slave and first.role is BrokerRole.SLAVE and not first.sync_master
            assert first.runtime_info()["brokerRole"] == "SLAVE"
            # A demoted master keeps its HA port (no send waits on the server holding it).
            assert first.ha_server is not None and first.ha_server.port == first_ha_port
            refused = await client.invoke(first_addr, send_request("Orders", b"to a slave"))
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE

            promoted = await client.invoke(second_addr, role_changed(second_addr, 2))
            assert promoted.code == ResponseCode.SUCCESS, promoted.remark
            assert not second.is_slave and second.epoch == 2 and second.registered_id == 0
            # The NameServer drops each broker's old entry and names the new master as id 0.
            await wait_until(
                lambda: broker_entries(namesrv) == {0: second_addr, 2: first_addr}, message="swapped"
            )
            ha_addr = namesrv.routes.broker_live_table[second_addr].ha_server_addr
            assert ha_addr == f"127.0.0.1:{second.ha_port}"

            sent = await client.invoke(second_addr, send_request("Orders", b"after"))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            # The demoted broker follows the master the NameServer names, and copies what it takes.
            await wait_until(lambda: first.master_addr == second_addr, message="the new master learned")
            await wait_until(
                lambda: first.store.replica_end() == second.store.replica_end(),
                message="the demoted broker copies the new master's log",
            )

            # And back: the first broker's HA port is the one it had from the start.
            assert (
                await client.invoke(second_addr, role_changed(first_addr, 3))
            ).code == ResponseCode.SUCCESS
            assert (await client.invoke(first_addr, role_changed(first_addr, 3))).code == ResponseCode.SUCCESS
            assert first.ha_server is not None and first.ha_server.port == first_ha_port
            await wait_until(
                lambda: broker_entries(namesrv) == {0: first_addr, 1: second_addr}, message="back"
            )
            sent = await client.invoke(first_addr, send_request("Orders", b"again"))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        await client.close()

    run(scenario())


def test_a_sync_send_waiting_for_a_slave_is_answered_when_its_master_is_demoted(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        settings = {"brokerRole": "SYNC_MASTER", "brokerId": 1, "slaveTimeout": 600_000}
        async with running(tmp_path, **settings) as master:
            addr = address(master)
            assert (await create_topic(client, addr, "Orders", 1)).code == ResponseCode.SUCCESS
            assert master.ha_server is not None
            # A slave that reports once and never acknowledges anything more.
            _, writer = await asyncio.open_connection("127.0.0.1", master.ha_server.port)
            writer.write(encode_report(master.store.replica_end()))
            ha_server = master.ha_server
            await wait_until(
                lambda: ha_server.runtime_info().ha_connection_info, message="the slave is linked"
            )
            before = master.store.replica_end()
            sending = asyncio.ensure_future(client.invoke(addr, send_request("Orders", b"waits"), timeout=30))
            await wait_until(lambda: master.store.replica_end() > before, message="the message is stored")
            assert not sending.done()
            await master.become_slave(None, None, 0)
            answer = await sending
            assert answer.code == ResponseCode.FLUSH_SLAVE_TIMEOUT  # stored, not confirmed by a slave
            writer.close()
        await client.close()

    run(scenario())


def test_a_demoted_master_stops_delivering_delayed_messages_and_a_promoted_slave_starts(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with running(tmp_path / "a", brokerId=1) as broker:
            assert broker.schedule._started
            await broker.become_slave(None, None, 0)
            assert not broker.schedule._started
            await broker.become_master(broker.epoch + 2)
            assert broker.schedule._started and not broker.is_slave

    run(scenario())


@pytest.mark.parametrize(
    ("settings", "master_address", "epoch", "reason"),
    [
        # brokerId 0 (the default): no id to register under as a slave.
        ({}, "10.0.0.1:10911", 5, "a slave needs brokerId 1 or more"),
        # Epoch 1 is the master's own already.
        ({"brokerId": 3}, "self", 1, "epoch 1 is not past this broker's last epoch 1"),
        ({"brokerId": 3, "etcdEndpoints": "127.0.0.1:1"}, "self", 9, "failover is run by etcd here"),
    ],
)
def test_a_role_switch_that_cannot_be_made_is_refused_with_its_reason(
    tmp_path: Path, settings: dict[str, Any], master_address: str, epoch: int, reason: str
) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        broker = Broker(broker_config(tmp_path, **settings))
        await broker.start()
        try:
            addr = address(broker)
            target = addr if master_address == "self" else master_address
            role = broker.role
            answer = await client.invoke(addr, role_changed(target, epoch))
            assert answer.code == ResponseCode.SYSTEM_ERROR
            assert reason in (answer.remark or "")
            assert broker.role is role
        finally:
            await broker.stop()
            await client.close()

    run(scenario())


def test_failover_mode_needs_a_broker_id_of_1_or_more_and_reads_slave_as_async_master(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"failover \(etcdEndpoints\) needs brokerId 1 or more"):
        Broker(broker_config(tmp_path / "a", etcdEndpoints="127.0.0.1:2379"))
    config = broker_config(tmp_path / "b", etcdEndpoints="127.0.0.1:2379", brokerRole="SLAVE", brokerId=2)
    broker = Broker(config)
    assert broker.config.broker_role is BrokerRole.ASYNC_MASTER
    assert broker.own_id == 2 and broker.is_slave  # a slave of no master until the election decides


def test_the_etcd_flag_sets_the_failover_endpoints_over_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("etcdEndpoints=10.0.0.1:2379\netcdPrefix=/mq\n")
    args = build_parser().parse_args(
        ["broker", "-c", str(conf), "--etcd", "127.0.0.1:2379, 127.0.0.2:2379", "--data-dir", str(tmp_path)]
    )
    config = _servers._broker_config(args)
    assert config.failover and config.etcd_endpoint_list == ["127.0.0.1:2379", "127.0.0.2:2379"]
    assert (config.etcd_prefix, config.etcd_lease_ttl) == ("/mq", 5)


def test_a_promoted_slave_takes_id_0_over_from_a_registered_master_of_an_older_epoch(tmp_path: Path) -> None:
    """The master it replaces may still be registered (paused, cut off): the NameServer gives id 0 to
    the later epoch, and refuses the older master's registrations as id 0 until it is demoted."""

    async def scenario() -> None:
        client = RemotingClient()
        async with (
            name_server() as (namesrv, ns_addr),
            running(tmp_path / "a", namesrvAddr=ns_addr, brokerId=2) as first,
            running(tmp_path / "b", namesrvAddr=ns_addr, brokerRole="SLAVE", brokerId=1) as second,
        ):
            first_addr, second_addr = address(first), address(second)
            await wait_until(
                lambda: broker_entries(namesrv) == {0: first_addr, 1: second_addr}, message="both in"
            )
            promoted = await client.invoke(second_addr, role_changed(second_addr, 2))
            assert promoted.code == ResponseCode.SUCCESS, promoted.remark
            await wait_until(lambda: broker_entries(namesrv) == {0: second_addr}, message="promoted")
            # The first broker, still a master, registers again: refused.
            await first.register_all()
            assert (
                broker_entries(namesrv) == {0: second_addr} and namesrv.routes.master_epochs["broker-a"] == 2
            )
            demoted = await client.invoke(first_addr, role_changed(second_addr, 2))
            assert demoted.code == ResponseCode.SUCCESS, demoted.remark
            await wait_until(
                lambda: broker_entries(namesrv) == {0: second_addr, 2: first_addr}, message="demoted"
            )
        await client.close()

    run(scenario())


def test_a_role_switch_does_not_wait_for_the_name_servers_and_a_master_starts_in_sync_alone(
    tmp_path: Path,
) -> None:
    """The NameServers learn of a switch from the registration task: one that does not answer keeps
    the switch (and the election behind it) waiting for nothing."""

    async def scenario() -> None:
        requests: list[int] = []
        never_answered: asyncio.Future[RemotingCommand | None] = asyncio.get_running_loop().create_future()

        def silent(conn: Connection, request: RemotingCommand) -> asyncio.Future[RemotingCommand | None]:
            requests.append(request.code)
            return never_answered

        silent_namesrv = RemotingServer(silent, "127.0.0.1", 0)
        await silent_namesrv.start()
        try:
            async with running(tmp_path, brokerRole="SLAVE", brokerId=2) as broker:
                broker.set_in_sync(frozenset({2, 3}))  # left from an earlier mastership
                broker.config.namesrv_addr = f"127.0.0.1:{silent_namesrv.port}"
                await broker.become_master(1)
                assert RequestCode.UNREGISTER_BROKER not in requests
                assert broker.in_sync == {2}
                await wait_until(
                    lambda: RequestCode.UNREGISTER_BROKER in requests,
                    message="the slave's entry unregistered by the registration task",
                )
                broker.config.namesrv_addr = ""
        finally:
            never_answered.cancel()
            await silent_namesrv.stop()

    run(scenario())
