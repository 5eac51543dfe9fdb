"""Flushing: SYNC_FLUSH group commit and timeouts, ASYNC_FLUSH timing, the checkpoint."""

from __future__ import annotations

import asyncio
import gc
import os
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import pytest
from store_testlib import make_msg

from cometmq.store import FlushDiskType, MessageStore, PutStatus
from cometmq.store._flush import FlushService
from cometmq.store._mappedfile import MappedFile
from cometmq.store.format import unpack_checkpoint
from flush_fakes import InjectedCommitLogSync
from waiting import wait_until_blocking

OpenStore = Callable[..., MessageStore]


def test_sync_flush_waits_for_the_data_to_be_on_disk(open_store: OpenStore, tmp_path: Path) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)

    async def main() -> None:
        res = store.put(make_msg(body=b"durable"))
        assert res.status is PutStatus.PUT_OK
        assert await store.wait_flushed(res.commitlog_end_offset)
        assert store.commitlog_flushed_offset >= res.commitlog_end_offset
        view = store.message_at(res.commitlog_offset)
        assert view is not None
        fd = os.open(tmp_path / "store" / "commitlog" / f"{0:020d}", os.O_RDONLY)
        try:
            assert os.pread(fd, res.wrote_bytes, res.commitlog_offset) == bytes(view)
        finally:
            os.close(fd)
        # Already covered: answered at once, by a future that is done when handed out.
        assert await store.wait_flushed(res.commitlog_end_offset)
        covered = store.when_flushed(res.commitlog_end_offset)
        assert covered.done() and covered.result() is True
        # Not yet covered (unless the timed flush ran in between): the group commit resolves it.
        later = store.put(make_msg(body=b"later"))
        assert await store.when_flushed(later.commitlog_end_offset) is True
        assert store.commitlog_flushed_offset >= later.commitlog_end_offset

    asyncio.run(main())


def test_group_commit_shares_fsyncs(open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    syncs = InjectedCommitLogSync(monkeypatch, delay=0.02).calls
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)

    async def producer(i: int) -> bool:
        res = store.put(make_msg(body=bytes([i])))
        return await store.wait_flushed(res.commitlog_end_offset)

    async def main() -> list[bool]:
        return await asyncio.gather(*(producer(i) for i in range(60)))

    assert asyncio.run(main()) == [True] * 60
    assert 1 <= len(syncs) < 30  # 60 waiters, far fewer fsyncs


def test_sync_flush_timeout_does_not_block_the_loop(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = InjectedCommitLogSync(monkeypatch)
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=100)

    async def main() -> bool:
        res = store.put(make_msg())
        return await store.wait_flushed(res.commitlog_end_offset)

    disk.hang()
    try:
        # Answered while the fsync hangs: the loop kept running (it ran the timeout) meanwhile.
        assert asyncio.run(main()) is False
        assert disk.calls, "the fsync started"
    finally:
        disk.release()


def test_each_sync_flush_waiter_times_out_at_its_own_deadline(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One timer serves every waiter of a loop: once it answers the oldest, it must wait on for the next.
    disk = InjectedCommitLogSync(monkeypatch)
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=200)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        waiters = []
        for _ in range(2):  # the second's deadline 100 ms or more after the first's
            asked = loop.time()
            waiters.append(
                (asked, asyncio.create_task(store.wait_flushed(store.put(make_msg()).commitlog_end_offset)))
            )
            await asyncio.sleep(0.1)
        for asked, waiter in waiters:
            assert await waiter is False
            assert loop.time() >= asked + 0.2, "answered before its own deadline"

    disk.hang()  # no fsync answers either of them
    try:
        asyncio.run(main())
    finally:
        disk.release()


def test_an_answered_sync_flush_wait_keeps_no_hold_on_its_event_loop(open_store: OpenStore) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def main() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        assert await store.wait_flushed(store.put(make_msg()).commitlog_end_offset)
        await asyncio.sleep(0)  # the flush thread's answer arrives as a callback

    for _ in range(3):
        asyncio.run(main())
    gc.collect()
    assert [ref() for ref in loops] == [None, None, None]


