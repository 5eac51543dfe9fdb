"""The commit log: segment files and the write position (format: ``store.format``)."""

from __future__ import annotations

import bisect
import logging
import os
import struct
from pathlib import Path
from typing import Final

from cometmq.protocol.record import BLANK_MAGIC_CODE, BORNHOST_V6_FLAG, MESSAGE_MAGIC_CODE, MIN_RECORD_SIZE

from ._mappedfile import MappedFile, fsync_dir
from .format import BLANK_MIN_SIZE, file_name, parse_file_name

__all__ = ["CommitLog"]

log = logging.getLogger("cometmq.store")

_SIZE_MAGIC: Final = struct.Struct(">iI")
_Q: Final = struct.Struct(">q")
_I: Final = struct.Struct(">i")
_PHYSICAL_OFFSET_AT: Final = 28
_SYSFLAG_AT: Final = 36
_PAGE: Final = 4096
_NEVER: Final = 1 << 62

# Under SYNC_FLUSH the writer keeps the next WARM_AHEAD bytes of its segment written with zeros, a
# WARM_CHUNK at a time (RocketMQ's warmMapedFileEnable warms a whole file instead). The blocks
# reserved ahead of the writer (RESERVE_STEP) are allocated but unwritten, so every group commit into
# them also commits their change to written; a group commit into blocks written before costs less
# (bench/store.py prints both, and SYNC_FLUSH appends/s). The zeros reach the disk with the next group
# commit, long before the writer gets there.
WARM_AHEAD: Final = 4 << 20
WARM_CHUNK: Final = 256 << 10
_ZEROS: Final = bytes(WARM_CHUNK)

# A segment's blocks are reserved a step at a time, ahead of the writer (``MappedFile.reserve``), not
# all at its creation: a new segment takes this much disk, not its full size (1 GiB by default), and
# the put that crosses into the next step pays for one posix_fallocate, once per thousands of 1 KiB
# records.
RESERVE_STEP: Final = 4 << 20


