"""The flush thread, group commit for SYNC_FLUSH, and the checkpoint file.

Threading: the event-loop thread writes records and units into the mappings and publishes
``CommitLog.max_offset``; this thread fdatasyncs file descriptors, advances the flushed positions,
writes the index files' headers and the checkpoint, and closes retired files. fdatasync releases the
GIL, so a slow disk never stalls the loop. Files are never closed while this thread may use them:
files of deleted topics and the files retention deletes are handed over (``retire``) and closed
here, at the start of the next checkpoint cycle, under the lock every sync runs under.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

from ._batchqueue import BatchQueueTable
from ._commitlog import CommitLog
from ._consumequeue import ConsumeQueue, QueueTable
from ._index import IndexService
from ._mappedfile import MappedFile, fsync_dir
from .format import CHECKPOINT_SIZE, Checkpoint, pack_checkpoint, unpack_checkpoint

__all__ = ["CheckpointFile", "FlushService"]

log = logging.getLogger("cometmq.store")

# RocketMQ's flushIntervalConsumeQueue: consume queues (and so the checkpoint) are synced this often.
QUEUE_FLUSH_INTERVAL_S: Final = 1.0
# The process (EMFILE) or the system (ENFILE) has no file descriptor left to open a file with.
OUT_OF_DESCRIPTORS: Final = frozenset({errno.EMFILE, errno.ENFILE})
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
    SYNC_FLUSH: ``when_flushed`` registers a waiter and wakes the thread; one fdatasync then covers
    every record written so far, releasing all waiters it covers at once (group commit).
    """

    def __init__(
        self,
        commitlog: CommitLog,
        queues: QueueTable,
        batch_queues: BatchQueueTable,
        checkpoint: CheckpointFile,
        *,
        sync_mode: bool,
        interval_s: float,
        least_bytes: int,
        timeout_s: float,
        index: IndexService | None = None,
        on_failure: Callable[[], None] | None = None,
    ) -> None:
        self._commitlog = commitlog
        self._queues = queues
        self._batch_queues = batch_queues
        self._index = index
        self._on_failure = on_failure
        self._checkpoint = checkpoint
        self._sync_mode = sync_mode
        self._interval_s = interval_s
        self._least_bytes = max(1, least_bytes)
        self._timeout_s = timeout_s
        self._wake = threading.Event()
        self._stopping = False
        self._flush_thread: threading.Thread | None = None
        # Serialises flush cycles (the thread's and the final one at shutdown).
        self._cycle_lock = threading.Lock()
        self._waiters_lock = threading.Lock()
        # (commit-log end offset, future, loop.time() deadline) of each SYNC_FLUSH reply waiting.
        self._waiters: list[tuple[int, asyncio.Future[bool], float]] = []
        # Per event loop, the one timer that answers its waiters past their deadline (loop thread only).
        self._expiry_timers: dict[asyncio.AbstractEventLoop, asyncio.TimerHandle] = {}
        self._retired: list[ConsumeQueue | MappedFile] = []
        self._checkpoint_due = False
        # Whether the last cycle stopped for lack of file descriptors (logged once per spell).
        self._out_of_descriptors = False
        # Set once a sync fails, never cleared: after a failed fdatasync Linux may have dropped the
        # dirty pages, and a later successful one proves nothing about them (PostgreSQL's "fsyncgate").
        self.failure: str | None = None
        # The writer pokes the thread once max_offset reaches this (ASYNC_FLUSH only); one int
        # compare per put keeps that check off the profile.
        self.wake_at = NEVER if sync_mode else commitlog.flushed_offset + self._least_bytes

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._stopping = False
        self._flush_thread = threading.Thread(target=self._run, name="cometmq-store-flush", daemon=True)
        self._flush_thread.start()

    def stop(self) -> None:
        """Stop the thread, flush everything and write a clean checkpoint (unless a sync failed)."""
        if self._flush_thread is not None:
            self._stopping = True
            self._wake.set()
            self._flush_thread.join()
            self._flush_thread = None
        self.checkpoint_cycle(clean=True)
        self._release_waiters()
        self._expiry_timers.clear()  # timers of loops that may be closed by now; they find no waiter

    def poke(self) -> None:
        self.wake_at = NEVER
        self._wake.set()

    def retire(self, queues: Iterable[ConsumeQueue | MappedFile]) -> None:
        """Hand over queues of a deleted topic, or files retention deleted; they are closed by the
        next checkpoint cycle, under ``_cycle_lock``, so never while a sync may use their descriptor.

        Also asks for a checkpoint right away: once ``dispatch_safe`` is past the topic's records,
        crash recovery no longer re-dispatches them (which would bring the topic back).
        """
        self._retired.extend(queues)
        if self._flush_thread is None:
            self._close_retired()
        else:
            self._checkpoint_due = True
            self._wake.set()

    # -- group commit --------------------------------------------------------------------------

    def when_flushed(self, end: int) -> asyncio.Future[bool]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        on_disk = self._commitlog.flushed_offset >= end
        if on_disk or self._flush_thread is None or self.failure is not None:
            fut.set_result(on_disk)  # covered already, or never will be
            return fut
        deadline = loop.time() + self._timeout_s
        with self._waiters_lock:
            self._waiters.append((end, fut, deadline))
        if not self._wake.is_set():  # many waiters per fsync: skip the Condition when already set
            self._wake.set()
        # One timer per loop, armed for its oldest waiter, rather than a timer per waiter: this runs
        # once per message, and a timer per waiter costs a visible share of SYNC_FLUSH appends/s with
        # 16 producers (bench/store.py).
        if loop not in self._expiry_timers:
            self._expiry_timers[loop] = loop.call_at(deadline, self._expire_waiters, loop)
        return fut

    def _expire_waiters(self, loop: asyncio.AbstractEventLoop) -> None:
        """Answer False (FLUSH_DISK_TIMEOUT) to *loop*'s waiters past their deadline, and arm the
        timer again for the oldest one left."""
        self._expiry_timers.pop(loop, None)  # gone already if ``stop`` ran meanwhile
        now = loop.time()
        with self._waiters_lock:
            mine = [w for w in self._waiters if w[1].get_loop() is loop]
            expired = [fut for _, fut, deadline in mine if deadline <= now]
            if expired:
                self._waiters = [w for w in self._waiters if w[2] > now or w[1].get_loop() is not loop]
            left = [deadline for _, _, deadline in mine if deadline > now]
        for fut in expired:
            _expire(fut)
        if left:
            self._expiry_timers[loop] = loop.call_at(min(left), self._expire_waiters, loop)

    def _release_waiters(self, flushed: bool = True) -> None:
        """Answer the waiters the flushed offset covers (True), or every waiter (False) when the
        flush failed."""
        upto = self._commitlog.flushed_offset if flushed else NEVER
        with self._waiters_lock:
            if not self._waiters:
                return
            ready = [fut for end, fut, _ in self._waiters if end <= upto]
            if not ready:
                return
            self._waiters = [w for w in self._waiters if w[0] > upto]
        # One wake-up per event loop, however many waiters this flush covered.
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[bool]]] = {}
        for fut in ready:
            by_loop.setdefault(fut.get_loop(), []).append(fut)
        for loop, futs in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits there any more
                loop.call_soon_threadsafe(self._answer, loop, futs, flushed)

    def _answer(
        self, loop: asyncio.AbstractEventLoop, futs: list[asyncio.Future[bool]], flushed: bool
    ) -> None:
        """Resolve waiters in their loop's thread; with none of the loop's left, drop its timer."""
        for fut in futs:
            if not fut.done():  # a waiter that timed out already has its answer
                fut.set_result(flushed)
        with self._waiters_lock:
            waiting = any(w[1].get_loop() is loop for w in self._waiters)
        if not waiting:
            timer = self._expiry_timers.pop(loop, None)
            if timer is not None:
                timer.cancel()

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
        """Sync consume queues, then the commit log, then record both in the checkpoint.

        After a failed sync the checkpoint is left as it was: it must not vouch for data written
        since (nor call a shutdown clean), so the next start recovers from the last good one."""
        with self._cycle_lock:
            safe = self._sync_all()
            if self.failure is None:
                self._write_checkpoint(self._commitlog.flushed_offset, safe, clean)

    @contextlib.contextmanager
    def truncating(self, end: int) -> Iterator[None]:
        """Hold off flush cycles while the writer cuts the store back to commit-log offset *end*.
        Everything written is made durable first and the checkpoint lowered to *end*, so that
        recovery after a crash from here on scans from there and finds either the whole log or the
        cut one. Afterwards the SYNC_FLUSH waiters for bytes beyond *end* are answered False: those
        bytes are gone, whatever is written there next."""
        with self._cycle_lock:
            safe = self._sync_all()
            self._write_checkpoint(min(self._commitlog.flushed_offset, end), min(safe, end), False)
            yield
            if not self._sync_mode:
                self.wake_at = self._commitlog.flushed_offset + self._least_bytes
        with self._waiters_lock:
            cut = [fut for waited, fut, _ in self._waiters if waited > end]
            self._waiters = [w for w in self._waiters if w[0] <= end]
        for fut in cut:
            _expire(fut)

    def _sync_all(self) -> int:
        """Sync the consume queues, the index and the commit log (under ``_cycle_lock``); return
        the commit-log offset below which every record's unit is on disk."""
        # First, so a sync that keeps failing cannot keep deleted files (and their blocks) alive.
        # Nothing syncs them: they left the lists before they were handed over.
        self._close_retired()
        # Captured before the queues are listed and synced: dispatch happens before max_offset
        # moves, so every record below ``safe`` has its unit in a queue we are about to sync.
        safe = self._commitlog.max_offset
        for cq in self._queues.all_queues():
            try:
                cq.sync()
            except FileNotFoundError:
                # Its topic was deleted since the list was taken: the directory went with it (the
                # topic leaves the table first), and nothing of it needs to be durable. Missing
                # files of a queue still in the table are a real failure.
                if any(cq is live for live in self._queues.all_queues()):
                    raise
        for bq in self._batch_queues.all_queues():
            try:
                bq.sync()
            except (FileNotFoundError, ValueError):  # deleted with its topic since the list was taken
                if bq in self._batch_queues.all_queues():
                    raise
        if self._index is not None:
            self._index.sync()  # its own headers record what is on disk; not the checkpoint
        self.flush_commitlog()
        return safe

    def _write_checkpoint(self, flushed: int, safe: int, clean: bool) -> None:
        self._checkpoint.write(Checkpoint(flushed, safe, clean, time.time_ns() // 1_000_000))

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
                    if self._out_of_descriptors:
                        self._out_of_descriptors = False
                        log.warning("the store flush has file descriptors again")
            except OSError as exc:
                if exc.errno in OUT_OF_DESCRIPTORS:
                    self._descriptors_ran_out(exc)
                    continue
                # The data may not be on disk, and will not get there by retrying: say so to every
                # waiter now (the broker answers FLUSH_DISK_TIMEOUT, never SEND_OK) and let the
                # store refuse further writes. The thread keeps running for the rest.
                if self.failure is None:
                    self.failure = (
                        f"the store could not write to disk ({exc.strerror or exc}) and accepts no more "
                        "messages; check the disk and restart the broker"
                    )
                    log.critical("store flush failed: %s", self.failure, exc_info=True)
                    if self._on_failure is not None:
                        self._on_failure()
                self._release_waiters(flushed=False)
            except Exception:
                log.exception("store flush cycle failed")

    def _descriptors_ran_out(self, exc: OSError) -> None:
        # Only a new file's directory could not be opened for its sync (its data was synced before):
        # nothing failed to reach the disk, so this is no failure of the store. The cycle, and the
        # checkpoint that would vouch for that file, are retried on the next wake; SYNC_FLUSH replies
        # waiting now are told their flush did not complete.
        if not self._out_of_descriptors:
            self._out_of_descriptors = True
            log.error("the store flush is waiting for a file descriptor (%s); raise RLIMIT_NOFILE", exc)
        self._checkpoint_due = True
        self._release_waiters(flushed=False)


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)
