"""The HA stream codec: the handshake, offset reports and chunks survive any split of the TCP stream."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.errors import ProtocolError
from cometmq.protocol.ha import (
    AUTH_CHALLENGE_SIZE,
    AUTH_MAGIC,
    CHUNK_HEADER_SIZE,
    CONFIRMED_CHUNK_HEADER_SIZE,
    HELLO_MAGIC,
    HELLO_SIZE,
    MAX_EPOCH_ENTRIES,
    REPORT_SIZE,
    Auth,
    AuthChallenge,
    AuthDecoder,
    ChunkDecoder,
    Hello,
    HelloAnswer,
    HelloAnswerDecoder,
    HelloDecoder,
    ReportDecoder,
    auth_content,
    encode_auth,
    encode_auth_challenge,
    encode_chunk_header,
    encode_confirmed_chunk_header,
    encode_hello,
    encode_hello_answer,
    encode_report,
)

# Up to 2^60: a first report from 0x16 << 56 on would start like a TLS ClientHello, which a master
# refuses (no commit log comes near that size).
offsets = st.integers(min_value=0, max_value=(1 << 60))


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


confirmed_chunks = st.lists(st.tuples(offsets, st.binary(max_size=300), offsets), min_size=1, max_size=10)


@given(confirmed_chunks, st.lists(st.integers(min_value=0), max_size=40))
def test_chunks_after_a_handshake_carry_the_confirmed_offset_through_any_split(
    sent: list[tuple[int, bytes, int]], cuts: list[int]
) -> None:
    stream = b"".join(
        encode_confirmed_chunk_header(offset, len(body), confirmed) + body for offset, body, confirmed in sent
    )
    decoder = ChunkDecoder(confirmed=True)
    received: list[tuple[int, bytes]] = []
    for piece in pieces(stream, cuts):
        before = len(received)
        received += decoder.feed(piece)
        if len(received) > before:  # the confirmed offset of the last whole chunk fed
            assert decoder.confirmed == sent[len(received) - 1][2]
    assert received == [(offset, body) for offset, body, _ in sent]
    assert decoder.confirmed == sent[-1][2]
    assert decoder.buffered == 0


def test_confirmed_chunk_header_layout_and_a_classic_decoder_is_unchanged() -> None:
    header = encode_confirmed_chunk_header(1, 2, 3)
    assert header == bytes(7) + b"\x01" + bytes(3) + b"\x02" + bytes(7) + b"\x03"
    assert len(header) == CONFIRMED_CHUNK_HEADER_SIZE
    assert ChunkDecoder(confirmed=True).confirmed == -1
    classic = ChunkDecoder()
    assert classic.feed(encode_chunk_header(5, 1) + b"x") == [(5, b"x")]
    assert classic.confirmed == -1


def test_a_negative_confirmed_offset_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="confirmed offset"):
        ChunkDecoder(confirmed=True).feed(encode_confirmed_chunk_header(0, 0, -1))


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
    confirmed_decoder = ChunkDecoder(max_body=1024, confirmed=True)
    report_decoder = ReportDecoder()
    for decoder in (chunk_decoder, confirmed_decoder):
        for piece in pieces(data, cuts):
            try:
                decoder.feed(piece)
            except ProtocolError:
                break
    for piece in pieces(data, cuts):
        try:
            report_decoder.feed(piece)
        except ProtocolError:
            break


ids = st.integers(min_value=0, max_value=(1 << 63) - 1)


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Epoch histories: epochs rising from 1, start offsets not going down."""
    epochs = sorted(draw(st.sets(st.integers(min_value=1, max_value=1 << 40), max_size=8)))
    starts = sorted(draw(st.lists(offsets, min_size=len(epochs), max_size=len(epochs))))
    return list(zip(epochs, starts, strict=True))


def test_hello_layout() -> None:
    assert len(HELLO_MAGIC) == 8 and HELLO_MAGIC[0] & 0x80
    hello = encode_hello(2, 7)
    assert len(hello) == HELLO_SIZE
    assert hello == HELLO_MAGIC + (2).to_bytes(8, "big") + (7).to_bytes(8, "big")
    answer = encode_hello_answer(3, 100, [(1, 0), (3, 40)])
    assert answer == HELLO_MAGIC + b"".join(
        n.to_bytes(size, "big") for n, size in ((3, 8), (100, 8), (2, 4), (1, 8), (0, 8), (3, 8), (40, 8))
    )


