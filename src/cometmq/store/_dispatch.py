"""The raw-record dispatcher: commit-log bytes checked record by record, each message record given its
consume-queue unit from the queue offset it carries.

Crash recovery (``_recovery``) and a slave's ``MessageStore.append_replica`` both run it: what a slave
accepts from its master is exactly what recovery keeps after a crash, so a kill -9 between two chunks
leaves the log at the end of the last record both would accept.
"""

from __future__ import annotations

import enum
import logging
import struct
from collections.abc import Callable
from typing import Final

from cometmq.errors import RecordError
from cometmq.protocol.record import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MIN_RECORD_SIZE,
    DecodedRecord,
    carries_record_crc,
    decode_record_at,
    record_crc_matches,
)

from ._commitlog import CommitLog
from ._consumequeue import ConsumeQueue, QueueTable
from ._mappedfile import MappedFile
from .format import BLANK_MIN_SIZE

__all__ = [
    "Dispatched",
    "RecordCrcCheck",
    "Stop",
    "TagsCodeOf",
    "dispatch_unit",
    "is_dispatched",
    "walk_records",
    "whole_records",
]

log = logging.getLogger("cometmq.store")

_SIZE_MAGIC: Final = struct.Struct(">iI")

TagsCodeOf = Callable[[DecodedRecord], int]
Retire = Callable[[list[MappedFile]], None]


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


class Stop(enum.Enum):
    """Why ``walk_records`` stopped where it did."""

    END = "end"  # it reached the end it was given
    ZEROS = "zeros"  # zero bytes where a record would start: where a log normally ends
    PARTIAL = "partial"  # a record, or a segment's blank filler, whose bytes are not all there yet
    DAMAGED = "damaged"  # bytes that are not a valid record (the walk's third result says why)
    MISFIT = "misfit"  # a record or blank filler that does not end where its segment allows (says why)


def walk_records(
    cl: CommitLog,
    start: int,
    stop: int,
    on_record: Callable[[DecodedRecord], None],
    record_crc: RecordCrcCheck = RecordCrcCheck.OFF,
) -> tuple[int, Stop, str]:
    """Check the commit log's records from *start* (a record boundary) on, calling *on_record* for
    each valid message record. Bytes at or past *stop* count as not written yet: a record reaching
    past it is PARTIAL, and a segment's blank filler moves the walk to the next segment only once
    *stop* reaches the segment's end. Returns where the valid records end, why the walk stopped
    there and, for DAMAGED and MISFIT, what is wrong.

    A record must have the message magic, a TOTALSIZE that fits its segment, lengths that add up,
    a matching body CRC (and record CRC, per *record_crc*) and PHYSICALOFFSET equal to its position.
    """
    pos = start
    while pos < stop:
        seg = cl.segment_for(pos)
        if seg is None:
            return pos, Stop.ZEROS, ""
        rel = pos - seg.start
        view = seg.view
        size = seg.size
        avail = min(size, stop - seg.start)
        while True:
            left = size - rel
            if left < BLANK_MIN_SIZE:
                break  # too short even for a blank filler: the segment is complete
            if rel >= avail:
                return pos, Stop.END, ""
            if avail - rel < BLANK_MIN_SIZE:
                return pos, Stop.PARTIAL, ""
            total, magic = _SIZE_MAGIC.unpack_from(view, rel)
            if magic == BLANK_MAGIC_CODE:
                if total != left:
                    why = f"a blank filler of {total} bytes, {left} bytes before the end of {seg.path.name}"
                    return pos, Stop.MISFIT, why
                break
            if magic != MESSAGE_MAGIC_CODE:
                if magic == MESSAGE_MAGIC_CODE_V2:
                    why = "a record in RocketMQ 5's message format V2 (topics over 127 bytes), not held here"
                    return pos, Stop.DAMAGED, why
                if not total and not magic:
                    return pos, Stop.ZEROS, ""
                return pos, Stop.DAMAGED, f"no record there (size {total}, magic code 0x{magic:08X})"
            if total > left:
                why = f"a record of {total} bytes, {left} bytes before the end of {seg.path.name}"
                return pos, Stop.MISFIT, why
            if total < MIN_RECORD_SIZE:
                return pos, Stop.DAMAGED, f"a record of {total} bytes, less than any record"
            if total > avail - rel:
                return pos, Stop.PARTIAL, ""
            try:
                rec = decode_record_at(view, rel, rel + total, check_crc=True)
            except RecordError as exc:
                return pos, Stop.DAMAGED, f"{exc} (in {seg.path.name})"
            crc_problem = record_crc.problem(view, rel, rec)
            if crc_problem is not None:
                return pos, Stop.DAMAGED, crc_problem
            if rec.commitlog_offset != pos:
                return pos, Stop.DAMAGED, f"the record there claims offset {rec.commitlog_offset}"
            on_record(rec)
            pos += total
            rel += total
        if stop < seg.end:
            return pos, Stop.PARTIAL, ""  # the rest of the segment (its blank filler) is still coming
        pos = seg.end
    return pos, Stop.END, ""


