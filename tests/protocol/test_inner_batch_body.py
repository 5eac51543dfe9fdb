"""Counting a batch body's entries (a broker's INNER_NUM) and unwrapping inner-batch records into plain
ones (the Spark reader): property tests against the decoders they must agree with."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.client.message import decode_pulled
from cometmq.errors import ProtocolError
from cometmq.protocol.batch import (
    ENTRY_HEAD,
    BatchEntry,
    count_batch_entries,
    decode_batch_body,
    encode_batch_body,
    unwrap_inner_batches,
)
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import (
    INNER_BATCH_FLAG,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    NEED_UNWRAP_FLAG,
    crc32,
    decode_records,
    encode_host,
    pack_properties_length,
    pack_record_head,
    topic_field,
)

entries = st.lists(
    st.builds(
        BatchEntry,
        st.integers(-(2**31), 2**31 - 1),
        st.binary(max_size=64),
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=16),
    ),
    min_size=1,
    max_size=20,
)


@given(entries)
def test_count_agrees_with_the_decoder_on_well_formed_bodies(batch: list[BatchEntry]) -> None:
    assert count_batch_entries(encode_batch_body(batch)) == len(batch)


def count_accepts_exactly_what_the_decoder_accepts(data: bytes) -> None:
    try:
        expected: int | None = len(decode_batch_body(data))
    except ProtocolError:
        expected = None
    if expected is None:
        with pytest.raises(ProtocolError):
            count_batch_entries(data)
    else:
        assert count_batch_entries(data) == expected


@given(st.binary(max_size=200))
def test_count_accepts_exactly_what_the_decoder_accepts(data: bytes) -> None:
    count_accepts_exactly_what_the_decoder_accepts(data)


def entry(body: bytes, properties: bytes) -> bytes:
    total = ENTRY_HEAD.size + len(body) + 2 + len(properties)
    return ENTRY_HEAD.pack(total, 0, 0, 0, len(body)) + body + struct.pack(">H", len(properties)) + properties


@pytest.mark.parametrize(
    "properties",
    [b"a\x01" + b"x" * 40_000 + b"\x02", b"a\x01" + b"x" * 32_766, b"\xff\xfe\x01v", b"k\x01\xc3"],
    ids=["over 32767 bytes", "32768 bytes", "not UTF-8", "cut UTF-8"],
)
def test_count_refuses_an_entry_the_decoder_refuses(properties: bytes) -> None:
    data = entry(b"ok", b"") + entry(b"hello", properties)
    count_accepts_exactly_what_the_decoder_accepts(data)
    with pytest.raises(ProtocolError):
        count_batch_entries(data)


def test_a_record_whose_batch_cannot_be_split_stays_whole() -> None:
    plain = record(b"before", 9, 0)
    unsplittable = entry(b"hello", b"a\x01" + b"x" * 40_000)  # PROPERTIESLENGTH negative as an int16
    wrapped = record(unsplittable, 10, INNER_BATCH_FLAG | NEED_UNWRAP_FLAG)
    good = record(encode_batch_body([BatchEntry(0, b"m", "")] * 2), 11, INNER_BATCH_FLAG | NEED_UNWRAP_FLAG)
    unwrapped = unwrap_inner_batches(plain + wrapped + good, 0)
    assert unwrapped is not None
    records = decode_records(unwrapped)
    assert [(r.queue_offset, r.body) for r in records] == [
        (9, b"before"),
        (10, unsplittable),
        (11, b"m"),
        (12, b"m"),
    ]


def record(body: bytes, queue_offset: int, sys_flag: int, properties: bytes = b"") -> bytes:
    topic = topic_field(b"Topic")
    head = pack_record_head(
        MIN_RECORD_SIZE - 1 + len(body) + len(topic) + len(properties),
        MESSAGE_MAGIC_CODE,
        crc32(body) & 0x7FFFFFFF,
        3,
        0,
        queue_offset,
        4096,
        sys_flag,
        1_700_000_000_000,
        encode_host("10.0.0.2", 40000),
        1_700_000_000_123,
        encode_host("10.0.0.1", 10911),
        0,
        0,
        len(body),
    )
    return head + body + topic + pack_properties_length(len(properties)) + properties


@given(entries, st.integers(0, 25))
def test_unwrapped_records_are_the_batchs_messages_from_the_first_offset_on(
    batch: list[BatchEntry], first: int
) -> None:
    plain = record(b"before", 9, 0)
    wrapped = record(encode_batch_body(batch), 10, INNER_BATCH_FLAG | NEED_UNWRAP_FLAG, b"INNER_NUM\x011")
    unwrapped = unwrap_inner_batches(plain + wrapped, 10 + first)
    assert unwrapped is not None
    got = decode_records(unwrapped, check_crc=True)
    assert got[0].body == b"before"
    kept = decode_batch_body(encode_batch_body(batch))[first:]
    assert [(r.queue_offset, r.flag, r.body, r.properties) for r in got[1:]] == [
        (10 + first + i, e.flag, e.body, e.properties) for i, e in enumerate(kept)
    ]
    assert all(r.sys_flag == 0 and r.store_timestamp == 1_700_000_000_123 for r in got[1:])
    assert unwrap_inner_batches(plain, 0) is None


@given(entries, st.integers(0, 25))
def test_the_consumers_split_agrees_with_the_unwrapped_records(batch: list[BatchEntry], first: int) -> None:
    """decode_pulled (the consumer's split of an inner batch) and unwrap_inner_batches (the Spark reader's)
    give the same messages: offsets, flags, bodies, properties and the batch's store time."""
    data = record(b"before", 9, 0) + record(
        encode_batch_body(batch), 10, INNER_BATCH_FLAG | NEED_UNWRAP_FLAG, b"INNER_NUM\x011"
    )
    unwrapped = unwrap_inner_batches(data, first + 9)
    assert unwrapped is not None
    split = decode_pulled(data, "broker-a", first + 9)
    plain = decode_records(unwrapped)
    assert [(m.queue_offset, m.flag, m.body, m.properties, m.store_timestamp) for m in split] == [
        (r.queue_offset, r.flag, r.body, decode_properties(r.properties), r.store_timestamp) for r in plain
    ]
