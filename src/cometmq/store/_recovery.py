"""Start-up recovery: find the end of the commit log and make the consume queues agree with it.

The algorithm is described in ``store.format`` (section *Recovery*) and in docs/store.md.
"""

from __future__ import annotations

import bisect
import enum
import logging
import struct
from collections.abc import Callable
from typing import Final

from cometmq.errors import RecordError
from cometmq.protocol.record import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    DecodedRecord,
    carries_record_crc,
    decode_record_at,
    record_crc_matches,
)

from ._commitlog import CommitLog
from ._consumequeue import ConsumeQueue, QueueTable
from .format import BLANK_MIN_SIZE, Checkpoint

__all__ = ["recover"]

log = logging.getLogger("cometmq.store")

_SIZE_MAGIC: Final = struct.Struct(">iI")

TagsCodeOf = Callable[[DecodedRecord], int]
QueueKey = tuple[str, int]


class RecordCrcCheck(enum.Enum):
    """What recovery makes of the record CRC (docs/store.md, "Record CRC")."""

    OFF = "off"  # neither key set: a __CRC32# property is a property like any other (as in RocketMQ)
    WHEN_PRESENT = "when present"  # enabledAppendPropCRC: a record that carries one must match it
    REQUIRED = "required"  # forceVerifyPropCRC: and a record without one is damaged

    @classmethod
    def of(cls, append: bool, force: bool) -> RecordCrcCheck:
        return cls.REQUIRED if force else cls.WHEN_PRESENT if append else cls.OFF

    def problem(self, view: memoryview, pos: int, rec: DecodedRecord) -> str | None:
        """Why the record at ``view[pos:]`` fails this check, or None."""
        if self is RecordCrcCheck.OFF:
            return None
        if carries_record_crc(rec.properties):
            return None if record_crc_matches(view, pos, rec.total_size) else "record CRC mismatch"
        return "record without a record CRC (forceVerifyPropCRC)" if self is RecordCrcCheck.REQUIRED else None


def is_dispatched(sys_flag: int) -> bool:
    """PREPARED (0x4) and ROLLBACK (0xC) transaction records get no consume-queue unit."""
    tx = sys_flag & 0xC
    return tx != 0x4 and tx != 0xC


def recover(
    cl: CommitLog,
    queues: QueueTable,
    checkpoint: Checkpoint | None,
    crashed: bool,
    tags_code_of: TagsCodeOf,
    record_crc: RecordCrcCheck = RecordCrcCheck.OFF,
) -> None:
    """Set the commit log's end and repair the consume queues. ``cl`` and ``queues`` are loaded."""
    damaged = cl.damaged or any(cq.damaged for cq in queues.all_queues())
    if (
        not crashed
        and not damaged
        and checkpoint is not None
        and checkpoint.clean
        and _clean_end_plausible(cl, checkpoint)
    ):
        end = checkpoint.commitlog_flushed
        valid_end = _verify_last_segment(cl, queues, end, tags_code_of, record_crc)
        if valid_end == end:
            cl.set_end(end)
            _trim_queues(queues, end, cl.min_offset)
            log.info("store opened after a clean shutdown; commit log ends at %d", end)
            return
        log.warning(
            "the clean-shutdown checkpoint ends the commit log at %d, but its valid records end at %d",
            end,
            valid_end,
        )
        damaged = True

    if not crashed and checkpoint is None and not cl.segments:
        log.info("creating a new store in %s", cl.dir.parent)
        cl.set_end(0)
        _trim_queues(queues, 0, 0)  # consume queues without a log point at nothing
        return
    if crashed:
        log.warning("store was not shut down cleanly (abort file present); recovering")
    elif damaged:
        log.warning("store files are damaged; recovering")
    else:
        log.warning("no usable clean checkpoint; recovering as after a crash")
    start = dispatch_from = cl.min_offset
    # The checkpoint vouches for units of records below dispatch_safe; with no consume queue at
    # all they were deleted (the way operators ask for a rebuild), so redo everything.
    queues_lost = (
        checkpoint is not None and checkpoint.dispatch_safe > cl.min_offset and not queues.all_queues()
    )
    if (
        checkpoint is not None
        and not damaged
        and not queues_lost
        and cl.segments
        and cl.min_offset <= checkpoint.dispatch_safe <= cl.segments[-1].end
    ):
        # Records below dispatch_safe are on disk with their units: verify from the start of its
        # segment (cheap insurance against a checkpoint that is off), re-dispatch only from it on.
        # Not re-dispatching older records is also what keeps deleted topics deleted.
        dispatch_from = checkpoint.dispatch_safe
        start = cl.starts[bisect.bisect_right(cl.starts, dispatch_from) - 1]
    stats = _ScanStats()
    end = _scan(cl, queues, start, dispatch_from, None, None, tags_code_of, stats, record_crc)
    if stats.gaps:
        # Those queues lack units for records before ``dispatch_from`` (their files were lost):
        # rebuild them from the first record in the log.
        log.warning(
            "recovery: rebuilding consume queues %s from the start of the commit log", sorted(stats.gaps)
        )
        for topic, queue_id in stats.gaps:
            t = queues.topic(topic)
            if t is not None:
                queues.queue(t, queue_id).reset(0)
        _scan(cl, queues, cl.min_offset, cl.min_offset, end, set(stats.gaps), tags_code_of, stats)
    old_segments = len(cl.segments)
    cl.set_end(end)
    dropped_units = _trim_queues(queues, end, cl.min_offset)
    log.warning(
        "recovery: scanned commit log [%d, %d): %d records, %d consume-queue units rewritten; "
        "tail after %d zeroed, %d later segment(s) deleted, %d dangling consume-queue unit(s) dropped",
        start,
        end,
        stats.records,
        stats.redispatched,
        end,
        old_segments - len(cl.segments),
        dropped_units,
    )
    # Make the repaired state durable before the checkpoint that vouches for it is written.
    for seg in cl.segments:
        if seg.end > start:
            seg.sync()
    for cq in queues.all_queues():
        cq.sync_all()