def test_a_shutdown_with_waiters_leaves_no_timer_to_fail_later(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    InjectedCommitLogSync(monkeypatch, delay=0.05)
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=150)
    errors: list[dict[str, object]] = []

    async def main() -> bool:
        asyncio.get_running_loop().set_exception_handler(lambda _, context: errors.append(context))
        waiter = asyncio.create_task(store.wait_flushed(store.put(make_msg()).commitlog_end_offset))
        await asyncio.sleep(0)  # registered, its loop's expiry timer armed
        store.shutdown()  # the final flush answers it
        answer = await waiter
        await asyncio.sleep(0.3)  # past the deadline the timer was armed for
        return answer

    assert asyncio.run(main()) is True
    assert errors == []


def test_async_flush_on_interval(open_store: OpenStore) -> None:
    store = open_store(flush_interval_commitlog_ms=20)
    res = store.put(make_msg())
    wait_until_blocking(
        lambda: store.commitlog_flushed_offset >= res.commitlog_end_offset, message="the interval's flush"
    )


def test_async_flush_early_when_enough_is_dirty(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs = InjectedCommitLogSync(monkeypatch).calls
    store = open_store(flush_interval_commitlog_ms=60_000, flush_commitlog_least_pages=4)
    store.put(make_msg(body=b"x" * 1000))
    time.sleep(0.1)
    assert syncs == []  # below 16 KiB: waits for the (long) interval
    for _ in range(17):
        store.put(make_msg(body=b"x" * 1000))
    wait_until_blocking(lambda: syncs, message="an early flush")


def test_checkpoint_after_clean_shutdown(open_store: OpenStore, tmp_path: Path) -> None:
    store = open_store()
    for _ in range(10):
        store.put(make_msg())
    end = store.commitlog_max_offset
    cp = unpack_checkpoint((tmp_path / "store" / "checkpoint").read_bytes())
    assert cp is not None and not cp.clean
    store.shutdown()
    cp = unpack_checkpoint((tmp_path / "store" / "checkpoint").read_bytes())
    assert cp is not None and cp.clean
    assert cp.commitlog_flushed == cp.dispatch_safe == end


def test_a_failed_fsync_answers_waiters_at_once_and_stops_writes(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A disk error is injected (a fake: fdatasync raising EIO), since a real one cannot be made here."""
    # An hour's flush timeout: only the failure itself can answer the waiter within the test's timeout.
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=3_600_000)

    def failing_sync(self: MappedFile) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(MappedFile, "sync", failing_sync)

    async def main() -> bool:
        res = store.put(make_msg(body=b"not durable"))
        assert res.status is PutStatus.PUT_OK
        return await store.wait_flushed(res.commitlog_end_offset)

    assert asyncio.run(main()) is False
    refusal = store.write_refusal
    assert refusal is not None and "could not write to disk (Input/output error)" in refusal
    assert store.put(make_msg(body=b"later")).status is PutStatus.SERVICE_NOT_AVAILABLE
    # A later successful sync proves nothing about the pages the failed one lost: still refused.
    monkeypatch.undo()
    assert store.put(make_msg(body=b"later")).status is PutStatus.SERVICE_NOT_AVAILABLE
    assert asyncio.run(store.wait_flushed(store.commitlog_max_offset + 1)) is False
    checkpoint_before = (tmp_path / "store" / "checkpoint").read_bytes()
    cycles: list[bool] = []
    cycle = FlushService.checkpoint_cycle

    def counted_cycle(self: FlushService, clean: bool = False) -> None:
        cycle(self, clean)
        cycles.append(clean)

    monkeypatch.setattr(FlushService, "checkpoint_cycle", counted_cycle)
    # A checkpoint cycle passes: it must not vouch for what the failed sync covered.
    wait_until_blocking(lambda: cycles, message="a checkpoint cycle")
    store.shutdown()
    # Neither a clean checkpoint nor a missing abort file: the next start recovers and checks.
    assert (tmp_path / "store" / "abort").exists()
    assert (tmp_path / "store" / "checkpoint").read_bytes() == checkpoint_before
