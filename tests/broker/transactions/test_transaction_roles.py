"""A slave keeps the transactions' progress (the consumer offsets of CID_RMQ_SYS_TRANS it copies from
its master) and the half and op records (its copy of the commit log): made master, it knows which half
messages are settled, ends the others and checks them. Progress past the end of the half or op queue
this broker holds is capped at it, and a master commits progress only once its op records reached
the slaves. A SYNC_FLUSH master answers a commit once the committed copy is flushed."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from _tx_support import (
    COMMIT,
    ROLLBACK,
    address,
    broker_and_client,
    create_topic,
    end_request,
    name_server,
    pull,
    run,
    running_broker,
    send_half,
)

from cometmq.protocol import ResponseCode
from cometmq.protocol.naming import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from cometmq.protocol.transaction import TRANSACTION_CHECK_GROUP
from cometmq.remoting import RemotingClient
from cometmq.store import PutStatus
from flush_fakes import InjectedCommitLogSync
from waiting import wait_until

TOPIC = "TxRoles"


def test_a_promoted_slave_continues_from_its_masters_progress(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with (
            name_server() as (_, ns_addr),
            running_broker(tmp_path / "master", namesrvAddr=ns_addr, slave_sync_period_s=0.1) as master,
            running_broker(
                tmp_path / "slave",
                namesrvAddr=ns_addr,
                brokerRole="SLAVE",
                brokerId=1,
                slave_sync_period_s=0.1,
            ) as slave,
        ):
            client = RemotingClient()
            try:
                addr = address(master)
                assert (await create_topic(client, addr, TOPIC, 1)).code == ResponseCode.SUCCESS
                halves = [await send_half(client, addr, TOPIC, f"m{i}".encode()) for i in range(3)]
                for half, kind in ((halves[0], COMMIT), (halves[1], ROLLBACK)):
                    response = await client.invoke(addr, end_request(half, kind), timeout=10)
                    assert response.code == ResponseCode.SUCCESS, response.remark
                await master.transactions.check_round()
                assert master.offsets.query(TRANSACTION_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 2
                await wait_until(
                    lambda: (
                        slave.offsets.query(TRANSACTION_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 2
                        and slave.store.max_offset(TRANS_OP_HALF_TOPIC, 0) == 2
                        and slave.store.max_offset(TOPIC, 0) == 1
                    ),
                    message="the progress and the records copied to the slave",
                )
                assert not slave.transactions.running  # a slave does not check

                await slave.become_master(master.epoch + 1)
                promoted = address(slave)
                service = slave.transactions
                assert [half.queue_offset in service.settled for half in halves] == [True, True, False]
                for half in halves:  # the settled ones change nothing; the open one is committed
                    response = await client.invoke(promoted, end_request(half, COMMIT), timeout=10)
                    assert response.code == ResponseCode.SUCCESS, response.remark
                _, records = await pull(client, promoted, TOPIC, 0, 0)
                assert [r.body for r in records] == [b"m0", b"m2"]
            finally:
                await client.close()

    run(scenario())


def test_a_sync_flush_master_answers_a_commit_once_the_copy_is_flushed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, flushDiskType="SYNC_FLUSH") as (broker, addr, client):
            await create_topic(client, addr, TOPIC, 1)
            half = await send_half(client, addr, TOPIC, b"flushed")
            disk = InjectedCommitLogSync(monkeypatch)
            disk.hang()
            try:
                answer = asyncio.ensure_future(client.invoke(addr, end_request(half, COMMIT), timeout=30))
                await wait_until(
                    lambda: broker.store.max_offset(TOPIC, 0) == 1 and disk.calls,
                    message="the committed copy stored and its flush under way",
                )
                assert not answer.done()  # not answered before the copy is flushed
            finally:
                disk.release()
            response = await answer
            assert response.code == ResponseCode.SUCCESS, response.remark
            _, records = await pull(client, addr, TOPIC, 0, 0)
            assert [r.body for r in records] == [b"flushed"]

    run(scenario())


def test_progress_past_the_queues_ends_is_capped_at_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="cometmq.broker")

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, TOPIC, 1)
            service = broker.transactions
            await service.stop()
            # What a promoted slave holds when its log lags the progress it copied from its master.
            broker.offsets.commit(TRANSACTION_CHECK_GROUP, TRANS_HALF_TOPIC, 0, 5)
            broker.offsets.commit(TRANSACTION_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0, 3)
            service.start()
            warnings = [r for r in caplog.records if "past the half and op queues' ends" in r.getMessage()]
            assert len(warnings) == 1

            half = await send_half(client, addr, TOPIC, b"born unsettled")
            assert half.queue_offset == 0 and half.queue_offset not in service.settled
            response = await client.invoke(addr, end_request(half, COMMIT), timeout=10)
            assert response.code == ResponseCode.SUCCESS, response.remark
            _, records = await pull(client, addr, TOPIC, 0, 0)
            assert [r.body for r in records] == [b"born unsettled"]
            await service.check_round()
            assert broker.offsets.query(TRANSACTION_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 1
            assert broker.offsets.query(TRANSACTION_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0) == 1

    run(scenario())


def test_a_master_commits_progress_once_its_op_records_are_replicated(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with (
            name_server() as (_, ns_addr),
            running_broker(tmp_path / "master", namesrvAddr=ns_addr) as master,
            running_broker(tmp_path / "slave", namesrvAddr=ns_addr, brokerRole="SLAVE", brokerId=1),
        ):
            client = RemotingClient()
            try:
                addr = address(master)
                assert (await create_topic(client, addr, TOPIC, 1)).code == ResponseCode.SUCCESS
                ha_server = master.ha_server
                assert ha_server is not None
                await wait_until(
                    lambda: ha_server.runtime_info().ha_connection_info, message="the slave connected"
                )
                # The slaves' acknowledgement of the op records is held back until the test gives it.
                asked: list[int] = []
                acknowledged: asyncio.Future[PutStatus] = asyncio.get_running_loop().create_future()

                def when_replicated(end: int) -> asyncio.Future[PutStatus]:
                    asked.append(end)
                    return acknowledged

                ha_server.when_replicated = when_replicated  # type: ignore[method-assign]
                half = await send_half(client, addr, TOPIC, b"m")
                response = await client.invoke(addr, end_request(half, ROLLBACK), timeout=10)
                assert response.code == ResponseCode.SUCCESS, response.remark
                round_done = asyncio.ensure_future(master.transactions.check_round())
                await wait_until(lambda: asked, message="the round waiting for the slaves")
                assert asked == [master.store.commitlog_max_offset]
                assert master.offsets.query(TRANSACTION_CHECK_GROUP, TRANS_HALF_TOPIC, 0) <= 0
                acknowledged.set_result(PutStatus.PUT_OK)
                await round_done
                assert master.offsets.query(TRANSACTION_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 1
            finally:
                await client.close()

    run(scenario())
