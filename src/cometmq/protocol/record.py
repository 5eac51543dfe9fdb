"""The RocketMQ 4.x message record and offset message ids (docs/protocol.md#record, #message-ids).

One layout serves three purposes: it is how a message sits in the commit log, how the broker sends it
in pull/query/view bodies (stored bytes as they are), and what clients decode. All integers are
big-endian; ``i``/``q`` below are signed 32/64-bit.

    off  width  field
    0    4      TOTALSIZE         whole record, this field included
    4    4      MAGICCODE         0xDAA320A7 message, 0xCBD43194 blank filler at a segment's end
    8    4      BODYCRC           zlib.crc32(body) & 0x7FFFFFFF
    12   4      QUEUEID
    16   4      FLAG              producer's user flag
    20   8      QUEUEOFFSET       consume-queue offset (unit index)
    28   8      PHYSICALOFFSET    commit-log offset of this record
    36   4      SYSFLAG           MessageSysFlag; 0x10 / 0x20 = born / store host is IPv6
    40   8      BORNTIMESTAMP     producer clock, ms
    48   8|20   BORNHOST          IPv4: 4 address bytes + int32 port (IPv6: 16 + 4)
    56   8      STORETIMESTAMP    broker clock, ms            (offsets from here assume IPv4 hosts)
    64   8|20   STOREHOST
    72   4      RECONSUMETIMES
    76   8      PREPARED_TX_OFFSET
    84   4      BODYLENGTH n, then n body bytes
    88+n 1      TOPICLENGTH t (signed byte, so t <= 127), then t UTF-8 bytes
    89+n+t 2    PROPERTIESLENGTH p (int16), then p UTF-8 bytes (docs/protocol.md#properties)

    TOTALSIZE = 91 + n + t + p, plus 12 per IPv6 host.

A record may end with RocketMQ 5's record CRC (its ``enabledAppendPropCRC``): the last 20 bytes are
the property ``__CRC32#`` \x01 + ten ASCII digits + \x02, the digits the CRC32 (masked as BODYCRC) of
every byte of the record before those 20, least significant digit first, padded with "0". BODYCRC
covers the body only; this covers the head, topic and properties too.

We only *write* IPv4 hosts (C++ 1.2.3 and the JS client ignore the v6 bits), but the decoder honours
them, and also reads RocketMQ 5.x records (magic 0xDAA320AB, 2-byte topic length).
"""

from __future__ import annotations

import ipaddress
import mmap
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from cometmq.errors import RecordError

try:
    # zlib's CRC-32, computed with SIMD (several times faster than zlib's for a 1 KiB body),
    # on every stored message (the broker's put) and every checked one (recovery, check_crc).
    from isal.isal_zlib import crc32
except ImportError:  # installed without its dependencies: zlib gives the same values
    from zlib import crc32

__all__ = [
    "BLANK_MAGIC_CODE",
    "BORNHOST_V6_FLAG",
    "FIXED_HEAD_SIZE",
    "INNER_BASE_PROPERTY",
    "INNER_BATCH_FLAG",
    "INNER_NUM_PROPERTY",
    "MAX_PROPERTIES_SIZE",
    "MAX_TOPIC_SIZE",
    "MESSAGE_MAGIC_CODE",
    "MESSAGE_MAGIC_CODE_V2",
    "MIN_RECORD_SIZE",
    "NEED_UNWRAP_FLAG",
    "RECORD_CRC_NAME",
    "STOREHOST_V6_FLAG",
    "DecodedRecord",
    "body_crc",
    "carries_record_crc",
    "crc32",
    "decode_host",
    "decode_offset_msg_id",
    "decode_record_at",
    "decode_records",
    "encode_host",
    "encode_record_into",
    "hex_ids",
    "inflate_body",
    "iter_records",
    "offset_msg_id",
    "pack_properties_length",
    "pack_record_head",
    "record_crc_matches",
    "record_size",
    "seal_record_crc",
    "seal_records_crc",
    "topic_field",
    "with_record_crc_property",
    "without_record_crc_property",
]

