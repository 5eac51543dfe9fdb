"""CPU per frame of a connection's receive path, in process: ``Connection.get_buffer`` and
``buffer_updated`` as the event loop calls them, the decoder behind them, no socket.

    .venv/bin/python bench/receive.py [--frames 20000] [--rounds 5]

Three streams, each read the way a socket delivers it (reads of up to 64 KiB):
heartbeat-sized requests (many whole frames per read, a server's shared read buffer), 110 KB batch
sends (a frame over several reads) and 256 KiB pull responses (a consumer's connection, reusing its
buffers). Prints the median over --rounds of the CPU time per frame. Run it with two source trees on
PYTHONPATH, one after the other, to compare them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from cometmq.protocol import RemotingCommand, encode_bytes
from cometmq.protocol.codec import ReadBuffer
from cometmq.protocol.codes import RESPONSE_FLAG
from cometmq.remoting.transport import Connection

READ_SIZE = 64 * 1024


def _streams() -> dict[str, tuple[bytes, int, bool]]:
    """name → (the bytes of 100 frames, 100, whether a server's connection reads them)."""
    heartbeat = encode_bytes(
        RemotingCommand(code=34, ext_fields={"clientID": "127.0.0.1@1"}, body=b"x" * 300)
    )
    batch = encode_bytes(
        RemotingCommand(code=320, ext_fields={"a": "TopicTest", "b": "PID"}, body=b"m" * 110_000)
    )
    pull = encode_bytes(RemotingCommand(code=0, flag=RESPONSE_FLAG, body=b"p" * 262_000))
    return {
        "heartbeat request (350 B)": (heartbeat * 100, 100, True),
        "batch send (110 KB)": (batch * 100, 100, True),
        "pull response (256 KiB)": (pull * 100, 100, False),
    }


def _receive(conn: Connection, stream: bytes) -> None:
    view = memoryview(stream)
    pos = 0
    while pos < len(stream):
        buffer = conn.get_buffer(-1)
        count = min(len(buffer), READ_SIZE, len(stream) - pos)
        buffer[:count] = view[pos : pos + count]
        conn.buffer_updated(count)
        pos += count


async def _round(stream: bytes, count: int, server_side: bool, frames: int) -> float:
    conn = Connection(None, ReadBuffer() if server_side else None)
    started = time.process_time()
    for _ in range(frames // count):
        _receive(conn, stream)
    return (time.process_time() - started) / frames * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=20_000, help="frames per stream and round (20000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is printed (5)")
    args = parser.parse_args()
    print(f"{'CPU µs per frame':<28} {'median':>8}")
    for name, (stream, count, server_side) in _streams().items():
        figures = [asyncio.run(_round(stream, count, server_side, args.frames)) for _ in range(args.rounds)]
        print(f"{name:<28} {statistics.median(figures):>8.2f}")


if __name__ == "__main__":
    main()
