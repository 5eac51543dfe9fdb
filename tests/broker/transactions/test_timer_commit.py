"""A half message asking for a delivery time (TIMER_DELAY_MS) is parked for it when committed, as a
plain send of it would be, the time reckoned from the commit (RocketMQ puts the committed copy through
the same hook as a send)."""

from __future__ import annotations

import time
from pathlib import Path

from _tx_support import COMMIT, broker_and_client, create_topic, end_request, records_of, run, send_half

from cometmq.protocol import ResponseCode
from waiting import wait_until


def test_a_committed_half_message_is_delivered_not_before_its_time_after_the_commit(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            assert (await create_topic(client, addr, "TxTimer", 1)).code == 0
            half = await send_half(client, addr, "TxTimer", b"tx", TIMER_DELAY_MS="1000")
            committed_at = time.time_ns() // 1_000_000
            ended = await client.invoke(addr, end_request(half, COMMIT))
            assert ended.code == ResponseCode.SUCCESS, ended.remark
            assert broker.store.max_offset("rmq_sys_wheel_timer", 0) == 1
            assert await records_of(client, addr, "TxTimer") == []
            (record,) = await wait_until(
                lambda: records_of(client, addr, "TxTimer"), message="the committed message delivered"
            )
            assert record.body == b"tx" and record.store_timestamp >= committed_at + 1000

    run(scenario())
