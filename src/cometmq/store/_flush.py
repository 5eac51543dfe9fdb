"""The flush thread, group commit for SYNC_FLUSH, and the checkpoint file.

Threading: the event-loop thread writes records and units into the mappings and publishes
``CommitLog.max_offset``; this thread only fdatasyncs file descriptors, advances the flushed
positions and writes the checkpoint. fdatasync releases the GIL, so a slow disk never stalls the
loop. Files are never closed while this thread may use them: files of deleted topics are handed
over (``retire``) and closed here, after their last sync.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from ._commitlog import CommitLog
from ._consumequeue import ConsumeQueue, QueueTable
from ._mappedfile import fsync_dir
from .format import CHECKPOINT_SIZE, Checkpoint, pack_checkpoint, unpack_checkpoint

__all__ = ["CheckpointFile", "FlushService"]

log = logging.getLogger("cometmq.store")

# RocketMQ's flushIntervalConsumeQueue: consume queues (and so the checkpoint) are synced this often.
QUEUE_FLUSH_INTERVAL_S: Final = 1.0
NEVER: Final = 1 << 62


class CheckpointFile:
    """``<root>/checkpoint``, rewritten in place; see ``store.format``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1

    def read(self) -> Checkpoint | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        return unpack_checkpoint(data[:CHECKPOINT_SIZE])

    def write(self, cp: Checkpoint) -> None:
        if self._fd < 0:
            created = not self.path.exists()
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            if created:
                fsync_dir(self.path.parent)
        # 36 bytes at offset 0: one sector, so in practice atomic; the CRC catches it if not.
        os.pwrite(self._fd, pack_checkpoint(cp), 0)
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class FlushService:
    """Flushes the commit log (timed or on demand), the consume queues and the checkpoint.

    ASYNC_FLUSH: the thread wakes every ``interval_s``, or earlier when the writer sees
    ``least_bytes`` unflushed (``wake_at``), and syncs whatever is dirty.
    SYNC_FLUSH: ``wait_flushed`` registers a waiter and wakes the thread; one fdatasync then covers
    every record written so far, releasing all waiters it covers at once (group commit).
    """

    def __init__(
        self,
        commitlog: CommitLog,
        queues: QueueTable,
        checkpoint: CheckpointFile,
        *,
        sync_mode: bool,
        interval_s: float,
        least_bytes: int,
        timeout_s: float,
    ) -> None:
        self._commitlog = commitlog
        self._queues = queues
        self._checkpoint = checkpoint
        self._sync_mode = sync_mode
        self._interval_s = interval_s
        self._least_bytes = max(1, least_bytes)
        self._timeout_s = timeout_s
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        # Serialises flush cycles (the thread's and the final one at shutdown).
        self._cycle_lock = threading.Lock()
        self._waiters_lock = threading.Lock()
        self._waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self._retired: list[ConsumeQueue] = []
        self._checkpoint_due = False
        # The writer pokes the thread once max_offset reaches this (ASYNC_FLUSH only); one int
        # compare per put keeps that check off the profile.
        self.wake_at = NEVER if sync_mode else commitlog.flushed_offset + self._least_bytes

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="cometmq-store-flush", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread, flush everything and write a clean checkpoint."""
        if self._thread is not None:
            self._stopping = True
            self._wake.set()
            self._thread.join()
            self._thread = None
        self.checkpoint_cycle(clean=True)
        self._release_waiters()

    def poke(self) -> None:
        self.wake_at = NEVER
        self._wake.set()

    def retire(self, queues: Iterable[ConsumeQueue]) -> None:
        """Hand over queues of a deleted topic; their files are closed after the next sync.

        Also asks for a checkpoint right away: once ``dispatch_safe`` is past the topic's records,
        crash recovery no longer re-dispatches them (which would bring the topic back).
        """
        self._retired.extend(queues)
        if self._thread is None:
            self._close_retired()
        else:
            self._checkpoint_due = True
            self._wake.set()

    # -- group commit --------------------------------------------------------------------------

    async def wait_flushed(self, end: int) -> bool:
        if self._commitlog.flushed_offset >= end:
            return True
        if self._thread is None:
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        with self._waiters_lock:
            self._waiters.append((end, fut))
        self._wake.set()
        try:
            async with asyncio.timeout(self._timeout_s):
                return await fut
        except TimeoutError:
            return False

    def _release_waiters(self) -> None:
        flushed = self._commitlog.flushed_offset
        with self._waiters_lock:
            if not self._waiters:
                return
            ready = [fut for end, fut in self._waiters if end <= flushed]
            if not ready:
                return
            self._waiters = [(end, fut) for end, fut in self._waiters if end > flushed]
        # One wake-up per event loop, however many waiters this flush covered.
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[bool]]] = {}
        for fut in ready:
            by_loop.setdefault(fut.get_loop(), []).append(fut)
        for loop, futs in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits there any more
                loop.call_soon_threadsafe(_resolve, futs)

    # -- flushing ------------------------------------------------------------------------------

    def flush_commitlog(self) -> None:
        cl = self._commitlog
        target = cl.max_offset
        done = cl.flushed_offset
        if target > done:
            for seg in reversed(cl.segments):
                if seg.end <= done:
                    break
                if seg.start < target:
                    seg.sync()
            cl.flushed_offset = target
        if not self._sync_mode:
            self.wake_at = cl.flushed_offset + self._least_bytes

    def checkpoint_cycle(self, clean: bool = False) -> None:
        """Sync consume queues, then the commit log, then record both in the checkpoint."""
        with self._cycle_lock:
            # Captured before the queues are listed and synced: dispatch happens before max_offset
            # moves, so every record below ``safe`` has its unit in a queue we are about to sync.
            safe = self._commitlog.max_offset
            for cq in self._queues.all_queues():
                cq.sync()
            self._close_retired()
            self.flush_commitlog()
            self._checkpoint.write(
                Checkpoint(self._commitlog.flushed_offset, safe, clean, time.time_ns() // 1_000_000)
            )

    def _close_retired(self) -> None:
        while self._retired:
            self._retired.pop().close()

    def _run(self) -> None:
        next_queue_flush = time.monotonic() + QUEUE_FLUSH_INTERVAL_S
        while True:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            if self._stopping:
                return
            try:
                with self._cycle_lock:
                    self.flush_commitlog()
                self._release_waiters()
                if self._checkpoint_due or time.monotonic() >= next_queue_flush:
                    self._checkpoint_due = False
                    self.checkpoint_cycle()
                    next_queue_flush = time.monotonic() + QUEUE_FLUSH_INTERVAL_S
            except Exception:
                # fsync errors are serious (the data may not be on disk), but the thread must keep
                # serving: SYNC_FLUSH waiters then time out and the broker reports it.
                log.exception("store flush failed")


def _resolve(futs: list[asyncio.Future[bool]]) -> None:
    for fut in futs:
        if not fut.done():  # a waiter that timed out has been cancelled
            fut.set_result(True)