MESSAGE_MAGIC_CODE: Final = 0xDAA320A7  # Java int -626843481
BLANK_MAGIC_CODE: Final = 0xCBD43194  # Java int -875286124
MESSAGE_MAGIC_CODE_V2: Final = 0xDAA320AB  # RocketMQ 5.x; decoded, never written
BORNHOST_V6_FLAG: Final = 0x10
STOREHOST_V6_FLAG: Final = 0x20
# RocketMQ 5's MessageSysFlag bits of a record that holds a whole batch (a BatchCQ topic's inner batch):
# INNER_BATCH marks the record, NEED_UNWRAP tells a client to split its body into the batch's messages.
NEED_UNWRAP_FLAG: Final = 0x40
INNER_BATCH_FLAG: Final = 0x80
# RocketMQ 5's MessageConst: an inner batch's message count, and the queue offset of its first message.
INNER_NUM_PROPERTY: Final = "INNER_NUM"
INNER_BASE_PROPERTY: Final = "INNER_BASE"
FIXED_HEAD_SIZE: Final = 84  # everything before BODYLENGTH, with IPv4 hosts
MIN_RECORD_SIZE: Final = 91  # empty body, topic and properties, IPv4 hosts
MAX_TOPIC_SIZE: Final = 127  # encoded bytes: TOPICLENGTH is a signed byte
MAX_PROPERTIES_SIZE: Final = 32767  # encoded bytes: PROPERTIESLENGTH is an int16

# The fixed head plus BODYLENGTH in one struct: a single pack_into/unpack_from per record is the
# cheapest way to move 15 fields between Python and the buffer (bench/store.py).
_HEAD: Final = struct.Struct(">iIiiiqqiq8sq8siqi")
_HEAD_SIZE: Final = _HEAD.size  # 88
_SIZE_MAGIC: Final = struct.Struct(">iI")
_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")

_CRC_MASK: Final = 0x7FFFFFFF

RECORD_CRC_SIZE: Final = 20  # name, separator, ten digits, separator (RocketMQ's CRC32_RESERVED_LEN)
RECORD_CRC_NAME: Final = b"__CRC32#\x01"  # RocketMQ's MessageConst.PROPERTY_CRC32, and its separator
_RECORD_CRC_NAME_TEXT: Final = RECORD_CRC_NAME.decode()


WritableBuffer = bytearray | memoryview | mmap.mmap


def record_size(body_len: int, topic_len: int, props_len: int) -> int:
    """Stored size of a record with IPv4 hosts; lengths are in encoded bytes."""
    return 91 + body_len + topic_len + props_len


def body_crc(body: bytes | memoryview) -> int:
    """BODYCRC as RocketMQ computes it: CRC32 masked to a non-negative Java int."""
    return crc32(body) & _CRC_MASK


# The largest body a compressed one may inflate to. Producers compress bodies already held under
# their maxMessageSize (4 MiB by default); this leaves room for raised limits while a small body
# built to inflate without end (a "zlib bomb") costs a reader at most this much memory.
MAX_INFLATED_BODY_SIZE = 64 * 1024 * 1024


def inflate_body(body: bytes | memoryview, limit: int = MAX_INFLATED_BODY_SIZE) -> bytes:
    """*body* inflated (zlib), as a message body whose sysflag marks it compressed is; RecordError
    when it does not inflate, or inflates past *limit* bytes (it is never inflated further)."""
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error:
        raise RecordError("compressed body does not inflate: it is not zlib data") from None
    if len(data) > limit:
        raise RecordError(f"compressed body inflates to more than {limit} bytes")
    if not inflater.eof:
        raise RecordError("compressed body does not inflate: the stream is truncated")
    return data


def with_record_crc_property(properties: bytes) -> bytes:
    """*properties* (encoded, without a record CRC property) followed by one whose digits are still to
    be filled in by ``seal_record_crc``; like RocketMQ, a separator first unless they end with one."""
    if properties and not properties.endswith(b"\x02"):
        properties += b"\x02"
    return properties + RECORD_CRC_NAME + b"0000000000\x02"


def without_record_crc_property(properties: bytes) -> bytes:
    """*properties* (encoded) with any record CRC property taken out: a client cannot set it, or it
    could make recovery take a record for damaged (and drop it). Callers on a hot path look for
    ``RECORD_CRC_NAME`` first: it is almost never there."""
    return b"\x02".join(pair for pair in properties.split(b"\x02") if not pair.startswith(RECORD_CRC_NAME))


