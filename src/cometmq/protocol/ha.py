"""The HA stream between a master and its slave (RocketMQ's ``haListenPort``), with no I/O.

It is a plain TCP stream, not remoting frames. Integers are big-endian and signed, as Java writes them.

A CometMQ slave opens the link with a **handshake** (RocketMQ 4.x slaves have none, and still work):

- Slave → master ``HELLO``, 24 bytes: the 8 bytes of ``HELLO_MAGIC`` (its first byte has the top bit
  set, so it can never be an offset report, which is never negative), int64 the slave's brokerId,
  int64 the master epoch it expects (0: any). A master whose epoch is another closes the link.
- Master → slave ``HELLO_ANSWER``: ``HELLO_MAGIC``, int64 the master's epoch, int64 the master's
  commit-log end, int32 a count, then count times (int64 epoch, int64 start offset): the master's epoch
  history (its ``epochFileCheckpoint``), oldest first.

A master with access control on (``aclEnable``) makes a slave prove who it is before it answers:

- Master → slave ``AUTH_CHALLENGE``, 24 bytes, right after the hello: the 8 bytes of ``AUTH_MAGIC``
  and 16 random bytes, the nonce.
- Slave → master ``AUTH``: ``AUTH_MAGIC``, int16 the length of the access key, the access key
  (UTF-8), 16 random bytes of the slave's own (its nonce), and 20 bytes: the answer, an HMAC-SHA1
  keyed with *k* = HMAC-SHA1(secret key, ``AUTH_LABEL``) of ``AUTH_LABEL``, the master's nonce, the
  slave's nonce and the 24 bytes of the slave's hello (:func:`auth_content`). The answer serves no
  other link, nor another slave's hello; and, keyed with *k* rather than the secret key itself, it is
  never the Signature of a remoting request, whatever nonce a master (or someone in between) chose.

The master then answers the hello, or closes the link.

Then, or from the first byte without a handshake:

- Slave → master: **offset reports**, 8 bytes each, one int64: the end of the slave's commit-log
  bytes. The first report says where to start (0: an empty slave); every report acknowledges the
  bytes below it. Several reports can arrive in one read: only the newest counts (RocketMQ's master
  skips the older ones too).
- Master → slave: **chunks**, a 12-byte header (int64 commit-log offset of the body's first byte,
  int32 body size) followed by that many raw commit-log bytes. A body never crosses a commit-log
  segment and is not aligned to records. A header with size 0 is a heartbeat. After a handshake the
  header has 20 bytes: the same two fields, then int64 the master's **confirmed offset** (RocketMQ 5's
  confirmOffset): the commit-log end every member of its in-sync set holds, which the slave's reads
  stay below. A master sends a heartbeat when it rises with nothing else to send.

The decoders take the stream in pieces of any size (TCP splits it anywhere) and raise
:class:`~cometmq.errors.ProtocolError` for bytes that cannot be the stream.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from cometmq.errors import ProtocolError
from cometmq.protocol.command import Buffer

__all__ = [
    "AUTH_CHALLENGE_SIZE",
    "AUTH_LABEL",
    "AUTH_MAGIC",
    "AUTH_NONCE_SIZE",
    "CHUNK_HEADER_SIZE",
    "CONFIRMED_CHUNK_HEADER_SIZE",
    "HELLO_MAGIC",
    "HELLO_SIZE",
    "MAX_ACCESS_KEY_SIZE",
    "MAX_CHUNK_BODY",
    "MAX_EPOCH_ENTRIES",
    "REPORT_SIZE",
    "Auth",
    "AuthChallenge",
    "AuthDecoder",
    "ChunkDecoder",
    "Hello",
    "HelloAnswer",
    "HelloAnswerDecoder",
    "HelloDecoder",
    "ReportDecoder",
    "auth_content",
    "encode_auth",
    "encode_auth_challenge",
    "encode_chunk_header",
    "encode_confirmed_chunk_header",
    "encode_hello",
    "encode_hello_answer",
    "encode_report",
]

REPORT_SIZE: Final = 8
CHUNK_HEADER_SIZE: Final = 12
CONFIRMED_CHUNK_HEADER_SIZE: Final = 20  # after a handshake
# The largest body a slave accepts in one chunk. RocketMQ's masters send at most
# haTransferBatchSize (32 KiB by default) and never more than one segment; this only bounds what a
# slave buffers for a peer that is not a master.
MAX_CHUNK_BODY: Final = 64 * 1024 * 1024

# The top bit of the first byte is set: an offset report (a non-negative int64) never starts so.
HELLO_MAGIC: Final = b"\xccCOMETHA"
HELLO_SIZE: Final = 24
# An AUTH_CHALLENGE and an AUTH start so; the top bit of the first byte is set, as HELLO_MAGIC's.
AUTH_MAGIC: Final = b"\xccCOMAUTH"
AUTH_NONCE_SIZE: Final = 16
# What separates the HA answer from every other use of a user's secret key (see the module's doc).
AUTH_LABEL: Final = b"cometmq-ha-auth-v1"
AUTH_CHALLENGE_SIZE: Final = len(AUTH_MAGIC) + AUTH_NONCE_SIZE
# An access key longer than this is no user's: bounds what a master buffers for a peer that is no slave.
MAX_ACCESS_KEY_SIZE: Final = 1024
_HMAC_SHA1_SIZE: Final = 20
# The first byte of a TLS ClientHello (a handshake record).
_TLS_HANDSHAKE_BYTE: Final = 0x16
# More epochs than a group lives through; bounds what a slave buffers for a peer that is not a master.
MAX_EPOCH_ENTRIES: Final = 1 << 16

_REPORT = struct.Struct(">q")
_HEADER = struct.Struct(">qi")
_CONFIRMED_HEADER = struct.Struct(">qiq")
_HELLO = struct.Struct(">8sqq")
_ANSWER_HEAD = struct.Struct(">8sqqi")
_ENTRY = struct.Struct(">qq")
_AUTH_HEAD = struct.Struct(">8sh")
_MAX_OFFSET = (1 << 63) - 1


def encode_report(offset: int) -> bytes:
    """A slave's offset report."""
    return _REPORT.pack(offset)