def whole_records(data: bytearray, room: int) -> int:
    """How many leading bytes of *data*, which starts at a record boundary *room* bytes before its
    segment's end, are whole records or a whole blank filler; the rest is the start of one still
    coming. Bytes that cannot start a record count as whole: ``walk_records`` then says what is
    wrong with them."""
    pos = 0
    size = len(data)
    while pos < size:
        left = room - pos
        if left < BLANK_MIN_SIZE or size - pos < BLANK_MIN_SIZE:
            return size if left < BLANK_MIN_SIZE else pos
        total, magic = _SIZE_MAGIC.unpack_from(data, pos)
        if magic == BLANK_MAGIC_CODE:
            if total != left:
                return size
        elif magic != MESSAGE_MAGIC_CODE or not MIN_RECORD_SIZE <= total <= left:
            return size
        if pos + total > size:
            return pos
        pos += total
    return size


class Dispatched(enum.Enum):
    """What ``dispatch_unit`` did with a record."""

    WRITTEN = "written"  # its unit was appended
    PRESENT = "present"  # its queue already had that very unit
    GAP = "gap"  # its queue lacks the units before it (not rebuilding): nothing written
    UNUSABLE = "unusable"  # a topic name or queue id the store cannot hold: nothing written


def dispatch_unit(
    queues: QueueTable,
    rec: DecodedRecord,
    rebuilding: bool,
    tags_code_of: TagsCodeOf,
    retire: Retire | None = None,
) -> tuple[Dispatched, ConsumeQueue | None]:
    """Give *rec* (a message record that gets a unit, ``is_dispatched``) its consume-queue unit at the
    queue offset it carries, and return what was done and the queue.

    A queue whose units differ from the log from that offset on is cut there and rewritten; a record
    beyond its queue's end starts the queue there when *rebuilding* (the log no longer holds the
    queue's earlier records, as for a slave's first records), and is a GAP otherwise. Files dropped on
    the way go to *retire* (closed where no sync can be using them) or are closed at once.
    ``OSError`` when a queue file cannot be created or grown (disk full): nothing written then.
    """
    topic = queues.topic(rec.topic)
    if topic is None or rec.queue_id < 0:
        log.warning("record at %d has an unusable topic/queue; not indexed", rec.commitlog_offset)
        return Dispatched.UNUSABLE, None
    cq = queues.queue(topic, rec.queue_id)
    q = rec.queue_offset
    if q < cq.max_offset:
        unit = cq.unit(q)
        if unit is not None and unit[0] == rec.commitlog_offset and unit[1] == rec.total_size:
            return Dispatched.PRESENT, cq
        # Missing (a hole) or different: everything from here is rebuilt from the log.
        if q < cq.min_offset:
            cq.reset(q, retire)
        else:
            cq.truncate(q, retire)
    elif q > cq.max_offset:
        if not rebuilding:
            return Dispatched.GAP, cq
        # The log no longer holds this queue's earlier records: the queue starts here.
        cq.reset(q, retire)
    cq.prepare(1)
    cq.append(rec.commitlog_offset, rec.total_size, tags_code_of(rec))
    return Dispatched.WRITTEN, cq
