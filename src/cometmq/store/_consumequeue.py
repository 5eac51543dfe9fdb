"""Consume queues: per (topic, queue id) arrays of 20-byte units (format: ``store.format``)."""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Final

from cometmq.protocol.record import MAX_TOPIC_SIZE, topic_field

from ._mappedfile import MappedFile
from .format import CQ_UNIT, CQ_UNIT_SIZE, file_name, parse_file_name

__all__ = ["ConsumeQueue", "QueueTable", "TopicQueues", "encode_topic", "written_end"]

log = logging.getLogger("cometmq.store")

SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
# A queue file's blocks are reserved this much at a time, ahead of the writer (``MappedFile.reserve``):
# a queue takes 64 KiB of disk when it gets its first unit rather than its whole file (6 MB by
# default, for every queue of every topic), and appends pay for one posix_fallocate per 3276 units.
RESERVE_STEP: Final = 64 << 10
NEVER: Final = 1 << 62
_SIZE_FIELD: Final = struct.Struct(">i")  # a unit's size, 8 bytes into it
# Loading reads this much of a queue file first (a page: 204 units), and more only for longer queues.
_FIRST_READ: Final = 4096 - 4096 % CQ_UNIT_SIZE


def encode_topic(name: str) -> bytes | None:
    """UTF-8 bytes of a topic name the store can hold, or None. The broker enforces RocketMQ's
    naming rules; this only guards the record format and the directory tree."""
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return None
    if not 0 < len(encoded) <= MAX_TOPIC_SIZE or name in (".", "..") or "/" in name or "\x00" in name:
        return None
    return encoded


