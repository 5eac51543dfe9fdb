"""The message record codec (cometmq.protocol.record; docs/protocol.md#record, #message-ids)."""

from __future__ import annotations

import contextlib
import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.client.message import decode_pulled
from cometmq.errors import RecordError
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    decode_host,
    decode_offset_msg_id,
    decode_records,
    encode_host,
    encode_record_into,
    iter_records,
    offset_msg_id,
    record_size,
)

ipv4_hosts = st.builds(
    lambda a, p: a + struct.pack(">i", p), st.binary(min_size=4, max_size=4), st.integers(0, 65535)
)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
topics = st.text(st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=30).filter(
    lambda t: len(t.encode()) <= 127
)
prop_text = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=40)


@st.composite
def records(draw: st.DrawFn) -> dict[str, object]:
    return {
        "queue_id": draw(i32),
        "flag": draw(i32),
        "queue_offset": draw(st.integers(0, 2**63 - 1)),
        "commitlog_offset": draw(st.integers(0, 2**63 - 1)),
        "sys_flag": draw(st.integers(0, 2**31 - 1)) & ~0x30,
        "born_timestamp": draw(i64),
        "born_host": draw(ipv4_hosts),
        "store_timestamp": draw(i64),
        "store_host": draw(ipv4_hosts),
        "reconsume_times": draw(i32),
        "prepared_transaction_offset": draw(i64),
        "body": draw(st.binary(max_size=300)),
        "topic": draw(topics),
        "properties": draw(prop_text),
    }


def encode(fields: dict[str, object]) -> bytes:
    f = fields
    topic = str(f["topic"]).encode()
    props = str(f["properties"]).encode()
    body = f["body"]
    assert isinstance(body, bytes)
    buf = bytearray(b"\xee" * (record_size(len(body), len(topic), len(props)) + 16))
    n = encode_record_into(
        buf,
        8,
        f["queue_id"],  # type: ignore[arg-type]
        f["flag"],  # type: ignore[arg-type]
        f["queue_offset"],  # type: ignore[arg-type]
        f["commitlog_offset"],  # type: ignore[arg-type]
        f["sys_flag"],  # type: ignore[arg-type]
        f["born_timestamp"],  # type: ignore[arg-type]
        f["born_host"],  # type: ignore[arg-type]
        f["store_timestamp"],  # type: ignore[arg-type]
        f["store_host"],  # type: ignore[arg-type]
        f["reconsume_times"],  # type: ignore[arg-type]
        f["prepared_transaction_offset"],  # type: ignore[arg-type]
        body,
        topic,
        props,
    )
    assert n == record_size(len(body), len(topic), len(props))
    # Nothing outside the record was touched.
    assert buf[:8] == b"\xee" * 8 and buf[8 + n :] == b"\xee" * 8
    return bytes(buf[8 : 8 + n])


@given(records())
def test_round_trip_every_field(fields: dict[str, object]) -> None:
    data = encode(fields)
    (rec,) = decode_records(data, check_crc=True)
    assert rec.total_size == len(data)
    assert rec.magic_code == MESSAGE_MAGIC_CODE
    assert rec.body_crc == zlib.crc32(fields["body"]) & 0x7FFFFFFF  # type: ignore[arg-type]
    for name, value in fields.items():
        assert getattr(rec, name) == value, name
    assert rec.offset_msg_id == offset_msg_id(fields["store_host"], fields["commitlog_offset"])  # type: ignore[arg-type]


def test_layout_matches_the_documented_record() -> None:
    # A record with a 22-byte body, a 9-byte topic and 95 bytes of properties is 217 bytes
    # (docs/protocol.md#record); then the offset of every fixed field.
    assert record_size(22, 9, 95) == 217
    data = encode(
        {
            "queue_id": 3,
            "flag": 7,
            "queue_offset": 11,
            "commitlog_offset": 4096,
            "sys_flag": 0,
            "born_timestamp": 1,
            "born_host": encode_host("1.2.3.4", 5),
            "store_timestamp": 2,
            "store_host": encode_host("5.6.7.8", 9),
            "reconsume_times": 4,
            "prepared_transaction_offset": 6,
            "body": b"b" * 22,
            "topic": "t" * 9,
            "properties": "p" * 95,
        }
    )
    assert len(data) == 217
    assert struct.unpack_from(">iI", data, 0) == (217, 0xDAA320A7)
    assert struct.unpack_from(">i", data, 12) == (3,)
    assert struct.unpack_from(">q", data, 20) == (11,)
    assert struct.unpack_from(">q", data, 28) == (4096,)
    assert data[48:56] == bytes([1, 2, 3, 4, 0, 0, 0, 5])
    assert struct.unpack_from(">q", data, 56) == (2,)
    assert data[64:72] == bytes([5, 6, 7, 8, 0, 0, 0, 9])
    assert struct.unpack_from(">i", data, 84) == (22,)
    assert data[88 + 22] == 9
    assert struct.unpack_from(">h", data, 88 + 22 + 1 + 9) == (95,)