class _ScanStats:
    __slots__ = ("gaps", "records", "redispatched")

    def __init__(self) -> None:
        self.records = 0
        self.redispatched = 0
        self.gaps: set[QueueKey] = set()


def _scan(
    cl: CommitLog,
    queues: QueueTable,
    start: int,
    dispatch_from: int,
    stop: int | None,
    only: set[QueueKey] | None,
    tags_code_of: TagsCodeOf,
    stats: _ScanStats,
    record_crc: RecordCrcCheck = RecordCrcCheck.OFF,
) -> int:
    """Verify records from *start* on, dispatching those from *dispatch_from* on to their queues;
    return the end of the valid log. With *only* set, dispatch just those queues (a rebuild) and
    stop at *stop*."""
    offset = start
    idx = bisect.bisect_right(cl.starts, start) - 1
    while 0 <= idx < len(cl.segments):
        seg = cl.segments[idx]
        if seg.start != offset and offset != start:
            return offset  # not contiguous (cannot happen after CommitLog.load)
        rel = offset - seg.start
        view = seg.view
        size = seg.size
        while True:
            if stop is not None and offset >= stop:
                return offset
            if size - rel < BLANK_MIN_SIZE:
                break  # no record fits here: the segment is complete
            total, magic = _SIZE_MAGIC.unpack_from(view, rel)
            if magic == BLANK_MAGIC_CODE:
                if total != size - rel:
                    log.warning(
                        "recovery: commit log ends at %d (%s): blank record of %d bytes does not reach "
                        "the segment's end",
                        offset,
                        seg.path.name,
                        total,
                    )
                    return offset
                break
            if magic != MESSAGE_MAGIC_CODE:
                if total or magic:  # zeros are the log's normal end; anything else is damage
                    log.warning(
                        "recovery: commit log ends at %d (%s): no record there (size %d, magic code 0x%08X)",
                        offset,
                        seg.path.name,
                        total,
                        magic,
                    )
                return offset
            try:
                rec = decode_record_at(view, rel, size, check_crc=True)
            except RecordError as exc:
                log.warning("recovery: commit log ends at %d (%s): %s", offset, seg.path.name, exc)
                return offset
            crc_problem = record_crc.problem(view, rel, rec)
            if crc_problem is not None:
                log.warning("recovery: commit log ends at %d (%s): %s", offset, seg.path.name, crc_problem)
                return offset
            if rec.commitlog_offset != offset:
                log.warning(
                    "recovery: commit log ends at %d: record there claims offset %d",
                    offset,
                    rec.commitlog_offset,
                )
                return offset
            if only is None:
                stats.records += 1
            if (
                offset >= dispatch_from
                and is_dispatched(rec.sys_flag)
                and (only is None or (rec.topic, rec.queue_id) in only)
            ):
                _dispatch(queues, rec, only is not None, tags_code_of, stats)
            offset += total
            rel += total
        offset = seg.end
        idx += 1
    return offset


