"""Batch consume queues: per (topic, queue id) arrays of 46-byte units, each covering the queue offsets
of one commit-log record (RocketMQ 5's BatchConsumeQueue; format: ``store.format``).

A topic whose ``queue.type`` is ``BatchCQ`` keeps its queues here rather than in ``consumequeue``. A
record sent as an inner batch holds N messages and gets ONE unit covering N offsets; any other record
of such a topic gets a unit covering one. A queue offset is found by binary search over the units'
base offsets, kept in memory (8 bytes a unit, so a few bytes per thousand batched messages).
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Final

from cometmq.errors import StoreError

from ._consumequeue import RESERVE_STEP, encode_topic, written_end
from ._mappedfile import MappedFile, unlink_oldest_first
from .format import BCQ_UNIT, BCQ_UNIT_SIZE, file_name, parse_file_name

__all__ = ["BatchConsumeQueue", "BatchQueueTable", "BatchUnit"]

log = logging.getLogger("cometmq.store")

# RocketMQ's BatchConsumeQueue files hold 300 000 units, as its consume-queue files do.
UNITS_PER_FILE: Final = 300_000
# RocketMQ writes -1 (INVALID_POS) into a unit's compactedOffset.
_NO_COMPACTED_OFFSET: Final = -1
_pack_into: Final = BCQ_UNIT.pack_into
_unpack_from: Final = BCQ_UNIT.unpack_from

# (commit-log offset, size, tags code, store time, base queue offset, message count)
BatchUnit = tuple[int, int, int, int, int, int]
# Closes dropped files once no reader can hold their mappings (the store's flush thread).
Retire = Callable[[list[MappedFile]], None]


def _close(dropped: list[MappedFile], retire: Retire | None) -> None:
    if retire is not None:
        retire(dropped)
    else:  # start-up: no reader yet
        for mf in dropped:
            mf.close()


class BatchConsumeQueue:
    """Units of one queue of a BatchCQ topic. ``max_offset`` is the next queue offset to write (the last
    unit's base plus its count), ``min_offset`` the first unit's base. The writer thread appends; the flush
    thread calls ``sync`` only. Unit indexes are internal: a queue that restarts elsewhere (a slave whose
    first record is mid-queue) starts over at unit 0 with that base."""

    __slots__ = (
        "_head_files",
        "_live",
        "_reserved_units",
        "bases",
        "dir",
        "files",
        "max_offset",
        "queue_id",
        "synced_units",
        "topic",
        "units_per_file",
    )

    def __init__(
        self, topic: str, queue_id: int, directory: Path, units_per_file: int = UNITS_PER_FILE
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.dir = directory
        self.units_per_file = units_per_file
        self.files: list[MappedFile] = []
        self.bases = array("q")  # base queue offset of each unit, increasing
        self.max_offset = 0
        self.synced_units = 0
        self._reserved_units = 0  # units below this land in reserved blocks
        # Files retention deleted from the head: ``files[0]`` is file number ``_head_files`` of the
        # queue, and unit index i (of ``bases``) is unit ``i % units_per_file`` of ``files[i //
        # units_per_file]``, since whole files go.
        self._head_files = 0
        self._live = 0  # index of the first unit whose record the commit log still holds

    @property
    def min_offset(self) -> int:
        return self.bases[self._live] if self._live < len(self.bases) else self.max_offset

    @property
    def units(self) -> int:
        return len(self.bases)

    # -- loading -------------------------------------------------------------------------------

    def load(self) -> None:
        """Map the queue's files and read its units up to the first that is not valid (RocketMQ's
        recover: offset >= 0, size > 0, base >= 0, count > 0), or that does not continue its
        predecessor's offsets; anything after it is zeroed. A file that is not where or how large this
        store writes them stops the start (StoreError), as RocketMQ's load does: deleting it would lose
        units that recovery does not rebuild (those below the checkpoint)."""
        paths = sorted(
            (start, path)
            for path in self.dir.iterdir()
            if (start := parse_file_name(path.name)) is not None and path.is_file()
        )
        file_bytes = self.units_per_file * BCQ_UNIT_SIZE
        first = paths[0][0] - paths[0][0] % file_bytes if paths else 0  # retention deleted those before
        self._head_files = first // file_bytes
        for i, (start, path) in enumerate(paths):
            size = path.stat().st_size
            if start != first + i * file_bytes or size != file_bytes:
                self.close()
                raise StoreError(
                    f"batch consume queue file {path} is not one this store writes: it holds {size} bytes "
                    f"from queue byte {start}, where a file of {file_bytes} bytes from byte "
                    f"{first + i * file_bytes} was expected; move it (or the queue's directory) away to "
                    "start, knowing that its units are then lost"
                )
            self.files.append(MappedFile.open(path, start, RESERVE_STEP))
        written = 0  # units up to the end of the written units of the file the valid units end in
        for i, mf in enumerate(self.files):
            # Only the written units are read (not the mapping: holes of a sparse file).
            used = written_end(mf.fd, 0, self.units_per_file, BCQ_UNIT_SIZE)
            data = os.pread(mf.fd, used * BCQ_UNIT_SIZE, 0)
            for coff, size, _tags, _ts, base, count, _c, _r in BCQ_UNIT.iter_unpack(data):
                if (
                    coff < 0
                    or size <= 0
                    or base < 0
                    or count <= 0
                    or (self.bases and base != self.max_offset)
                ):
                    break
                self.bases.append(base)
                self.max_offset = base + count
            written = i * self.units_per_file + used
            if len(self.bases) < (i + 1) * self.units_per_file:
                break
        self._cut(len(self.bases), written)
        self.synced_units = len(self.bases)

    def _cut(self, keep: int, written: int, retire: Retire | None = None) -> None:
        """Keep units ``[0, keep)``: zero units ``[keep, written)`` and drop the files after the one
        holding unit ``keep - 1`` (the first file is kept), closed through *retire* when given (a
        reader may still hold their mappings)."""
        last = (keep - 1) // self.units_per_file if keep else 0
        dropped = []
        while len(self.files) > last + 1:
            mf = self.files.pop()
            mf.unlink()
            dropped.append(mf)
        _close(dropped, retire)
        if self.files:
            mf = self.files[-1]
            file_start = last * self.units_per_file * BCQ_UNIT_SIZE
            begin = keep * BCQ_UNIT_SIZE - file_start
            end = min(mf.size, written * BCQ_UNIT_SIZE - file_start)
            if end > begin:
                mf.write_at(begin, bytes(end - begin))  # not through the mapping: maybe holes
        self._reserved_units = 0

    # -- writing -------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Reserve the blocks of the next unit, creating its file, so that ``append`` cannot fail after
        the commit-log record is written. ``OSError`` when the disk has no room."""
        unit = len(self.bases)
        if unit < self._reserved_units:
            return
        upf = self.units_per_file
        idx = unit // upf
        if idx >= len(self.files):
            self.dir.mkdir(parents=True, exist_ok=True)
            start = (self._head_files + idx) * upf * BCQ_UNIT_SIZE
            size = upf * BCQ_UNIT_SIZE
            self.files.append(MappedFile.create(self.dir / file_name(start), start, size, RESERVE_STEP))
        mf = self.files[idx]
        mf.reserve((unit % upf + 1) * BCQ_UNIT_SIZE)
        self._reserved_units = idx * upf + mf.reserved_to // BCQ_UNIT_SIZE

    def append(self, commitlog_offset: int, size: int, tags_code: int, store_time: int, count: int) -> None:
        """One unit for a record at *commitlog_offset* holding *count* messages from ``max_offset`` on."""
        unit = len(self.bases)
        upf = self.units_per_file
        mf = self.files[unit // upf]
        base = self.max_offset
        _pack_into(
            mf.mm,
            unit % upf * BCQ_UNIT_SIZE,
            commitlog_offset,
            size,
            tags_code,
            store_time,
            base,
            count,
            _NO_COMPACTED_OFFSET,
            0,
        )
        self.bases.append(base)
        self.max_offset = base + count

    def restart_at(self, base: int, retire: Retire | None = None) -> None:
        """Drop every unit; the next one covers offsets from *base* on."""
        dropped = self.files
        self.files = []
        for mf in dropped:
            mf.unlink()
        _close(dropped, retire)
        self.bases = array("q")
        self.max_offset = base
        self.synced_units = 0
        self._reserved_units = 0
        self._head_files = 0
        self._live = 0

    def truncate_units(self, count: int, retire: Retire | None = None) -> None:
        """Keep the first *count* units."""
        if count >= len(self.bases):
            return
        if count == 0:
            self.restart_at(self.bases[0], retire)
            return
        last = self.unit(count - 1)
        written = len(self.bases)
        del self.bases[count:]
        self._live = min(self._live, count)
        self.max_offset = last[4] + last[5]
        self._cut(count, written, retire)
        self.synced_units = min(self.synced_units, count)

    def truncate_to_commitlog(self, end: int, retire: Retire | None = None) -> int:
        """Drop the trailing units whose records reach past commit-log offset *end*; how many."""
        keep = len(self.bases)
        while keep and (unit := self.unit(keep - 1))[0] + unit[1] > end:
            keep -= 1
        dropped = len(self.bases) - keep
        self.truncate_units(keep, retire)
        return dropped

    # -- reading -------------------------------------------------------------------------------

    def unit(self, index: int) -> BatchUnit:
        upf = self.units_per_file
        coff, size, tags, ts, base, count, _c, _r = _unpack_from(
            self.files[index // upf].mm, index % upf * BCQ_UNIT_SIZE
        )
        return coff, size, tags, ts, base, count

    def unit_index(self, offset: int) -> int:
        """The index of the unit covering queue *offset* (``min_offset <= offset < max_offset``)."""
        return bisect.bisect_right(self.bases, offset) - 1

    def first_unit_at(self, timestamp_ms: int) -> int:
        """Index of the first unit stored at or after *timestamp_ms*; ``units`` if all are older."""
        return self._first_unit_reaching(3, timestamp_ms, 0)

    def _first_unit_reaching(self, field: int, value: int, low: int) -> int:
        """Index of the first unit from *low* on whose *field* is at least *value*, by bisection: the
        field (commit-log offset, store time) does not decrease along the queue."""
        high = len(self.bases)
        while low < high:
            mid = (low + high) // 2
            if self.unit(mid)[field] < value:
                low = mid + 1
            else:
                high = mid
        return low

    # -- retention -----------------------------------------------------------------------------

    def adjust_min(self, commitlog_min: int) -> None:
        """Move ``min_offset`` to the first unit whose record starts at or after *commitlog_min* (the
        records before are in deleted segments; their units form a prefix)."""
        self._live = self._first_unit_reaching(0, commitlog_min, self._live)

    def drop_files_before(self, commitlog_min: int, retire: Retire) -> list[MappedFile]:
        """Delete the leading files whose units all point below *commitlog_min*, never the last one,
        with their units' bases, and move ``min_offset`` (``adjust_min``); the files deleted."""
        upf = self.units_per_file
        count = 0
        while count < len(self.files) - 1 and self.unit((count + 1) * upf - 1)[0] < commitlog_min:
            count += 1
        dropped = unlink_oldest_first(self.files[:count])
        if dropped:
            gone = len(dropped) * upf
            # New objects, not ``del``: the flush thread may be iterating the old list (``sync``).
            self.files = self.files[len(dropped) :]
            self.bases = self.bases[gone:]
            self._head_files += len(dropped)
            self._live = max(0, self._live - gone)
            self.synced_units = max(0, self.synced_units - gone)
            self._reserved_units = max(0, self._reserved_units - gone)
            retire(dropped)
        self.adjust_min(commitlog_min)
        return dropped

    # -- flushing (flush thread) ---------------------------------------------------------------

    def sync(self) -> None:
        target = len(self.bases)
        done = self.synced_units
        if target <= done:
            return
        for mf in self.files[done // self.units_per_file : (target - 1) // self.units_per_file + 1]:
            mf.sync()
        self.synced_units = target

    def sync_all(self) -> None:
        for mf in self.files:
            mf.sync()
        self.synced_units = len(self.bases)

    def close(self) -> None:
        for mf in self.files:
            mf.close()
        self.files = []


class BatchQueueTable:
    """The batch consume queues under ``<root>/batchconsumequeue``, and which topics are BatchCQ: those
    declared by the broker and those with a directory there."""

    __slots__ = ("dir", "queues", "topics")

    def __init__(self, directory: Path, topics: set[str]) -> None:
        self.dir = directory
        self.topics = topics  # shared with the store, which declares topics before they load
        self.queues: dict[tuple[str, int], BatchConsumeQueue] = {}

    def load(self) -> None:
        if not self.dir.is_dir():
            return
        for tdir in sorted(self.dir.iterdir()):
            if not tdir.is_dir() or encode_topic(tdir.name) is None:
                log.warning("ignoring unexpected entry %s in the batch consume-queue directory", tdir)
                continue
            self.topics.add(tdir.name)
            for qdir in sorted(tdir.iterdir()):
                if not qdir.is_dir() or not qdir.name.isdigit() or not qdir.name.isascii():
                    log.warning("ignoring unexpected entry %s in the batch consume-queue directory", qdir)
                    continue
                bq = BatchConsumeQueue(tdir.name, int(qdir.name), qdir, UNITS_PER_FILE)
                bq.load()
                self.queues[(tdir.name, bq.queue_id)] = bq

    def get(self, topic: str, queue_id: int) -> BatchConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def queue(self, topic: str, queue_id: int) -> BatchConsumeQueue:
        bq = self.queues.get((topic, queue_id))
        if bq is None:
            bq = self.queues[(topic, queue_id)] = BatchConsumeQueue(
                topic, queue_id, self.dir / topic / str(queue_id), UNITS_PER_FILE
            )
        return bq

    def all_queues(self) -> list[BatchConsumeQueue]:
        return list(self.queues.values())

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(qid for name, qid in list(self.queues) if name == topic)

    def remove_topic(self, topic: str) -> list[BatchConsumeQueue]:
        self.topics.discard(topic)
        removed = [self.queues.pop(key) for key in [k for k in self.queues if k[0] == topic]]
        shutil.rmtree(self.dir / topic, ignore_errors=True)
        return removed

    def close(self) -> None:
        for bq in self.queues.values():
            bq.close()
        self.queues.clear()
