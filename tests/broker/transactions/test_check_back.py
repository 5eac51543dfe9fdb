"""The check-back: a half message left open past transactionTimeOut is checked with
CHECK_TRANSACTION_STATE at a producer of its group (header and body exact), the answer settles it,
CHECK_IMMUNITY_TIME_IN_SECONDS holds a check back, and after transactionCheckMax checks the message is
discarded to TRANS_CHECK_MAX_TIME_TOPIC with a warning."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from _tx_support import (
    COMMIT,
    FAST_CHECKS,
    GROUP,
    ROLLBACK,
    UNKNOWN,
    broker_and_client,
    create_topic,
    end_request,
    joined_producer,
    pull,
    records_of,
    run,
    send_half,
)

from cometmq.broker import _transaction
from cometmq.broker._json_config import MetadataFile
from cometmq.protocol import ResponseCode
from cometmq.protocol.naming import TRANS_CHECK_MAX_TIME_TOPIC
from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.protocol.record import decode_record_at
from cometmq.protocol.transaction import OP_RECORD_TAG, Settlement
from cometmq.store import PutStatus
from waiting import wait_until

TOPIC = "TxChecked"


def test_an_open_half_message_is_checked_and_the_answer_settles_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **FAST_CHECKS) as (broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=2)
            async with joined_producer(addr) as producer:
                half = await send_half(
                    client, addr, TOPIC, b"ask me", queue_id=1, TAGS="t", __transactionId__="tx-1"
                )
                response = await client.invoke(addr, end_request(half, UNKNOWN), timeout=10)
                assert response.code == ResponseCode.SUCCESS

                check = await producer.next_check()
                header = check.header
                assert header.tran_state_table_offset == half.queue_offset
                assert header.commit_log_offset == half.commitlog_offset
                assert header.msg_id == half.uniq_key
                assert header.transaction_id == "tx-1"
                assert header.offset_msg_id == half.msg_id
                assert header.topic == TOPIC
                assert header.broker_name == broker.config.broker_name
                shown = decode_record_at(memoryview(check.body), 0, len(check.body))
                assert shown.total_size == len(check.body)
                assert (shown.topic, shown.queue_id, shown.body) == (TOPIC, 1, b"ask me")
                assert (shown.commitlog_offset, shown.queue_offset) == (
                    half.commitlog_offset,
                    half.queue_offset,
                )
                props = decode_properties(shown.properties)
                assert props["TRANSACTION_CHECK_TIMES"] == "1"
                assert props["PGROUP"] == GROUP and props["UNIQ_KEY"] == half.uniq_key

                # The producer answers over the connection the check came on, as Java's client does.
                answer = end_request(half, COMMIT, from_check=True)
                answered = await check.conn.invoke(answer, 10)
                assert answered.code == ResponseCode.SUCCESS
                (committed,) = await records_of(client, addr, TOPIC, 1)
                assert committed.body == b"ask me"
                await wait_until(
                    lambda: half.queue_offset < broker.transactions.settled.first_unsettled,
                    message="the half message counted settled",
                )
                assert half.queue_offset not in broker.transactions.check_counts

    run(scenario())


def test_checks_repeat_until_answered_and_go_round_robin(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **FAST_CHECKS) as (_broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            async with (
                joined_producer(addr, client_id="first") as first,
                joined_producer(addr, client_id="second") as second,
            ):
                half = await send_half(client, addr, TOPIC, b"x")
                one = await first.next_check()
                two = await second.next_check()
                counts = {
                    decode_properties(decode_record_at(memoryview(c.body), 0, len(c.body)).properties)[
                        "TRANSACTION_CHECK_TIMES"
                    ]
                    for c in (one, two)
                }
                assert counts == {"1", "2"}
                answered = await two.conn.invoke(end_request(half, ROLLBACK, from_check=True), 10)
                assert answered.code == ResponseCode.SUCCESS
                assert await records_of(client, addr, TOPIC) == []

    run(scenario())


def test_check_immunity_time_holds_a_check_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The rounds are run by the test at the times it sets on the service's clock.
    clock = [0]
    monkeypatch.setattr(_transaction, "_now_ms", lambda: clock[0])

    async def scenario() -> None:
        rounds_by_hand = {"transactionTimeOut": "1", "transactionCheckInterval": "3600000"}
        async with broker_and_client(tmp_path, **rounds_by_hand) as (broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            async with joined_producer(addr) as producer:
                immune = await send_half(
                    client, addr, TOPIC, b"immune", CHECK_IMMUNITY_TIME_IN_SECONDS="3600"
                )
                brief = await send_half(client, addr, TOPIC, b"brief", CHECK_IMMUNITY_TIME_IN_SECONDS="3")
                plain = await send_half(client, addr, TOPIC, b"plain")
                view = broker.store.message_at(brief.commitlog_offset)
                assert view is not None
                stored_at = decode_record_at(view, 0, len(view)).store_timestamp
                del view
                # Rounds when the brief one is 0.5, 1.5, 2.5 and 3.5 s old: only the last is past its 3 s.
                for age_ms in (500, 1500, 2500, 3500):
                    clock[0] = stored_at + age_ms
                    await broker.transactions.check_round()
                # A round checks the due messages in queue order, over one connection.
                checked = [(await producer.next_check()).header.tran_state_table_offset for _ in range(5)]
                assert checked == [plain.queue_offset] * 3 + [brief.queue_offset, plain.queue_offset]
                assert immune.queue_offset not in broker.transactions.check_counts

    run(scenario())


def test_after_transaction_check_max_checks_the_message_is_discarded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.broker")

    async def scenario() -> None:
        async with broker_and_client(tmp_path, transactionCheckMax="2", **FAST_CHECKS) as (
            broker,
            addr,
            client,
        ):
            await create_topic(client, addr, TOPIC, queues=1)
            # No producer of the group is connected: the checks count all the same.
            half = await send_half(client, addr, TOPIC, b"abandoned", KEYS="key-a")
            (discarded,) = await wait_until(
                lambda: records_of(client, addr, TRANS_CHECK_MAX_TIME_TOPIC),
                message="the message in TRANS_CHECK_MAX_TIME_TOPIC",
            )
            assert discarded.body == b"abandoned"
            props = decode_properties(discarded.properties)
            assert props["UNIQ_KEY"] == half.uniq_key and props["REAL_TOPIC"] == TOPIC
            assert await records_of(client, addr, TOPIC) == []
            await wait_until(
                lambda: half.queue_offset in broker.transactions.settled, message="the discarded half settled"
            )
            warnings = [r.getMessage() for r in caplog.records if "discarded" in r.getMessage()]
            assert len(warnings) == 1
            assert half.uniq_key in warnings[0] and TOPIC in warnings[0] and GROUP in warnings[0]
            assert any(f"no producer of group {GROUP} is connected" in r.getMessage() for r in caplog.records)
            # A commit that comes too late is refused and changes nothing.
            response = await client.invoke(addr, end_request(half, COMMIT), timeout=10)
            assert response.code == ResponseCode.TRANSACTION_FAILED
            assert await records_of(client, addr, TOPIC) == []

    run(scenario())


def test_check_counts_are_kept_across_a_restart(tmp_path: Path) -> None:
    async def scenario() -> None:
        settings = {"transactionCheckMax": "3", **FAST_CHECKS}
        async with broker_and_client(tmp_path, **settings) as (broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            async with joined_producer(addr) as producer:
                half = await send_half(client, addr, TOPIC, b"counted")
                await producer.next_check()
                await producer.next_check()
            await wait_until(
                lambda: broker.transactions.check_counts.get(half.queue_offset, 0) >= 2,
                message="two checks counted",
            )
        counts = (tmp_path / "config" / "transactionChecks.json").read_text()
        assert f'"{half.queue_offset}"' in counts
        async with broker_and_client(tmp_path, **settings) as (broker, addr, client):
            assert broker.transactions.check_counts[half.queue_offset] >= 2
            await wait_until(
                lambda: records_of(client, addr, TRANS_CHECK_MAX_TIME_TOPIC), message="the message discarded"
            )

    run(scenario())


def test_op_records_naming_several_offsets_settle_each_of_them(tmp_path: Path) -> None:
    """RocketMQ 5 writes one op record for several half messages, their offsets comma-separated."""

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            halves = [await send_half(client, addr, TOPIC, f"m{i}".encode()) for i in range(3)]
            op = dataclasses.replace(
                broker.transactions.op_record(0, Settlement.ROLLBACK),
                body=b"0,2",
                properties=encode_properties({"TAGS": OP_RECORD_TAG}),  # RocketMQ's: no SETTLED_AS
            )
            assert broker.store.put(op).status is PutStatus.PUT_OK
        async with broker_and_client(tmp_path) as (broker, addr, client):
            settled = broker.transactions.settled
            assert [h.queue_offset in settled for h in halves] == [True, False, True]
            assert settled.first_unsettled == 1

    run(scenario())


def test_ends_that_come_while_a_round_walks_the_half_queue_settle_as_usual(tmp_path: Path) -> None:
    """A round gives the event loop a turn every so many records: the ENDs served meanwhile change the
    settled state the round walks."""

    async def scenario() -> None:
        async with broker_and_client(tmp_path, transactionCheckMax="1000", **FAST_CHECKS) as (
            _broker,
            addr,
            client,
        ):
            await create_topic(client, addr, TOPIC, queues=1)
            halves = [await send_half(client, addr, TOPIC, f"m{i}".encode()) for i in range(600)]
            answers = await asyncio.gather(
                *(client.invoke(addr, end_request(half, COMMIT), timeout=30) for half in halves)
            )
            assert {answer.code for answer in answers} == {ResponseCode.SUCCESS}, answers[0].remark
            offset, delivered = 0, []
            while len(delivered) < len(halves):
                response, records = await pull(client, addr, TOPIC, 0, offset)
                assert response.code == ResponseCode.SUCCESS, response.remark
                delivered += [r.body for r in records]
                offset += len(records)
            assert sorted(delivered) == sorted(f"m{i}".encode() for i in range(600))

    run(scenario())


def test_stop_waits_for_a_check_counts_write_under_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writing, written = threading.Event(), threading.Event()
    real_save = MetadataFile.save

    def held_save(file: MetadataFile, obj: Any) -> bool:
        if file.path.name == "transactionChecks.json" and not writing.is_set():
            writing.set()
            written.wait(30)  # the disk answers when the test says
        return real_save(file, obj)

    monkeypatch.setattr(MetadataFile, "save", held_save)

    async def scenario() -> None:
        async with broker_and_client(tmp_path, **FAST_CHECKS) as (broker, addr, _client):
            service = broker.transactions
            half = await send_half(_client, addr, TOPIC, b"counted")  # no producer: counted all the same
            await wait_until(writing.is_set, message="the check counts being written")
            loop_task = service._task
            assert loop_task is not None
            stopping = asyncio.ensure_future(service.stop())
            await wait_until(loop_task.done, message="the check loop cancelled")
            for _ in range(20):  # turns enough for a stop that does not wait to finish
                await asyncio.sleep(0)
            assert not stopping.done()
            written.set()
            await stopping
            saved = json.loads((tmp_path / "config" / "transactionChecks.json").read_text())
            assert saved["checkTimes"][str(half.queue_offset)] >= 1

    run(scenario())