def _ipv6_record(v2_magic: bool = False) -> bytes:
    body, topic, props = b"payload", b"T6", b"KEYS\x01k"
    born = bytes(range(16)) + struct.pack(">i", 1234)
    store = bytes(range(16, 32)) + struct.pack(">i", 10911)
    tlen = struct.pack(">h", len(topic)) if v2_magic else struct.pack(">b", len(topic))
    rest = (
        struct.pack(">iiiqqiq", zlib.crc32(body) & 0x7FFFFFFF, 1, 2, 3, 4, 0x30, 5)
        + born
        + struct.pack(">q", 6)
        + store
        + struct.pack(">iqi", 7, 8, len(body))
        + body
        + tlen
        + topic
        + struct.pack(">h", len(props))
        + props
    )
    magic = MESSAGE_MAGIC_CODE_V2 if v2_magic else MESSAGE_MAGIC_CODE
    return struct.pack(">iI", 8 + len(rest), magic) + rest


@pytest.mark.parametrize("v2_magic", [False, True])
def test_decodes_ipv6_hosts_and_5x_magic(v2_magic: bool) -> None:
    data = _ipv6_record(v2_magic)
    assert len(data) == 91 + 7 + 2 + 6 + 24 + (1 if v2_magic else 0)
    (rec,) = decode_records(data, check_crc=True)
    assert rec.born_host[:16] == bytes(range(16))
    assert decode_host(rec.store_host) == (
        str(__import__("ipaddress").ip_address(bytes(range(16, 32)))),
        10911,
    )
    assert (rec.queue_id, rec.flag, rec.queue_offset, rec.commitlog_offset) == (1, 2, 3, 4)
    assert (rec.born_timestamp, rec.store_timestamp, rec.reconsume_times) == (5, 6, 7)
    assert (rec.body, rec.topic, rec.properties) == (b"payload", "T6", "KEYS\x01k")
    assert len(rec.offset_msg_id) == 56


@given(
    st.lists(st.tuples(records(), st.booleans()), min_size=1, max_size=6),
    st.none() | st.integers(0, 6),
)
def test_the_consumers_decoder_reads_every_field_as_the_general_decoder(
    drawn: list[tuple[dict[str, object], bool]], ipv6_at: int | None
) -> None:
    """decode_pulled (the consumer's fast path, head fields unpacked only when read) against
    decode_records, field by field; compressed bodies inflated; an IPv6 record sends it and every
    later record to the general decoder."""
    encoded = []
    for fields, compressed in drawn:
        body = fields["body"]
        assert isinstance(body, bytes)
        sys_flag = fields["sys_flag"]
        assert isinstance(sys_flag, int)
        sys_flag &= ~0x40  # NEED_UNWRAP: an inner batch's record is split (tests/client/test_inner_batch.py)
        if compressed:
            fields = {**fields, "body": zlib.compress(body), "sys_flag": sys_flag | 1}
        else:
            fields = {**fields, "sys_flag": sys_flag & ~1}
        encoded.append(encode(fields))
    if ipv6_at is not None:
        encoded.insert(min(ipv6_at, len(encoded)), _ipv6_record())
    data = b"".join(encoded)
    general = decode_records(data)
    pulled = decode_pulled(data, "broker-a")
    assert len(pulled) == len(general)
    for m, rec in zip(pulled, general, strict=True):
        body = zlib.decompress(rec.body) if rec.sys_flag & 1 else rec.body
        assert (m.topic, m.body, m.broker_name) == (rec.topic, body, "broker-a")
        assert (m.queue_id, m.queue_offset, m.sys_flag, m.reconsume_times) == (
            rec.queue_id,
            rec.queue_offset,
            rec.sys_flag,
            rec.reconsume_times,
        )
        assert (m.flag, m.commitlog_offset, m.born_timestamp, m.store_timestamp) == (
            rec.flag,
            rec.commitlog_offset,
            rec.born_timestamp,
            rec.store_timestamp,
        )
        assert (m.born_host_raw, m.store_host_raw) == (rec.born_host, rec.store_host)
        assert m.offset_msg_id == rec.offset_msg_id
        assert m.properties == decode_properties(rec.properties)


