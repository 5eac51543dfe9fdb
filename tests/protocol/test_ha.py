"""The HA stream codec: offset reports and chunks survive any split of the TCP stream."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.errors import ProtocolError
from cometmq.protocol.ha import (
    CHUNK_HEADER_SIZE,
    REPORT_SIZE,
    ChunkDecoder,
    ReportDecoder,
    encode_chunk_header,
    encode_report,
)

offsets = st.integers(min_value=0, max_value=(1 << 62))


def pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    """*data* cut at the positions *cuts* names (taken modulo its length)."""
    points = sorted({cut % (len(data) + 1) for cut in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def test_wire_layout_is_big_endian_signed() -> None:
    assert encode_report(0x0102030405060708) == bytes(range(1, 9))
    assert encode_chunk_header(1, 2) == bytes(7) + b"\x01" + bytes(3) + b"\x02"
    assert len(encode_report(0)) == REPORT_SIZE
    assert len(encode_chunk_header(0, 0)) == CHUNK_HEADER_SIZE


@given(st.lists(offsets, min_size=1, max_size=20), st.lists(st.integers(min_value=0), max_size=30))
def test_the_master_keeps_the_newest_whole_report_of_any_split(reports: list[int], cuts: list[int]) -> None:
    decoder = ReportDecoder()
    seen: list[int] = []
    for piece in pieces(b"".join(map(encode_report, reports)), cuts):
        newest = decoder.feed(piece)
        if newest is not None:
            seen.append(newest)
    assert seen[-1] == reports[-1]
    assert all(value in reports for value in seen)


def test_a_report_cut_short_waits_for_its_rest() -> None:
    decoder = ReportDecoder()
    data = encode_report(77) + encode_report(99)
    assert decoder.feed(data[:5]) is None
    assert decoder.feed(data[5:13]) == 77
    assert decoder.feed(data[13:]) == 99


def test_a_negative_report_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="negative"):
        ReportDecoder().feed(encode_report(-1))


chunks = st.lists(st.tuples(offsets, st.binary(max_size=300)), min_size=1, max_size=10)


@given(chunks, st.lists(st.integers(min_value=0), max_size=40))
def test_chunks_come_out_whole_and_in_order_from_any_split(
    sent: list[tuple[int, bytes]], cuts: list[int]
) -> None:
    stream = b"".join(encode_chunk_header(offset, len(body)) + body for offset, body in sent)
    decoder = ChunkDecoder()
    received: list[tuple[int, bytes]] = []
    for piece in pieces(stream, cuts):
        received += decoder.feed(piece)
    assert received == sent
    assert decoder.buffered == 0


@pytest.mark.parametrize(
    "header",
    [encode_chunk_header(-1, 0), encode_chunk_header(0, -5), encode_chunk_header(0, 1 << 30)],
    ids=["negative offset", "negative size", "body over the limit"],
)
def test_a_header_that_cannot_be_a_chunk_is_a_protocol_error(header: bytes) -> None:
    with pytest.raises(ProtocolError, match="not an HA chunk header"):
        ChunkDecoder(max_body=1 << 20).feed(header)


@given(st.binary(max_size=200), st.lists(st.integers(min_value=0), max_size=10))
def test_arbitrary_bytes_decode_or_raise_protocol_error(data: bytes, cuts: list[int]) -> None:
    chunk_decoder = ChunkDecoder(max_body=1024)
    report_decoder = ReportDecoder()
    for piece in pieces(data, cuts):
        try:
            chunk_decoder.feed(piece)
        except ProtocolError:
            break
    for piece in pieces(data, cuts):
        try:
            report_decoder.feed(piece)
        except ProtocolError:
            break