def _dispatch(
    queues: QueueTable, rec: DecodedRecord, rebuilding: bool, tags_code_of: TagsCodeOf, stats: _ScanStats
) -> None:
    topic = queues.topic(rec.topic)
    if topic is None or rec.queue_id < 0:
        log.warning("recovery: record at %d has an unusable topic/queue; not indexed", rec.commitlog_offset)
        return
    cq = queues.queue(topic, rec.queue_id)
    q = rec.queue_offset
    if q < cq.max_offset:
        unit = cq.unit(q)
        if unit is not None and unit[0] == rec.commitlog_offset and unit[1] == rec.total_size:
            return
        # Missing (a hole) or different: everything from here is rebuilt from the log.
        if q < cq.min_offset:
            cq.reset(q)
        else:
            cq.truncate(q)
    elif q > cq.max_offset:
        if not rebuilding:
            stats.gaps.add((rec.topic, rec.queue_id))
            return
        # The log no longer holds this queue's earlier records: the queue starts here.
        cq.reset(q)
    cq.prepare(1)
    cq.append(rec.commitlog_offset, rec.total_size, tags_code_of(rec))
    stats.redispatched += 1


def _trim_queues(queues: QueueTable, end: int, commitlog_min: int) -> int:
    dropped = 0
    for cq in queues.all_queues():
        dropped += _trim_queue(cq, end)
        cq.adjust_min(commitlog_min)
    return dropped


def _trim_queue(cq: ConsumeQueue, end: int) -> int:
    """Drop trailing units that are holes or point at or past *end*. After the scan those form a
    suffix (everything pointing into the scanned range was verified), so bisect for it."""
    lo, hi = cq.min_offset, cq.max_offset
    while lo < hi:
        mid = (lo + hi) // 2
        unit = cq.unit(mid)
        if unit is None or unit[1] <= 0 or unit[0] + unit[1] > end:
            hi = mid
        else:
            lo = mid + 1
    dropped = cq.max_offset - lo
    if dropped:
        log.warning(
            "recovery: dropping %d unit(s) [%d, %d) of %s/%d: beyond the commit log's end",
            dropped,
            lo,
            cq.max_offset,
            cq.topic,
            cq.queue_id,
        )
        cq.truncate(lo)
    return dropped


def _verify_last_segment(
    cl: CommitLog, queues: QueueTable, end: int, tags_code_of: TagsCodeOf, record_crc: RecordCrcCheck
) -> int:
    """Where the valid records of the segment holding the log's last byte end (*end* if all are).

    A clean checkpoint says where the log ends, not that the bytes before it are still intact (a
    disk error, a bad copy, an editor); unchecked, a clean start would serve damaged records to
    clients. RocketMQ's normal recovery checks its last files the same way."""
    if end <= cl.min_offset:
        return end
    start = cl.starts[bisect.bisect_right(cl.starts, end - 1) - 1]
    return _scan(cl, queues, start, end, end, None, tags_code_of, _ScanStats(), record_crc)


def _clean_end_plausible(cl: CommitLog, cp: Checkpoint) -> bool:
    """A clean checkpoint's end must lie inside the log with nothing written after it."""
    end = cp.commitlog_flushed
    if not cl.segments:
        return end == 0
    if not cl.min_offset <= end <= cl.segments[-1].end:
        return False
    seg = cl.segment_for(end)
    if seg is None:  # exactly the end of the last segment
        return True
    rel = end - seg.start
    return not any(seg.view[rel : rel + 4])
