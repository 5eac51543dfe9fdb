"""On-disk format of the CometMQ store (same layout as RocketMQ 4.x, so its operators feel at home).

Everything is big-endian. ``i``/``q`` are signed 32/64-bit integers.

Directory layout
================

::

    <root>/commitlog/<20-digit start offset>                   commit-log segments
    <root>/consumequeue/<topic>/<queueId>/<20-digit start byte>  consume-queue files
    <root>/checkpoint                                           recovery bookkeeping (below)
    <root>/index/<yyyyMMddHHmmssSSS>                            index files (below)
    <root>/abort                                                exists while the store runs
    <root>/lock                                                 locked (flock) while a store runs; its pid
    <root>/epochFileCheckpoint                                  the epoch history (below), with a .bak

File names are the decimal start offset zero-padded to 20 digits (``00000000001073741824``).

Commit log
==========

The commit log is one logical byte stream of message records, starting at offset 0 and cut into
segments of ``mapped_file_size_commitlog`` bytes (1 GiB by default). Segment *k* holds offsets
``[start_k, start_k + size_k)`` and ``start_{k+1} = start_k + size_k``. A segment is created with
``ftruncate`` to its full size (sparse), then memory-mapped; unwritten bytes read as zero.

Each message is one record in the layout of ``cometmq.protocol.record`` (docs/protocol.md#record), always with
IPv4 hosts: TOTALSIZE, MAGICCODE 0xDAA320A7, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET,
SYSFLAG, BORNTIMESTAMP, BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES, PREPARED_TX_OFFSET,
BODYLENGTH+BODY, TOPICLENGTH(1)+TOPIC, PROPERTIESLENGTH(2)+PROPERTIES. PHYSICALOFFSET equals the
record's own commit-log offset, which recovery uses to tell a real record start from stale bytes.

A record never spans two segments, and at least 8 bytes always stay free behind the last record of a
segment. When the next record does not fit, the rest of the segment becomes a *blank* record::

    0  i  TOTALSIZE   = bytes from here to the segment's end
    4  i  MAGICCODE   = 0xCBD43194
    8  ... whatever (zero)

and the record goes to the start of the next segment. Store timestamps never decrease along the
log while the store runs (a clock stepping back repeats the last timestamp), which keeps the time
search monotonic.

Transaction records of type PREPARED (``sys_flag & 0xC == 0x4``) and ROLLBACK (``0xC``) are stored
with QUEUEOFFSET 0 and get no consume-queue unit, as in RocketMQ.

Consume queue
=============

One per (topic, queueId): an array of 20-byte units; the unit's index is the *queue offset*::

    0   q  commit-log offset of the record
    8   i  record size (TOTALSIZE)
    12  q  tags code: Java String.hashCode of the TAGS property (0 if none), or, in
           SCHEDULE_TOPIC_XXXX, the delivery time in ms (store time + delay of the DELAY level)

Files hold ``mapped_file_size_consume_queue`` bytes (300 000 units, a multiple of 20) and are
named by their start *byte* offset (``unit index * 20``). A unit is valid iff its size is > 0;
the queue's max offset (next unit to write) is one past the last valid unit. Units of one queue
point at strictly increasing commit-log offsets. A queue may begin mid-file, its first file zero before its
first unit (a slave's queue begins at the queue offset of its first record): its min offset is
that first unit.

Batch consume queue
===================

The queues of a topic whose ``queue.type`` attribute is ``BatchCQ`` live under
``<root>/batchconsumequeue/<topic>/<queueId>/`` (RocketMQ 5's BatchConsumeQueue), as arrays of 46-byte
units, one per commit-log record, each covering the queue offsets of the messages that record holds::

    0   q  commit-log offset of the record
    8   i  record size (TOTALSIZE)
    12  q  tags code of the record (its own TAGS property; an inner batch normally has none: 0)
    20  q  store time of the record, ms
    28  q  base queue offset: the queue offset of the record's first message
    36  h  message count: the record's INNER_NUM for an inner batch, else 1
    38  i  compacted offset, -1 (unused, as RocketMQ writes it)
    42  i  reserved, 0

Files hold 300 000 units (13 800 000 bytes) and are named by their start byte offset. A unit is valid
iff offset >= 0, size > 0, base >= 0 and count > 0, and the units of a queue cover consecutive offsets
(each base is the previous base plus its count): the queue's min offset is its first unit's base, its
max offset the last unit's base plus count. A queue offset inside a unit is found by binary search over
the bases. The record of an inner batch is stored with SYSFLAG bits INNER_BATCH (0x80) and NEED_UNWRAP
(0x40), QUEUEOFFSET = the base, and the properties INNER_NUM (the count) and INNER_BASE (the base); its
body is the batch as the producer sent it (``cometmq.protocol.batch``), each message in it carrying
its own flag, body and properties.

Checkpoint
==========

``<root>/checkpoint`` is a 36-byte file, rewritten in place (``pwrite`` + ``fdatasync``)::

    0   4s  magic b"CMQK"
    4   H   format version = 1
    6   H   flags: bit 0 = written by a clean shutdown
    8   q   commitlog_flushed: commit-log bytes below this offset are on disk. At a clean
            shutdown it is exactly the end of the log.
    16  q   dispatch_safe: every record below this offset has its consume-queue unit on disk
    24  q   time of writing, ms since the epoch (informational)
    32  I   zlib.crc32 of bytes 0..31 (a torn write reads as "no checkpoint")

The flush thread writes it after each consume-queue flush (every second) with the clean flag off;
shutdown writes it with the flag on after flushing everything. ``abort`` is created (and fsynced)
at start and removed after that final checkpoint.

Index
=====

Maps ``<topic>#<UNIQ_KEY>`` and ``<topic>#<each space-separated KEYS entry>`` of every dispatched
record to its commit-log offset (what QUERY_MESSAGE searches). Prepared and rolled-back transaction
records are not indexed. Files live in ``<root>/index/`` and are named ``yyyyMMddHHmmssSSS`` like
RocketMQ's, but by their creation time in UTC (RocketMQ uses local time, which goes back an hour
when daylight saving ends), and never before an existing name (a clash or a clock stepping back
adds milliseconds): name order is creation order, which is the order of their entries. Each file
holds at most ``capacity`` entries (``max_index_num``, 20 000 000 by default: a 240 MB sparse file)
and is ``64 + 12 * capacity`` bytes::

    0   4s  magic b"CMQI"
    4   H   format version = 1
    6   H   flags, 0
    8   i   capacity: number of entry slots
    12  i   count: entries [0, count) are valid and on disk
    16  q   begin timestamp: smallest STORETIMESTAMP of the entries' records, ms (0 when empty)
    24  q   end timestamp: largest STORETIMESTAMP, ms (0 when empty)
    32  q   begin offset: commit-log offset of entry 0's record (0 when empty)
    40  q   end offset: commit-log offset of entry count-1's record (0 when empty)
    48  q   indexed to: every record of the commit log below this offset has all its entries in
            this file or an earlier one (0 until the flush thread first writes the header)
    56  I   zlib.crc32 of bytes 0..55
    60  4x  zero
    64          capacity x  I   key hashes: zlib.crc32 of the UTF-8 ``topic#key``
    64 + 4 * capacity  capacity x  q   commit-log offsets, same order

Entry *i* is (hash *i*, offset *i*). Entries are appended in commit-log order, so offsets never
decrease along a file or from one file to the next; the keys of one record are consecutive entries
(the unique key first, then KEYS in order) and may continue in the next file. A lookup scans the hash
region for the 4 bytes of the wanted hash (``mmap.rfind``, at C speed; only 4-aligned hits count),
fetches each record, and keeps it only if its topic, key and store time really match (crc32 values
collide). Unlike RocketMQ's index (hash slots chaining 20-byte entries with a time delta), there is
nothing to update but the two regions, which keeps the put path cheap in Python.

Besides the header a new file gets when it is created (count 0, indexed to 0), headers are written
only by the flush thread, in file order, after the entries they count were fdatasynced (and are
fdatasynced themselves), so whatever header is found on disk - after kill -9 or a power loss -
describes entries that are on disk. The newest file's *indexed to* is the commit log's end as the
flush thread saw it before counting the entries (index entries are written before the log's end
moves past their record); an older file's is its own end offset. If a new file cannot be created
(disk full), records go unindexed until one can be (tried again every few seconds), and *indexed to*
stays at the first record left (partly) unindexed, so the next start indexes it and all after it. A
store always has at least one index file, so *indexed to* advances even while no
message carries a key. The headers are synced before the commit log, so after a power loss they
may count entries for records the recovered log no longer has.

Epoch file
==========

``<root>/epochFileCheckpoint`` is RocketMQ 5's epoch file: which mastership (epoch) began writing at
which commit-log offset. ASCII lines, each ending in ``\n``::

    <number of entries>
    <CRC-32 of the entry lines, newlines included, & 0x7FFFFFFF (Java's UtilAll.crc32); 0: unchecked>
    <epoch>-<start offset>        one line per entry, oldest first

Epochs increase along the file; start offsets never decrease (an epoch that wrote nothing shares
its start with the next). An entry's stretch of the log ends where the next one starts, the last
one's at the log's end. The file is replaced atomically (a temporary file renamed over it), the
previous content kept as ``epochFileCheckpoint.bak``, which is read when the file is torn or
damaged. At start, entries beginning beyond the recovered log's end are dropped (a truncation a
crash interrupted after the log was cut); one beginning exactly at the end is kept.

Truncation
==========

A slave whose tail its new master does not have cuts its store back to a record boundary: first
the checkpoint is lowered to the cut (everything before it synced), then the 8 bytes at the cut are
zeroed and synced, so that from then on recovery's scan ends the log there; then later segments are
deleted, newest first, and the rest of the cut's segment is zeroed; consume queues drop the units
of the records cut (their max offsets go back), the index the entries, and last the epoch file the
entries beginning after the cut. A crash before the 8 bytes reach the disk recovers the store as it
was; one after recovers it cut, recovery doing what the truncation had not done yet.

Recovery
========

Clean start (no ``abort`` and the checkpoint's clean flag set): the log ends at
``commitlog_flushed``; consume queues are taken as they are. The records of the segment holding the
log's last byte are checked first, as a crash recovery checks them; if one fails, the start is a
crash recovery from the first segment instead.

Otherwise (a crash): scan the commit log from the start of the segment holding ``dispatch_safe``
(from the first segment when there is no valid checkpoint or no consume queue at all). Each record
must have the message magic, a TOTALSIZE that fits its segment, lengths that add up to TOTALSIZE,
PHYSICALOFFSET equal to its position and a matching body CRC; a blank record whose size reaches
exactly the segment's end moves the scan to the next segment. The first record failing a check ends
the log: the rest of that segment is zeroed (``ftruncate`` down to the end, then back up to full
size) and later segments are deleted. (``MessageStore.put_together`` relies on this: it writes
its group's first TOTALSIZE last, so a crash between the two writes leaves zeros where the group
starts, and the log ends before it.) Every scanned record from ``dispatch_safe`` on whose unit is
missing or different is re-dispatched (older records are trusted, which also keeps deleted topics
deleted); then each consume queue drops units pointing at or past the end. A queue whose first
re-dispatched record lies beyond its units (its files were lost) is rebuilt by a second scan from
the start of the log. Everything touched is fsynced before the new checkpoint is written.

The index recovers on every start, after the commit log: a file with a bad header, or whose
entries start before the previous file's end, is deleted with every file named after it; with R =
the smallest of the largest *indexed to*, the log's end and the first offset a deleted file's header
still names, entries pointing at R or beyond are dropped from every file holding them (written
after their header, or pointing at records recovery cut), and the records from R (at least from
the log's start) to the end are indexed again by scanning the log. Without index files (delete
``<root>/index`` to force it) the whole log is indexed again.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "BCQ_UNIT",
    "BCQ_UNIT_SIZE",
    "BLANK_MIN_SIZE",
    "CHECKPOINT_SIZE",
    "CQ_UNIT",
    "CQ_UNIT_SIZE",
    "INDEX_ENTRY_SIZE",
    "INDEX_HEADER_SIZE",
    "Checkpoint",
    "IndexHeader",
    "file_name",
    "index_file_size",
    "pack_checkpoint",
    "pack_index_header",
    "parse_file_name",
    "unpack_checkpoint",
    "unpack_index_header",
]

CQ_UNIT: Final = struct.Struct(">qiq")
CQ_UNIT_SIZE: Final = CQ_UNIT.size  # 20
# commit-log offset, size, tags code, store time, base queue offset, count, compacted offset, reserved
BCQ_UNIT: Final = struct.Struct(">qiqqqhii")
BCQ_UNIT_SIZE: Final = BCQ_UNIT.size  # 46
BLANK_MIN_SIZE: Final = 8  # TOTALSIZE + MAGICCODE of the blank filler

_CHECKPOINT_HEAD: Final = struct.Struct(">4sHHqqq")
_CRC: Final = struct.Struct(">I")
CHECKPOINT_SIZE: Final = _CHECKPOINT_HEAD.size + _CRC.size  # 36
_CHECKPOINT_MAGIC: Final = b"CMQK"
_CHECKPOINT_VERSION: Final = 1
_CLEAN: Final = 0x1


def _crc_checked_fields(data: bytes, head: struct.Struct, size: int) -> tuple[Any, ...] | None:
    """The fields *head* packs at the start of *data*; None when *data* is shorter than *size* or the
    CRC32 that follows the fields does not match them (a short or torn header)."""
    if len(data) < size:
        return None
    packed = data[: head.size]
    (crc,) = _CRC.unpack_from(data, head.size)
    if zlib.crc32(packed) != crc:
        return None
    return head.unpack(packed)


def file_name(start_offset: int) -> str:
    """Segment / consume-queue file name for a start offset (20-digit zero-padded decimal)."""
    return f"{start_offset:020d}"


def parse_file_name(name: str) -> int | None:
    """Start offset encoded in a file name, or None if *name* is not one of ours."""
    if len(name) != 20 or not name.isdigit() or not name.isascii():
        return None
    return int(name)


@dataclass(slots=True, frozen=True)
class Checkpoint:
    commitlog_flushed: int
    dispatch_safe: int
    clean: bool
    timestamp_ms: int


def pack_checkpoint(cp: Checkpoint) -> bytes:
    head = _CHECKPOINT_HEAD.pack(
        _CHECKPOINT_MAGIC,
        _CHECKPOINT_VERSION,
        _CLEAN if cp.clean else 0,
        cp.commitlog_flushed,
        cp.dispatch_safe,
        cp.timestamp_ms,
    )
    return head + _CRC.pack(zlib.crc32(head))


def unpack_checkpoint(data: bytes) -> Checkpoint | None:
    """The checkpoint in *data*, or None if it is short, torn or not ours."""
    fields = _crc_checked_fields(data, _CHECKPOINT_HEAD, CHECKPOINT_SIZE)
    if fields is None:
        return None
    magic, version, flags, flushed, safe, ts = fields
    if magic != _CHECKPOINT_MAGIC or version != _CHECKPOINT_VERSION or flushed < 0 or safe < 0:
        return None
    return Checkpoint(flushed, safe, bool(flags & _CLEAN), ts)


_INDEX_HEAD: Final = struct.Struct(">4sHHiiqqqqq")
INDEX_HEADER_SIZE: Final = 64  # _INDEX_HEAD (56) + CRC (4) + 4 zero bytes
INDEX_ENTRY_SIZE: Final = 12  # 4-byte hash + 8-byte commit-log offset
_INDEX_MAGIC: Final = b"CMQI"
_INDEX_VERSION: Final = 1


def index_file_size(capacity: int) -> int:
    return INDEX_HEADER_SIZE + INDEX_ENTRY_SIZE * capacity


@dataclass(slots=True, frozen=True)
class IndexHeader:
    capacity: int
    count: int
    begin_timestamp: int
    end_timestamp: int
    begin_offset: int
    end_offset: int
    indexed_to: int = 0


def pack_index_header(h: IndexHeader) -> bytes:
    head = _INDEX_HEAD.pack(
        _INDEX_MAGIC,
        _INDEX_VERSION,
        0,
        h.capacity,
        h.count,
        h.begin_timestamp,
        h.end_timestamp,
        h.begin_offset,
        h.end_offset,
        h.indexed_to,
    )
    return head + _CRC.pack(zlib.crc32(head)) + bytes(INDEX_HEADER_SIZE - _INDEX_HEAD.size - _CRC.size)


def unpack_index_header(data: bytes) -> IndexHeader | None:
    """The index header in *data*, or None if it is short, torn or not ours."""
    fields = _crc_checked_fields(data, _INDEX_HEAD, INDEX_HEADER_SIZE)
    if fields is None:
        return None
    magic, version, _flags, capacity, count, begin_ts, end_ts, begin_off, end_off, indexed_to = fields
    if (
        magic != _INDEX_MAGIC
        or version != _INDEX_VERSION
        or capacity <= 0
        or not 0 <= count <= capacity
        or min(begin_off, end_off, indexed_to) < 0
    ):
        return None
    return IndexHeader(capacity, count, begin_ts, end_ts, begin_off, end_off, indexed_to)