def test_blank_records_are_skipped_and_zero_size_ends() -> None:
    one = encode({**_simple(), "commitlog_offset": 0})
    blank = struct.pack(">iI", 24, BLANK_MAGIC_CODE) + bytes(16)
    two = encode({**_simple(), "commitlog_offset": 100})
    recs = decode_records(one + blank + two + bytes(64))
    assert [r.commitlog_offset for r in recs] == [0, 100]


def _simple() -> dict[str, object]:
    h = encode_host("127.0.0.1", 1)
    return {
        "queue_id": 0,
        "flag": 0,
        "queue_offset": 0,
        "commitlog_offset": 0,
        "sys_flag": 0,
        "born_timestamp": 0,
        "born_host": h,
        "store_timestamp": 0,
        "store_host": h,
        "reconsume_times": 0,
        "prepared_transaction_offset": 0,
        "body": b"abc",
        "topic": "T",
        "properties": "",
    }


def test_malformed_records_raise_record_error() -> None:
    good = encode(_simple())
    with pytest.raises(RecordError):
        decode_records(good[:-1])  # truncated
    with pytest.raises(RecordError):
        decode_records(b"\x00\x00\x00\x10\x12\x34\x56\x78" + bytes(8))  # bad magic
    bad_crc = bytearray(good)
    bad_crc[88] ^= 0xFF
    decode_records(bytes(bad_crc))  # CRC is only checked on request
    with pytest.raises(RecordError, match="CRC"):
        decode_records(bytes(bad_crc), check_crc=True)
    bad_len = bytearray(good)
    struct.pack_into(">i", bad_len, 84, 1000)  # body length overruns the record
    with pytest.raises(RecordError):
        decode_records(bytes(bad_len))


@given(st.binary(max_size=400))
def test_arbitrary_bytes_decode_or_raise_record_error(data: bytes) -> None:
    with contextlib.suppress(RecordError):
        list(iter_records(data, check_crc=True))


@given(records(), st.data())
def test_corrupted_record_never_crashes_the_decoder(fields: dict[str, object], data: st.DataObject) -> None:
    raw = bytearray(encode(fields))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] = data.draw(st.integers(0, 255))
    with contextlib.suppress(RecordError):
        decode_records(bytes(raw))


def test_offset_msg_id() -> None:
    host = encode_host("10.0.0.1", 10911)
    mid = offset_msg_id(host, 0x1234)
    assert mid == "0A00000100002A9F0000000000001234"
    assert decode_offset_msg_id(mid) == (bytes([10, 0, 0, 1]), 10911, 0x1234)
    assert decode_offset_msg_id(mid.lower()) == (bytes([10, 0, 0, 1]), 10911, 0x1234)
    with pytest.raises(ValueError):
        decode_offset_msg_id("ABC")
    with pytest.raises(ValueError):
        decode_offset_msg_id("Z" * 32)


@given(ipv4_hosts, st.integers(0, 2**63 - 1))
def test_offset_msg_id_round_trip(host: bytes, offset: int) -> None:
    mid = offset_msg_id(host, offset)
    assert len(mid) == 32 and mid == mid.upper()
    addr, port, off = decode_offset_msg_id(mid)
    assert addr + struct.pack(">i", port) == host and off == offset


def test_hosts() -> None:
    assert encode_host("10.0.0.1", 10911) == bytes([10, 0, 0, 1, 0, 0, 0x2A, 0x9F])
    assert decode_host(encode_host("::1", 80)) == ("::1", 80)
    with pytest.raises(ValueError):
        decode_host(b"123")
