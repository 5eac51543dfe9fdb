"""A half message asking for a delivery time (TIMER_DELAY_MS) is parked for it when committed, as a
plain send of it would be, the time reckoned from the commit (RocketMQ puts the committed copy through
the same hook as a send)."""

from __future__ import annotations

import time
from pathlib import Path

from _tx_support import COMMIT, broker_and_client, create_topic, end_request, records_of, run, send_half

from cometmq.protocol import ResponseCode
from cometmq.protocol.naming import TRANS_HALF_TOPIC
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import decode_record_at
from waiting import wait_until


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_a_committed_half_message_is_delivered_not_before_its_time_after_the_commit(tmp_path: Path) -> None:
    delay_ms = 3_600_000  # far beyond any stall; the test drives the timer's clock

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            assert (await create_topic(client, addr, "TxTimer", 1)).code == 0
            half = await send_half(client, addr, "TxTimer", b"tx", TIMER_DELAY_MS=str(delay_ms))
            half_unit = broker.store.queue_unit(TRANS_HALF_TOPIC, 0, 0)
            assert half_unit is not None
            half_view = broker.store.message_at(half_unit[0])
            assert half_view is not None
            half_stored = decode_record_at(half_view, 0, len(half_view)).store_timestamp
            del half_view
            # The commit comes at a later millisecond than the half's store time.
            await wait_until(lambda: now_ms() > half_stored, message="a millisecond after the half")
            before_commit = now_ms()
            ended = await client.invoke(addr, end_request(half, COMMIT))
            assert ended.code == ResponseCode.SUCCESS, ended.remark
            after_commit = now_ms()
            unit = broker.store.queue_unit("rmq_sys_wheel_timer", 0, 0)
            assert unit is not None
            due = unit[2]  # a timer unit's tags code is its delivery time
            assert before_commit + delay_ms <= due <= after_commit + delay_ms
            await wait_until(lambda: broker.timer.waiting == 1, message="the parked unit read")
            broker.timer.deliver_due(due - 1)
            assert await records_of(client, addr, "TxTimer") == []
            broker.timer.deliver_due(due)
            (record,) = await records_of(client, addr, "TxTimer")
            assert record.body == b"tx" and decode_properties(record.properties)["TIMER_OUT_MS"] == str(due)

    run(scenario())


def test_a_half_message_checked_when_sent_is_committed_whatever_the_timer_settings_became(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, timerMaxDelaySec="7200") as (_, addr, client):
            assert (await create_topic(client, addr, "TxSettings", 1)).code == 0
            half = await send_half(client, addr, "TxSettings", b"tx", TIMER_DELAY_SEC="3600")
        # Restarted with a shorter horizon and the timer turned off: the commit still parks the copy.
        settings = {"timerMaxDelaySec": "60", "timerWheelEnable": "false"}
        async with broker_and_client(tmp_path, **settings) as (broker, addr, client):
            ended = await client.invoke(addr, end_request(half, COMMIT))
            assert ended.code == ResponseCode.SUCCESS, ended.remark
            assert broker.store.max_offset("rmq_sys_wheel_timer", 0) == 1
            assert await records_of(client, addr, "TxSettings") == []

    run(scenario())