def seal_record_crc(buf: WritableBuffer, pos: int, total: int) -> None:
    """Fill in the record CRC of the complete record at ``buf[pos:pos + total]``, whose properties end
    with ``with_record_crc_property``'s placeholder."""
    with memoryview(buf) as mv:
        seal_records_crc(mv, ((pos, pos + total),))


def seal_records_crc(mv: memoryview, spans: Iterable[tuple[int, int]]) -> None:
    """``seal_record_crc`` for each record ``mv[start:end]`` of *spans* (one call for a batch)."""
    for start, end in spans:
        crc = crc32(mv[start : end - RECORD_CRC_SIZE]) & _CRC_MASK
        mv[end - 11 : end - 1] = (b"%d" % crc)[::-1].ljust(10, b"0")


def carries_record_crc(properties: str) -> bool:
    """Whether decoded properties end with a record CRC property: a property of its own (the whole
    properties, or after a separator), so that a look-alike name or value is not taken for one."""
    return (
        properties[-RECORD_CRC_SIZE:-11] == _RECORD_CRC_NAME_TEXT
        and properties[-1:] == "\x02"
        and (len(properties) == RECORD_CRC_SIZE or properties[-RECORD_CRC_SIZE - 1] == "\x02")
    )


def record_crc_matches(mv: memoryview, pos: int, total: int) -> bool:
    """Whether the record at ``mv[pos:pos + total]``, which ``carries_record_crc``, matches it."""
    end = pos + total
    digits = mv[end - 11 : end - 1].tobytes()
    return digits.isdigit() and int(digits[::-1]) == crc32(mv[pos : end - RECORD_CRC_SIZE]) & _CRC_MASK


def encode_record_into(
    buf: WritableBuffer,
    pos: int,
    queue_id: int,
    flag: int,
    queue_offset: int,
    commitlog_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes,
    topic: bytes,
    properties: bytes,
) -> int:
    """Write one record at ``buf[pos:]`` and return its size (TOTALSIZE).

    *topic* and *properties* are already UTF-8 encoded; hosts are 8-byte IPv4 ``addr + int32 port``
    (``encode_host``), and *sys_flag* must not carry the IPv6 host bits. The caller checks that the
    record fits (``record_size``) and that topic and properties are at most ``MAX_TOPIC_SIZE`` and
    ``MAX_PROPERTIES_SIZE`` bytes; an ``mmap`` works as *buf* (it supports the buffer protocol and
    slice assignment).

    Positional parameters on purpose: this is the commit log's per-message hot path, and keyword
    passing of 16 arguments costs measurably more.
    """
    n = len(body)
    t = len(topic)
    p = len(properties)
    total = 91 + n + t + p
    _HEAD.pack_into(
        buf,
        pos,
        total,
        MESSAGE_MAGIC_CODE,
        crc32(body) & _CRC_MASK,
        queue_id,
        flag,
        queue_offset,
        commitlog_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        n,
    )
    at = pos + 88 + n
    buf[pos + 88 : at] = body
    buf[at] = t
    at += 1
    buf[at : at + t] = topic
    at += t
    _I16.pack_into(buf, at, p)
    buf[at + 2 : at + 2 + p] = properties
    return total


# For writers that join many records before one copy into the log (the store's writer: one write
# per put or batch instead of five slice assignments per record; bench/store.py measures it):
# pack_record_head(TOTALSIZE, MESSAGE_MAGIC_CODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET,
# SYSFLAG, BORNTIMESTAMP, BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES, PREPARED_TX_OFFSET,
# BODYLENGTH) gives the 88 bytes before BODY (IPv4 hosts); a record is then
# head + body + topic_field(topic) + pack_properties_length(len(properties)) + properties.
pack_record_head: Final = _HEAD.pack
pack_properties_length: Final = _I16.pack


def topic_field(topic: bytes) -> bytes:
    """TOPICLENGTH + TOPIC (the caller keeps the topic <= ``MAX_TOPIC_SIZE`` bytes)."""
    return bytes((len(topic),)) + topic


@dataclass(slots=True)
class DecodedRecord:
    """Every field of one stored message; hosts are raw ``address + int32 port`` bytes."""

    total_size: int
    magic_code: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commitlog_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: str

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.commitlog_offset)


