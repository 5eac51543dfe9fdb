"""The master's confirmed offset reaches its slaves in the chunk headers of a link opened with a
hello (RocketMQ 5's confirmOffset); a slave without a hello gets the classic 12-byte headers."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path

from _stores import following, put, replication_config, serving, stores
from test_in_sync import scripted_slave

from cometmq.protocol.ha import ChunkDecoder, encode_hello, encode_report
from waiting import wait_until


def test_a_slave_learns_the_confirmed_offset_which_waits_for_every_member(tmp_path: Path) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "m", "s2") as (master, s2):
            master.begin_epoch(1)
            start = put(master, "before")
            async with AsyncExitStack() as stack:
                server = await stack.enter_async_context(serving(master, replication_config(1)))
                server.set_in_sync(frozenset({1, 2, 3}))
                heard: list[int] = []
                server.on_confirmed = heard.append
                client = await stack.enter_async_context(following(s2, server, replication_config(2)))
                _, third = await scripted_slave(server, master, encode_hello(3, 1))
                try:
                    await wait_until(lambda: client.confirmed == start, message="the slave to learn it")
                    end = put(master, "held by slave 2, not by slave 3")
                    await wait_until(lambda: s2.replica_end() == end, message="slave 2 holds it")
                    assert client.confirmed == server.confirmed_offset() == start
                    third.write(encode_report(end))
                    await wait_until(lambda: client.confirmed == end, message="the rise to reach the slave")
                    assert heard[-1] == end
                finally:
                    third.close()

    asyncio.run(scenario())


def test_a_slave_without_a_hello_reads_classic_chunk_headers(tmp_path: Path) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "m") as (master,):
            master.begin_epoch(1)
            end = put(master, "one")
            async with serving(master, replication_config(1)) as server:
                server.set_in_sync(frozenset({1}))
                reader, writer = await scripted_slave(server, master, b"", report=0)
                try:
                    decoder = ChunkDecoder()
                    chunks: list[tuple[int, bytes]] = []
                    while sum(len(body) for _, body in chunks) < end:
                        chunks += decoder.feed(await asyncio.wait_for(reader.read(1 << 16), 30))
                    assert chunks[0][0] == 0
                    assert b"".join(body for _, body in chunks) == master.ha_readable(0, end).tobytes()
                finally:
                    writer.close()

    asyncio.run(scenario())
