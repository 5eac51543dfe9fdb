"""Pull response bodies → Arrow record batches in the connector's schema (the read hot path).

Per message, Python does one ``struct`` unpack and two slices; everything else is done a column at a
time by Arrow: timestamps are scaled and cast, the system properties (TAGS, KEYS, UNIQ_KEY) are cut
out of the raw property text with RE2 regexes, keys are split, tag filters are a vectorised ``is_in``.
"""

from __future__ import annotations

import bisect
import struct
import zlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cometmq.client.message import SYSFLAG_COMPRESSED
from cometmq.client.producer import RESERVED_PROPERTIES
from cometmq.common.properties import decode_properties
from cometmq.common.record import (
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    DecodedRecord,
    RecordError,
    iter_records,
    offset_msg_id,
)
from cometmq.spark._schema import ARROW_SCHEMA, KEYS_TYPE, PROPERTIES_TYPE, TIMESTAMP

__all__ = ["DecodedBatch", "decode_batch"]

# The record head (common/record.py) with IPv4 hosts, keeping only what a row needs: TOTALSIZE,
# MAGICCODE, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP, STORETIMESTAMP, STOREHOST,
# RECONSUMETIMES, BODYLENGTH. Skipped fields are pad bytes, so they cost no int objects.
_HEAD = struct.Struct(">iI4x4x4xqqiq8xq8si8xi")
_BODY_AT = 88
_HOST_V6_FLAGS = 0x30
_UNIQ_KEY = "UNIQ_KEY"
_MILLIS = pa.timestamp("ms", tz="UTC")
# Typed scalars: handed a bare Python value, pyarrow infers its type each call (and tries to import
# dateutil while doing so, ~46 us a call).
_TWO = pa.scalar(2, pa.int32())
_EMPTY = pa.scalar("", pa.string())
_NULL_STRING = pa.scalar(None, pa.string())
# Properties that have a column of their own or belong to the broker and clients, never to users.
SYSTEM_PROPERTIES = RESERVED_PROPERTIES | {_UNIQ_KEY}


def _property_pattern(name: str) -> str:
    # Matched against the *reversed* property bytes, so the first match is the last occurrence of a
    # repeated name, which wins as in decode_properties (and Java's HashMap). Twice as fast as a
    # greedy ".*" prefix on the text as it is.
    return f"(?P<v>[^\x02]*)\x01{name[::-1]}(?:\x02|$)"


_TAGS_RE = _property_pattern("TAGS")
_KEYS_RE = _property_pattern("KEYS")
_UNIQ_RE = _property_pattern(_UNIQ_KEY)


@dataclass(slots=True)
class DecodedBatch:
    """The rows of one pull body: ``batch`` holds the rows at offsets below the reader's end that pass
    its tag filter; ``first``/``last``/``count`` describe what the body held before either cut, which
    is what the reader checks for gaps."""

    batch: pa.RecordBatch
    offsets: tuple[int, ...]

    @property
    def first(self) -> int:
        return self.offsets[0]

    @property
    def last(self) -> int:
        return self.offsets[-1]

    @property
    def count(self) -> int:
        return len(self.offsets)

    def first_gap(self, expected_first: int) -> tuple[int, int]:
        """The first missing offset at or after ``expected_first``, and the next offset present."""
        previous = expected_first - 1
        for offset in self.offsets:
            if offset != previous + 1:
                return previous + 1, offset
            previous = offset
        return previous + 1, previous + 1


def decode_batch(
    data: bytes,
    topic: str,
    broker: str,
    queue_id: int,
    *,
    end: int,
    tags: Collection[str] = (),
    include_properties: bool = False,
) -> DecodedBatch | None:
    """Decode the records of a pull body of queue ``topic@broker:queue_id``; None for an empty body.

    Malformed bytes raise :class:`RecordError`.
    """
    heads, bodies, props = _split(data, len(topic.encode()))
    count = len(heads)
    if not count:
        return None
    _, _, offsets, phys, sys_flags, born, stored, hosts, reconsume, _ = zip(*heads, strict=True)
    all_offsets = offsets
    keep = count if offsets[-1] < end else bisect.bisect_left(offsets, end)
    if keep < count:
        offsets, phys, sys_flags, born, stored, hosts, reconsume = (
            column[:keep] for column in (offsets, phys, sys_flags, born, stored, hosts, reconsume)
        )
        bodies, props = bodies.slice(0, keep), props.slice(0, keep)
    if any(flag & SYSFLAG_COMPRESSED for flag in sys_flags):
        bodies = pa.array(
            [
                zlib.decompress(b) if f & SYSFLAG_COMPRESSED else b
                for b, f in zip(bodies.to_pylist(), sys_flags, strict=True)
            ],
            pa.binary(),
        )
    reversed_props = pc.binary_reverse(props)
    uniq = _non_empty(_extract(reversed_props, _UNIQ_RE))
    if uniq.null_count:
        fallback = [offset_msg_id(h, p) for h, p in zip(hosts, phys, strict=True)]
        uniq = pc.coalesce(uniq, pa.array(fallback, pa.string()))
    tag_column = _extract(reversed_props, _TAGS_RE)
    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), keep),
        pa.repeat(pa.scalar(broker, pa.string()), keep),
        pa.repeat(pa.scalar(queue_id, pa.int32()), keep),
        pa.array(offsets, pa.int64()),
        uniq,
        _keys(_extract(reversed_props, _KEYS_RE)),
        tag_column,
        bodies,
        _user_properties(props) if include_properties else pa.nulls(keep, PROPERTIES_TYPE),
        _timestamps(born),
        _timestamps(stored),
        pa.array(reconsume, pa.int32()),
    ]
    batch = pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    if tags:
        batch = batch.filter(pc.fill_null(pc.is_in(tag_column, pa.array(list(tags), pa.string())), False))
    return DecodedBatch(batch, all_offsets)


