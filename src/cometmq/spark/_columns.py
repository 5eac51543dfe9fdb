"""Pull response bodies → Arrow record batches in the connector's schema (the read hot path).

Python only walks the chain of record sizes (one 4-byte unpack per message). Everything else is done
a column at a time by Arrow, in C: the fixed-size record heads, bodies and property texts are cut out
of the response's own buffer, head fields are read from the heads, the layout is checked, the system
properties (TAGS, KEYS, UNIQ_KEY) are found among the split property texts, keys are split, and tag filters
are a vectorised ``is_in``. Unusual records (IPv6 hosts, RocketMQ 5.x's magic code, blank fillers)
send the whole body through the general record decoder instead.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
from collections.abc import Collection

import pyarrow as pa
import pyarrow.compute as pc

from cometmq.client.message import SYSFLAG_COMPRESSED
from cometmq.client.producer import RESERVED_PROPERTIES
from cometmq.errors import RecordError
from cometmq.protocol.batch import unwrap_inner_batches
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import (
    INNER_BATCH_FLAG,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    NEED_UNWRAP_FLAG,
    inflate_body,
    iter_records,
    offset_msg_id,
)
from cometmq.spark._schema import ARROW_SCHEMA, KEYS_TYPE, PROPERTIES_TYPE, TIMESTAMP

__all__ = ["DecodedBatch", "decode_batch"]

log = logging.getLogger(__name__)

# Record layout with IPv4 hosts (protocol/record.py): where the fields a row needs start.
_MAGIC_AT = 4
_QUEUE_OFFSET_AT = 20
_PHYSICAL_OFFSET_AT = 28
_SYS_FLAG_AT = 36
_BORN_AT = 40
_STORED_AT = 56
_STORE_HOST_AT = 64
_RECONSUME_AT = 72
_BODY_LENGTH_AT = 84
_BODY_AT = 88
_HOST_V6_FLAGS = 0x30
_UNIQ_KEY = "UNIQ_KEY"
_MILLIS = pa.timestamp("ms", tz="UTC")
_TOTAL_SIZE = struct.Struct(">i")
_I32 = pa.int32()
# Typed scalars: handed a bare Python value, pyarrow infers its type each call (and tries to import
# dateutil while doing so, on every call).
_ZERO = pa.scalar(0, _I32)
_ONE = pa.scalar(1, _I32)
_TWO = pa.scalar(2, _I32)
_HEAD_SIZE = pa.scalar(_BODY_AT, _I32)
_V6_FLAGS = pa.scalar(_HOST_V6_FLAGS, _I32)
_COMPRESSED = pa.scalar(SYSFLAG_COMPRESSED, _I32)
_INNER_BATCH = pa.scalar(INNER_BATCH_FLAG | NEED_UNWRAP_FLAG, _I32)
_MAGIC = pa.scalar(MESSAGE_MAGIC_CODE, pa.uint32())
_EMPTY = pa.scalar("", pa.string())
_NULL_STRING = pa.scalar(None, pa.string())
# Properties that have a column of their own or belong to the broker and clients, never to users.
SYSTEM_PROPERTIES = RESERVED_PROPERTIES | {_UNIQ_KEY}


@dataclasses.dataclass(slots=True)
class DecodedBatch:
    """The rows of some pull bodies: ``batch`` holds the rows at offsets below the reader's end that
    pass its tag filter; ``queue_offsets`` every offset the bodies held before either cut, which is
    what the reader checks for gaps."""

    batch: pa.RecordBatch
    queue_offsets: pa.Int64Array

    @property
    def offsets(self) -> tuple[int, ...]:
        return tuple(self.queue_offsets.to_pylist())

    @property
    def first(self) -> int:
        return int(self.queue_offsets[0].as_py())

    @property
    def last(self) -> int:
        return int(self.queue_offsets[-1].as_py())

    @property
    def count(self) -> int:
        return len(self.queue_offsets)

    def first_gap(self, expected_first: int) -> tuple[int, int]:
        """The first missing offset at or after ``expected_first``, and the next offset present."""
        previous = expected_first - 1
        for offset in self.offsets:
            if offset != previous + 1:
                return previous + 1, offset
            previous = offset
        return previous + 1, previous + 1


@dataclasses.dataclass(slots=True)
class _Fields:
    """The per-record values a row is made of, one Arrow array each."""

    queue_offsets: pa.Int64Array
    physical_offsets: pa.Int64Array
    sys_flags: pa.Int32Array
    born: pa.Int64Array
    stored: pa.Int64Array
    store_hosts: pa.BinaryArray
    reconsume_times: pa.Int32Array
    bodies: pa.BinaryArray
    properties: pa.BinaryArray

    def head(self, n: int) -> _Fields:
        return _Fields(*(getattr(self, field.name).slice(0, n) for field in dataclasses.fields(self)))


def _inflated(stored: bytes, topic: str, broker: str, queue_id: int) -> bytes:
    """A compressed body inflated; one that does not inflate (a producer's bug, or past the bound) is
    read as stored, with a warning, as the consumers hand it over: failing the task would stop every
    query and stream over its queue at that message for ever."""
    try:
        return inflate_body(stored)
    except RecordError as exc:
        log.warning("a message of %s@%s:%d: %s; read as stored", topic, broker, queue_id, exc)
        return stored


def decode_batch(
    data: bytes,
    topic: str,
    broker: str,
    queue_id: int,
    *,
    end: int,
    tags: Collection[str] = (),
    include_properties: bool = False,
    unwrap_from: int = 0,
) -> DecodedBatch | None:
    """Decode the records of pull bodies of queue ``topic@broker:queue_id``; None for no records. A
    BatchCQ topic's inner batches, one record each, become a row per message from queue offset
    *unwrap_from* on (a batch may straddle the range's start); those from *end* on are left out too.

    Malformed bytes raise :class:`RecordError`.
    """
    topic_length = len(topic.encode())
    fields = _split(data, topic_length) or _decode_generally(data)
    if fields is None:
        return None
    if pc.any(pc.equal(pc.bit_wise_and(fields.sys_flags, _INNER_BATCH), _INNER_BATCH)).as_py():
        # Only then the records are walked again: an ordinary topic pays this one column test.
        data = unwrap_inner_batches(data, unwrap_from) or b""
        fields = _split(data, topic_length) or _decode_generally(data)
        if fields is None:
            return None
    all_offsets = fields.queue_offsets
    count = len(all_offsets)
    keep = count if all_offsets[-1].as_py() < end else pc.sum(pc.less(all_offsets, end)).as_py()
    if keep == 0:
        return DecodedBatch(pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA), all_offsets)
    if keep < count:
        fields = fields.head(keep)
    bodies, flags = fields.bodies, fields.sys_flags
    if pc.any(pc.not_equal(pc.bit_wise_and(flags, _COMPRESSED), _ZERO)).as_py():
        bodies = pa.array(
            [
                _inflated(b, topic, broker, queue_id) if f & SYSFLAG_COMPRESSED else b
                for b, f in zip(bodies.to_pylist(), flags.to_pylist(), strict=True)
            ],
            pa.binary(),
        )
    finder = _PropertyFinder(fields.properties)
    uniq = _non_empty(finder.last(_UNIQ_KEY))
    if uniq.null_count:
        hosts, physical = fields.store_hosts.to_pylist(), fields.physical_offsets.to_pylist()
        fallback = [offset_msg_id(h, p) for h, p in zip(hosts, physical, strict=True)]
        uniq = pc.coalesce(uniq, pa.array(fallback, pa.string()))
    tag_column = finder.last("TAGS")
    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), keep),
        pa.repeat(pa.scalar(broker, pa.string()), keep),
        pa.repeat(pa.scalar(queue_id, _I32), keep),
        fields.queue_offsets,
        uniq,
        _keys(finder.last("KEYS")),
        tag_column,
        bodies,
        _user_properties(fields.properties) if include_properties else pa.nulls(keep, PROPERTIES_TYPE),
        fields.born.view(_MILLIS).cast(TIMESTAMP),
        fields.stored.view(_MILLIS).cast(TIMESTAMP),
        fields.reconsume_times,
    ]
    batch = pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    if tags:
        batch = batch.filter(pc.fill_null(pc.is_in(tag_column, pa.array(list(tags), pa.string())), False))
    return DecodedBatch(batch, all_offsets)


def _split(data: bytes, topic_length: int) -> _Fields | None:
    """The fields of every record in ``data``, when all are plain 4.x records with IPv4 hosts and
    this topic; None otherwise (and for no records), for the general decoder to do.

    Python only follows the TOTALSIZE chain. The record starts then cut ``data`` into segments (head,
    body, topic, properties) that are one Arrow binary array over ``data`` itself, and ``take``s copy
    the wanted segments out in C.
    """
    unpack = _TOTAL_SIZE.unpack_from
    starts: list[int] = []
    add = starts.append
    pos = 0
    size = len(data)
    last_start = size - MIN_RECORD_SIZE
    while pos <= last_start:
        (total,) = unpack(data, pos)
        if total < MIN_RECORD_SIZE:
            return None
        add(pos)
        pos += total
    if pos != size or not starts:
        return None
    n = len(starts)
    buffer = pa.py_buffer(data)
    start = pa.array(starts, _I32)
    body_at = pc.add(start, _HEAD_SIZE)
    heads = _segments(buffer, [start, body_at]).take(_every(2, n))
    body_length = _field(heads, _BODY_LENGTH_AT, _I32)
    sys_flags = _field(heads, _SYS_FLAG_AT, _I32)
    record_end = pa.concat_arrays([start.slice(1), pa.array([size], _I32)])
    # Room for the body: what follows it (topic length, topic, properties length) taken off. Compared
    # before anything adds the body length: int32 sums wrap, and a wrapped offset would send Arrow
    # reading before the record (a crash, not an error).
    body_room = pc.subtract(record_end, pc.add(body_at, pa.scalar(3 + topic_length, _I32)))
    if not (
        pc.all(pc.equal(_field(heads, _MAGIC_AT, pa.uint32()), _MAGIC)).as_py()
        and pc.all(pc.equal(pc.bit_wise_and(sys_flags, _V6_FLAGS), _ZERO)).as_py()
        and pc.min(body_length).as_py() >= 0
        and pc.all(pc.less_equal(body_length, body_room)).as_py()
    ):
        return None
    topic_at = pc.add(body_at, body_length)
    properties_at = pc.add(topic_at, pa.scalar(3 + topic_length, _I32))
    segments = _segments(buffer, [body_at, topic_at, properties_at, record_end])
    every_fourth = _every(4, n)
    topic_length_bytes = pc.binary_slice(segments.take(pc.add(every_fourth, _ONE)), 0, 1)
    if not pc.all(pc.equal(topic_length_bytes, pa.scalar(bytes([topic_length]), pa.binary()))).as_py():
        return None
    return _Fields(
        queue_offsets=_field(heads, _QUEUE_OFFSET_AT, pa.int64()),
        physical_offsets=_field(heads, _PHYSICAL_OFFSET_AT, pa.int64()),
        sys_flags=sys_flags,
        born=_field(heads, _BORN_AT, pa.int64()),
        stored=_field(heads, _STORED_AT, pa.int64()),
        store_hosts=pc.binary_slice(heads, _STORE_HOST_AT, _RECONSUME_AT),
        reconsume_times=_field(heads, _RECONSUME_AT, _I32),
        bodies=segments.take(every_fourth),
        properties=segments.take(pc.add(every_fourth, _TWO)),
    )


def _field(heads: pa.BinaryArray, at: int, kind: pa.DataType) -> pa.Array:
    """A big-endian integer field of every record head, as an Arrow column: the field's bytes are cut
    out and reversed per value in C, which leaves native little-endian integers back to back."""
    width = kind.bit_width // 8
    raw = pc.binary_reverse(pc.binary_slice(heads, at, at + width))
    return pa.Array.from_buffers(kind, len(raw), [None, raw.buffers()[2]])


def _segments(buffer: pa.Buffer, bounds: list[pa.Array]) -> pa.BinaryArray:
    """One binary array over ``buffer`` whose values run between consecutive bounds, taken row by row
    from ``bounds`` (k arrays of n positions, k a power of two: b0[0], b1[0], ..., b0[1], ...)."""
    k, n = len(bounds), len(bounds[0])
    positions = _arange(k * n)
    interleave = pc.add(
        pc.multiply(pc.bit_wise_and(positions, pa.scalar(k - 1, _I32)), pa.scalar(n, _I32)),
        pc.shift_right(positions, pa.scalar(k.bit_length() - 1, _I32)),
    )
    offsets = pa.concat_arrays(bounds).take(interleave)
    return pa.Array.from_buffers(pa.binary(), k * n - 1, [None, offsets.buffers()[1], buffer])


_RANGE: list[pa.Int32Array] = [pa.array([], _I32)]


def _arange(n: int) -> pa.Int32Array:
    """0, 1, ..., n - 1 (a slice of one array kept for all calls)."""
    if len(_RANGE[0]) < n:
        _RANGE[0] = pa.array(range(max(n, 65536)), _I32)
    return _RANGE[0].slice(0, n)


def _every(k: int, n: int) -> pa.Array:
    return pc.multiply(_arange(n), pa.scalar(k, _I32))


def _decode_generally(data: bytes) -> _Fields | None:
    """The fields of every record, one record at a time through protocol/record.py."""
    records = list(iter_records(data))
    if not records:
        return None
    return _Fields(
        queue_offsets=pa.array([r.queue_offset for r in records], pa.int64()),
        physical_offsets=pa.array([r.commitlog_offset for r in records], pa.int64()),
        sys_flags=pa.array([r.sys_flag for r in records], _I32),
        born=pa.array([r.born_timestamp for r in records], pa.int64()),
        stored=pa.array([r.store_timestamp for r in records], pa.int64()),
        store_hosts=pa.array([r.store_host for r in records], pa.binary()),
        reconsume_times=pa.array([r.reconsume_times for r in records], _I32),
        bodies=pa.array([r.body for r in records], pa.binary()),
        properties=pa.array([r.properties.encode() for r in records], pa.binary()),
    )


class _PropertyFinder:
    r"""The value of the last occurrence of a property name in every row's property text.

    The texts are split at ``\x02`` into ``NAME\x01value`` items once; a name's items are found with
    ``starts_with``, and their values cut off by a fixed-width slice. When every row holds the name
    exactly once (what producers write), the values are the column as they are; otherwise each row
    takes its last one (a repeated name's last value wins, as in decode_properties and Java's
    HashMap), or null. About three times as cheap as searching each row's text per name.
    """

    def __init__(self, properties: pa.BinaryArray) -> None:
        items = pc.split_pattern(properties, b"\x02")
        self._items = pc.list_flatten(items)
        self._rows = pc.list_parent_indices(items)
        self._n = len(properties)

    def last(self, name: str) -> pa.StringArray:
        """The value per row, null where the row lacks the property."""
        prefix = f"{name}\x01".encode()
        matches = pc.starts_with(self._items, prefix)
        values = pc.binary_slice(self._items.filter(matches), len(prefix), _BEYOND_ANY_VALUE)
        rows = self._rows.filter(matches)
        n, found = self._n, len(rows)
        if found != n or (n > 1 and not pc.all(pc.less(rows.slice(0, n - 1), rows.slice(1))).as_py()):
            # Latest first, so that the first match index_in finds for a row is its last value.
            latest_first = pc.subtract(pa.scalar(found - 1, _I32), _arange(found))
            rows, values = rows.take(latest_first), values.take(latest_first)
            values = values.take(pc.index_in(_arange(n).cast(rows.type), value_set=rows))
        try:
            return values.cast(pa.string())
        except pa.ArrowInvalid as exc:
            raise RecordError(f"message properties are not UTF-8: {exc}") from None


_BEYOND_ANY_VALUE = 2**31 - 1


def _non_empty(values: pa.StringArray) -> pa.StringArray:
    return pc.if_else(pc.equal(values, _EMPTY), _NULL_STRING, values)


def _keys(keys: pa.StringArray) -> pa.Array:
    """KEYS split at runs of spaces, as RocketMQ's index splits them (and as ReceivedMessage.keys
    does); null when no KEYS property is set."""
    trimmed = pc.utf8_trim(keys, " ")
    if pc.any(pc.match_substring(trimmed, "  ")).as_py():
        split = pc.split_pattern_regex(trimmed, " +")
    else:
        split = pc.split_pattern(trimmed, " ")  # a quarter of the regex's cost
    return pc.if_else(pc.equal(trimmed, _EMPTY), _NO_KEYS, split.cast(KEYS_TYPE))


_NO_KEYS = pa.scalar([], KEYS_TYPE)


def _user_properties(properties: pa.BinaryArray) -> pa.Array:
    system = SYSTEM_PROPERTIES
    rows = [
        [(k, v) for k, v in decode_properties(raw.decode("utf-8", "replace")).items() if k not in system]
        for raw in properties.to_pylist()
    ]
    return pa.array(rows, PROPERTIES_TYPE)
