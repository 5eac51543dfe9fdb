"""Half messages and END_TRANSACTION over real sockets: a half message is invisible in its real queue;
a commit makes it visible once, a rollback never; a second END changes nothing; END naming the wrong
group or offsets is refused; a slave refuses END; rejectTransactionMessage refuses half messages; the
settled state survives a restart."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from _tx_support import (
    COMMIT,
    GROUP,
    ROLLBACK,
    UNKNOWN,
    Half,
    address,
    broker_and_client,
    create_topic,
    end_request,
    half_request,
    records_of,
    run,
    running_broker,
    send,
    send_half,
    send_request,
)

from cometmq.broker import Broker
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.protocol.naming import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.protocol.transaction import TRANSACTION_CHECK_GROUP, TransactionType, transaction_type
from cometmq.remoting import RemotingClient
from waiting import wait_until

TOPIC = "TxTopic"


async def end(client: RemotingClient, addr: str, request: RemotingCommand) -> RemotingCommand:
    return await client.invoke(addr, request, timeout=10)


async def settled(client: RemotingClient, addr: str, half: Half, kind: int) -> None:
    response = await end(client, addr, end_request(half, kind, topic=TOPIC))
    assert response.code == ResponseCode.SUCCESS, response.remark


def test_a_half_message_is_invisible_until_committed_and_then_delivered_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=2)
            half = await send_half(client, addr, TOPIC, b"payload", TAGS="tagA", KEYS="k1", queue_id=1)
            assert half.queue_id == 1  # the answer names the real queue
            assert await records_of(client, addr, TOPIC, 1) == []
            (stored,) = await records_of(client, addr, TRANS_HALF_TOPIC)
            props = decode_properties(stored.properties)
            assert (stored.queue_offset, stored.commitlog_offset) == (
                half.queue_offset,
                half.commitlog_offset,
            )
            assert props["REAL_TOPIC"] == TOPIC and props["REAL_QID"] == "1" and props["PGROUP"] == GROUP
            assert transaction_type(stored.sys_flag) is TransactionType.NOT_TYPE

            await settled(client, addr, half, COMMIT)
            (committed,) = await records_of(client, addr, TOPIC, 1)
            assert committed.body == b"payload"
            assert transaction_type(committed.sys_flag) is TransactionType.COMMIT
            assert committed.prepared_transaction_offset == half.commitlog_offset
            props = decode_properties(committed.properties)
            assert props["UNIQ_KEY"] == half.uniq_key and props["TAGS"] == "tagA" and props["KEYS"] == "k1"
            assert not {"TRAN_MSG", "REAL_TOPIC", "REAL_QID"} & props.keys()
            (op,) = await records_of(client, addr, TRANS_OP_HALF_TOPIC)
            assert op.body == str(half.queue_offset).encode()
            assert decode_properties(op.properties) == {"TAGS": "d", "SETTLED_AS": "COMMIT"}

            # A second END changes nothing: a commit is answered SUCCESS, a rollback refused.
            await settled(client, addr, half, COMMIT)
            response = await end(client, addr, end_request(half, ROLLBACK, topic=TOPIC))
            assert response.code == ResponseCode.TRANSACTION_FAILED
            assert len(await records_of(client, addr, TOPIC, 1)) == 1
            assert len(await records_of(client, addr, TRANS_OP_HALF_TOPIC)) == 1

    run(scenario())


def test_a_committed_half_message_counts_once_as_a_half_and_once_in_its_topic(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            half = await send_half(client, addr, TOPIC, b"payload")
            stats = broker.stats
            assert stats.put_by_topic[TRANS_HALF_TOPIC][0] == 1 and TOPIC not in stats.put_by_topic
            await settled(client, addr, half, COMMIT)
            assert (stats.put_by_topic[TOPIC][0], stats.put_by_topic[TRANS_HALF_TOPIC][0]) == (1, 1)

    run(scenario())


def test_a_rolled_back_half_message_is_never_delivered(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            half = await send_half(client, addr, TOPIC, b"never")
            await settled(client, addr, half, ROLLBACK)
            response = await end(client, addr, end_request(half, COMMIT, topic=TOPIC))
            assert response.code == ResponseCode.TRANSACTION_FAILED  # too late: nothing changes
            assert await records_of(client, addr, TOPIC) == []
            (op,) = await records_of(client, addr, TRANS_OP_HALF_TOPIC)
            assert decode_properties(op.properties)["SETTLED_AS"] == "ROLLBACK"

    run(scenario())


def test_end_transaction_unknown_changes_nothing_and_bad_requests_are_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            plain_offset, _ = await send(client, addr, TOPIC, b"plain")
            half = await send_half(client, addr, TOPIC, b"tx")
            cases = [
                (end_request(half, COMMIT, group="OtherGroup"), "is not the half message's group PG_TX"),
                (end_request(half, COMMIT, queue_offset=half.queue_offset + 7), "no half message at queue"),
                (end_request(half, COMMIT, commitlog_offset=plain_offset), "not commitLogOffset"),
                (end_request(half, COMMIT, commitlog_offset=half.commitlog_offset + 3), "commitLogOffset"),
                (end_request(half, COMMIT, topic="OtherTopic"), f"is not the half message's topic {TOPIC}"),
                (end_request(half, 5), "commitOrRollback 5"),
            ]
            for request, remark in cases:
                response = await end(client, addr, request)
                assert response.code == ResponseCode.SYSTEM_ERROR, response.remark
                assert remark in (response.remark or ""), response.remark
            response = await end(client, addr, end_request(half, UNKNOWN))
            assert response.code == ResponseCode.SUCCESS
            assert len(await records_of(client, addr, TOPIC)) == 1  # the plain message alone
            assert await records_of(client, addr, TRANS_OP_HALF_TOPIC) == []

            await settled(client, addr, half, COMMIT)
            assert [r.body for r in await records_of(client, addr, TOPIC)] == [b"plain", b"tx"]

    run(scenario())


def test_a_oneway_end_transaction_is_served_without_an_answer(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            half = await send_half(client, addr, TOPIC, b"oneway")
            await client.invoke_oneway(addr, end_request(half, COMMIT))
            records = await wait_until(
                lambda: records_of(client, addr, TOPIC), message="the committed message in its queue"
            )
            assert [r.body for r in records] == [b"oneway"]

    run(scenario())


def test_sends_with_transaction_flags_the_broker_cannot_store_are_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            batch = send_request(
                TOPIC,
                encode_batch_body(
                    [BatchEntry(0, b"x", encode_properties({"TRAN_MSG": "true", "PGROUP": GROUP}))]
                ),
                m="true",
            )
            batch.code = RequestCode.SEND_BATCH_MESSAGE
            cases = [
                (send_request(TOPIC, b"x", sysFlag="4"), "needs the property TRAN_MSG=true"),
                (send_request(TOPIC, b"x", sysFlag="12"), "ROLLBACK"),
                (batch, "transaction message"),
            ]
            for request, remark in cases:
                response = await client.invoke(addr, request, timeout=10)
                assert response.code == ResponseCode.MESSAGE_ILLEGAL, response.remark
                assert remark in (response.remark or ""), response.remark
            assert await records_of(client, addr, TOPIC) == []
            assert await records_of(client, addr, TRANS_HALF_TOPIC) == []

    run(scenario())


def test_reject_transaction_message_refuses_half_messages(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, rejectTransactionMessage="true") as (_broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            response = await client.invoke(addr, half_request(TOPIC, b"x"), timeout=10)
            assert response.code == ResponseCode.NO_PERMISSION
            assert response.remark == "the broker[127.0.0.1] sending transaction message is forbidden"
            assert await records_of(client, addr, TRANS_HALF_TOPIC) == []
            await send(client, addr, TOPIC, b"plain is fine")

    run(scenario())


def test_a_slave_refuses_end_transaction(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path, brokerRole="SLAVE", brokerId=1) as slave:
            client = RemotingClient()
            try:
                half = Half(0, 0, "", 0, "K")
                response = await client.invoke(address(slave), end_request(half, COMMIT), timeout=10)
            finally:
                await client.close()
            assert response.code == ResponseCode.SLAVE_NOT_AVAILABLE
            assert "a slave cannot end a transaction" in (response.remark or "")

    run(scenario())


def _committed_progress(broker: Broker) -> tuple[int, int]:
    offsets = broker.offsets
    return (
        offsets.query(TRANSACTION_CHECK_GROUP, TRANS_HALF_TOPIC, 0),
        offsets.query(TRANSACTION_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0),
    )


def test_settled_state_and_progress_survive_a_restart(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            halves = [await send_half(client, addr, TOPIC, f"m{i}".encode()) for i in range(5)]
            await settled(client, addr, halves[0], COMMIT)
            await settled(client, addr, halves[1], ROLLBACK)
            await settled(client, addr, halves[3], COMMIT)  # 2 stays open: H stops there, O at 3's op
            await broker.transactions.check_round()
            assert _committed_progress(broker) == (2, 2)
        async with broker_and_client(tmp_path) as (broker, addr, client):
            assert _committed_progress(broker) == (2, 2)
            service = broker.transactions
            assert [offset in service.settled for offset in range(5)] == [True, True, False, True, False]
            for half in halves:  # the settled ones change nothing; the open ones settle now
                await settled(client, addr, half, COMMIT)
            assert [r.body for r in await records_of(client, addr, TOPIC)] == [b"m0", b"m3", b"m2", b"m4"]
            await service.check_round()
            assert _committed_progress(broker) == (5, 5)

    run(scenario())


@pytest.mark.parametrize("delay", ["3", "+3", " 3"])
def test_a_committed_half_with_a_delay_is_delayed_like_a_send(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, delay: str
) -> None:
    caplog.set_level(logging.INFO)

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            await send(client, addr, TOPIC, b"sent", DELAY=delay)
            half = await send_half(client, addr, TOPIC, b"committed", DELAY=delay)
            await settled(client, addr, half, COMMIT)
            assert await records_of(client, addr, TOPIC) == []
            sent, committed = await records_of(client, addr, "SCHEDULE_TOPIC_XXXX", 2)
            assert (sent.body, committed.body) == (b"sent", b"committed")
            props = decode_properties(committed.properties)
            assert props["REAL_TOPIC"] == TOPIC and props["DELAY"] == "3"
            assert transaction_type(committed.sys_flag) is TransactionType.COMMIT

    run(scenario())
