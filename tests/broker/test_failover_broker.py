"""Brokers in failover mode against a real etcd: the election makes one master (registered as id 0)
and the others its slaves, a clean stop hands the mastership over, a SYNC_MASTER waits for its in-sync
set and refuses sends while it is smaller than minInSyncReplicas, a master whose lease is not trusted
refuses sends before storing them unless etcd is unreachable and another in-sync member can vouch for
them, and a broker whose log holds later epochs founds the group past them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from _support import (
    address,
    broker_config,
    broker_entries,
    create_topic,
    name_server,
    run,
    running_broker,
    send_request,
)

from cometmq.broker import Broker
from cometmq.broker._pull import _confirmed_part
from cometmq.broker._send import MASTERSHIP_NOT_TRUSTED
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.record import decode_offset_msg_id, decode_records
from cometmq.remoting import RemotingClient
from etcd_server import EtcdServer
from waiting import wait_until


@contextlib.asynccontextmanager
async def failover_broker(
    data_dir: Path, etcd: EtcdServer, broker_id: int, **settings: Any
) -> AsyncIterator[Broker]:
    """A broker of group broker-a in failover mode, with a lease of 2 s unless *settings* say (the
    shortest the fence trusts for a second)."""
    settings.setdefault("etcdLeaseTtl", 2)
    config = broker_config(
        data_dir,
        etcdEndpoints=",".join(etcd.endpoints),
        brokerId=broker_id,
        registerNameServerPeriod=500,
        **settings,
    )
    broker = Broker(config, slave_sync_period_s=0.1)
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


def test_the_election_makes_one_master_the_other_follows_and_a_clean_stop_hands_over(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        async with name_server() as (namesrv, ns_addr):
            settings = {"namesrvAddr": ns_addr, "brokerRole": "SYNC_MASTER"}
            second_stopped = contextlib.AsyncExitStack()
            async with failover_broker(tmp_path / "b1", etcd, 1, **settings) as first:
                await wait_until(lambda: not first.is_slave, message="the first broker founds the group")
                assert first.epoch == 1
                second = await second_stopped.enter_async_context(
                    failover_broker(tmp_path / "b2", etcd, 2, **settings)
                )
                first_addr, second_addr = address(first), address(second)
                await wait_until(
                    lambda: second.is_slave and second.master_addr == first_addr, message="the second follows"
                )
                await wait_until(
                    lambda: first.in_sync == {1, 2}, message="the follower joins the in-sync set"
                )
                await wait_until(
                    lambda: broker_entries(namesrv) == {0: first_addr, 2: second_addr}, message="routes"
                )
                assert (await create_topic(client, first_addr, "Orders", 1)).code == ResponseCode.SUCCESS
                sent = await client.invoke(first_addr, send_request("Orders", b"one"))
                assert sent.code == ResponseCode.SUCCESS, sent.remark
                # SYNC_MASTER with allAckInSyncStateSet: answered once the in-sync follower has it.
                assert second.store.replica_end() >= first.store.replica_end()
            # The first broker stopped: its lease is revoked, the second is elected at once.
            await wait_until(lambda: not second.is_slave, message="the second broker elected")
            assert second.epoch == 2
            await wait_until(
                lambda: broker_entries(namesrv) == {0: second_addr}, message="the new master registered"
            )
            sent = await client.invoke(second_addr, send_request("Orders", b"two"))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            await second_stopped.aclose()
        await client.close()

    run(scenario())


def test_a_master_whose_lease_lapsed_refuses_a_send_or_send_back_before_storing_it(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        async with failover_broker(tmp_path, etcd, 1) as broker:
            await wait_until(lambda: not broker.is_slave, message="elected")
            addr = address(broker)
            assert (await create_topic(client, addr, "Orders", 1)).code == ResponseCode.SUCCESS
            election = broker.election
            assert election is not None
            await wait_until(election.lease_trusted, message="the lease trusted")
            sent = await client.invoke(addr, send_request("Orders", b"while leased"))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            offset = decode_offset_msg_id(sent.ext_fields["msgId"])[2]
            etcd.stop()
            await wait_until(lambda: not election.lease_trusted(), message="the lease is no longer trusted")
            before = broker.store.replica_end()
            # Alone in its in-sync set, nobody can vouch for a message: refused before it is stored.
            refused = await client.invoke(addr, send_request("Orders", b"after the lease"))
            assert (refused.code, refused.remark) == (
                ResponseCode.SERVICE_NOT_AVAILABLE,
                MASTERSHIP_NOT_TRUSTED,
            )
            # A consumer's send-back too: the consumer keeps the message and tries again.
            back = RemotingCommand(
                code=RequestCode.CONSUMER_SEND_MSG_BACK,
                ext_fields={"offset": str(offset), "group": "CG", "delayLevel": "0"},
            )
            refused_back = await client.invoke(addr, back)
            assert (refused_back.code, refused_back.remark) == (
                ResponseCode.SERVICE_NOT_AVAILABLE,
                MASTERSHIP_NOT_TRUSTED,
            )
            assert broker.store.replica_end() == before  # nothing stored
            assert not broker.is_slave  # etcd unreachable: the role stays
        await client.close()

    run(scenario())


def test_a_sync_master_whose_lease_lapsed_with_etcd_reachable_refuses_sends_its_slaves_have(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    """The failsafe is for etcd being unreachable, not for a lease that lapsed while etcd answers (the
    master may have been paused and replaced meanwhile)."""

    async def scenario() -> None:
        client = RemotingClient()
        settings = {"brokerRole": "SYNC_MASTER", "etcdLeaseTtl": 10}
        async with failover_broker(tmp_path / "b1", etcd, 1, **settings) as first:
            await wait_until(lambda: not first.is_slave, message="elected")
            async with failover_broker(tmp_path / "b2", etcd, 2, **settings):
                await wait_until(
                    lambda: first.in_sync == {1, 2}, message="the follower joins the in-sync set"
                )
                addr = address(first)
                assert (await create_topic(client, addr, "Orders", 1)).code == ResponseCode.SUCCESS
                election = first.election
                assert election is not None
                # As if the master had been paused past its lease's trusted time.
                election._tasks[1].cancel()
                election._trusted_until = 0.0
                assert election.status().etcd_reachable
                before = first.store.replica_end()
                refused = await client.invoke(addr, send_request("Orders", b"unsure"))
                assert (refused.code, refused.remark) == (
                    ResponseCode.SERVICE_NOT_AVAILABLE,
                    MASTERSHIP_NOT_TRUSTED,
                )
                assert first.store.replica_end() == before
        await client.close()

    run(scenario())


def test_a_broker_whose_log_holds_later_epochs_founds_the_group_past_them(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    async def scenario() -> None:
        for _ in range(2):  # two runs with a static role: the log holds epochs 1 and 2
            async with running_broker(tmp_path):
                pass
        client = RemotingClient()
        async with failover_broker(tmp_path, etcd, 1) as broker:
            await wait_until(lambda: not broker.is_slave, message="elected")
            assert broker.epoch == 3
            assert [entry.epoch for entry in broker.store.epochs()] == [1, 2, 3]
            election = broker.election
            assert election is not None
            await wait_until(election.lease_trusted, message="the lease trusted")
            addr = address(broker)
            assert (await create_topic(client, addr, "Orders", 1)).code == ResponseCode.SUCCESS
            sent = await client.invoke(addr, send_request("Orders", b"served"))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        await client.close()

    run(scenario())


def test_a_sync_master_cut_off_from_etcd_acknowledges_what_every_in_sync_slave_has(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        settings = {"brokerRole": "SYNC_MASTER"}
        async with failover_broker(tmp_path / "b1", etcd, 1, **settings) as first:
            await wait_until(lambda: not first.is_slave, message="elected")
            async with failover_broker(tmp_path / "b2", etcd, 2, **settings):
                await wait_until(
                    lambda: first.in_sync == {1, 2}, message="the follower joins the in-sync set"
                )
                addr = address(first)
                assert (await create_topic(client, addr, "Orders", 1)).code == ResponseCode.SUCCESS
                etcd.stop()
                election = first.election
                assert election is not None
                await wait_until(
                    lambda: not election.lease_trusted(), message="the lease is no longer trusted"
                )
                sent = await client.invoke(addr, send_request("Orders", b"failsafe"))
                assert sent.code == ResponseCode.SUCCESS, sent.remark
        await client.close()

    run(scenario())


def test_a_sync_master_refuses_sends_while_its_in_sync_set_is_below_min_in_sync_replicas(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        settings = {"brokerRole": "SYNC_MASTER", "minInSyncReplicas": 2}
        async with failover_broker(tmp_path, etcd, 1, **settings) as broker:
            await wait_until(lambda: not broker.is_slave, message="elected")
            addr = address(broker)
            before = broker.store.replica_end()
            refused = await client.invoke(addr, send_request("Orders", b"alone"))
            assert refused.code == ResponseCode.SYSTEM_ERROR
            assert "in-sync replicas not enough" in (refused.remark or "")
            assert broker.store.replica_end() == before  # refused before storing
        await client.close()

    run(scenario())


def test_a_pull_reads_only_up_to_the_first_record_the_in_sync_set_has_not_acknowledged(
    tmp_path: Path,
) -> None:
    """RocketMQ 5's confirmOffset: cut at each record boundary, a read keeps the records before it
    and resumes at the first record cut; cut at the first record, there is nothing to read yet."""

    async def scenario() -> None:
        client = RemotingClient()
        async with running_broker(tmp_path) as broker:
            addr = address(broker)
            assert (await create_topic(client, addr, "Orders", 1)).code == ResponseCode.SUCCESS
            ends = []
            for i in range(6):
                sent = await client.invoke(addr, send_request("Orders", b"m%d" % i))
                assert sent.code == ResponseCode.SUCCESS
                ends.append(broker.store.replica_end())
            result = broker.store.get_messages("Orders", 0, 0, 32)
            assert result.message_count == 6
            assert _confirmed_part(result, ends[-1]) is result
            assert _confirmed_part(result, ends[0] - 1) == ends[0]  # where the first record ends
            for kept in range(1, 6):
                part = _confirmed_part(result, ends[kept - 1])
                assert not isinstance(part, int)
                assert (part.message_count, part.next_begin_offset) == (kept, kept)
                body = b"".join(bytes(buffer) for buffer in part.buffers)
                assert len(body) == part.buffer_total_size
                assert [record.body for record in decode_records(body)] == [b"m%d" % i for i in range(kept)]
        await client.close()

    run(scenario())
