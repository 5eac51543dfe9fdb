"""The body of a batch send: entries of TOTALSIZE, MAGIC, BODYCRC, FLAG, BODY, PROPERTIES.

Layout of one entry (big-endian)::

    int32 total size of this entry   int32 magic (clients write 0)   int32 body CRC (clients write 0)
    int32 flag   int32 body length + body   int16 properties length + properties (UTF-8)
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from cometmq.errors import ProtocolError
from cometmq.protocol.record import (
    INNER_BATCH_FLAG,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    NEED_UNWRAP_FLAG,
    crc32,
    decode_record_at,
    pack_properties_length,
    pack_record_head,
    topic_field,
)

ENTRY_HEAD = struct.Struct(">iiiii")  # total size, magic, crc, flag, body length
PROPERTIES_LENGTH = struct.Struct(">h")
_ENTRY_LENGTHS = struct.Struct(">i12xi")  # an entry's total size and body length


@dataclass(slots=True)
class BatchEntry:
    flag: int
    body: bytes
    properties: str


def batch_spans(data: bytes) -> Iterator[tuple[int, int, int, int]]:
    """``(flag, body_start, body_end, properties_end)`` of each entry of a batch body; the properties
    start 2 bytes after the body. ProtocolError when the body is not a well-formed batch."""
    pos = 0
    end = len(data)
    head_size = ENTRY_HEAD.size
    unpack_head = ENTRY_HEAD.unpack_from
    unpack_length = PROPERTIES_LENGTH.unpack_from
    while pos < end:
        if end - pos < head_size + 2:
            raise ProtocolError(f"batch entry at byte {pos} is truncated")
        total, _magic, _crc, flag, body_len = unpack_head(data, pos)
        body_start = pos + head_size
        body_end = body_start + body_len
        if body_len < 0 or total < head_size + 2 or pos + total > end or body_end + 2 > end:
            raise ProtocolError(f"batch entry at byte {pos} has inconsistent lengths")
        (props_len,) = unpack_length(data, body_end)
        pos += total
        if props_len < 0 or body_end + 2 + props_len != pos:
            raise ProtocolError(f"batch entry at byte {body_start - head_size} has inconsistent lengths")
        yield flag, body_start, body_end, pos


def decode_batch_body(data: bytes) -> list[BatchEntry]:
    """The entries of a batch body; ProtocolError when the body is not a well-formed batch."""
    entries: list[BatchEntry] = []
    for flag, body_start, body_end, props_end in batch_spans(data):
        try:
            properties = data[body_end + 2 : props_end].decode()
        except UnicodeDecodeError:
            raise ProtocolError(
                f"batch entry at byte {body_start - ENTRY_HEAD.size} has properties that are not UTF-8"
            ) from None
        entries.append(BatchEntry(flag, data[body_start:body_end], properties))
    return entries


def encode_batch_body(entries: list[BatchEntry]) -> bytes:
    parts = []
    for entry in entries:
        props = entry.properties.encode()
        total = ENTRY_HEAD.size + len(entry.body) + 2 + len(props)
        parts.append(ENTRY_HEAD.pack(total, 0, 0, entry.flag, len(entry.body)))
        parts.append(entry.body)
        parts.append(PROPERTIES_LENGTH.pack(len(props)))
        parts.append(props)
    return b"".join(parts)


def count_batch_entries(data: bytes) -> int:
    """How many entries a batch body holds, each checked as ``batch_spans`` and ``decode_batch_body``
    check it (PROPERTIESLENGTH a signed int16, so at most ``MAX_PROPERTIES_SIZE``; properties UTF-8):
    ProtocolError when the body is not a well-formed batch, so that every reader can split what a
    broker stores. What a broker stores an inner batch with (INNER_NUM): one walk over the entries'
    lengths, only non-empty properties decoded.

    Per entry on the inner-batch send path (bench/broker_send.py): one struct read, two byte reads."""
    pos = count = 0
    end = len(data)
    fixed = ENTRY_HEAD.size + 2
    unpack_lengths = _ENTRY_LENGTHS.unpack_from
    while pos < end:
        if end - pos < fixed:
            raise ProtocolError(f"batch entry at byte {pos} is truncated")
        total, body_len = unpack_lengths(data, pos)
        next_pos = pos + total
        body_end = pos + ENTRY_HEAD.size + body_len
        # PROPERTIESLENGTH (int16, not negative: its high bit clear) must be what is left of the entry
        # after the body.
        if (
            body_len < 0
            or total < fixed
            or next_pos > end
            or body_end + 2 > next_pos
            or data[body_end] > 0x7F
            or (data[body_end] << 8 | data[body_end + 1]) != next_pos - body_end - 2
        ):
            raise ProtocolError(f"batch entry at byte {pos} has inconsistent lengths")
        if next_pos > body_end + 2:
            try:
                data[body_end + 2 : next_pos].decode()
            except UnicodeDecodeError:
                raise ProtocolError(f"batch entry at byte {pos} has properties that are not UTF-8") from None
        pos = next_pos
        count += 1
    return count


# A stored record's TOTALSIZE and SYSFLAG (docs/protocol.md#record).
_SIZE_AND_SYS_FLAG = struct.Struct(">i32xi")
_INNER_BATCH_FLAGS = INNER_BATCH_FLAG | NEED_UNWRAP_FLAG


def unwrap_inner_batches(data: bytes, first_offset: int) -> bytes | None:
    """Stored records laid end to end (a pull body) with each inner-batch record replaced by one plain
    record per message from queue offset *first_offset* on, as a 4.x client would have received them
    from an ordinary topic: the message's flag, body and properties, the batch record's other fields,
    QUEUEOFFSET the batch's base + i, SYSFLAG without the inner-batch bits; an inner-batch record whose
    body is not a well-formed batch stays as it is. None when *data* holds no inner batch (the usual
    case: one walk over the records' sizes). RecordError for malformed records."""
    unpack = _SIZE_AND_SYS_FLAG.unpack_from
    pos = 0
    end = len(data)
    wrapped = []
    while pos + _SIZE_AND_SYS_FLAG.size <= end:
        total, sys_flag = unpack(data, pos)
        if total <= 0:
            break
        if sys_flag & _INNER_BATCH_FLAGS == _INNER_BATCH_FLAGS:
            wrapped.append(pos)
        pos += total
    if not wrapped:
        return None
    view = memoryview(data)
    parts: list[bytes] = []
    done = 0
    for start in wrapped:
        record = decode_record_at(view, start, end)
        try:
            spans = list(batch_spans(record.body))
        except ProtocolError:
            continue  # a record no reader can split stays whole, a message of its own
        parts.append(data[done:start])
        done = start + record.total_size
        topic = topic_field(record.topic.encode())
        sys_flag = record.sys_flag & ~_INNER_BATCH_FLAGS
        body = record.body
        offset = record.queue_offset
        for flag, body_start, body_end, props_end in spans:
            if offset >= first_offset:
                message = body[body_start:body_end]
                props = body[body_end + 2 : props_end]
                parts += (
                    pack_record_head(
                        MIN_RECORD_SIZE - 1 + len(message) + len(topic) + len(props),
                        MESSAGE_MAGIC_CODE,
                        crc32(message) & 0x7FFFFFFF,
                        record.queue_id,
                        flag,
                        offset,
                        record.commitlog_offset,
                        sys_flag,
                        record.born_timestamp,
                        record.born_host,
                        record.store_timestamp,
                        record.store_host,
                        record.reconsume_times,
                        record.prepared_transaction_offset,
                        len(message),
                    ),
                    message,
                    topic,
                    pack_properties_length(len(props)),
                    props,
                )
            offset += 1
    parts.append(data[done:])
    return b"".join(parts)
