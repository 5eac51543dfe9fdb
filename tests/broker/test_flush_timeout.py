"""SYNC_FLUSH through a real broker and socket: a flush slower than syncFlushTimeout is answered
FLUSH_DISK_TIMEOUT, never SEND_OK, and the broker goes on serving once the disk is fast again."""

from __future__ import annotations

from pathlib import Path

import pytest
from _support import broker_and_client, create_topic, pull, run, send_request

from cometmq.protocol import ResponseCode
from flush_fakes import InjectedCommitLogSync
from waiting import wait_until


def test_a_flush_slower_than_sync_flush_timeout_is_answered_flush_disk_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        sync_flush = {"flushDiskType": "SYNC_FLUSH", "syncFlushTimeout": 200}
        async with broker_and_client(tmp_path, disk_usage_probe=None, **sync_flush) as (broker, addr, client):
            await create_topic(client, addr, "Slow", 1)
            slow_disk = InjectedCommitLogSync(monkeypatch, delay=1.0)
            slow = await client.invoke(addr, send_request("Slow", b"stored, flush too slow", 0))
            assert slow.code == ResponseCode.FLUSH_DISK_TIMEOUT, slow.remark  # not SUCCESS (SEND_OK)
            assert slow.remark is not None and "flush timed out" in slow.remark
            assert "msgId" in slow.ext_fields  # stored all the same, as RocketMQ answers

            slow_disk.delay = 0.0
            end = broker.store.commitlog_max_offset
            await wait_until(
                lambda: broker.store.commitlog_flushed_offset >= end, message="the flush to catch up"
            )
            fast = await client.invoke(addr, send_request("Slow", b"flushed in time", 0))
            assert fast.code == ResponseCode.SUCCESS, fast.remark
            _, records = await pull(client, addr, "Slow", 0, 0)
            assert [r.body for r in records] == [b"stored, flush too slow", b"flushed in time"]

    run(scenario())
