"""The master's side of the HA link, spoken to over a real socket by a scripted slave: where it starts,
what it streams, which report counts, heartbeats, housekeeping and a slave ahead of the master."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from cometmq.broker import Broker, BrokerConfig
from cometmq.protocol import ResponseCode
from cometmq.protocol.ha import ChunkDecoder, encode_report
from cometmq.remoting import RemotingClient
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from _support import broker_and_client, create_topic, send, send_request


@asynccontextmanager
async def slave_socket(broker: Broker) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    assert broker.ha_server is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.ha_server.port)
    try:
        yield reader, writer
    finally:
        writer.close()


class ChunkReader:
    """The chunks a scripted slave receives, one at a time."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._decoder = ChunkDecoder()
        self._chunks: list[tuple[int, bytes]] = []

    async def next(self) -> tuple[int, bytes]:
        while not self._chunks:
            data = await asyncio.wait_for(self._reader.read(1 << 16), 30)
            assert data, "the master closed the link"
            self._chunks += self._decoder.feed(data)
        return self._chunks.pop(0)


def commit_log_bytes(data_dir: Path, start: int, size: int) -> bytes:
    path = data_dir / "commitlog" / f"{0:020d}"
    with path.open("rb") as f:
        f.seek(start)
        return f.read(size)


def test_an_empty_slave_gets_the_log_and_the_newest_report_counts(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path / "m", haSendHeartbeatInterval=200) as (broker, addr, client):
            await create_topic(client, addr, "Link", 1)
            for i in range(5):
                await send(client, addr, "Link", f"message {i}".encode())
            end = broker.store.replica_end()
            assert broker.ha_server is not None
            async with slave_socket(broker) as (reader, writer):
                writer.write(encode_report(0)[:3])  # a report cut by TCP
                await writer.drain()
                writer.write(encode_report(0)[3:])
                chunks = ChunkReader(reader)
                offset, body = await chunks.next()
                assert offset == 0
                assert body == commit_log_bytes(tmp_path / "m", 0, end)
                # Two reports in one write: the newer one is the acknowledgement.
                writer.write(encode_report(10) + encode_report(end))
                await writer.drain()
                await wait_until(
                    lambda: (
                        broker.ha_server is not None
                        and broker.ha_server.runtime_info().ha_connection_info[0].slave_ack_offset == end
                    ),
                    message="the acknowledgement",
                )
                # Nothing new to send: an empty chunk header at the slave's end, the heartbeat.
                assert await chunks.next() == (end, b"")
                await send(client, addr, "Link", b"one more")
                offset, body = await chunks.next()
                while not body:  # more heartbeats, on a slow machine
                    offset, body = await chunks.next()
                assert offset == end
                assert body == commit_log_bytes(tmp_path / "m", end, len(body)) and body

    asyncio.run(scenario())


def test_a_report_beyond_the_masters_end_gets_its_end_and_the_link_closes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path / "m") as (broker, addr, client):
            await create_topic(client, addr, "Link", 1)
            await send(client, addr, "Link", b"a message")
            end = broker.store.replica_end()
            async with slave_socket(broker) as (reader, writer):
                writer.write(encode_report(end + 1000))
                data = await asyncio.wait_for(reader.read(), 30)  # to the end of the stream
                assert ChunkDecoder().feed(data) == [(end, b"")]
            await send(client, addr, "Link", b"still serving")

    asyncio.run(scenario())


def test_a_silent_slave_is_closed_after_the_housekeeping_interval(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path / "m", haHousekeepingInterval=300) as (broker, _, _client):
            async with slave_socket(broker) as (reader, _writer):
                assert await asyncio.wait_for(reader.read(), 30) == b""
            assert broker.ha_server is not None
            assert broker.ha_server.runtime_info().ha_connection_info == []

    asyncio.run(scenario())


def test_a_stopping_sync_master_answers_its_waiting_sends_before_closing_their_connections(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        config = BrokerConfig()
        config.update(
            {
                "storePathRootDir": str(tmp_path),
                "listenPort": 0,
                "listenHost": "127.0.0.1",
                "mappedFileSizeCommitLog": 1 << 20,
                "brokerRole": "SYNC_MASTER",
                "slaveTimeout": 600_000,  # only the stop can answer the send
                # No idle sweep: nothing else in the transport's stop yields to the loop before it closes.
                "serverChannelMaxIdleTimeSeconds": 0,
            }
        )
        broker = Broker(config)
        await broker.start()
        client = RemotingClient()
        try:
            addr = f"127.0.0.1:{broker.port}"
            await create_topic(client, addr, "Stop", 1)
            async with slave_socket(broker) as (_, writer):
                writer.write(encode_report(broker.store.replica_end()))  # a slave that never acks again
                assert broker.ha_server is not None
                await wait_until(
                    lambda: bool(broker.ha_server and broker.ha_server.runtime_info().ha_connection_info),
                    message="the scripted slave to connect",
                )
                reply = asyncio.ensure_future(client.invoke(addr, send_request("Stop", b"x"), timeout=60))
                await wait_until(lambda: broker.store.max_offset("Stop", 0) == 1, message="the send stored")
                await broker.stop()
                response = await reply
            assert response.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
            assert response.ext_fields["queueOffset"] == "0"
        finally:
            await client.close()

    asyncio.run(scenario())


def test_a_master_stopping_with_a_slave_connected_closes_the_link_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path / "m") as (broker, _, _client):
            ha_server = broker.ha_server
            assert ha_server is not None
            async with slave_socket(broker) as (reader, writer):
                writer.write(encode_report(0))
                await writer.drain()
                await wait_until(lambda: ha_server.runtime_info().ha_connection_info, message="the link")
                await ha_server.stop()
                while await asyncio.wait_for(reader.read(1 << 16), 30):
                    pass  # what was streamed before the close

    with caplog.at_level(logging.ERROR):
        asyncio.run(scenario())
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_the_master_logs_a_slave_connecting_falling_behind_catching_up_and_leaving(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.replication")

    async def scenario() -> None:
        async with broker_and_client(tmp_path / "m", haMaxGapNotInSync=1000) as (broker, addr, client):
            await create_topic(client, addr, "Link", 1)
            for i in range(20):
                await send(client, addr, "Link", b"x" * 200 + str(i).encode())
            end = broker.store.replica_end()
            assert end > 1000
            async with slave_socket(broker) as (reader, writer):
                writer.write(encode_report(0))  # an empty slave: the whole log is its gap
                chunks = ChunkReader(reader)
                received = 0
                while received < end:
                    offset, body = await chunks.next()
                    received = offset + len(body)
                writer.write(encode_report(end))
                await wait_until(lambda: any("caught up" in m for m in caplog.messages), message="caught up")
            await wait_until(lambda: any("disconnected" in m for m in caplog.messages), message="left")

    asyncio.run(scenario())
    kinds = ("connected", "fell behind", "caught up", "disconnected")
    # "slave <address> <what happened>…", one line per change
    events = [m.split(" ", 2)[2] for m in caplog.messages if m.startswith("slave ")]
    assert [next(k for k in kinds if e.startswith(k)) for e in events] == list(kinds), events