def _split(data: bytes, topic_len: int) -> tuple[list[tuple[Any, ...]], pa.Array, pa.Array]:
    """The head fields of every record, and its bodies and property bytes as Arrow arrays.

    Python only finds where things are: the record boundaries split ``data`` into segments (body,
    topic, properties, next head, ...) that form one binary array over ``data`` itself, and Arrow's
    ``take`` of every fourth segment copies the bodies (and the properties) out in C. Anything unusual
    (IPv6 hosts, 5.x magic, blank fillers, a foreign topic length) goes through the general decoder.
    """
    unpack = _HEAD.unpack_from
    heads: list[tuple[Any, ...]] = []
    bounds: list[int] = []
    add_head, add_bounds = heads.append, bounds.extend
    pos = 0
    size = len(data)
    last_start = size - MIN_RECORD_SIZE
    try:
        while pos <= last_start:
            head = unpack(data, pos)
            at = pos + _BODY_AT + head[9]
            limit = pos + head[0]
            if (
                head[1] != MESSAGE_MAGIC_CODE
                or head[4] & _HOST_V6_FLAGS
                or head[9] < 0
                or limit > size
                or data[at] != topic_len
                or at + 3 + topic_len > limit
            ):
                break
            add_head(head)
            add_bounds((pos + _BODY_AT, at, at + 3 + topic_len, limit))
            pos = limit
    except (struct.error, IndexError):
        pass
    n = len(heads)
    if n:
        segments = pa.Array.from_buffers(
            pa.binary(),
            len(bounds) - 1,
            [None, pa.array(bounds, pa.int32()).buffers()[1], pa.py_buffer(data)],
        )
        every_fourth = pa.array(range(0, 4 * n, 4), pa.int32())
        bodies = segments.take(every_fourth)
        props = segments.take(pc.add(every_fourth, _TWO))
    else:
        bodies = props = pa.array([], pa.binary())
    if pos < size:
        records = list(iter_records(memoryview(data)[pos:]))
        heads += [_head_of(record) for record in records]
        bodies = pa.concat_arrays([bodies, pa.array([r.body for r in records], pa.binary())])
        props = pa.concat_arrays([props, pa.array([r.properties.encode() for r in records], pa.binary())])
    return heads, bodies, props


def _head_of(record: DecodedRecord) -> tuple[Any, ...]:
    """A record's fields in ``_HEAD``'s order (for records the fast path leaves to iter_records)."""
    return (
        record.total_size,
        MESSAGE_MAGIC_CODE,
        record.queue_offset,
        record.commitlog_offset,
        record.sys_flag,
        record.born_timestamp,
        record.store_timestamp,
        record.store_host,
        record.reconsume_times,
        len(record.body),
    )


def _extract(reversed_props: pa.Array, pattern: str) -> pa.Array:
    """The property's value per row; null where the row lacks it (struct_field keeps the nulls of the
    regex's struct result, which ``.field()`` would drop)."""
    try:
        found = pc.struct_field(pc.extract_regex(reversed_props, pattern), [0])
        return pc.binary_reverse(found).cast(pa.string())
    except pa.ArrowInvalid as exc:
        raise RecordError(f"message properties are not UTF-8: {exc}") from None


def _non_empty(values: pa.Array) -> pa.Array:
    return pc.if_else(pc.equal(values, _EMPTY), _NULL_STRING, values)


def _keys(keys: pa.Array) -> pa.Array:
    """KEYS split at runs of spaces, as RocketMQ's index splits them; null when no key is set."""
    trimmed = _non_empty(pc.utf8_trim(keys, " "))
    return pc.split_pattern_regex(trimmed, " +").cast(KEYS_TYPE)


def _timestamps(millis: tuple[int, ...]) -> pa.Array:
    return pa.array(millis, _MILLIS).cast(TIMESTAMP)


def _user_properties(props: pa.Array) -> pa.Array:
    system = SYSTEM_PROPERTIES
    rows = [
        [(k, v) for k, v in decode_properties(raw.decode("utf-8", "replace")).items() if k not in system]
        for raw in props.to_pylist()
    ]
    return pa.array(rows, PROPERTIES_TYPE)
