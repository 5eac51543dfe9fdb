"""The remoting frame codec: pure, no I/O (the h11 way).

A frame is ``length:int32 | header-word:int32 | header | body`` (big-endian). ``length`` counts the
header word, the header and the body, not itself. The header word's high byte is the serialization
type (0 JSON, 1 ROCKETMQ binary) and its low 24 bits the header length.

:class:`FrameDecoder` is incremental: feed it any slice of the byte stream and it returns the whole
commands in it. Anything that cannot be a valid frame raises :class:`ProtocolError`; after that the
decoder is unusable and the connection must be closed.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from cometmq.errors import ProtocolError
from cometmq.remoting.codes import LanguageCode, SerializeType
from cometmq.remoting.command import Buffer, RemotingCommand, language_name

# RocketMQ's decoder limit, compared against the whole frame including the length field.
MAX_FRAME_SIZE = 16 * 1024 * 1024

_INT32 = struct.Struct(">i")
_PREFIX = struct.Struct(">ii")
_BINARY_FIXED = struct.Struct(">hbhiii")  # code, language, version, opaque, flag, remark length
_LANGUAGE_BY_NAME = {lang.name: lang for lang in LanguageCode}

_json_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _java_string(value: Any) -> str | None:
    """The string a Java peer would see for a JSON extFields value (fastjson into Map<String,String>)."""
    if isinstance(value, str):
        return value
    if value is None:
        return None
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    return _json_encoder.encode(value)


def _decode_json_header(header: bytes, body: bytes) -> RemotingCommand:
    try:
        obj = json.loads(header)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ProtocolError(f"header is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("JSON header is not an object")
    try:
        code = int(obj["code"])
        opaque = int(obj.get("opaque", 0))
        flag = int(obj.get("flag", 0))
        version = int(obj.get("version", 0))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"JSON header lacks a valid code/opaque/flag/version: {exc}") from None
    raw_fields = obj.get("extFields") or {}
    if not isinstance(raw_fields, dict):
        raise ProtocolError("JSON header extFields is not an object")
    ext_fields: dict[str, str] = {}
    for key, value in raw_fields.items():
        text = _java_string(value)
        if text is not None:
            ext_fields[key] = text
    remark = obj.get("remark")
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        remark=remark if isinstance(remark, str) else None,
        ext_fields=ext_fields,
        body=body,
        language=language_name(obj.get("language", "OTHER")),
        version=version,
        serialize_type=SerializeType.JSON,
    )


def _decode_binary_header(header: bytes, body: bytes) -> RemotingCommand:
    size = len(header)
    if size < 21:
        raise ProtocolError(f"ROCKETMQ header of {size} bytes is shorter than its 21-byte minimum")
    code, language, version, opaque, flag, remark_len = _BINARY_FIXED.unpack_from(header, 0)
    pos = _BINARY_FIXED.size
    if remark_len < 0 or pos + remark_len + 4 > size:
        raise ProtocolError("ROCKETMQ header remark length runs past the header")
    try:
        remark = header[pos : pos + remark_len].decode() if remark_len else None
        pos += remark_len
        (fields_len,) = _INT32.unpack_from(header, pos)
        pos += 4
        if fields_len < 0 or pos + fields_len != size:
            raise ProtocolError("ROCKETMQ header extFields length does not match the header length")
        ext_fields: dict[str, str] = {}
        while pos < size:
            if pos + 2 > size:
                raise ProtocolError("ROCKETMQ header extFields entry is truncated")
            key_len = int.from_bytes(header[pos : pos + 2], "big")
            pos += 2
            if pos + key_len + 4 > size:
                raise ProtocolError("ROCKETMQ header extFields key runs past the header")
            key = header[pos : pos + key_len].decode()
            pos += key_len
            (value_len,) = _INT32.unpack_from(header, pos)
            pos += 4
            if value_len < 0 or pos + value_len > size:
                raise ProtocolError("ROCKETMQ header extFields value runs past the header")
            # 4.9.8 reads an empty value as null, i.e. absent.
            if value_len:
                ext_fields[key] = header[pos : pos + value_len].decode()
            pos += value_len
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"ROCKETMQ header text is not UTF-8: {exc}") from None
    try:
        language_text = LanguageCode(language).name
    except ValueError:
        language_text = "OTHER"
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext_fields,
        body=body,
        language=language_text,
        version=version,
        serialize_type=SerializeType.ROCKETMQ,
    )


def decode_frame(frame: bytes | memoryview) -> RemotingCommand:
    """Decode one frame *without* its 4-byte length prefix (header word, header, body)."""
    if len(frame) < 4:
        raise ProtocolError(f"frame of {len(frame)} bytes has no header-length word")
    (word,) = _INT32.unpack_from(frame, 0)
    serialize_type = (word >> 24) & 0xFF
    header_len = word & 0xFFFFFF
    if 4 + header_len > len(frame):
        raise ProtocolError(f"header length {header_len} exceeds the frame length {len(frame)}")
    header = bytes(frame[4 : 4 + header_len])
    body = bytes(frame[4 + header_len :])
    if serialize_type == SerializeType.JSON:
        return _decode_json_header(header, body)
    if serialize_type == SerializeType.ROCKETMQ:
        return _decode_binary_header(header, body)
    raise ProtocolError(f"unknown serialization type {serialize_type}")


class FrameDecoder:
    """Incremental decoder: ``feed(data)`` returns the commands completed by ``data``."""

    __slots__ = ("_broken", "_buffer", "max_frame_size")

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self._buffer = bytearray()
        self._broken = False
        self.max_frame_size = max_frame_size

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buffer)

    def feed(self, data: Buffer) -> list[RemotingCommand]:
        if self._broken:
            raise ProtocolError("decoder already failed; the connection must be closed")
        buffer = self._buffer
        buffer += data
        commands: list[RemotingCommand] = []
        pos = 0
        end = len(buffer)
        try:
            # Slicing a memoryview copies nothing; decode_frame copies header and body once each. The
            # view is released before the consumed bytes are deleted (a bytearray with an exported
            # view cannot resize).
            with memoryview(buffer) as view:
                while end - pos >= 4:
                    (length,) = _INT32.unpack_from(view, pos)
                    if length < 4 or length + 4 > self.max_frame_size:
                        raise ProtocolError(
                            f"frame length {length} outside 4..{self.max_frame_size - 4} bytes"
                        )
                    if end - pos - 4 < length:
                        break
                    commands.append(decode_frame(view[pos + 4 : pos + 4 + length]))
                    pos += 4 + length
        except ProtocolError:
            self._broken = True
            raise
        if pos:
            del buffer[:pos]
        return commands


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    header: dict[str, Any] = {
        "code": cmd.code,
        "extFields": cmd.ext_fields,
        "flag": cmd.flag,
        "language": cmd.language,
        "opaque": cmd.opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": cmd.version,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    return _json_encoder.encode(header).encode()


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    remark = cmd.remark.encode() if cmd.remark else b""
    parts = []
    for key, value in cmd.ext_fields.items():
        key_bytes = key.encode()
        value_bytes = value.encode()
        parts.append(len(key_bytes).to_bytes(2, "big"))
        parts.append(key_bytes)
        parts.append(_INT32.pack(len(value_bytes)))
        parts.append(value_bytes)
    fields = b"".join(parts)
    language = _LANGUAGE_BY_NAME.get(cmd.language, LanguageCode.OTHER)
    return b"".join(
        (
            _BINARY_FIXED.pack(cmd.code, language, cmd.version, cmd.opaque, cmd.flag, len(remark)),
            remark,
            _INT32.pack(len(fields)),
            fields,
        )
    )


def encode_header(cmd: RemotingCommand) -> bytes:
    """The serialized header of ``cmd`` in its own serialization type."""
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        return _encode_binary_header(cmd)
    return _encode_json_header(cmd)


def encode(cmd: RemotingCommand) -> list[Buffer]:
    """The frame for ``cmd`` as buffers to write in order (body parts are not copied)."""
    header = encode_header(cmd)
    if len(header) > 0xFFFFFF:
        raise ProtocolError(f"header of {len(header)} bytes exceeds the 24-bit header length")
    body_length = cmd.body_length
    length = 4 + len(header) + body_length
    if length + 4 > MAX_FRAME_SIZE:
        raise ProtocolError(f"frame of {length + 4} bytes exceeds {MAX_FRAME_SIZE} bytes")
    head = _PREFIX.pack(length, (int(cmd.serialize_type) << 24) | len(header)) + header
    if cmd.body_parts is not None:
        return [head, *cmd.body_parts]
    if cmd.body:
        return [head, cmd.body]
    return [head]


def encode_bytes(cmd: RemotingCommand) -> bytes:
    """The whole frame for ``cmd`` as one bytes object."""
    return b"".join(encode(cmd))