@given(ids, ids, st.lists(offsets, max_size=5), st.lists(st.integers(min_value=0), max_size=20))
def test_the_master_reads_a_hello_and_the_reports_after_it_from_any_split(
    broker_id: int, expected_epoch: int, reports: list[int], cuts: list[int]
) -> None:
    stream = encode_hello(broker_id, expected_epoch) + b"".join(map(encode_report, reports))
    decoder = HelloDecoder()
    decided = False
    rest = b""
    for piece in pieces(stream, cuts):
        if decided:
            rest += piece
        elif decoder.feed(piece):
            decided = True
            rest = decoder.rest
    assert decided
    assert decoder.hello == Hello(broker_id, expected_epoch)
    assert rest == b"".join(map(encode_report, reports))


@given(st.lists(offsets, min_size=1, max_size=5), st.integers(min_value=1, max_value=REPORT_SIZE))
def test_a_slave_without_a_handshake_starts_with_a_report(reports: list[int], first: int) -> None:
    stream = b"".join(map(encode_report, reports))
    decoder = HelloDecoder()
    assert not decoder.feed(b"")
    assert decoder.feed(stream[:first])
    assert decoder.hello is None
    assert decoder.rest == stream[:first]


@given(ids, offsets, histories(), st.binary(max_size=40), st.lists(st.integers(min_value=0), max_size=20))
def test_the_slave_reads_an_answer_and_the_chunks_after_it_from_any_split(
    epoch: int, end: int, history: list[tuple[int, int]], after: bytes, cuts: list[int]
) -> None:
    decoder = HelloAnswerDecoder()
    answers: list[HelloAnswer] = []
    rest = b""
    for piece in pieces(encode_hello_answer(epoch, end, history) + after, cuts):
        if answers:
            rest += piece
            continue
        answer = decoder.feed(piece)
        if answer is not None:
            answers.append(answer)
            rest = decoder.rest
    assert answers == [HelloAnswer(epoch, end, tuple(history))]
    assert rest == after


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (encode_hello_answer(1, -1, []), "end -1"),
        (encode_hello_answer(1, 0, [(2, 0), (2, 5)]), "not in order"),
        (encode_hello_answer(1, 0, [(1, 10), (2, 5)]), "not in order"),
        (encode_hello_answer(1, 0, [(0, 0)]), "not in order"),
        (HELLO_MAGIC + bytes(16) + (MAX_EPOCH_ENTRIES + 1).to_bytes(4, "big"), "epoch entries"),
        (b"\x00" * 40, "not an HA hello answer"),
    ],
    ids=["negative end", "an epoch twice", "a start going down", "epoch 0", "too many entries", "no magic"],
)
def test_an_answer_that_cannot_be_one_is_a_protocol_error(answer: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        HelloAnswerDecoder().feed(answer)


def test_a_hello_with_a_wrong_magic_or_negative_fields_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="not an HA hello"):
        HelloDecoder().feed(b"\xccCOMXX")
    with pytest.raises(ProtocolError, match="brokerId -1"):
        HelloDecoder().feed(encode_hello(-1, 0))


@given(st.binary(max_size=200), st.lists(st.integers(min_value=0), max_size=10))
def test_arbitrary_bytes_start_a_link_or_raise_protocol_error(data: bytes, cuts: list[int]) -> None:
    hello_decoder = HelloDecoder()
    answer_decoder = HelloAnswerDecoder()
    for piece in pieces(data, cuts):
        try:
            if hello_decoder.feed(piece):
                break
        except ProtocolError:
            break
    for piece in pieces(data, cuts):
        try:
            if answer_decoder.feed(piece) is not None:
                break
        except ProtocolError:
            break


nonces = st.binary(min_size=16, max_size=16)
access_keys = st.text(min_size=1, max_size=60).filter(lambda key: len(key.encode()) <= 1024)
signatures = st.binary(min_size=20, max_size=20)