def encode_chunk_header(offset: int, body_size: int) -> bytes:
    """The header of a chunk whose *body_size* bytes start at commit-log *offset* (0: a heartbeat)."""
    return _HEADER.pack(offset, body_size)


def encode_confirmed_chunk_header(offset: int, body_size: int, confirmed: int) -> bytes:
    """A chunk header after a handshake: ``encode_chunk_header``'s fields and the master's *confirmed*
    offset."""
    return _CONFIRMED_HEADER.pack(offset, body_size, confirmed)


class ReportDecoder:
    """The master's side: ``feed(data)`` returns the newest whole report the bytes complete, or None.
    At most 7 bytes of a report not yet whole are kept."""

    __slots__ = ("_partial",)

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, data: Buffer) -> int | None:
        stream = self._partial + bytes(data) if self._partial else bytes(data)
        whole = len(stream) - len(stream) % REPORT_SIZE
        self._partial = stream[whole:]
        if not whole:
            return None
        offset: int = _REPORT.unpack_from(stream, whole - REPORT_SIZE)[0]
        if offset < 0:
            raise ProtocolError(f"a slave reported the negative commit-log offset {offset}")
        return offset


class ChunkDecoder:
    """The slave's side: ``feed(data)`` returns the chunks the bytes complete, as ``(offset, body)``
    pairs (an empty body for a heartbeat). The body of a chunk not yet whole is kept; *max_body*
    bounds it. With *confirmed* (a link opened with a handshake) the headers carry the master's
    confirmed offset: ``confirmed`` is the last one fed (-1 before any)."""

    __slots__ = ("_buffer", "_header", "_max_body", "confirmed")

    def __init__(self, max_body: int = MAX_CHUNK_BODY, *, confirmed: bool = False) -> None:
        self._buffer = bytearray()
        self._max_body = max_body
        self._header = _CONFIRMED_HEADER if confirmed else _HEADER
        self.confirmed = -1

    @property
    def buffered(self) -> int:
        """Bytes received that do not form a whole chunk yet."""
        return len(self._buffer)

    def feed(self, data: Buffer) -> list[tuple[int, bytes]]:
        buffer = self._buffer
        buffer += data
        chunks: list[tuple[int, bytes]] = []
        pos = 0
        end = len(buffer)
        header = self._header
        header_size = header.size
        confirmed = self.confirmed
        with memoryview(buffer) as view:  # a body is copied once, not sliced and then copied
            while end - pos >= header_size:
                fields = header.unpack_from(view, pos)
                offset, size = fields[0], fields[1]
                if offset < 0 or size < 0 or size > self._max_body or offset > _MAX_OFFSET - size:
                    raise ProtocolError(f"not an HA chunk header: offset {offset}, body size {size}")
                body_end = pos + header_size + size
                if body_end > end:
                    break
                if header_size != CHUNK_HEADER_SIZE:
                    if fields[2] < 0:
                        raise ProtocolError(f"not an HA chunk header: confirmed offset {fields[2]}")
                    confirmed = fields[2]
                chunks.append((offset, bytes(view[pos + header_size : body_end])))
                pos = body_end
        self.confirmed = confirmed
        if pos:
            del buffer[:pos]
        return chunks


