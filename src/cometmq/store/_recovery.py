"""Start-up recovery: find the end of the commit log and make the consume queues agree with it.

The algorithm is described in ``store.format`` (section *Recovery*) and in docs/store.md.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable

from cometmq.protocol.record import DecodedRecord

from ._commitlog import CommitLog
from ._consumequeue import ConsumeQueue, QueueTable
from ._dispatch import (
    Dispatched,
    RecordCrcCheck,
    Stop,
    TagsCodeOf,
    dispatch_unit,
    is_dispatched,
    walk_records,
)
from ._mappedfile import MappedFile
from .format import Checkpoint

__all__ = ["rebuild_queue", "recover"]

log = logging.getLogger("cometmq.store")

QueueKey = tuple[str, int]
# Gives a record of a BatchCQ topic its batch unit (WRITTEN or PRESENT); None when the record is not one
# (``MessageStore``).
BatchDispatch = Callable[[DecodedRecord], Dispatched | None]
Retire = Callable[[list[MappedFile]], None]


def recover(
    cl: CommitLog,
    queues: QueueTable,
    checkpoint: Checkpoint | None,
    crashed: bool,
    tags_code_of: TagsCodeOf,
    record_crc: RecordCrcCheck = RecordCrcCheck.OFF,
    dispatch_batch: BatchDispatch | None = None,
    batch_queues: int = 0,
) -> int:
    """Set the commit log's end and repair the consume queues. ``cl`` and ``queues`` are loaded.
    *dispatch_batch* gives the records of BatchCQ topics their batch units (true when it took the
    record); the caller trims the batch queues (*batch_queues* of them loaded) to the end found. Returns
    the store time of the log's last record (0 when it has none): every way through reads the segment
    holding it."""
    damaged = cl.damaged or any(cq.damaged for cq in queues.all_queues())
    if (
        not crashed
        and not damaged
        and checkpoint is not None
        and checkpoint.clean
        and _clean_end_plausible(cl, checkpoint)
    ):
        end = checkpoint.commitlog_flushed
        verified = _ScanStats()
        valid_end = _verify_last_segment(cl, queues, end, tags_code_of, verified, record_crc)
        if valid_end == end:
            cl.set_end(end)
            _trim_queues(queues, end, cl.min_offset)
            log.info("store opened after a clean shutdown; commit log ends at %d", end)
            return verified.last_store_timestamp
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
        return 0
    if crashed:
        log.warning("store was not shut down cleanly (abort file present); recovering")
    elif damaged:
        log.warning("store files are damaged; recovering")
    else:
        log.warning("no usable clean checkpoint; recovering as after a crash")
    start = dispatch_from = cl.min_offset
    # The checkpoint vouches for units of records below dispatch_safe; with no consume queue at
    # all, ordinary or batch, they were deleted (the way operators ask for a rebuild), so redo everything.
    queues_lost = (
        checkpoint is not None
        and checkpoint.dispatch_safe > cl.min_offset
        and not batch_queues
        and not queues.has_queues()
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
    end = _scan(cl, queues, start, dispatch_from, None, None, tags_code_of, stats, record_crc, dispatch_batch)
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
        "recovery: scanned commit log [%d, %d): %d records, %d consume-queue or batch units rewritten; "
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
    return stats.last_store_timestamp


class _ScanStats:
    __slots__ = ("gaps", "last_store_timestamp", "records", "redispatched")

    def __init__(self) -> None:
        self.records = 0
        self.redispatched = 0
        self.gaps: set[QueueKey] = set()
        self.last_store_timestamp = 0  # of the last record walked (store times never go back)


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
    dispatch_batch: BatchDispatch | None = None,
) -> int:
    """Verify records from *start* on, dispatching those from *dispatch_from* on to their queues;
    return the end of the valid log. With *only* set, dispatch just those queues (a rebuild) and
    stop at *stop*."""

    def on_record(rec: DecodedRecord) -> None:
        if only is None:
            stats.records += 1
            stats.last_store_timestamp = rec.store_timestamp
        if (
            rec.commitlog_offset >= dispatch_from
            and is_dispatched(rec.sys_flag)
            and (only is None or (rec.topic, rec.queue_id) in only)
        ):
            if dispatch_batch is not None and only is None:
                batch_done = dispatch_batch(rec)
                if batch_done is not None:
                    if batch_done is Dispatched.WRITTEN:
                        stats.redispatched += 1
                    return
            done, _ = dispatch_unit(queues, rec, only is not None, tags_code_of)
            if done is Dispatched.WRITTEN:
                stats.redispatched += 1
            elif done is Dispatched.GAP:
                stats.gaps.add((rec.topic, rec.queue_id))

    if not cl.segments:
        return start
    end = cl.segments[-1].end if stop is None else stop
    offset, why, problem = walk_records(cl, start, end, on_record, record_crc)
    if why is Stop.DAMAGED or why is Stop.MISFIT:
        seg = cl.segment_for(offset)
        where = f" ({seg.path.name})" if seg is not None else ""
        log.warning("recovery: commit log ends at %d%s: %s", offset, where, problem)
    return offset


def _trim_queues(queues: QueueTable, end: int, commitlog_min: int) -> int:
    """Trim the loaded queues to the recovered *end*; queues loaded later are trimmed then."""
    queues.stale_from = min(queues.stale_from, end)
    dropped = 0
    for cq in queues.all_queues():
        dropped += _trim_queue(cq, end)
        cq.adjust_min(commitlog_min)
    return dropped


def _trim_queue(cq: ConsumeQueue, end: int) -> int:
    """Drop trailing units that are holes or point at or past *end*. After the scan those form a
    suffix (everything pointing into the scanned range was verified)."""
    old_max = cq.max_offset
    dropped = cq.truncate_to_commitlog(end)
    if dropped:
        log.warning(
            "recovery: dropping %d unit(s) [%d, %d) of %s/%d: beyond the commit log's end",
            dropped,
            old_max - dropped,
            old_max,
            cq.topic,
            cq.queue_id,
        )
    return dropped


def _verify_last_segment(
    cl: CommitLog,
    queues: QueueTable,
    end: int,
    tags_code_of: TagsCodeOf,
    stats: _ScanStats,
    record_crc: RecordCrcCheck,
) -> int:
    """Where the valid records of the segment holding the log's last byte end (*end* if all are).

    A clean checkpoint says where the log ends, not that the bytes before it are still intact (a
    disk error, a bad copy, an editor); unchecked, a clean start would serve damaged records to
    clients. RocketMQ's normal recovery checks its last files the same way."""
    if end <= cl.min_offset:
        return end
    start = cl.starts[bisect.bisect_right(cl.starts, end - 1) - 1]
    return _scan(cl, queues, start, end, end, None, tags_code_of, stats, record_crc)


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


def rebuild_queue(
    cl: CommitLog, cq: ConsumeQueue, queues: QueueTable, tags_code_of: TagsCodeOf, retire: Retire
) -> None:
    """Rewrite a queue whose files were found damaged when it was loaded after start-up (queues
    load on first use) from the whole commit log; its old files go to *retire*."""
    log.warning("rebuilding consume queue %s/%d from the start of the commit log", cq.topic, cq.queue_id)
    cq.reset(0, retire)
    _scan(
        cl,
        queues,
        cl.min_offset,
        cl.min_offset,
        cl.max_offset,
        {(cq.topic, cq.queue_id)},
        tags_code_of,
        _ScanStats(),
    )
    cq.damaged = False