def test_auth_layout() -> None:
    assert len(AUTH_MAGIC) == 8 and AUTH_MAGIC[0] & 0x80 and AUTH_MAGIC[:4] == HELLO_MAGIC[:4]
    challenge = encode_auth_challenge(bytes(range(16)))
    assert len(challenge) == AUTH_CHALLENGE_SIZE and challenge == AUTH_MAGIC + bytes(range(16))
    assert encode_auth("ak", b"s" * 16, bytes(20)) == AUTH_MAGIC + b"\x00\x02ak" + b"s" * 16 + bytes(20)
    assert auth_content(b"m" * 16, b"s" * 16, Hello(1, 2)) == (
        b"cometmq-ha-auth-v1" + b"m" * 16 + b"s" * 16 + encode_hello(1, 2)
    )
    with pytest.raises(ValueError, match="16 bytes"):
        encode_auth_challenge(b"short")
    with pytest.raises(ValueError, match="16 bytes"):
        encode_auth("ak", b"short", bytes(20))
    with pytest.raises(ValueError, match="20-byte HMAC-SHA1"):
        encode_auth("ak", b"s" * 16, b"not a digest")


@given(
    access_keys, nonces, signatures, st.binary(max_size=20), st.lists(st.integers(min_value=0), max_size=20)
)
def test_the_master_reads_an_auth_and_the_bytes_after_it_from_any_split(
    key: str, nonce: bytes, signature: bytes, after: bytes, cuts: list[int]
) -> None:
    decoder = AuthDecoder()
    found: list[Auth] = []
    rest = b""
    for piece in pieces(encode_auth(key, nonce, signature) + after, cuts):
        if found:
            rest += piece
            continue
        auth = decoder.feed(piece)
        if auth is not None:
            found.append(auth)
            rest = decoder.rest
    assert found == [Auth(key, nonce, signature)] and found[0].signature == signature
    assert rest == after


@given(nonces, ids, offsets, histories(), st.lists(st.integers(min_value=0), max_size=20))
def test_the_slave_reads_a_challenge_then_the_answer_from_any_split(
    nonce: bytes, epoch: int, end: int, history: list[tuple[int, int]], cuts: list[int]
) -> None:
    decoder = HelloAnswerDecoder()
    seen: list[object] = []
    for piece in pieces(encode_auth_challenge(nonce) + encode_hello_answer(epoch, end, history), cuts):
        result = decoder.feed(piece)
        while result is not None:
            seen.append(result)
            result = decoder.feed(b"") if isinstance(result, AuthChallenge) else None
    assert seen == [AuthChallenge(nonce), HelloAnswer(epoch, end, tuple(history))]


def test_a_second_challenge_or_a_bad_auth_is_a_protocol_error() -> None:
    decoder = HelloAnswerDecoder()
    assert decoder.feed(encode_auth_challenge(bytes(16))) == AuthChallenge(bytes(16))
    with pytest.raises(ProtocolError, match="not an HA hello answer"):
        decoder.feed(encode_auth_challenge(bytes(16)))
    with pytest.raises(ProtocolError, match="an access key of 0 bytes"):
        AuthDecoder().feed(AUTH_MAGIC + bytes(2))
    with pytest.raises(ProtocolError, match="not UTF-8"):
        AuthDecoder().feed(AUTH_MAGIC + b"\x00\x01\xff" + bytes(36))
    with pytest.raises(ProtocolError, match="not an HA AUTH"):
        AuthDecoder().feed(encode_hello(1, 0))


def test_a_tls_client_hello_where_a_hello_is_expected_is_a_protocol_error_saying_so() -> None:
    with pytest.raises(ProtocolError, match="the slave speaks TLS, this HA port does not"):
        HelloDecoder().feed(b"\x16\x03\x01\x02\x00\x01\x00\x01")


@given(st.binary(max_size=200), st.lists(st.integers(min_value=0), max_size=10))
def test_arbitrary_bytes_make_an_auth_or_raise_protocol_error(data: bytes, cuts: list[int]) -> None:
    decoder = AuthDecoder()
    for piece in pieces(data, cuts):
        try:
            if decoder.feed(piece) is not None:
                break
        except ProtocolError:
            break
