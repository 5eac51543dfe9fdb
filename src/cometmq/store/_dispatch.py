"""The raw-record dispatcher: commit-log bytes checked record by record, each message record given its
consume-queue unit from the queue offset it carries.

Crash recovery (``_recovery``) and a slave's ``MessageStore.append_replica`` both run it: what a slave
accepts from its master is exactly what recovery keeps after a crash, so a kill -9 between two chunks
leaves the log at the end of the last record both would accept.
"""

from __future__ import annotations

import enum
import logging
import re
import struct
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from typing import Final

from cometmq.errors import RecordError
from cometmq.protocol.record import (
    BLANK_MAGIC_CODE,
    INNER_BATCH_FLAG,
    MAX_TOPIC_SIZE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MIN_RECORD_SIZE,
    DecodedRecord,
    carries_record_crc,
    crc32,
    decode_record_at,
    record_crc_matches,
)
from cometmq.protocol.taghash import java_string_hash

from ._commitlog import CommitLog
from ._consumequeue import ConsumeQueue, QueueTable, TopicQueues
from ._mappedfile import MappedFile
from .format import BLANK_MIN_SIZE, CQ_UNIT

__all__ = [
    "Dispatched",
    "PlainRecords",
    "RecordCrcCheck",
    "Stop",
    "TagsCodeOf",
    "dispatch_unit",
    "is_dispatched",
    "scan_plain_records",
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


# The head fields dispatching a record reads, the others skipped: TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID,
# QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, STORETIMESTAMP, BODYLENGTH (IPv4 hosts: SYSFLAG & 0x30 clear).
_PLAIN_HEAD: Final = struct.Struct(">iIii4xqqi8x8xq8x12xi")
_PLAIN_HEAD_SIZE: Final = _PLAIN_HEAD.size  # 88
_PROPERTIES_LENGTH: Final = struct.Struct(">h")
_BODY_CRC_MASK: Final = 0x7FFFFFFF
_IPV6_HOSTS: Final = 0x30
_pack_unit: Final = CQ_UNIT.pack


@dataclass(slots=True)
class PlainRecords:
    """What ``scan_plain_records`` found: nothing of it is written yet."""

    end: int  # where the records it took end: the first record it left to ``walk_records``
    units: dict[ConsumeQueue, bytearray] = field(default_factory=dict)  # packed, in queue order
    tags_codes: dict[ConsumeQueue, list[int]] = field(default_factory=dict)
    index_entries: list[tuple[str, str, str, int, int]] = field(default_factory=list)  # add_records
    last_store_timestamp: int = 0


# A pair named TAGS, KEYS or UNIQ_KEY: one that starts the text or follows a \x02, its value up to the
# next \x02 (decode_properties splits there, then at the first \x01).
_find_indexed: Final = re.compile("(?:^|\x02)(TAGS|KEYS|UNIQ_KEY)\x01([^\x02]*)").findall


def indexed_properties(properties: str) -> tuple[str, str, str]:
    """TAGS, UNIQ_KEY and KEYS as ``decode_properties(properties).get(name, "")`` gives them (a name
    given twice keeps its last value): one regex scan in C rather than every pair decoded."""
    tags = uniq_key = keys = ""
    for name, value in _find_indexed(properties):
        if name == "TAGS":
            tags = value
        elif name == "KEYS":
            keys = value
        else:
            uniq_key = value
    return tags, uniq_key, keys


def scan_plain_records(
    cl: CommitLog,
    start: int,
    stop: int,
    queues: QueueTable,
    general_topics: Container[str],
    batch_topics: Container[str] = (),
) -> PlainRecords:
    """The consume-queue units and index entries of the commit log's records from *start* (a
    record boundary) up to *stop*, gathered per queue, as far as the records are the plain case: a
    valid message record with IPv4 hosts, in the segment holding *start*, not of *general_topics*,
    whose unit is the next of its queue (or a transaction record that gets none), not of *batch_topics*
    (whose records get batch units) and not an inner batch. The first record
    that is not, or is not valid, ends the scan: ``walk_records`` and ``dispatch_unit`` take it from
    there and say what is wrong. Checks what ``walk_records`` checks with the record CRC off.

    The slave's hot path (bench/replication.py, the new slave's copy): per record, one struct read of
    the fields needed, the body CRC on a view, TAGS, UNIQ_KEY and KEYS found by one regex scan.
    """
    found = PlainRecords(start)
    seg = cl.segment_for(start)
    if seg is None:
        return found
    view = seg.view
    base = seg.start
    rel = start - base
    avail = min(seg.size, stop - base)
    units = found.units
    tags_codes = found.tags_codes
    index_entries = found.index_entries
    topics: dict[bytes, TopicQueues | None] = {}
    last_ts = 0
    unpack_head = _PLAIN_HEAD.unpack_from
    unpack_properties_length = _PROPERTIES_LENGTH.unpack_from
    while avail - rel >= _PLAIN_HEAD_SIZE:
        total, magic, body_crc, queue_id, queue_offset, offset, sys_flag, store_ts, body_len = unpack_head(
            view, rel
        )
        end = rel + total
        if (
            magic != MESSAGE_MAGIC_CODE
            or sys_flag & _IPV6_HOSTS
            or not MIN_RECORD_SIZE <= total <= avail - rel
            or offset != base + rel
            or body_len < 0
        ):
            break
        at = rel + _PLAIN_HEAD_SIZE + body_len
        if at + 3 > end:
            break
        topic_at = at + 1
        properties_at = topic_at + view[at]
        if properties_at + 2 > end:
            break
        properties_len = unpack_properties_length(view, properties_at)[0]
        properties_at += 2
        if properties_at + properties_len != end:
            break
        if crc32(view[rel + _PLAIN_HEAD_SIZE : at]) & _BODY_CRC_MASK != body_crc:
            break
        name = bytes(view[topic_at : properties_at - 2])
        try:
            topic = topics[name]
        except KeyError:
            if len(name) > MAX_TOPIC_SIZE:
                break
            try:
                text = name.decode()
            except UnicodeDecodeError:
                break
            plain = text not in general_topics and text not in batch_topics
            topic = topics[name] = queues.topic(text) if plain else None
        if properties_len:
            try:
                properties = str(view[properties_at:end], "utf-8")
            except UnicodeDecodeError:
                break
        else:
            properties = ""
        tx = sys_flag & 0xC
        if tx == 0x4 or tx == 0xC:  # PREPARED or ROLLBACK: no unit (is_dispatched)
            rel = end
            continue
        if topic is None or queue_id < 0 or sys_flag & INNER_BATCH_FLAG:
            break
        cq = topic.queues.get(queue_id)
        if cq is None:
            cq = queues.queue(topic, queue_id)
        codes = tags_codes.get(cq)
        if codes is None:
            if queue_offset != cq.max_offset:
                break
            codes = tags_codes[cq] = []
            pending = units[cq] = bytearray()
        elif queue_offset != cq.max_offset + len(codes):
            break
        else:
            pending = units[cq]
        tags_code = 0
        if properties:
            tag, uniq_key, keys = indexed_properties(properties)
            if tag:
                tags_code = java_string_hash(tag)
            if uniq_key or keys:
                index_entries.append((topic.name, uniq_key, keys, offset, store_ts))
        pending += _pack_unit(offset, total, tags_code)
        codes.append(tags_code)
        if store_ts > last_ts:
            last_ts = store_ts
        rel = end
    found.end = base + rel
    found.last_store_timestamp = last_ts
    return found
