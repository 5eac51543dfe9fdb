"""An END_TRANSACTION that contradicts how its half message was settled is refused with
TRANSACTION_FAILED: a commit of a rolled-back or discarded half, a rollback of a committed one. An END
that agrees with the settlement, or names a half whose kind is no longer known, answers SUCCESS. The
kinds are rebuilt from the op records' SETTLED_AS at start, and discards are kept past H in
config/transactionChecks.json."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest
from _tx_support import (
    COMMIT,
    ROLLBACK,
    Half,
    broker_and_client,
    create_topic,
    end_request,
    records_of,
    run,
    send_half,
)

from cometmq.broker import Broker
from cometmq.protocol import ResponseCode
from cometmq.protocol.naming import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.transaction import (
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    OP_RECORD_TAG,
    TRANSACTION_CHECK_GROUP,
    Settlement,
)
from cometmq.remoting import RemotingClient
from cometmq.store import PutStatus
from waiting import wait_until

TOPIC = "TxKinds"
# Every half message is due at once, a round every 50 ms, and the first check-back unanswered discards.
DISCARD_AT_ONCE = {"transactionTimeOut": "1", "transactionCheckInterval": "50", "transactionCheckMax": "1"}
# No round comes while a test runs.
NO_ROUNDS = {"transactionCheckInterval": "600000", "transactionCheckMax": "1"}


async def end(client: RemotingClient, addr: str, half: Half, kind: int) -> tuple[int, str]:
    response = await client.invoke(addr, end_request(half, kind, topic=TOPIC), timeout=10)
    return response.code, response.remark or ""


def named(half: Half) -> str:
    """How a refusal's remark names *half*."""
    return f"the half message {half.uniq_key} of topic {TOPIC}"


def progress_past(broker: Broker, half: Half) -> bool:
    """H committed past *half*, and O past every op record (each names an offset below H)."""
    first_unsettled = broker.offsets.query(TRANSACTION_CHECK_GROUP, TRANS_HALF_TOPIC, 0)
    op_start = broker.offsets.query(TRANSACTION_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0)
    return first_unsettled > half.queue_offset and op_start == broker.store.max_offset(TRANS_OP_HALF_TOPIC, 0)


def test_a_rolled_back_half_cannot_be_committed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.broker")

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            half = await send_half(client, addr, TOPIC, b"rolled back")
            assert await end(client, addr, half, ROLLBACK) == (ResponseCode.SUCCESS, "")
            assert await end(client, addr, half, ROLLBACK) == (ResponseCode.SUCCESS, "")  # agrees

            code, remark = await end(client, addr, half, COMMIT)
            assert code == ResponseCode.TRANSACTION_FAILED
            assert remark == f"{named(half)} was rolled back; it cannot be committed"
            assert await records_of(client, addr, TOPIC) == []

            # Oneway: no answer, but the refusal is logged.
            await client.invoke_oneway(addr, end_request(half, COMMIT, topic=TOPIC))
            await wait_until(
                lambda: any("refused: " + remark in r.getMessage() for r in caplog.records),
                message="the oneway refusal logged",
            )
            assert await records_of(client, addr, TOPIC) == []

    run(scenario())


def test_a_committed_half_cannot_be_rolled_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            half = await send_half(client, addr, TOPIC, b"committed")
            assert await end(client, addr, half, COMMIT) == (ResponseCode.SUCCESS, "")
            assert await end(client, addr, half, COMMIT) == (ResponseCode.SUCCESS, "")  # agrees

            code, remark = await end(client, addr, half, ROLLBACK)
            assert code == ResponseCode.TRANSACTION_FAILED
            assert remark == f"{named(half)} was committed; it cannot be rolled back"
            assert [r.body for r in await records_of(client, addr, TOPIC)] == [b"committed"]

    run(scenario())


