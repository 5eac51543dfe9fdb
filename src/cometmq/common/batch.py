"""The body of a batch send: entries of TOTALSIZE, MAGIC, BODYCRC, FLAG, BODY, PROPERTIES.

Layout of one entry (big-endian)::

    int32 total size of this entry   int32 magic (clients write 0)   int32 body CRC (clients write 0)
    int32 flag   int32 body length + body   int16 properties length + properties (UTF-8)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cometmq.errors import ProtocolError

ENTRY_HEAD = struct.Struct(">iiiii")  # total size, magic, crc, flag, body length
PROPERTIES_LENGTH = struct.Struct(">h")


@dataclass(slots=True)
class BatchEntry:
    flag: int
    body: bytes
    properties: str


def decode_batch_body(data: bytes) -> list[BatchEntry]:
    """The entries of a batch body; ProtocolError when the body is not a well-formed batch."""
    entries: list[BatchEntry] = []
    pos = 0
    end = len(data)
    head_size = ENTRY_HEAD.size
    while pos < end:
        if end - pos < head_size + 2:
            raise ProtocolError(f"batch entry at byte {pos} is truncated")
        total, _magic, _crc, flag, body_len = ENTRY_HEAD.unpack_from(data, pos)
        body_start = pos + head_size
        props_len_at = body_start + body_len
        if body_len < 0 or total < head_size + 2 or pos + total > end or props_len_at + 2 > end:
            raise ProtocolError(f"batch entry at byte {pos} has inconsistent lengths")
        (props_len,) = PROPERTIES_LENGTH.unpack_from(data, props_len_at)
        props_end = props_len_at + 2 + props_len
        if props_len < 0 or props_end != pos + total:
            raise ProtocolError(f"batch entry at byte {pos} has inconsistent lengths")
        try:
            properties = data[props_len_at + 2 : props_end].decode()
        except UnicodeDecodeError:
            raise ProtocolError(f"batch entry at byte {pos} has properties that are not UTF-8") from None
        entries.append(BatchEntry(flag, data[body_start:props_len_at], properties))
        pos += total
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