@dataclass(frozen=True, slots=True)
class Hello:
    """A slave's handshake: who it is and the master epoch it expects (0: any)."""

    broker_id: int
    expected_epoch: int


@dataclass(frozen=True, slots=True)
class HelloAnswer:
    """A master's answer to a hello: its epoch, its commit-log end and its epoch history as
    ``(epoch, start offset)`` pairs, oldest first."""

    epoch: int
    end: int
    entries: tuple[tuple[int, int], ...]


def encode_hello(broker_id: int, expected_epoch: int) -> bytes:
    """A slave's ``HELLO``: its brokerId and the master epoch it expects (0: any)."""
    return _HELLO.pack(HELLO_MAGIC, broker_id, expected_epoch)


def encode_hello_answer(epoch: int, end: int, entries: Sequence[tuple[int, int]]) -> bytes:
    """A master's ``HELLO_ANSWER``: its *epoch*, commit-log *end* and epoch history *entries*
    (``(epoch, start offset)`` pairs, oldest first)."""
    head = _ANSWER_HEAD.pack(HELLO_MAGIC, epoch, end, len(entries))
    return head + b"".join(_ENTRY.pack(entry_epoch, start) for entry_epoch, start in entries)


class HelloDecoder:
    """The master's side of a link's first bytes. ``feed(data)`` returns True once it knows how the
    stream starts: then ``hello`` is the slave's ``Hello``, or None for a slave without a handshake
    (its first byte starts an offset report), and ``rest`` holds the bytes fed past the hello (every
    byte for a slave without one), which are offset reports."""

    __slots__ = ("_buffer", "hello", "rest")

    def __init__(self) -> None:
        self._buffer = b""
        self.hello: Hello | None = None
        self.rest = b""

    def feed(self, data: Buffer) -> bool:
        buffer = self._buffer + bytes(data)
        if not buffer:
            return False
        if buffer[0] == _TLS_HANDSHAKE_BYTE:  # as an offset report: more than 2^60 bytes
            raise ProtocolError(
                "a TLS handshake where an HA hello or offset report was expected: the slave speaks TLS, "
                "this HA port does not (tls.server.mode=disabled)"
            )
        if not buffer[0] & 0x80:
            self._buffer, self.rest = b"", buffer
            return True
        check = min(len(buffer), len(HELLO_MAGIC))
        if buffer[:check] != HELLO_MAGIC[:check]:
            raise ProtocolError(f"not an HA hello: the stream starts with {buffer[:check].hex()}")
        if len(buffer) < HELLO_SIZE:
            self._buffer = buffer
            return False
        _, broker_id, expected_epoch = _HELLO.unpack_from(buffer)
        if broker_id < 0 or expected_epoch < 0:
            raise ProtocolError(f"not an HA hello: brokerId {broker_id}, expected epoch {expected_epoch}")
        self._buffer, self.rest = b"", buffer[HELLO_SIZE:]
        self.hello = Hello(broker_id, expected_epoch)
        return True


@dataclass(frozen=True, slots=True)
class AuthChallenge:
    """A master's ``AUTH_CHALLENGE``: the nonce the slave's ``AUTH`` signs."""

    nonce: bytes


@dataclass(frozen=True, slots=True)
class Auth:
    """A slave's ``AUTH``: its access key, its nonce and its answer (see :func:`auth_content`)."""

    access_key: str
    nonce: bytes
    signature: bytes = field(repr=False)


def _check_nonce(nonce: bytes) -> None:
    if len(nonce) != AUTH_NONCE_SIZE:
        raise ValueError(f"an HA nonce has {AUTH_NONCE_SIZE} bytes, not {len(nonce)}")


def encode_auth_challenge(nonce: bytes) -> bytes:
    """A master's ``AUTH_CHALLENGE`` carrying *nonce* (``AUTH_NONCE_SIZE`` random bytes)."""
    _check_nonce(nonce)
    return AUTH_MAGIC + nonce


def auth_content(master_nonce: bytes, slave_nonce: bytes, hello: Hello) -> bytes:
    """What a slave's ``AUTH`` answers (keyed with a key derived from its secret and ``AUTH_LABEL``):
    ``AUTH_LABEL``, the master's nonce, the slave's nonce, then the slave's *hello* as it was sent."""
    return AUTH_LABEL + master_nonce + slave_nonce + encode_hello(hello.broker_id, hello.expected_epoch)