def test_a_discarded_half_cannot_be_committed_after_a_restart_and_past_h(tmp_path: Path) -> None:
    async def scenario() -> None:
        refusal = (
            "was discarded after 1 check-backs without an answer (transactionCheckMax); "
            "it cannot be committed"
        )
        async with broker_and_client(tmp_path, **DISCARD_AT_ONCE) as (broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            half = await send_half(client, addr, TOPIC, b"abandoned")
            await wait_until(
                lambda: records_of(client, addr, TRANS_CHECK_MAX_TIME_TOPIC), message="the half discarded"
            )
            code, remark = await end(client, addr, half, COMMIT)
            assert (code, remark) == (
                ResponseCode.TRANSACTION_FAILED,
                f"{named(half)} {refusal}",
            )
            assert await end(client, addr, half, ROLLBACK) == (ResponseCode.SUCCESS, "")  # agrees
            await wait_until(lambda: progress_past(broker, half), message="H and O past the discarded half")
        saved = json.loads((tmp_path / "config" / "transactionChecks.json").read_text())
        assert saved["discarded"] == {str(half.queue_offset): [half.commitlog_offset, 1]}

        # H and O are past it: only the discarded set, read back from the file, still knows it.
        async with broker_and_client(tmp_path, **NO_ROUNDS) as (broker, addr, client):
            assert broker.transactions.settled.first_unsettled > half.queue_offset
            code, remark = await end(client, addr, half, COMMIT)
            assert code == ResponseCode.TRANSACTION_FAILED and remark.endswith(refusal)
            assert await records_of(client, addr, TOPIC) == []

    run(scenario())


def test_the_kinds_are_rebuilt_at_start_from_the_op_records(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **DISCARD_AT_ONCE) as (broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            # Never checked: it holds H at 0, so every settlement below is rebuilt from its op record.
            await send_half(client, addr, TOPIC, b"open", **{CHECK_IMMUNITY_TIME_IN_SECONDS: "3600"})
            discarded = await send_half(client, addr, TOPIC, b"discarded")
            await wait_until(
                lambda: records_of(client, addr, TRANS_CHECK_MAX_TIME_TOPIC), message="the half discarded"
            )
            committed = await send_half(client, addr, TOPIC, b"committed")
            rolled_back = await send_half(client, addr, TOPIC, b"rolled back")
            assert await end(client, addr, committed, COMMIT) == (ResponseCode.SUCCESS, "")
            assert await end(client, addr, rolled_back, ROLLBACK) == (ResponseCode.SUCCESS, "")
            await wait_until(
                lambda: not broker.transactions.check_counts, message="the discarded half's count dropped"
            )
        # A crash before the file said it: the discard is known from its op record alone.
        (tmp_path / "config" / "transactionChecks.json").unlink()
        async with broker_and_client(tmp_path, **NO_ROUNDS) as (broker, addr, client):
            settled = broker.transactions.settled
            assert settled.first_unsettled == 0
            assert settled.kind(committed.queue_offset) is Settlement.COMMIT
            assert settled.kind(rolled_back.queue_offset) is Settlement.ROLLBACK
            assert discarded.queue_offset in broker.transactions.discarded
            assert (await end(client, addr, committed, ROLLBACK))[0] == ResponseCode.TRANSACTION_FAILED
            assert (await end(client, addr, rolled_back, COMMIT))[0] == ResponseCode.TRANSACTION_FAILED
            assert (await end(client, addr, discarded, COMMIT))[0] == ResponseCode.TRANSACTION_FAILED
            assert await end(client, addr, committed, COMMIT) == (ResponseCode.SUCCESS, "")
            assert await end(client, addr, rolled_back, ROLLBACK) == (ResponseCode.SUCCESS, "")
            assert [r.body for r in await records_of(client, addr, TOPIC)] == [b"committed"]

    run(scenario())


def test_an_op_record_without_settled_as_settles_with_the_kind_unknown(tmp_path: Path) -> None:
    """RocketMQ's op records say nothing of how they settled: either END then answers SUCCESS."""

    async def scenario() -> None:
        async with broker_and_client(tmp_path, **NO_ROUNDS) as (broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            half = await send_half(client, addr, TOPIC, b"settled elsewhere")
            service = broker.transactions
            rocketmq_op = dataclasses.replace(
                service.op_record(half.queue_offset, Settlement.COMMIT),
                properties=encode_properties({"TAGS": OP_RECORD_TAG}),
            )
            assert broker.store.put(rocketmq_op).status is PutStatus.PUT_OK
            await service.stop()
            service.start()  # reads the op records from O on
            assert half.queue_offset in service.settled
            assert service.settled.kind(half.queue_offset) is None
            assert await end(client, addr, half, COMMIT) == (ResponseCode.SUCCESS, "")
            assert await end(client, addr, half, ROLLBACK) == (ResponseCode.SUCCESS, "")
            assert await records_of(client, addr, TOPIC) == []

    run(scenario())


def test_below_h_the_kind_is_gone_and_an_end_answers_success(tmp_path: Path) -> None:
    async def scenario() -> None:
        fast = {"transactionTimeOut": "1", "transactionCheckInterval": "50"}
        async with broker_and_client(tmp_path, **fast) as (broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            half = await send_half(client, addr, TOPIC, b"committed long ago")
            assert await end(client, addr, half, COMMIT) == (ResponseCode.SUCCESS, "")
            await wait_until(lambda: progress_past(broker, half), message="H and O past the committed half")
        async with broker_and_client(tmp_path, **NO_ROUNDS) as (broker, addr, client):
            assert broker.transactions.settled.kind(half.queue_offset) is None
            assert await end(client, addr, half, ROLLBACK) == (ResponseCode.SUCCESS, "")
            assert [r.body for r in await records_of(client, addr, TOPIC)] == [b"committed long ago"]

    run(scenario())
