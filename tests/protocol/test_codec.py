"""The frame codec: round trips in both serializations, byte-by-byte feeding, and hostile input."""

from __future__ import annotations

import contextlib
import json
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cometmq.errors import ProtocolError
from cometmq.protocol import (
    FrameDecoder,
    RemotingCommand,
    SerializeType,
    decode_frame,
    encode,
    encode_bytes,
    fastjson,
)
from cometmq.protocol.codec import encode_header

GOLDEN = Path(__file__).parent.parent / "golden" / "frames"

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
ext_fields = st.dictionaries(
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20),
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40),
    max_size=8,
)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-32768, 32767),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.none() | st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40),
    ext_fields=ext_fields,
    body=st.binary(max_size=300),
    language=st.sampled_from(["JAVA", "CPP", "PYTHON", "GO"]),
    version=st.integers(0, 32767),
    serialize_type=st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]),
)


def _same(a: RemotingCommand, b: RemotingCommand) -> None:
    assert (
        a.code,
        a.opaque,
        a.flag,
        a.remark,
        a.ext_fields,
        a.body,
        a.language,
        a.version,
        a.serialize_type,
    ) == (
        b.code,
        b.opaque,
        b.flag,
        b.remark,
        b.ext_fields,
        bytes(b.body),
        b.language,
        b.version,
        b.serialize_type,
    )


@given(commands)
def test_round_trip_in_both_serializations(cmd: RemotingCommand) -> None:
    (decoded,) = FrameDecoder().feed(encode_bytes(cmd))
    _same(decoded, cmd)


@given(st.lists(commands, min_size=1, max_size=4), st.integers(1, 50))
def test_decoder_reassembles_frames_fed_in_arbitrary_pieces(cmds: list[RemotingCommand], step: int) -> None:
    stream = b"".join(encode_bytes(c) for c in cmds)
    decoder = FrameDecoder()
    out: list[RemotingCommand] = []
    for i in range(0, len(stream), step):
        out.extend(decoder.feed(stream[i : i + step]))
    assert len(out) == len(cmds)
    for got, want in zip(out, cmds, strict=True):
        _same(got, want)
    assert decoder.buffered == 0


@settings(max_examples=300)
@given(st.binary(max_size=120))
def test_arbitrary_header_bytes_in_a_well_framed_message(header: bytes) -> None:
    for kind in (0, 1):
        frame = struct.pack(">ii", 4 + len(header), (kind << 24) | len(header)) + header
        with contextlib.suppress(ProtocolError):
            FrameDecoder().feed(frame)


def test_java_style_numbers_and_booleans_in_ext_fields_become_java_strings() -> None:
    header = json.dumps(
        {
            "code": 10,
            "opaque": 3,
            "flag": 0,
            "language": "JAVA",
            "version": 121,
            "extFields": {"e": 4, "k": False, "g": 1700000000000, "x": None, "s": "v"},
        }
    ).encode()
    frame = struct.pack(">i", len(header)) + header
    cmd = decode_frame(frame)
    assert cmd.ext_fields == {"e": "4", "k": "false", "g": "1700000000000", "s": "v"}


def test_unknown_serialization_type_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="serialization type 7"):
        decode_frame(struct.pack(">i", (7 << 24) | 2) + b"{}")


def test_response_keeps_the_request_serialization() -> None:
    request = RemotingCommand(code=34, opaque=9, serialize_type=SerializeType.ROCKETMQ)
    response = request.response(ext_fields={"a": "b"})
    assert response.serialize_type is SerializeType.ROCKETMQ
    assert response.opaque == 9 and response.is_response
    assert encode_bytes(response)[4] == 1  # high byte of the header word: ROCKETMQ


def test_body_parts_are_written_without_joining() -> None:
    parts = [memoryview(b"abc"), memoryview(b"defg")]
    cmd = RemotingCommand(code=0, body_parts=parts)
    _head, *body = encode(cmd)
    assert all(written is part for written, part in zip(body, parts, strict=True))
    (decoded,) = FrameDecoder().feed(encode_bytes(cmd))
    assert decoded.body == b"abcdefg"


