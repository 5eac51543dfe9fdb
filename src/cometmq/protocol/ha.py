"""The HA stream between a master and its slave (RocketMQ's ``haListenPort``), with no I/O.

It is a plain TCP stream, not remoting frames, and has no handshake. Integers are big-endian and
signed, as Java writes them.

- Slave → master: **offset reports**, 8 bytes each, one int64: the end of the slave's commit-log
  bytes. The first report says where to start (0: an empty slave); every report acknowledges the
  bytes below it. Several reports can arrive in one read: only the newest counts (RocketMQ's master
  skips the older ones too).
- Master → slave: **chunks**, a 12-byte header (int64 commit-log offset of the body's first byte,
  int32 body size) followed by that many raw commit-log bytes. A body never crosses a commit-log
  segment and is not aligned to records. A header with size 0 is a heartbeat.

The decoders take the stream in pieces of any size (TCP splits it anywhere) and raise
:class:`~cometmq.errors.ProtocolError` for bytes that cannot be the stream.
"""

from __future__ import annotations

import struct
from typing import Final

from cometmq.errors import ProtocolError
from cometmq.protocol.command import Buffer

__all__ = [
    "CHUNK_HEADER_SIZE",
    "MAX_CHUNK_BODY",
    "REPORT_SIZE",
    "ChunkDecoder",
    "ReportDecoder",
    "encode_chunk_header",
    "encode_report",
]

REPORT_SIZE: Final = 8
CHUNK_HEADER_SIZE: Final = 12
# The largest body a slave accepts in one chunk. RocketMQ's masters send at most
# haTransferBatchSize (32 KiB by default) and never more than one segment; this only bounds what a
# slave buffers for a peer that is not a master.
MAX_CHUNK_BODY: Final = 64 * 1024 * 1024

_REPORT = struct.Struct(">q")
_HEADER = struct.Struct(">qi")
_MAX_OFFSET = (1 << 63) - 1


def encode_report(offset: int) -> bytes:
    """A slave's offset report."""
    return _REPORT.pack(offset)


def encode_chunk_header(offset: int, body_size: int) -> bytes:
    """The header of a chunk whose *body_size* bytes start at commit-log *offset* (0: a heartbeat)."""
    return _HEADER.pack(offset, body_size)


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
    bounds it."""

    __slots__ = ("_buffer", "_max_body")

    def __init__(self, max_body: int = MAX_CHUNK_BODY) -> None:
        self._buffer = bytearray()
        self._max_body = max_body

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
        with memoryview(buffer) as view:  # a body is copied once, not sliced and then copied
            while end - pos >= CHUNK_HEADER_SIZE:
                offset, size = _HEADER.unpack_from(view, pos)
                if offset < 0 or size < 0 or size > self._max_body or offset > _MAX_OFFSET - size:
                    raise ProtocolError(f"not an HA chunk header: offset {offset}, body size {size}")
                body_end = pos + CHUNK_HEADER_SIZE + size
                if body_end > end:
                    break
                chunks.append((offset, bytes(view[pos + CHUNK_HEADER_SIZE : body_end])))
                pos = body_end
        if pos:
            del buffer[:pos]
        return chunks