class CommitLog:
    """Segments in offset order plus the writer's position.

    Only the event-loop thread writes (``cur``, ``wrote_pos``, ``max_offset``, appending to
    ``segments``). The flush thread reads ``max_offset`` and ``segments`` and owns
    ``flushed_offset``; ``max_offset`` is published only after a record and its consume-queue unit
    are fully written, so whatever is below it is complete. Retention (``drop_head``) replaces
    ``segments`` and ``starts`` instead of shrinking them, so the flush thread can finish iterating
    the list it took.
    """

    __slots__ = (
        "_warm_seg",
        "_warmed_to",
        "cur",
        "damaged",
        "dir",
        "flushed_offset",
        "max_offset",
        "segment_size",
        "segments",
        "starts",
        "warm_at",
        "warm_chunk",
        "warm_window",
        "wrote_pos",
    )

    def __init__(self, directory: Path, segment_size: int, *, warm: bool = False) -> None:
        self.dir = directory
        self.segment_size = segment_size
        self.segments: list[MappedFile] = []
        self.starts: list[int] = []  # segment start offsets, for bisect
        self.cur: MappedFile | None = None
        self.wrote_pos = 0  # write position inside ``cur``
        self.max_offset = 0
        self.flushed_offset = 0
        self.damaged = False  # load found files that force a full recovery
        # The writer calls ``warm_ahead`` once a record ends past this offset; never without ``warm``.
        self.warm_at = 0 if warm else _NEVER
        # How far ahead of the writer, and in chunks of what size (no more than WARM_CHUNK, the zeros
        # kept: larger is taken as WARM_CHUNK); settable for tests that need the window to slide
        # within small segments.
        self.warm_window = WARM_AHEAD
        self.warm_chunk = WARM_CHUNK
        self._warm_seg: MappedFile | None = None  # the segment ``_warmed_to`` is in
        self._warmed_to = 0  # within it, zeros are written up to here

    # -- loading -------------------------------------------------------------------------------

    def load(self) -> None:
        """Map every segment file. Empty leftovers (a crash between create and ftruncate) are
        removed; after a hole in the chain only the segments before it are used."""
        self.dir.mkdir(parents=True, exist_ok=True)
        found: list[tuple[int, Path]] = []
        for path in self.dir.iterdir():
            start = parse_file_name(path.name)
            if start is None or not path.is_file():
                log.warning("ignoring unexpected file %s in the commit log directory", path)
                continue
            if path.stat().st_size == 0:
                log.warning("removing empty commit-log segment %s", path)
                path.unlink()
                continue
            found.append((start, path))
        found.sort()
        for i, (start, path) in enumerate(found):
            if self.segments and self.segments[-1].end != start:
                # Nothing can be read across a hole. Keep the prefix (recovery then ends the log
                # at the hole) and move the rest aside rather than destroy it.
                log.error(
                    "commit log has a hole before %s (previous segment ends at %d); "
                    "moving it and %d later segment(s) aside as *.orphan",
                    path.name,
                    self.segments[-1].end,
                    len(found) - i - 1,
                )
                for _, orphan in found[i:]:
                    orphan.rename(orphan.with_name(orphan.name + ".orphan"))
                self.damaged = True
                break
            if i == len(found) - 1 and path.stat().st_size < self.segment_size:
                # The segment being written was cut short (a partial copy, a torn create): give it
                # back its full size; only the last one can grow without moving later offsets.
                log.warning("extending short commit-log segment %s to %d bytes", path, self.segment_size)
                with path.open("r+b") as f:
                    f.truncate(self.segment_size)
                self.damaged = True
            self.segments.append(MappedFile.open(path, start, RESERVE_STEP))
        self.starts = [s.start for s in self.segments]

    def set_end(self, end: int) -> None:
        """Position the writer at *end*: zero everything after it in its segment and delete later
        segments. Used after recovery; logs what is dropped."""
        if not self.segments:
            self.max_offset = self.flushed_offset = end
            return
        idx = bisect.bisect_right(self.starts, end) - 1
        if idx < 0:
            raise ValueError(f"end {end} precedes the first segment {self.starts[0]}")
        for seg in self.segments[idx + 1 :]:
            log.warning("recovery: deleting commit-log segment %s beyond the end %d", seg.path.name, end)
            seg.close()
            seg.unlink()
        del self.segments[idx + 1 :]
        del self.starts[idx + 1 :]
        seg = self.segments[idx]
        rel = end - seg.start
        if rel < seg.size:
            # Unconditionally: after a power loss a lost page can be followed by surviving pages
            # holding stale records that a later recovery must not mistake for data.
            seg.zero_from(rel)
        self.cur = seg
        self.wrote_pos = rel
        self.max_offset = end
        self.flushed_offset = end
        self._warm_seg = None  # zero_from made the tail sparse again

    def ensure_segment(self) -> None:
        """A fresh log gets its first segment at offset 0 (so ``cur`` is never None while running)."""
        if self.cur is None:
            self._new_segment(self.max_offset)

    # -- writing (event-loop thread) -----------------------------------------------------------

    def begin_at(self, start: int) -> list[MappedFile]:
        """Make an empty log begin at *start* rather than 0 (a slave's first segment is its master's
        last): the first segment is created there, and the log's empty segments are dropped from the
        lists and returned, for the caller to unlink and retire. ``OSError`` (disk full) changes
        nothing. Created before the old ones go: a crash in between leaves a hole, which the next
        start moves aside (``load``), and the log is empty again."""
        first = MappedFile.create(self.dir / file_name(start), start, self.segment_size, RESERVE_STEP)
        dropped = self.segments
        # New lists, as ``drop_head`` makes them: the flush thread may be iterating the old one.
        self.segments = [first]
        self.starts = [start]
        self.cur = first
        self.wrote_pos = 0
        self.flushed_offset = start
        self.max_offset = start
        return dropped

    def cut_to(self, end: int) -> None:
        """Forget the bytes written after *end* in the current segment (zeroed, as recovery would):
        what a refused replicated chunk wrote. *end* is at or after the segment's start and at or
        after ``max_offset``."""
        cur = self.cur
        assert cur is not None and cur.start <= end <= cur.start + self.wrote_pos
        rel = end - cur.start
        if rel < self.wrote_pos:
            self.wrote_pos = rel
            self._warm_seg = None  # zero_from makes the tail sparse again
            cur.zero_from(rel)

    def truncate_to(self, end: int) -> list[MappedFile]:
        """Cut the log back to *end*, a record boundary at or after ``min_offset`` and before the
        written end, durably and in an order that leaves, after a crash at any point, either the whole
        log or the cut one to recovery (whose scan ends the log at the first bytes that are not a
        record): first the 8 bytes at *end* are zeroed and synced, so the scan stops there from then
        on; then the later segments are deleted, newest first, so what is left never has a hole; then
        the rest of *end*'s segment is zeroed. Returns the deleted segments, for the caller to close
        where no sync can be using them."""
        idx = bisect.bisect_right(self.starts, end) - 1
        seg = self.segments[idx]
        rel = end - seg.start
        seg.write_at(rel, bytes(BLANK_MIN_SIZE))  # a segment keeps at least 8 bytes after a record
        os.fsync(seg.fd)
        dropped = self.segments[idx + 1 :]
        for later in reversed(dropped):
            later.unlink()
        if dropped:
            fsync_dir(self.dir)
        # New lists, as ``drop_head`` makes them: the flush thread may be iterating the old one.
        self.segments = self.segments[: idx + 1]
        self.starts = self.starts[: idx + 1]
        seg.zero_from(rel)
        os.fsync(seg.fd)  # not fdatasync: the file's blocks were freed
        self.cur = seg
        self.wrote_pos = rel
        self.max_offset = end
        self.flushed_offset = min(self.flushed_offset, end)
        self._warm_seg = None  # zero_from made the tail sparse again
        if self.warm_at != _NEVER:
            self.warm_at = end  # warm again from the next record on
        return dropped

    def roll(self) -> MappedFile:
        """Fill the rest of the current segment with a blank record and start the next one."""
        cur = self.cur
        assert cur is not None
        pos = self.wrote_pos
        # Create the next segment first: if that fails (disk full) nothing has changed.
        nxt = self._new_segment(cur.end)
        remaining = cur.size - pos
        if remaining >= BLANK_MIN_SIZE:
            if pos + _SIZE_MAGIC.size <= cur.reserved_to:
                _SIZE_MAGIC.pack_into(cur.mm, pos, remaining, BLANK_MAGIC_CODE)
            else:
                try:
                    cur.write_at(pos, _SIZE_MAGIC.pack(remaining, BLANK_MAGIC_CODE))
                except OSError:
                    self._forget_last_segment(cur, pos)
                    raise
        return nxt

    def warm_ahead(self) -> None:
        """Write zeros over the current segment from the writer's next page on, up to ``warm_window``
        past the writer; the writer calls this once a record ends past ``warm_at``. Only this thread
        writes the log, and the zeros start after ``wrote_pos``, which the writer has already moved
        past its record, so they never land on a record. A failed write (disk full) only stops the
        warming of this segment: the puts report the disk."""
        seg = self.cur
        assert seg is not None
        if seg is not self._warm_seg or self._warmed_to < self.wrote_pos:
            self._warm_seg = seg
            self._warmed_to = -(-self.wrote_pos // _PAGE) * _PAGE
        chunk = min(self.warm_chunk, WARM_CHUNK)
        limit = min(self.wrote_pos + self.warm_window, seg.size)
        try:
            while self._warmed_to < limit:
                n = min(chunk, seg.size - self._warmed_to)
                seg.write_at(self._warmed_to, memoryview(_ZEROS)[:n])
                self._warmed_to += n
        except OSError as exc:
            log.warning("stopped writing ahead in %s: %s", seg.path.name, exc)
            self._warmed_to = seg.size
        # Again once the writer is a chunk further; with the whole segment warm, in the next one.
        if self._warmed_to >= seg.size:
            self.warm_at = seg.end
        else:
            self.warm_at = seg.start + self._warmed_to - self.warm_window + chunk

    def _new_segment(self, start: int) -> MappedFile:
        path = self.dir / file_name(start)
        seg = MappedFile.create(path, start, self.segment_size, RESERVE_STEP)
        self.segments.append(seg)
        self.starts.append(start)
        self.cur = seg
        self.wrote_pos = 0
        return seg

    def _forget_last_segment(self, cur: MappedFile, pos: int) -> None:
        """Undo ``_new_segment``: the writer goes on at *pos* in *cur*. New lists, as ``drop_head``
        makes; the flush thread never syncs the segment (nothing below ``max_offset`` is in it)."""
        seg = self.segments[-1]
        self.segments = self.segments[:-1]
        self.starts = self.starts[:-1]
        seg.close()
        seg.unlink()
        self.cur = cur
        self.wrote_pos = pos

    def drop_head(self, count: int) -> list[MappedFile]:
        """Forget the first *count* segments (never the one being written) and return them; the
        caller deletes and closes them. ``min_offset`` becomes the next segment's start."""
        count = min(count, len(self.segments) - 1)
        if count <= 0:
            return []
        dropped = self.segments[:count]
        # New lists, not ``del``: the flush thread may be iterating the old one right now
        # (``reversed()`` over a list shrinking at the front would skip segments it must sync).
        self.segments = self.segments[count:]
        self.starts = self.starts[count:]
        return dropped

    # -- reading -------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    def segment_for(self, offset: int) -> MappedFile | None:
        cur = self.cur
        if cur is not None and cur.start <= offset < cur.end:
            return cur
        idx = bisect.bisect_right(self.starts, offset) - 1
        if idx < 0:
            return None
        seg = self.segments[idx]
        return seg if offset < seg.end else None

    def record_at(self, offset: int) -> memoryview | None:
        """The whole record starting at *offset*, or None if no valid record starts there."""
        if offset < 0 or offset + MIN_RECORD_SIZE > self.max_offset:
            return None
        seg = self.segment_for(offset)
        if seg is None:
            return None
        rel = offset - seg.start
        if rel + MIN_RECORD_SIZE > seg.size:
            return None
        total, magic = _SIZE_MAGIC.unpack_from(seg.mm, rel)
        if (
            magic != MESSAGE_MAGIC_CODE
            or total < MIN_RECORD_SIZE
            or rel + total > seg.size
            or offset + total > self.max_offset
            # A record carries its own offset: this tells a record start from bytes inside a body.
            or _Q.unpack_from(seg.mm, rel + _PHYSICAL_OFFSET_AT)[0] != offset
        ):
            return None
        return seg.view[rel : rel + total]

    def store_timestamp_at(self, offset: int) -> int:
        """STORETIMESTAMP of the record at *offset* (-1 if its segment is gone)."""
        seg = self.segment_for(offset)
        if seg is None:
            return -1
        rel = offset - seg.start
        (sys_flag,) = _I.unpack_from(seg.mm, rel + _SYSFLAG_AT)
        at = rel + (68 if sys_flag & BORNHOST_V6_FLAG else 56)
        return int(_Q.unpack_from(seg.mm, at)[0])

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
        self.segments.clear()
        self.starts.clear()
        self.cur = None