def iter_records(data: bytes | bytearray | memoryview, check_crc: bool = False) -> Iterator[DecodedRecord]:
    """Decode records laid end to end (a pull body, or a commit-log segment).

    Blank filler records are skipped; a zero TOTALSIZE ends the data (the unwritten tail of a
    segment). Anything else malformed raises ``RecordError``; with *check_crc* a body whose CRC
    does not match does too.
    """
    mv = memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    end = len(mv)
    pos = 0
    while pos < end:
        if end - pos < 8:
            raise RecordError(f"truncated record header at {pos}")
        total, magic = _SIZE_MAGIC.unpack_from(mv, pos)
        if total == 0:
            return
        if magic == BLANK_MAGIC_CODE:
            if total < 8 or total > end - pos:
                raise RecordError(f"blank record at {pos} claims {total} bytes, {end - pos} available")
            pos += total
            continue
        rec = decode_record_at(mv, pos, end, check_crc)
        yield rec
        pos += rec.total_size


def decode_records(data: bytes | bytearray | memoryview, check_crc: bool = False) -> list[DecodedRecord]:
    """``list(iter_records(data, check_crc))``."""
    return list(iter_records(data, check_crc))


def decode_record_at(mv: memoryview, pos: int, end: int, check_crc: bool = False) -> DecodedRecord:
    """Decode the message record at ``mv[pos:]`` that must end by *end*; ``RecordError`` if it is
    not a well-formed message record (blank fillers included). *mv* is a byte-format memoryview."""
    if end - pos < 8:
        raise RecordError(f"truncated record header at {pos}")
    total, magic = _SIZE_MAGIC.unpack_from(mv, pos)
    if total < MIN_RECORD_SIZE or total > end - pos:
        raise RecordError(f"record at {pos} claims {total} bytes, {end - pos} available")
    if magic == MESSAGE_MAGIC_CODE:
        fields = _HEAD.unpack_from(mv, pos)
        if not fields[7] & 0x30:
            # Fast path: v1 magic and IPv4 hosts, so the fixed head layout applies as is.
            limit = pos + total
            n = fields[14]
            at = pos + 88 + n
            if n < 0 or at + 3 > limit:
                raise RecordError(f"record at {pos}: body length {n} overruns the record")
            t = mv[at]
            tp = at + 1 + t
            if t > MAX_TOPIC_SIZE or tp + 2 > limit:
                raise RecordError(f"record at {pos}: bad topic length {t}")
            (p,) = _I16.unpack_from(mv, tp)
            if p < 0 or tp + 2 + p != limit:
                raise RecordError(f"record at {pos}: lengths do not add up to TOTALSIZE {total}")
            body = bytes(mv[pos + 88 : at])
            crc = fields[2]
            if check_crc and crc32(body) & _CRC_MASK != crc:
                raise RecordError(f"record at {pos}: body CRC mismatch")
            try:
                topic = str(mv[at + 1 : tp], "utf-8")
                properties = str(mv[tp + 2 : limit], "utf-8")
            except UnicodeDecodeError as exc:
                raise RecordError(f"record at {pos}: {exc}") from None
            return DecodedRecord(
                total,
                magic,
                crc,
                fields[3],
                fields[4],
                fields[5],
                fields[6],
                fields[7],
                fields[8],
                fields[9],
                fields[10],
                fields[11],
                fields[12],
                fields[13],
                body,
                topic,
                properties,
            )
    elif magic != MESSAGE_MAGIC_CODE_V2:
        raise RecordError(f"record at {pos}: bad magic code {magic:#010x}")
    try:
        return _decode_general(mv, pos, total, magic, check_crc)
    except UnicodeDecodeError as exc:
        raise RecordError(f"record at {pos}: {exc}") from None


class _Reader:
    """Bounds-checked sequential reads inside one record (the slow decode path)."""

    __slots__ = ("at", "limit", "mv", "pos")

    def __init__(self, mv: memoryview, pos: int, limit: int) -> None:
        self.mv = mv
        self.pos = pos
        self.at = pos
        self.limit = limit

    def _take(self, width: int) -> int:
        start = self.at
        self.at += width
        if width < 0 or self.at > self.limit:
            raise RecordError(f"record at {self.pos}: field overruns TOTALSIZE")
        return start

    def int_(self, s: struct.Struct) -> int:
        value: int = s.unpack_from(self.mv, self._take(s.size))[0]
        return value

    def raw(self, width: int) -> bytes:
        start = self._take(width)
        return bytes(self.mv[start : self.at])