GOLDEN_FILES = sorted(GOLDEN.glob("*.bin"))


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=[p.stem for p in GOLDEN_FILES])
def test_golden_cpp_frames_decode_and_re_encode(path: Path) -> None:
    raw = path.read_bytes()
    (cmd,) = FrameDecoder().feed(raw)
    assert cmd.language == "CPP" and cmd.version == 63
    assert cmd.serialize_type is SerializeType.JSON
    # The header comes from jsoncpp: alphabetical keys and a trailing newline, so re-encoding gives
    # the same command, not the same bytes; the body is carried byte for byte.
    (length,) = struct.unpack_from(">i", raw)
    header_len = struct.unpack_from(">i", raw, 4)[0] & 0xFFFFFF
    original_header = json.loads(raw[8 : 8 + header_len])
    assert cmd.code == original_header["code"]
    assert cmd.ext_fields == {
        k: v if isinstance(v, str) else str(v) for k, v in original_header.get("extFields", {}).items()
    }
    assert cmd.body == raw[8 + header_len : 4 + length]
    again = encode_bytes(cmd)
    (decoded,) = FrameDecoder().feed(again)
    _same(decoded, cmd)
    assert again.endswith(raw[8 + header_len :])


def test_golden_frames_were_captured() -> None:
    names = {p.stem for p in GOLDEN_FILES}
    assert {"cpp_send_message", "cpp_send_batch", "cpp_pull_message", "cpp_heartbeat_consumer"} <= names


@pytest.mark.parametrize(
    "header",
    [
        b'{"code":1e999}',  # overflows int()
        b"[" * 100_000,  # nests deeper than the JSON parser recurses
        b'{"code":1,"extFields":' + b"[" * 100_000 + b"}",
        # Within what orjson reads, deeper than writing the value back as a Java string may recurse.
        b'{"code":1,"extFields":{"k":' + b"[" * 1000 + b"]" * 1000 + b"}}",
        b'{"code":1,"remark":"\\udc00","extFields":{"k":' + b"[" * 1000 + b"]" * 1000 + b"}}",
    ],
)
def test_hostile_json_headers_are_protocol_errors(header: bytes) -> None:
    frame = struct.pack(">ii", 4 + len(header), len(header)) + header
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(frame)


# Headers are read and written with orjson; the standard library is the reference it must agree with,
# and decides what orjson refuses. st.text() never draws surrogates: they are mixed in here.
any_text = st.text(
    st.characters() | st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=()),
    max_size=40,
)


@given(commands.filter(lambda c: c.serialize_type == SerializeType.JSON))
def test_json_headers_are_written_byte_for_byte_as_the_standard_encoder_writes_them(
    cmd: RemotingCommand,
) -> None:
    header = json.loads(encode_header(cmd))
    assert encode_header(cmd) == json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()


@given(any_text, st.dictionaries(any_text.filter(bool), any_text, max_size=4))
def test_text_orjson_refuses_round_trips_through_the_standard_library(
    remark: str, fields: dict[str, str]
) -> None:
    cmd = RemotingCommand(code=1, remark=remark or None, ext_fields=fields, serialize_type=SerializeType.JSON)
    _same(decode_frame(encode_bytes(cmd)[4:]), cmd)


@pytest.mark.parametrize(
    ("header", "opaque", "remark"),
    [
        (b'{"code":1,"opaque":7,"remark":"\\ud800"}', 7, "\ud800"),  # an escaped lone surrogate
        (b'{"code":1,"opaque":NaN,"remark":"x"}', None, "x"),  # NaN: int() refuses it below
    ],
)
def test_json_headers_orjson_refuses_are_read_as_the_standard_library_reads_them(
    header: bytes, opaque: int | None, remark: str | None
) -> None:
    frame = struct.pack(">ii", 4 + len(header), len(header)) + header
    if opaque is None:
        with pytest.raises(ProtocolError, match="opaque"):
            FrameDecoder().feed(frame)
        return
    (cmd,) = FrameDecoder().feed(frame)
    assert (cmd.code, cmd.opaque, cmd.remark) == (1, opaque, remark)


@given(st.integers(1, 200), st.sampled_from(["[", '{"k":']), st.integers(0, 3))
def test_extfields_values_nested_past_the_depth_limit_are_protocol_errors(
    depth: int, opener: str, spaces: int
) -> None:
    closer = "]" if opener == "[" else "}"
    value = (opener + " " * spaces) * depth + "1" + closer * depth
    header = f'{{"code":1,"extFields":{{"k":{value}}}}}'.encode()
    frame = struct.pack(">ii", 4 + len(header), len(header)) + header
    if depth + 2 <= fastjson.MAX_DEPTH:  # the header object holds extFields, which holds the value
        (cmd,) = FrameDecoder().feed(frame)
        assert json.loads(cmd.ext_fields["k"]) == json.loads(value)
    else:
        with pytest.raises(ProtocolError, match="nested deeper"):
            FrameDecoder().feed(frame)
