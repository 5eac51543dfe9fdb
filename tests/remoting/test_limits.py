"""What clients may make a server hold: partial frames, idle connections, connection count.

Each test talks to a real RemotingServer over sockets, with its limits shrunk so that a test stays
small, and checks that a client keeping within them is still served.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import struct
import subprocess

import pytest
from remoting_support import with_server

from cometmq.protocol import MAX_FRAME_SIZE, FrameDecoder, RemotingCommand, encode_bytes
from cometmq.remoting import Connection, RemotingClient, RemotingServer, ServerLimits
from waiting import wait_until

# The start of a frame declaring the largest length allowed, as a peer holding memory would send it.
HUGE_FRAME_START = struct.pack(">ii", MAX_FRAME_SIZE - 4, 10) + b'{"code":1}'


def _echo(conn: Connection, request: RemotingCommand) -> RemotingCommand:
    return request.response(body=request.body)


async def _connect(server: RemotingServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Connection]:
    """A raw socket to *server*, and the server's side of it."""
    known = set(server.connections)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    (conn,) = await wait_until(lambda: server.connections - known, message="the server to accept")
    return reader, writer, conn


async def _arrived(conn: Connection, count: int) -> None:
    await wait_until(lambda: conn.buffered == count, message=f"{count} bytes of a frame to arrive")


async def _closed_by_server(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(65536), 5) == b""


async def _served(client: RemotingClient, addr: str, body: bytes = b"ping") -> bool:
    return (await client.invoke(addr, RemotingCommand(code=1, body=body), timeout=5)).body == body


def test_a_frame_declaring_16_mib_holds_only_about_what_arrived() -> None:
    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        _, writer, conn = await _connect(server)
        writer.write(HUGE_FRAME_START)
        sent = len(HUGE_FRAME_START)
        for chunk in (1000, 30_000, 200_000):
            writer.write(bytes(chunk))
            sent += chunk
            await _arrived(conn, sent)
            # The buffer starts at 128 KiB and grows to four times what came each time it fills.
            assert server.partial_frame_bytes <= max(128 * 1024, 4 * sent)
        assert server.partial_frame_bytes < MAX_FRAME_SIZE // 8
        assert await _served(client, addr)
        writer.close()
        await wait_until(lambda: server.partial_frame_bytes == 0, message="the partial frame to go")

    with_server(_echo, scenario)


def test_past_the_global_bound_the_oldest_partial_frame_is_dropped_and_others_served() -> None:
    # 128 KiB for each of the two partial frames, then 608 KiB for the client's large request: its
    # arrival goes past 800 KiB, and the connection holding the oldest partial frame is closed.
    limits = ServerLimits(max_partial_frame_bytes=800 * 1024)

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        oldest_reader, oldest_writer, oldest = await _connect(server)
        _, younger_writer, younger = await _connect(server)
        for writer, conn in ((oldest_writer, oldest), (younger_writer, younger)):
            writer.write(HUGE_FRAME_START + bytes(100_000))
            await _arrived(conn, len(HUGE_FRAME_START) + 100_000)
        assert server.partial_frame_bytes == 2 * 128 * 1024

        assert await _served(client, addr, bytes(600_000))
        assert await _closed_by_server(oldest_reader)
        assert younger.is_open
        assert server.partial_frame_bytes == 128 * 1024  # the younger one's, still waiting
        assert await _served(client, addr)
        younger_writer.close()
        oldest_writer.close()

    with_server(_echo, scenario, limits=limits)


def test_a_connection_idle_past_the_limit_is_closed_while_a_busy_one_stays() -> None:
    limits = ServerLimits(channel_max_idle_s=1.0)

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        reader, writer, _ = await _connect(server)
        idle_closed = asyncio.ensure_future(reader.read(65536))
        requests = 0
        while not idle_closed.done():  # the client keeps busy until the silent one is closed
            assert await _served(client, addr)
            requests += 1
        assert idle_closed.result() == b""
        assert requests > 1 and await _served(client, addr)  # its connection survived the sweeps
        writer.close()

    with_server(_echo, scenario, limits=limits)


def test_connections_past_the_maximum_are_closed_at_once_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limits = ServerLimits(max_connections=3)

    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        assert await _served(client, addr)  # the client's connection is the first of three
        kept = [await _connect(server) for _ in range(2)]
        with caplog.at_level(logging.WARNING, logger="cometmq.remoting"):
            for _ in range(5):
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                assert await _closed_by_server(reader)
                writer.close()
        warnings = [r.getMessage() for r in caplog.records if "serverMaxConnections" in r.getMessage()]
        assert len(warnings) == 1 and "3 connections open" in warnings[0]
        assert len(server.connections) == 3

        kept[0][1].close()
        await wait_until(lambda: len(server.connections) == 2, message="a connection to close")
        reader, writer, _ = await _connect(server)
        writer.write(encode_bytes(RemotingCommand(code=1, opaque=9, body=b"x")))
        (reply,) = FrameDecoder().feed(await asyncio.wait_for(reader.read(65536), 5))
        assert reply.opaque == 9 and reply.body == b"x"
        writer.close()
        kept[1][1].close()

    with_server(_echo, scenario, limits=limits)


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to read the backlog")
def test_the_listen_backlog_is_the_configured_one() -> None:
    async def scenario(server: RemotingServer, client: RemotingClient, addr: str) -> None:
        assert _listen_backlog(server.port) == 1024

    with_server(_echo, scenario)


def _listen_backlog(port: int) -> int:
    """The backlog of the socket listening on *port*: ``ss`` shows it as Send-Q of a listening socket."""
    out = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[2])