def encode_auth(access_key: str, nonce: bytes, signature: bytes) -> bytes:
    """A slave's ``AUTH``: its *access_key*, its *nonce* and *signature*, its answer over
    :func:`auth_content`."""
    key = access_key.encode()
    _check_nonce(nonce)
    if len(key) > MAX_ACCESS_KEY_SIZE or len(signature) != _HMAC_SHA1_SIZE:
        raise ValueError(
            f"an HA AUTH carries an access key of at most {MAX_ACCESS_KEY_SIZE} bytes and a "
            f"{_HMAC_SHA1_SIZE}-byte HMAC-SHA1, not {len(key)} and {len(signature)}"
        )
    return _AUTH_HEAD.pack(AUTH_MAGIC, len(key)) + key + nonce + signature


class AuthDecoder:
    """The master's side of a slave's answer to its challenge. ``feed(data)`` returns the ``Auth`` once
    the bytes complete it (None before); ``rest`` then holds the bytes fed past it."""

    __slots__ = ("_buffer", "rest")

    def __init__(self) -> None:
        self._buffer = b""
        self.rest = b""

    def feed(self, data: Buffer) -> Auth | None:
        buffer = self._buffer = self._buffer + bytes(data)
        check = min(len(buffer), len(AUTH_MAGIC))
        if buffer[:check] != AUTH_MAGIC[:check]:
            raise ProtocolError(f"not an HA AUTH: the stream starts with {buffer[:check].hex()}")
        if len(buffer) < _AUTH_HEAD.size:
            return None
        _, key_size = _AUTH_HEAD.unpack_from(buffer)
        if not 0 < key_size <= MAX_ACCESS_KEY_SIZE:
            raise ProtocolError(f"not an HA AUTH: an access key of {key_size} bytes")
        key_end = _AUTH_HEAD.size + key_size
        nonce_end = key_end + AUTH_NONCE_SIZE
        size = nonce_end + _HMAC_SHA1_SIZE
        if len(buffer) < size:
            return None
        try:
            access_key = buffer[_AUTH_HEAD.size : key_end].decode()
        except UnicodeDecodeError:
            raise ProtocolError("not an HA AUTH: the access key is not UTF-8") from None
        self._buffer, self.rest = b"", buffer[size:]
        return Auth(access_key, buffer[key_end:nonce_end], buffer[nonce_end:size])


class HelloAnswerDecoder:
    """The slave's side of the master's first bytes. ``feed(data)`` returns an ``AuthChallenge`` if the
    master asks for one (once; feed ``b""`` after answering it: the answer may have come with it), and
    the ``HelloAnswer`` once the bytes complete it (None before); ``rest`` then holds the bytes fed past
    it, which are chunks."""

    __slots__ = ("_buffer", "_challenged", "rest")

    def __init__(self) -> None:
        self._buffer = b""
        self._challenged = False
        self.rest = b""

    def feed(self, data: Buffer) -> HelloAnswer | AuthChallenge | None:
        buffer = self._buffer = self._buffer + bytes(data)
        check = min(len(buffer), len(HELLO_MAGIC))
        if not self._challenged and buffer[:check] == AUTH_MAGIC[:check]:
            if len(buffer) < AUTH_CHALLENGE_SIZE:  # (shorter than both, or than the challenge)
                return None
            self._challenged = True
            self._buffer = buffer[AUTH_CHALLENGE_SIZE:]
            return AuthChallenge(buffer[len(AUTH_MAGIC) : AUTH_CHALLENGE_SIZE])
        if buffer[:check] != HELLO_MAGIC[:check]:
            raise ProtocolError(f"not an HA hello answer: the stream starts with {buffer[:check].hex()}")
        if len(buffer) < _ANSWER_HEAD.size:
            return None
        _, epoch, end, count = _ANSWER_HEAD.unpack_from(buffer)
        if epoch < 0 or end < 0 or not 0 <= count <= MAX_EPOCH_ENTRIES:
            raise ProtocolError(f"not an HA hello answer: epoch {epoch}, end {end}, {count} epoch entries")
        size = _ANSWER_HEAD.size + count * _ENTRY.size
        if len(buffer) < size:
            return None
        entries = tuple(_ENTRY.iter_unpack(buffer[_ANSWER_HEAD.size : size]))
        previous_epoch = previous_start = 0
        for entry_epoch, start in entries:
            if entry_epoch <= previous_epoch or start < previous_start:  # epochs count from 1
                raise ProtocolError(
                    f"not an HA hello answer: epoch history {entries} is not in order of epoch and offset"
                )
            previous_epoch, previous_start = entry_epoch, start
        self._buffer, self.rest = b"", buffer[size:]
        return HelloAnswer(epoch, end, entries)
