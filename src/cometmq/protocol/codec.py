"""The remoting frame codec: pure, no I/O (the h11 way).

A frame is ``length:int32 | header-word:int32 | header | body`` (big-endian). ``length`` counts the
header word, the header and the body, not itself. The header word's high byte is the serialization
type (0 JSON, 1 ROCKETMQ binary) and its low 24 bits the header length.

:class:`FrameDecoder` is incremental: feed it any slice of the byte stream and it returns the whole
commands in it. Anything that cannot be a valid frame raises :class:`ProtocolError`; after that the
decoder is unusable and the connection must be closed. Besides ``feed(data)``, it offers the two halves
of a receive without an intermediate copy (what ``asyncio.BufferedProtocol`` wants): ``get_buffer()``
is where the next bytes are to be written, ``buffer_updated(n)`` says ``n`` of them were.

Receive buffers: small frames collect in a reused 16 KiB buffer and are copied out when whole (many
may arrive in one read); a frame of at least 4 KiB that is not whole yet gets a ``bytearray`` of its
own, filled straight by the reads, and its body is handed out as a read-only view of that buffer
(``RemotingCommand.body_buffer``), so a 256 KiB pull response costs no copy beyond the kernel's but
for the part that came in the same read as the bytes before it (16 KiB at most).

That buffer grows with what arrives, not with the length the frame declares: a peer that declares
16 MiB and sends a few bytes makes its decoder hold 128 KiB, not 16 MiB (:attr:`FrameDecoder.held`
says how much it holds). It starts at 128 KiB (or the frame's size, if smaller) and grows to four
times what came each time it fills. Frames up to 128 KiB (a batch of 100 1 KiB messages) so get their
buffer at once, those up to 1 MiB reuse the buffers of earlier ones, and only larger ones, or the first
of a size, pay the copies of growing (less than 4/3 of their size).

The 16 KiB buffer may be shared by the decoders of one thread (:class:`ReadBuffer`, what a server gives
its connections): each decoder then holds 16 KiB of its own only while part of a small frame waits for
the rest, not for as long as its connection is open.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Final

import orjson

from cometmq.errors import ProtocolError
from cometmq.protocol import fastjson
from cometmq.protocol.codes import LanguageCode, SerializeType
from cometmq.protocol.command import Buffer, RemotingCommand, language_name

# RocketMQ's decoder limit, compared against the whole frame including the length field.
MAX_FRAME_SIZE = 16 * 1024 * 1024

_INT32 = struct.Struct(">i")
# The first two bytes of a TLS handshake record (content type 22, version 3.x), read as the top half of
# a frame length: a peer that starts TLS where a frame was expected.
_TLS_HANDSHAKE_RECORD: Final = 0x1603
TLS_HANDSHAKE_NOT_EXPECTED: Final = (
    "a TLS handshake where a remoting frame was expected: the peer speaks TLS, this end does not "
    "(tls.server.mode=disabled)"
)
_PREFIX = struct.Struct(">ii")
_BINARY_FIXED = struct.Struct(">hbhiii")  # code, language, version, opaque, flag, remark length
_LANGUAGE_BY_NAME = {lang.name: lang for lang in LanguageCode}

_json_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))

# Every request and response header goes through JSON. orjson writes what the encoder above writes
# (compact, UTF-8) in a tenth of the time and reads in under half. It reads integers beyond 64 bits
# as floats, where the standard library keeps them exact: no RocketMQ header field is that wide.
# What it refuses goes to the standard library: on reading, escaped lone surrogates and NaN; on
# writing, lone surrogates (a topic read from such an escape, echoed in a remark), which UTF-8 cannot
# hold but a \u escape can, and which Java reads back the same.
_ascii_json_encoder = json.JSONEncoder(separators=(",", ":"))


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


_STR_ONLY: Final = frozenset((str,))


def _loads(header: bytes) -> Any:
    try:
        return orjson.loads(header)
    except orjson.JSONDecodeError:
        text = header.decode()
        fastjson.check_depth(text)  # the standard library's parser recurses per level
        return json.loads(text)


def _decode_json_header(header: bytes, body: bytes | memoryview) -> RemotingCommand:
    try:
        obj = _loads(header)
    except ValueError as exc:  # UnicodeDecodeError is one
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
    ext_fields: dict[str, str]
    if _STR_ONLY.issuperset(map(type, raw_fields.values())):
        ext_fields = raw_fields  # what clients send: strings only, nothing to convert
    else:
        try:
            # orjson reads 1024 levels without recursing; writing a value back out recurses per level.
            fastjson.check_depth(header.decode())
        except ValueError as exc:
            raise ProtocolError(f"header extFields: {exc}") from None
        ext_fields = {}
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


def _decode_binary_header(header: bytes, body: bytes | memoryview) -> RemotingCommand:
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


def decode_frame(frame: Buffer) -> RemotingCommand:
    """Decode one frame *without* its 4-byte length prefix (header word, header, body).

    Header and body are copied out, so ``frame`` may be reused afterwards.
    """
    return _decode(frame, copy_body=True)


def _decode(frame: Buffer, copy_body: bool) -> RemotingCommand:
    # Without copy_body (a frame in a buffer of its own) the body is a view of ``frame``. One function for
    # both: small frames pass here many per read, and a call less is ~1 % of decoding one.
    if len(frame) < 4:
        raise ProtocolError(f"frame of {len(frame)} bytes has no header-length word")
    (word,) = _INT32.unpack_from(frame, 0)
    header_end = 4 + (word & 0xFFFFFF)
    if header_end > len(frame):
        raise ProtocolError(f"header length {header_end - 4} exceeds the frame length {len(frame)}")
    header = bytes(frame[4:header_end])
    body = bytes(frame[header_end:]) if copy_body else memoryview(frame)[header_end:]
    serialize_type = (word >> 24) & 0xFF
    if serialize_type == SerializeType.JSON:
        return _decode_json_header(header, body)
    if serialize_type == SerializeType.ROCKETMQ:
        return _decode_binary_header(header, body)
    raise ProtocolError(f"unknown serialization type {serialize_type}")


# Small frames collect in a reused buffer of this size. 16 KiB holds dozens of small frames per read
# (decoding one takes 3-5 us, far more than a read's share) and bounds what is copied of a large
# frame's first part, read into it before the frame's length was known.
_SCRATCH_SIZE = 16 * 1024
# A frame at least this long (length prefix included) that is not whole in the scratch buffer gets a
# buffer of its own (exactly its size, filled by the reads, its body handed out without a copy).
# Shorter frames are copied out of the scratch buffer, as cheap as allocating one for them.
_OWN_BUFFER_FROM = 4 * 1024
# A frame's own buffer starts this large (or at its size, if smaller), and grows to _GROWTH times what
# came each time it fills: memory follows what a peer sent, not what it declared. Starting smaller made
# a 110 KB batch send cost half as much again in `bench/receive.py` (a second buffer and a copy).
_FIRST_PART = 128 * 1024
_GROWTH = 4
# Frames of these sizes reuse a buffer kept by their decoder (see _start_frame): from glibc's default
# mmap threshold, below which malloc reuses freed memory by itself, up to a bound on what an idle
# connection keeps (pull responses are 256 KiB, batch sends at most a few MiB).
_REUSE_FROM = 128 * 1024
_REUSE_UP_TO = 1024 * 1024
# Up to this many such buffers are kept: responses that arrive together (one per queue a consumer
# pulls) are each held until their caller has decoded them. A consumer keeping just the last one
# reused it for 30 % of its 256 KiB pull responses, with 8 for all but the first few.
_SPARES = 8
# Their sizes are rounded up to this, so frames a few bytes apart fit each other's buffers.
_REUSE_STEP = 32 * 1024


class ReadBuffer:
    """A receive buffer for small frames that several decoders (:class:`FrameDecoder`) share: those of
    the connections one event loop serves, which it drives one read at a time (``get_buffer`` then
    ``buffer_updated`` of the same decoder, with no other decoder's call between). What a read leaves of
    a frame not yet whole is moved to a buffer of that decoder's own before the next read.

    Without it, a decoder keeps a 16 KiB buffer of its own for as long as it lives: 160 MiB for a broker
    with 10 000 connections, most of them idle between heartbeats.
    """

    __slots__ = ("view",)

    def __init__(self) -> None:
        self.view = memoryview(bytearray(_SCRATCH_SIZE))


class FrameDecoder:
    """Incremental decoder: ``feed(data)``, or ``get_buffer()`` + ``buffer_updated(n)``, return the
    commands completed by the new bytes. With ``shared``, small frames are read into that buffer (see
    :class:`ReadBuffer` for how it must be driven) rather than one of the decoder's own."""

    __slots__ = (
        "_broken",
        "_end",
        "_filled",
        "_frame",
        "_length",
        "_max_spares",
        "_offered",
        "_own",
        "_shared",
        "_spares",
        "_start",
        "held",
    )

    def __init__(self, shared: ReadBuffer | None = None) -> None:
        self._shared = None if shared is None else shared.view
        # The decoder's own buffer for small frames: always there without ``shared``; with it, only
        # while it holds the start of a frame (so None means reads go to the shared one). Never
        # resized, so a view of it lives as long as it.
        self._own: memoryview | None = memoryview(bytearray(_SCRATCH_SIZE)) if shared is None else None
        # Unconsumed bytes are _own[_start:_end], unless a frame of its own is being filled.
        self._start = 0
        self._end = 0
        # A view of the buffer of the frame (without its length prefix) that has one of its own, how much
        # of the frame came, and its length (the view is shorter while the buffer grows).
        self._frame: memoryview | None = None
        self._filled = 0
        self._length = 0
        # Bytes this decoder holds for a frame not yet whole: its own buffer, or the 16 KiB one for the
        # start of a small frame with a shared buffer (what a server counts against its bounds).
        self.held = 0
        # Bytes writable in the buffer get_buffer() last returned (a bound for buffer_updated).
        self._offered = 0
        self._broken = False
        # Buffers of earlier large frames, for later ones once nothing uses them (_frame_buffer). A
        # server's decoders (``shared``) keep none: a spare per connection would let 10 000 clients
        # pin gigabytes outside the bound on partial frames, and the frames that would reuse one there
        # (batch sends) are rarer than a consumer's pull responses.
        self._spares: list[bytearray] = []
        self._max_spares = _SPARES if shared is None else 0

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        if self._frame is not None:
            return 4 + self._filled
        return self._end - self._start

    def get_buffer(self) -> memoryview:
        """Where the next bytes of the stream are to be written (any amount up to its length), then
        reported with :meth:`buffer_updated`. Valid until the next call of either method (of any
        decoder, for the buffer of a :class:`ReadBuffer`)."""
        if self._broken:
            raise ProtocolError("decoder already failed; the connection must be closed")
        own = self._own
        if self._frame is not None:
            if self._filled == len(self._frame):
                self._grow_frame()
            buffer = self._frame[self._filled :]
        elif own is None:
            assert self._shared is not None
            buffer = self._shared
        else:
            if self._start == self._end:
                self._start = self._end = 0
            elif _SCRATCH_SIZE - self._end < _OWN_BUFFER_FROM:
                # Move the start of the next frame (shorter than _OWN_BUFFER_FROM, or it would have a
                # buffer of its own) to the front, so a read always has room for a frame of that size.
                # (Assigning to a memoryview moves with memmove: overlapping is fine.)
                pending = self._end - self._start
                own[:pending] = own[self._start : self._end]
                self._start, self._end = 0, pending
            buffer = own[self._end :]
        self._offered = len(buffer)
        return buffer

    def buffer_updated(self, nbytes: int) -> list[RemotingCommand]:
        """``nbytes`` were written at the start of the buffer :meth:`get_buffer` returned; the commands
        they complete."""
        if self._broken:
            raise ProtocolError("decoder already failed; the connection must be closed")
        if not 0 <= nbytes <= self._offered:
            raise ValueError(f"{nbytes} bytes written into a buffer of {self._offered}")
        self._offered = 0
        try:
            if self._frame is not None:
                self._filled += nbytes
                if self._filled < self._length:
                    return []
                frame = self._frame
                self._frame = None
                self.held = 0
                # From here on the frame is only read (the command's body is a read-only view of it).
                return [_decode(frame.toreadonly(), copy_body=False)]
            own = self._own
            if own is None:  # read into the shared buffer
                shared = self._shared
                assert shared is not None
                commands, pos = self._decode_small(shared, 0, nbytes)
                if pos < nbytes:  # the start of a small frame: keep it until the rest comes
                    # (No buffer of its own yet: with a shared one, it is dropped whenever it empties.)
                    self._own = memoryview(bytearray(_SCRATCH_SIZE))
                    self._own[: nbytes - pos] = shared[pos:nbytes]
                    self._start, self._end = 0, nbytes - pos
                    self.held = _SCRATCH_SIZE
                return commands
            self._end += nbytes
            commands, self._start = self._decode_small(own, self._start, self._end)
            if self._start == self._end and self._shared is not None:
                self._own = None  # nothing waits in it: the next read goes to the shared buffer
                if self._frame is None:
                    self.held = 0
            return commands
        except ProtocolError:
            self._broken = True
            raise

    def _decode_small(self, view: memoryview, pos: int, end: int) -> tuple[list[RemotingCommand], int]:
        """The whole frames in view[pos:end] and where the first one not whole starts (*end* when
        there is none, or when it went to a buffer of its own)."""
        commands: list[RemotingCommand] = []
        while end - pos >= 4:
            (length,) = _INT32.unpack_from(view, pos)
            if length < 4 or length + 4 > MAX_FRAME_SIZE:
                if length >> 16 == _TLS_HANDSHAKE_RECORD:
                    raise ProtocolError(TLS_HANDSHAKE_NOT_EXPECTED)
                raise ProtocolError(f"frame length {length} outside 4..{MAX_FRAME_SIZE - 4} bytes")
            if end - pos - 4 >= length:
                commands.append(_decode(view[pos + 4 : pos + 4 + length], copy_body=True))
                pos += 4 + length
                continue
            if length + 4 >= _OWN_BUFFER_FROM:
                received = end - pos - 4
                self._start_frame(length, received)
                assert self._frame is not None
                self._frame[:received] = view[pos + 4 : end]
                pos = end
            break
        return commands, pos

    def _start_frame(self, length: int, received: int) -> None:
        """Give the frame of *length* bytes, *received* of which came, a buffer of its own. Frames of
        _REUSE_FROM bytes and more reuse the buffer of an earlier one that no view is left of (its body
        was copied, or dropped): a fresh allocation of that size is fresh pages from the kernel,
        zero-filled on first touch (measured on a consumer reading 256 KiB pull responses: a page fault
        every 4 messages). Other frames never take a spare: a small body kept as a view would pin a
        large buffer."""
        self._length = length
        self._filled = received
        if _REUSE_FROM <= length <= _REUSE_UP_TO:
            for spare in self._spares:
                if len(spare) >= length:
                    try:
                        spare.append(0)  # a bytearray cannot change size while a view of it exists
                    except BufferError:
                        continue
                    spare.pop()
                    self._frame = memoryview(spare)[:length]
                    self.held = len(spare)
                    return
        self._frame = self._new_frame_buffer(received)

    def _grow_frame(self) -> None:
        """Move the frame being received, its buffer full, to a larger one."""
        assert self._frame is not None
        frame = self._new_frame_buffer(self._filled)
        frame[: self._filled] = self._frame
        self._frame = frame

    def _new_frame_buffer(self, arrived: int) -> memoryview:
        """A view of a new buffer for the frame being received, _GROWTH times the *arrived* bytes of it
        (at least _FIRST_PART, at most the frame's size)."""
        length = self._length
        reused = _REUSE_FROM <= length <= _REUSE_UP_TO
        # A buffer to be reused is rounded up, so that frames a few bytes apart fit each other's.
        full = -(-length // _REUSE_STEP) * _REUSE_STEP if reused else length
        buffer = bytearray(min(full, max(_FIRST_PART, _GROWTH * arrived)))
        self.held = len(buffer)
        if reused and len(buffer) == full and len(self._spares) < self._max_spares:
            self._spares.append(buffer)
        return memoryview(buffer)[:length]

    def feed(self, data: Buffer) -> list[RemotingCommand]:
        """The commands completed by ``data`` (copied in through :meth:`get_buffer`)."""
        commands: list[RemotingCommand] = []
        source = memoryview(data).cast("B")
        pos = 0
        size = len(source)
        while True:
            buffer = self.get_buffer()
            count = min(len(buffer), size - pos)
            buffer[:count] = source[pos : pos + count]
            commands += self.buffer_updated(count)
            pos += count
            if pos == size:
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
    try:
        return orjson.dumps(header)
    except orjson.JSONEncodeError:
        return _ascii_json_encoder.encode(header).encode()


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    if not -0x8000 <= cmd.code <= 0x7FFF:
        # RocketMQ's binary header keeps the code in 16 bits: RocketMQ 5's six-digit codes (POP_MESSAGE
        # 200050 ...) travel only in JSON headers.
        raise ProtocolError(f"request code {cmd.code} does not fit the ROCKETMQ header's 16-bit code")
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
    body = cmd.body_buffer
    if body:
        return [head, body]
    return [head]


def encode_bytes(cmd: RemotingCommand) -> bytes:
    """The whole frame for ``cmd`` as one bytes object."""
    return b"".join(encode(cmd))
