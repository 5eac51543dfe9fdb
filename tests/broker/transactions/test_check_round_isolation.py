"""A half message the check-back cannot handle fails alone: its step in a round is logged and counted
as a check (so it is discarded in the end), and every other half message is still checked. Its
CHECK_IMMUNITY_TIME_IN_SECONDS is parsed as RocketMQ parses it, and a half message whose properties
leave no room for the check's TRANSACTION_CHECK_TIMES is refused when it is sent."""

from __future__ import annotations

import logging
import re
import time
import uuid
from pathlib import Path

import pytest
from _tx_support import (
    FAST_CHECKS,
    GROUP,
    broker_and_client,
    create_topic,
    half_request,
    joined_producer,
    pull,
    run,
    send_half,
)
from hypothesis import given
from hypothesis import strategies as st

from cometmq.broker._transaction import check_immunity_ms
from cometmq.protocol import ResponseCode
from cometmq.protocol.naming import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC
from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.protocol.record import MAX_PROPERTIES_SIZE, decode_record_at
from cometmq.protocol.transaction import CHECK_IMMUNITY_TIME_IN_SECONDS, TRANSACTION_CHECK_TIMES
from cometmq.store import MessageToStore, PutStatus
from waiting import wait_until

TOPIC = "TxIsolated"
TIMEOUT_MS = 6000
WEEK_MS = 7 * 24 * 3600 * 1000


@given(st.text())
def test_check_immunity_is_a_bounded_number_of_seconds_or_the_timeout(text: str) -> None:
    wait = check_immunity_ms({CHECK_IMMUNITY_TIME_IN_SECONDS: text}, TIMEOUT_MS)
    assert wait is not None and (wait == TIMEOUT_MS or (0 <= wait <= WEEK_MS and wait % 1000 == 0))


def test_check_immunity_values() -> None:
    assert check_immunity_ms({}, TIMEOUT_MS) is None
    assert check_immunity_ms({CHECK_IMMUNITY_TIME_IN_SECONDS: "60"}, TIMEOUT_MS) == 60_000
    for unusable in ("\u00b2", "-5", "1.5", "", str(WEEK_MS), "9" * 5000):
        assert check_immunity_ms({CHECK_IMMUNITY_TIME_IN_SECONDS: unusable}, TIMEOUT_MS) == TIMEOUT_MS


def check_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and "transactions:" in r.getMessage()
    ]


def test_an_unparsable_immunity_time_is_the_transaction_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.broker")

    async def scenario() -> None:
        async with broker_and_client(tmp_path, **FAST_CHECKS) as (_broker, addr, client):
            await create_topic(client, addr, TOPIC, queues=1)
            async with joined_producer(addr) as producer:
                # "²" is a digit to str.isdigit() and no number to int().
                odd = await send_half(client, addr, TOPIC, b"odd", CHECK_IMMUNITY_TIME_IN_SECONDS="\u00b2")
                plain = await send_half(client, addr, TOPIC, b"plain")
                checked: set[int] = set()
                while checked != {odd.queue_offset, plain.queue_offset}:
                    checked.add((await producer.next_check()).header.tran_state_table_offset)

    run(scenario())
    assert check_errors(caplog) == []


def test_a_half_message_whose_check_fails_is_discarded_and_the_others_are_checked(
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
            async with joined_producer(addr) as producer:
                # A half message stored with properties so long that its check's body, with
                # TRANSACTION_CHECK_TIMES added, cannot be encoded: the send refuses such a message, but a
                # store may already hold one.
                uniq_key = uuid.uuid4().hex.upper()
                properties = {
                    "PGROUP": GROUP,
                    "REAL_TOPIC": TOPIC,
                    "REAL_QID": "0",
                    "UNIQ_KEY": uniq_key,
                    "pad": "",
                }
                properties["pad"] = "p" * (MAX_PROPERTIES_SIZE - 10 - len(encode_properties(properties)))
                stored = broker.store.put(
                    MessageToStore(
                        topic=TRANS_HALF_TOPIC,
                        queue_id=0,
                        flag=0,
                        body=b"too long to check",
                        properties=encode_properties(properties),
                        sys_flag=0,
                        born_timestamp=int(time.time() * 1000),
                        born_host=broker.store_host,
                        store_host=broker.store_host,
                        uniq_key=uniq_key,
                    )
                )
                assert stored.status is PutStatus.PUT_OK
                later = await send_half(client, addr, TOPIC, b"later")
                while (await producer.next_check()).header.tran_state_table_offset != later.queue_offset:
                    pass

            async def discarded() -> list[bytes]:
                _, records = await pull(client, addr, TRANS_CHECK_MAX_TIME_TOPIC, 0, 0)
                return [r.body for r in records]

            assert b"too long to check" in await wait_until(discarded, message="the discarded message")

    run(scenario())
    errors = check_errors(caplog)
    assert errors and all(e.startswith("transactions: half message 0 could not be checked") for e in errors)


def test_a_half_message_without_room_for_the_check_count_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, transactionCheckMax="10000", **FAST_CHECKS) as (
            _broker,
            addr,
            client,
        ):
            await create_topic(client, addr, TOPIC, queues=1)
            async with joined_producer(addr) as producer:
                pad = MAX_PROPERTIES_SIZE - 20
                response = await client.invoke(addr, half_request(TOPIC, b"x", pad="p" * pad), timeout=10)
                assert response.code == ResponseCode.MESSAGE_ILLEGAL
                remark = response.remark or ""
                assert TRANSACTION_CHECK_TIMES in remark
                found = re.search(r"take (\d+) bytes; a half message may have at most (\d+)", remark)
                assert found is not None, remark
                size, limit = map(int, found.groups())
                largest = pad - (size - limit)
                response = await client.invoke(
                    addr, half_request(TOPIC, b"x", pad="p" * (largest + 1)), timeout=10
                )
                assert response.code == ResponseCode.MESSAGE_ILLEGAL, response.remark
                response = await client.invoke(addr, half_request(TOPIC, b"x", pad="p" * largest), timeout=10)
                assert response.code == ResponseCode.SUCCESS, response.remark

                check = await producer.next_check()
                shown = decode_record_at(memoryview(check.body), 0, len(check.body))
                assert decode_properties(shown.properties)[TRANSACTION_CHECK_TIMES] == "1"

    run(scenario())