class ConsumeQueue:
    """Units of one queue, spread over equally sized files.

    ``max_offset`` is the next unit to write. Offsets below ``min_offset`` are no longer readable.
    The event-loop thread appends; the flush thread calls ``sync`` only.
    """

    __slots__ = (
        "_cur_idx",
        "_first",
        "_head_offset",
        "_limit",
        "_mm",
        "_tail_end",
        "_unmapped",
        "capacity",
        "damaged",
        "dir",
        "file_size",
        "files",
        "max_offset",
        "min_offset",
        "queue_id",
        "starts",
        "synced_offset",
        "topic",
        "units_per_file",
    )

    def __init__(self, topic: str, queue_id: int, directory: str, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.dir = directory  # a str: a Path for each of 80 000 queues takes seconds at start
        self.file_size = file_size
        self.units_per_file = file_size // CQ_UNIT_SIZE
        self.files: list[MappedFile] = []
        self.starts: list[int] = []  # first unit index of each file, for bisect
        self.min_offset = 0
        self.max_offset = 0
        self.synced_offset = 0  # units below this are on disk (flush thread)
        # Units below this land in reserved blocks (``_set_capacity``): appending them cannot fail.
        self.capacity = 0
        self.damaged = False  # load lost files: recovery must rebuild
        # Append cursor: the file units ``[_first, _limit)`` of which the next unit goes to.
        self._cur_idx = -1
        self._mm: MappedFile | None = None
        self._first = 0
        self._limit = 0
        # Files ``load`` found and left unmapped, as (start, path); empty once mapped.
        self._unmapped: list[tuple[int, str]] = []
        # While unmapped: the commit-log offset of the unit at ``min_offset`` and where the record of
        # the last unit ends (both 0 for an empty queue).
        self._head_offset = 0
        self._tail_end = 0

    # -- loading -------------------------------------------------------------------------------

    def load(self) -> None:
        """Find the queue's files and its end: one past the last written unit (a unit's size is never
        0, the rest of a file is zeros).

        Units are written in order into zero-filled files, so the written units of the last file
        form a run after its leading zero units (those occur only in the first file of a queue that
        began mid-file: ``reset``, a slave's queue starts at its first record's offset). Its end is
        read from the file's first page when it lies there, and found by binary search over the
        units' size fields otherwise (``_scan_file``). Only a power loss can leave holes in the run;
        recovery then re-dispatches every record from the checkpoint's ``dispatch_safe`` on, and a
        unit not on disk belongs to such a record (units below it were synced first), so a search
        that stops at a hole only has recovery rewrite more units.

        The files are not mapped: an offset query needs none, and a broker with tens of thousands
        of queues would run out of descriptors and mappings (``vm.max_map_count``). The first read
        or append maps them (``_map``); until then what trimming and retention ask of the queue is
        answered from its first and last units, read here.
        """
        found: list[tuple[int, str, int]] = []
        with os.scandir(self.dir) as entries:
            for entry in entries:
                start = parse_file_name(entry.name)
                if start is None or start % CQ_UNIT_SIZE or not entry.is_file():
                    log.warning("ignoring unexpected file %s in a consume-queue directory", entry.path)
                    continue
                size = entry.stat().st_size
                if size < CQ_UNIT_SIZE or size % CQ_UNIT_SIZE:
                    log.warning("removing consume-queue file %s of impossible size %d", entry.path, size)
                    os.unlink(entry.path)
                    self.damaged = True
                    continue
                found.append((start, entry.path, size))
        found.sort()
        for i in range(1, len(found)):
            if found[i - 1][0] + found[i - 1][2] != found[i][0]:
                # Units are rebuilt from the commit log by recovery; drop what follows the hole.
                log.error(
                    "consume queue %s has a hole before %s; dropping the files from there",
                    self.dir,
                    found[i][1],
                )
                for _, lost, _ in found[i:]:
                    os.unlink(lost)
                del found[i:]
                self.damaged = True
                break
        if not found:
            return
        # Keep an existing queue's file size even if the config changed: equal-sized files keep
        # file boundaries predictable (``next_file_start``).
        self.file_size = found[-1][2]
        self.units_per_file = self.file_size // CQ_UNIT_SIZE
        first_unit = found[0][0] // CQ_UNIT_SIZE
        self.min_offset = self.max_offset = first_unit
        self._head_offset = self._tail_end = 0
        for i in range(len(found) - 1, -1, -1):
            start, path, size = found[i]
            lead, end, head, tail = _scan_file(path, size, first_file=i == 0)
            if end > lead:
                self.max_offset = start // CQ_UNIT_SIZE + end
                self._tail_end = tail
                if i > 0:  # files before the last are full; the first may lead with zeros
                    lead, _, head, _ = _scan_file(found[0][1], found[0][2], first_file=True)
                self.min_offset = first_unit + lead
                self._head_offset = head
                break
        # Files that start beyond the end hold nothing.
        while len(found) > 1 and found[-1][0] // CQ_UNIT_SIZE > self.max_offset:
            os.unlink(found.pop()[1])
        self.starts = [start // CQ_UNIT_SIZE for start, _, _ in found]
        self._unmapped = [(start, path) for start, path, _ in found]
        self.synced_offset = self.max_offset

    def _map(self) -> None:
        """Map the files ``load`` found, on the queue's first use."""
        found = self._unmapped
        if not found:
            return
        files: list[MappedFile] = []
        try:
            for start, path in found:
                files.append(MappedFile.open(Path(path), start, RESERVE_STEP, random_access=True))
        except BaseException:
            for mf in files:
                mf.close()
            raise
        self._unmapped = []
        self.files = files
        self._set_cursor(len(files) - 1)
        self._set_capacity()

    def adjust_min(self, commitlog_min: int) -> None:
        """Move ``min_offset`` to the first unit that is written and still backed by the commit log.

        Zero units can lead a file when the queue was restarted mid-file (``reset``); units below
        *commitlog_min* point at deleted segments. Both form a prefix, so bisect.
        """
        if self._unmapped and (self.min_offset == self.max_offset or self._head_offset >= commitlog_min):
            return
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            mf = self._file_for(mid)
            if mf is not None:
                off, size, _ = CQ_UNIT.unpack_from(mf.mm, mid * CQ_UNIT_SIZE - mf.start)
                if size > 0 and off >= commitlog_min:
                    hi = mid
                    continue
            lo = mid + 1
        self.min_offset = lo

    def files_before(self, commitlog_min: int) -> int:
        """How many leading files hold only units pointing below *commitlog_min* (into deleted
        commit-log segments). Never the file being appended to, nor the last one."""
        if self._unmapped:
            if len(self._unmapped) == 1 or self._head_offset >= commitlog_min:
                return 0
            self._map()
        count = 0
        # Files before the append cursor are complete, so their last unit is their newest one.
        while count < min(self._cur_idx, len(self.files) - 1):
            mf = self.files[count]
            off, size, _ = CQ_UNIT.unpack_from(mf.mm, mf.size - CQ_UNIT_SIZE)
            if size <= 0 or off >= commitlog_min:
                break
            count += 1
        return count

    def drop_head(self, count: int) -> list[MappedFile]:
        """Forget the first *count* files (at most ``files_before``'s answer) and return them; the
        caller deletes and closes them. Call ``adjust_min`` afterwards."""
        if count <= 0:
            return []
        dropped = self.files[:count]
        # New lists, not ``del``: the flush thread may be iterating the old one (``sync``).
        self.files = self.files[count:]
        self.starts = self.starts[count:]
        self._cur_idx -= count
        self.min_offset = max(self.min_offset, self.starts[0])
        return dropped

    # -- writing (event-loop thread) -----------------------------------------------------------

    def append(self, commitlog_offset: int, size: int, tags_code: int) -> None:
        i = self.max_offset
        if i >= self._limit:
            self._advance()
        assert self._mm is not None
        CQ_UNIT.pack_into(self._mm.mm, (i - self._first) * CQ_UNIT_SIZE, commitlog_offset, size, tags_code)
        self.max_offset = i + 1

    def append_units(self, units: bytes | bytearray) -> None:
        """Append packed units: one slice assignment per file they land in."""
        i = self.max_offset
        end = i + len(units) // CQ_UNIT_SIZE
        if end <= self._limit and self._mm is not None:  # all in the current file: a put's usual case
            at = (i - self._first) * CQ_UNIT_SIZE
            self._mm.mm[at : at + len(units)] = units
            self.max_offset = end
            return
        done = 0
        while done < len(units):
            i = self.max_offset
            if i >= self._limit:
                self._advance()
            assert self._mm is not None
            take = min(len(units) - done, (self._limit - i) * CQ_UNIT_SIZE)
            at = (i - self._first) * CQ_UNIT_SIZE
            self._mm.mm[at : at + take] = units[done : done + take]
            done += take
            self.max_offset = i + take // CQ_UNIT_SIZE

    def prepare(self, count: int) -> None:
        """Reserve the blocks the next *count* units need, creating files as they fill, so that
        ``append`` cannot fail on I/O after the commit-log record is written. ``OSError`` when the
        disk has no room."""
        self._map()
        needed = self.max_offset + count
        while self.capacity < needed:
            last = self.files[-1] if self.files else None
            if last is not None and last.reserved_to < last.size:
                last.reserve(needed * CQ_UNIT_SIZE - last.start)
                self._set_capacity()
            else:
                self._create_file()

    def _set_capacity(self) -> None:
        """Up to the end of the last file's reserved blocks (a file from an earlier run has none
        until ``prepare`` reserves them): a unit stored into a hole of the mapping could die of
        SIGBUS. A new file is created only once the last one is reserved to its end, so the units
        of the files before it all land in reserved (or written) blocks."""
        last = self.files[-1] if self.files else None
        self.capacity = 0 if last is None else (last.start + last.reserved_to) // CQ_UNIT_SIZE

    def _create_file(self) -> None:
        if self.files:
            start_unit = self.files[-1].end // CQ_UNIT_SIZE
        else:
            start_unit = self.max_offset - self.max_offset % self.units_per_file
        os.makedirs(self.dir, exist_ok=True)
        start = start_unit * CQ_UNIT_SIZE
        mf = MappedFile.create(Path(self.dir, file_name(start)), start, self.file_size, RESERVE_STEP, True)
        self.files.append(mf)
        self.starts.append(start_unit)
        self._set_capacity()

    def _advance(self) -> None:
        if self._cur_idx + 1 >= len(self.files):
            self._create_file()
        self._set_cursor(self._cur_idx + 1)

    def _set_cursor(self, idx: int) -> None:
        self._cur_idx = idx
        if idx < 0:
            self._mm = None
            self._first = self._limit = 0
            return
        mf = self.files[idx]
        self._mm = mf
        self._first = mf.start // CQ_UNIT_SIZE
        self._limit = mf.end // CQ_UNIT_SIZE

    def truncate(self, new_max: int, retire: Callable[[list[MappedFile]], None] | None = None) -> None:
        """Drop units ``[new_max, max_offset)``. Files dropped go to *retire*, which has them closed
        where no sync can be using them; without it (recovery: no flush thread yet) they are closed
        at once."""
        if new_max >= self.max_offset:
            return
        self._map()
        idx = bisect.bisect_right(self.starts, new_max) - 1
        if idx < 0:
            self.reset(new_max, retire)
            return
        while len(self.files) > idx + 1:
            self._drop_last_file(retire)
        mf = self.files[idx]
        first = mf.start // CQ_UNIT_SIZE
        end_unit = min(self.max_offset, mf.end // CQ_UNIT_SIZE)
        a = (new_max - first) * CQ_UNIT_SIZE
        b = (end_unit - first) * CQ_UNIT_SIZE
        mf.write_at(a, bytes(b - a))  # not through the mapping: these units' blocks may be holes
        self.max_offset = new_max
        self.min_offset = min(self.min_offset, new_max)
        self.synced_offset = min(self.synced_offset, new_max)
        self._set_cursor(idx)

    def truncate_to_commitlog(
        self, end: int, retire: Callable[[list[MappedFile]], None] | None = None
    ) -> int:
        """Drop the trailing units that are holes or whose records reach past commit-log offset *end*
        (*retire* as for ``truncate``); return how many. Units point at increasing offsets, so those
        form a suffix: bisect for it."""
        if self._unmapped and self._tail_end <= end:
            return 0
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self.unit(mid)
            if unit is None or unit[1] <= 0 or unit[0] + unit[1] > end:
                hi = mid
            else:
                lo = mid + 1
        dropped = self.max_offset - lo
        if dropped:
            self.truncate(lo, retire)
        return dropped

    def reset(self, start: int, retire: Callable[[list[MappedFile]], None] | None = None) -> None:
        """Delete every file; the queue continues empty at unit *start* (*retire* as for ``truncate``)."""
        self._map()
        while self.files:
            self._drop_last_file(retire)
        self.min_offset = self.max_offset = self.synced_offset = start
        self._set_cursor(-1)

    def _drop_last_file(self, retire: Callable[[list[MappedFile]], None] | None = None) -> None:
        # New lists, not ``pop``: the flush thread may be iterating the old one (``sync``).
        mf = self.files[-1]
        self.files = self.files[:-1]
        self.starts = self.starts[:-1]
        mf.unlink()
        if retire is None:
            mf.close()
        else:
            retire([mf])
        self._set_capacity()

    # -- reading -------------------------------------------------------------------------------

    def _file_for(self, index: int) -> MappedFile | None:
        if self._first <= index < self._limit:
            return self._mm
        if self._unmapped:
            self._map()
        idx = bisect.bisect_right(self.starts, index) - 1
        if idx < 0:
            return None
        mf = self.files[idx]
        return mf if index < mf.end // CQ_UNIT_SIZE else None

    def unit(self, index: int) -> tuple[int, int, int] | None:
        """``(commit-log offset, size, tags code)`` of unit *index*, None outside [min, max)."""
        if not self.min_offset <= index < self.max_offset:
            return None
        if self._unmapped:
            # One unit needs no mapping (an offset or time lookup, an admin request going over every
            # queue): read it, and keep the queue's files closed.
            start, path = self._unmapped[bisect.bisect_right(self.starts, index) - 1]
            fd = os.open(path, os.O_RDONLY)
            try:
                off, size, tags = CQ_UNIT.unpack(os.pread(fd, CQ_UNIT_SIZE, index * CQ_UNIT_SIZE - start))
            finally:
                os.close(fd)
            return int(off), int(size), int(tags)
        mf = self._file_for(index)
        if mf is None:
            return None
        off, size, tags = CQ_UNIT.unpack_from(mf.mm, index * CQ_UNIT_SIZE - mf.start)
        return int(off), int(size), int(tags)

    def read_units(self, index: int, limit: int) -> bytes | None:
        """Up to *limit* units from *index* on, all from the one file holding *index* (the pull path
        scans one file per request, as RocketMQ does). None if that file is missing."""
        mf = self._file_for(index)
        if mf is None:
            return None
        count = min(limit, self.max_offset - index, mf.end // CQ_UNIT_SIZE - index)
        a = index * CQ_UNIT_SIZE - mf.start
        return mf.mm[a : a + count * CQ_UNIT_SIZE]

    def next_file_start(self, index: int) -> int:
        return index + self.units_per_file - index % self.units_per_file

    # -- flushing (flush thread) ---------------------------------------------------------------

    def sync(self) -> None:
        target = self.max_offset
        done = self.synced_offset
        if target <= done:
            return
        # reversed() over the live list is safe while the writer appends: it indexes from the
        # length it saw at the start.
        for mf in reversed(self.files):
            if mf.end // CQ_UNIT_SIZE <= done:
                break
            if mf.start // CQ_UNIT_SIZE < target:
                mf.sync()
        self.synced_offset = target

    def sync_all(self) -> None:
        for mf in self.files:
            mf.sync()
        self.synced_offset = self.max_offset

    def close(self) -> None:
        for mf in self.files:
            mf.close()
        self._set_cursor(-1)


def _scan_file(path: str, size: int, first_file: bool) -> tuple[int, int, int, int]:
    """``(lead, end, head, tail)`` of a consume-queue file: how many zero units lead it (0 unless
    *first_file*), one past its last written unit (``end <= lead``: none written), the commit-log
    offset of its first written unit and where the record of its last one ends.

    One read of the file's first page answers for a queue holding fewer units than a page does;
    a longer run is found by binary search over the units' size fields. Read, not through a mapping:
    the file is sparse past what was reserved, and on tmpfs even reading a hole of a shared mapping
    needs a page, a SIGBUS on a full disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        units = size // CQ_UNIT_SIZE
        page = os.pread(fd, min(size, _FIRST_READ), 0)
        lead = 0
        if first_file and not any(page[:CQ_UNIT_SIZE]):  # a queue that began mid-file: rare
            data = os.pread(fd, size, 0)
            lead = (len(data) - len(data.lstrip(b"\0"))) // CQ_UNIT_SIZE
            if lead == units:
                return lead, lead, 0, 0
        in_page = len(page) // CQ_UNIT_SIZE
        if lead < in_page and _size_at(fd, page, in_page - 1) == 0:
            end = written_end(fd, lead, in_page, CQ_UNIT_SIZE, page)  # the run ends in the first page
        else:
            end = written_end(fd, max(lead, in_page), units, CQ_UNIT_SIZE, page)
        if end <= lead:
            return lead, lead, 0, 0
        head, _, _ = CQ_UNIT.unpack(_unit(fd, page, lead))
        offset, record_size, _ = CQ_UNIT.unpack(_unit(fd, page, end - 1))
        return lead, end, int(head), int(offset) + int(record_size)
    finally:
        os.close(fd)


def _unit(fd: int, page: bytes, index: int) -> bytes:
    """Unit *index* of the file: from *page* (its first bytes) when that holds it."""
    at = index * CQ_UNIT_SIZE
    if at + CQ_UNIT_SIZE <= len(page):
        return page[at : at + CQ_UNIT_SIZE]
    return os.pread(fd, CQ_UNIT_SIZE, at)


def _size_at(fd: int, page: bytes, index: int, unit_size: int = CQ_UNIT_SIZE) -> int:
    """The size field of unit *index* of a queue file of *unit_size*-byte units: from *page* (the
    file's first bytes) when that holds it. Both queue formats put the size (int32) 8 bytes into a
    unit, after the commit-log offset."""
    at = index * unit_size + 8
    if at + 4 <= len(page):
        return int(_SIZE_FIELD.unpack_from(page, at)[0])
    return int(_SIZE_FIELD.unpack(os.pread(fd, 4, at))[0])


def written_end(fd: int, lo: int, hi: int, unit_size: int, page: bytes = b"") -> int:
    """The first unit of size 0 in ``[lo, hi)`` (*hi* if none) of a queue file of *unit_size*-byte
    units, where the written units, none of size 0, form a run from *lo* on: units are written in
    order into a zeroed file, so a binary search over the size fields finds the end without reading
    the file (a few 4-byte reads)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if _size_at(fd, page, mid, unit_size) != 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


class TopicQueues:
    """Per-topic state kept hot for the put path: the encoded name, as a record stores it, and the
    queues loaded so far."""

    __slots__ = ("_on_disk", "dir", "encoded", "is_schedule", "name", "queues", "record_field")

    def __init__(self, name: str, encoded: bytes, directory: Path, on_disk: set[int] | None = None) -> None:
        self.name = name
        self.encoded = encoded
        self.record_field = topic_field(encoded)  # TOPICLENGTH + TOPIC
        self.dir = directory
        self.is_schedule = name == SCHEDULE_TOPIC
        self.queues: dict[int, ConsumeQueue] = {}
        # Ids of queues with a directory that are not loaded yet; None until the directory is listed.
        self._on_disk = on_disk

    def on_disk(self) -> set[int]:
        """Ids of the queues found on disk and not loaded yet (the topic's directory is listed on
        the first call)."""
        if self._on_disk is None:
            found: set[int] = set()
            try:
                entries = list(os.scandir(self.dir))
            except FileNotFoundError:
                entries = []
            for qdir in entries:
                if not qdir.is_dir() or not qdir.name.isdigit() or not qdir.name.isascii():
                    log.warning("ignoring unexpected entry %s in the consume-queue directory", qdir.path)
                    continue
                found.add(int(qdir.name))
            self._on_disk = found - self.queues.keys()
        return self._on_disk

    def queue_ids(self) -> set[int]:
        return self.queues.keys() | self.on_disk()


class QueueTable:
    """All consume queues under ``<root>/consumequeue``.

    Queues are loaded on first use (``queue``), not at start: a start then costs one directory
    listing however many queues there are. A queue loaded late gets what start-up would have done
    to it: the units of records at or past ``stale_from`` dropped (records recovery or a truncation
    cut from the log: a queue not loaded got no unit since), its min offset moved to the commit
    log's first offset (``commitlog_min``), and when its files are damaged, ``on_damaged`` (set by
    the store once it runs: it rebuilds the queue from the commit log)."""

    __slots__ = ("commitlog_min", "dir", "file_size", "on_damaged", "stale_from", "topics")

    def __init__(self, directory: Path, file_size: int) -> None:
        self.dir = directory
        self.file_size = file_size
        self.topics: dict[str, TopicQueues] = {}
        self.stale_from = NEVER
        self.commitlog_min: Callable[[], int] = lambda: 0
        self.on_damaged: Callable[[ConsumeQueue], None] | None = None

    def load(self) -> None:
        """Find the topics (their directories); their queues load on first use."""
        self.dir.mkdir(parents=True, exist_ok=True)
        # scandir: its entries know whether they are directories without a stat each.
        for tdir in os.scandir(self.dir):
            encoded = encode_topic(tdir.name)
            if encoded is None or not tdir.is_dir():
                log.warning("ignoring unexpected entry %s in the consume-queue directory", tdir.path)
                continue
            self.topics[tdir.name] = TopicQueues(tdir.name, encoded, self.dir / tdir.name)

    def has_queues(self) -> bool:
        """Whether any queue exists, loaded or on disk."""
        return any(t.queues or t.on_disk() for t in list(self.topics.values()))

    def topic(self, name: str) -> TopicQueues | None:
        """The topic's state, created (without touching the disk) if the name is storable."""
        topic = self.topics.get(name)
        if topic is None:
            encoded = encode_topic(name)
            if encoded is None:
                return None
            # A new topic: nothing of it is on disk.
            topic = self.topics[name] = TopicQueues(name, encoded, self.dir / name, on_disk=set())
        return topic

    def queue(self, topic: TopicQueues, queue_id: int) -> ConsumeQueue:
        """The queue, loaded from disk on first use, or created (without touching the disk)."""
        cq = topic.queues.get(queue_id)
        if cq is None:
            cq = ConsumeQueue(topic.name, queue_id, os.path.join(topic.dir, str(queue_id)), self.file_size)
            on_disk = topic.on_disk()
            if queue_id in on_disk:
                on_disk.discard(queue_id)
                cq.load()
                cq.truncate_to_commitlog(self.stale_from)
                cq.adjust_min(self.commitlog_min())
            topic.queues[queue_id] = cq
            if cq.damaged and self.on_damaged is not None:
                self.on_damaged(cq)
        return cq

    def loaded_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue if it exists (loaded now if it is on disk), else None."""
        t = self.topics.get(topic)
        if t is None:
            return None
        cq = t.queues.get(queue_id)
        if cq is None and queue_id in t.on_disk():
            cq = self.queue(t, queue_id)
        return cq

    def all_queues(self) -> list[ConsumeQueue]:
        """The loaded queues (those on disk not loaded yet have nothing to sync, trim or clean)."""
        # list() over dict views is done in C without running Python code, so it is atomic with
        # respect to the writer thread mutating the dicts.
        return [cq for topic in list(self.topics.values()) for cq in list(topic.queues.values())]

    def delete_unloaded_files_before(self, commitlog_min: int) -> list[Path]:
        """Retention for the queues on disk that are not loaded (idle since the start): delete each
        one's leading files whose last unit points below *commitlog_min*, never its last file, as
        ``files_before`` does for a loaded queue. One unit is read per file; no queue is loaded.
        On the writer's thread, like loading, so no queue is loaded meanwhile."""
        deleted: list[Path] = []
        for topic in list(self.topics.values()):
            for queue_id in list(topic.on_disk()):
                qdir = Path(topic.dir, str(queue_id))
                try:
                    names = sorted(
                        entry.name for entry in os.scandir(qdir) if parse_file_name(entry.name) is not None
                    )
                except FileNotFoundError:
                    continue
                for name in names[:-1]:  # sorted by start: the names have a fixed width
                    path = qdir / name
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        off, size, _ = CQ_UNIT.unpack(
                            os.pread(fd, CQ_UNIT_SIZE, self.file_size - CQ_UNIT_SIZE)
                        )
                    finally:
                        os.close(fd)
                    if size <= 0 or off >= commitlog_min:
                        break
                    path.unlink()
                    deleted.append(path)
        return deleted

    def remove_topic(self, name: str) -> list[ConsumeQueue]:
        """Forget a topic and delete its directory; the caller closes the returned queues' files."""
        topic = self.topics.pop(name, None)
        if topic is None:
            return []
        shutil.rmtree(topic.dir, ignore_errors=True)
        return list(topic.queues.values())

    def close(self) -> None:
        for cq in self.all_queues():
            cq.close()
        self.topics.clear()