def _decode_general(mv: memoryview, pos: int, total: int, magic: int, check_crc: bool) -> DecodedRecord:
    """Field-by-field decode for IPv6 hosts and 5.x records (rare, so clarity over speed)."""
    r = _Reader(mv, pos, pos + total)
    r.raw(8)  # TOTALSIZE and MAGICCODE, already read
    crc = r.int_(_I32)
    queue_id = r.int_(_I32)
    flag = r.int_(_I32)
    queue_offset = r.int_(_I64)
    commitlog_offset = r.int_(_I64)
    sys_flag = r.int_(_I32)
    born_ts = r.int_(_I64)
    born_host = r.raw(20 if sys_flag & BORNHOST_V6_FLAG else 8)
    store_ts = r.int_(_I64)
    store_host = r.raw(20 if sys_flag & STOREHOST_V6_FLAG else 8)
    reconsume = r.int_(_I32)
    prepared = r.int_(_I64)
    body = r.raw(r.int_(_I32))
    # 5.x widened TOPICLENGTH to two bytes under its own magic code.
    topic = r.raw(r.int_(_I16 if magic == MESSAGE_MAGIC_CODE_V2 else _I8)).decode()
    properties = r.raw(r.int_(_I16)).decode()
    if r.at != r.limit:
        raise RecordError(f"record at {pos}: lengths do not add up to TOTALSIZE {total}")
    if check_crc and crc32(body) & _CRC_MASK != crc:
        raise RecordError(f"record at {pos}: body CRC mismatch")
    return DecodedRecord(
        total,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        commitlog_offset,
        sys_flag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prepared,
        body,
        topic,
        properties,
    )


def offset_msg_id(store_host: bytes, commitlog_offset: int) -> str:
    """The offset message id: upper-case hex of store address + int32 port + int64 offset.

    32 characters for an 8-byte IPv4 *store_host*, 56 for a 20-byte IPv6 one.
    """
    return store_host.hex().upper() + format(commitlog_offset & 0xFFFF_FFFF_FFFF_FFFF, "016X")


def hex_ids(prefix: str, packed: bytes, width: int) -> str:
    """Comma-separated ids, one per *width* bytes of *packed*: *prefix*, then those bytes in
    upper-case hex. For many ids at once (a batch's offset message ids or UNIQ_KEYs): one ``hex``
    with a separator and one ``replace`` that puts the prefix before each, with no Python step per
    id (cheaper than cutting and joining slices; bench/broker_send.py)."""
    return prefix + packed.hex(",", width).upper().replace(",", "," + prefix)


def decode_offset_msg_id(msg_id: str) -> tuple[bytes, int, int]:
    """``(address bytes, port, commit-log offset)`` of an offset message id; ``ValueError`` if it is
    not one (wrong length or not hex)."""
    if len(msg_id) == 32:
        addr_len = 4
    elif len(msg_id) == 56:
        addr_len = 16
    else:
        raise ValueError(f"not an offset message id (length {len(msg_id)}): {msg_id!r}")
    raw = bytes.fromhex(msg_id)
    (port,) = _I32.unpack_from(raw, addr_len)
    (offset,) = _I64.unpack_from(raw, addr_len + 4)
    return raw[:addr_len], port, offset


def encode_host(ip: str, port: int) -> bytes:
    """Pack ``ip:port`` as a record host field: 4 (or 16 for IPv6) address bytes + int32 port."""
    return ipaddress.ip_address(ip).packed + _I32.pack(port)


def decode_host(raw: bytes) -> tuple[str, int]:
    """Inverse of ``encode_host``."""
    if len(raw) not in (8, 20):
        raise ValueError(f"a host field is 8 or 20 bytes, not {len(raw)}")
    (port,) = _I32.unpack_from(raw, len(raw) - 4)
    return str(ipaddress.ip_address(raw[:-4])), port


def host_text(raw: bytes) -> str:
    """A host field as ``ip:port`` (``[ip]:port`` for IPv6) for people to read; its hex when it is not
    8 or 20 bytes."""
    try:
        ip, port = decode_host(raw)
    except ValueError:
        return raw.hex()
    return f"{ip}:{port}" if ":" not in ip else f"[{ip}]:{port}"
