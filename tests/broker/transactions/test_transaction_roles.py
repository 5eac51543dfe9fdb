"""A slave keeps the transactions' progress (the consumer offsets of CID_RMQ_SYS_TRANS it copies from
its master) and the half and op records (its copy of the commit log): made master, it knows which half
messages are settled, ends the others and checks them. A SYNC_FLUSH master answers a commit once the
committed copy is flushed."""

from __future__ import annotations

from pathlib import Path

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


def test_a_sync_flush_master_answers_a_commit_once_the_copy_is_flushed(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, flushDiskType="SYNC_FLUSH") as (broker, addr, client):
            await create_topic(client, addr, TOPIC, 1)
            half = await send_half(client, addr, TOPIC, b"flushed")
            response = await client.invoke(addr, end_request(half, COMMIT), timeout=10)
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert broker.store.commitlog_flushed_offset >= broker.store.commitlog_max_offset
            _, records = await pull(client, addr, TOPIC, 0, 0)
            assert [r.body for r in records] == [b"flushed"]

    run(scenario())
