"""Failover's in-sync set on the master's side: a caught-up slave is waited for from the moment it
joins, with a barrier (the master's end then), is offered as a candidate only once it acknowledged the
barrier, and leaves the wait again when it disconnects before being committed."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path

from _stores import following, put, replication_config, serving, stores
from test_in_sync import scripted_slave

from cometmq.protocol.ha import ChunkDecoder, HelloAnswerDecoder, encode_hello, encode_report
from cometmq.store import PutStatus
from waiting import wait_until


def test_a_slave_that_caught_up_earlier_is_offered_only_once_it_holds_the_end_of_when_it_joined(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "m") as (master,):
            master.begin_epoch(1)
            first = put(master, "acknowledged by slave 4")
            async with serving(master, replication_config(1)) as server:
                _, slave = await scripted_slave(server, master, encode_hello(4, 1))
                try:
                    await wait_until(lambda: server.in_sync_candidates() == {4}, message="slave 4 caught up")
                    end = put(master, "acknowledged by the master alone")
                    server.set_in_sync(frozenset({1}))  # slave 4 caught up within the window, but lacks this
                    assert end > first
                    assert server.in_sync_candidates() == frozenset()
                    waiting = server.when_replicated(end)
                    assert not waiting.done()  # slave 4 is waited for from now on
                    assert server.confirmed_offset() == end  # everything before it joined stays confirmed
                    slave.write(encode_report(end))
                    assert await waiting is PutStatus.PUT_OK
                    await wait_until(lambda: server.in_sync_candidates() == {4}, message="slave 4 offered")
                finally:
                    slave.close()

    asyncio.run(scenario())


def test_a_caught_up_slave_is_waited_for_before_it_is_committed(tmp_path: Path) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "m", "s2") as (master, s2):
            master.begin_epoch(1)
            async with AsyncExitStack() as stack:
                server = await stack.enter_async_context(serving(master, replication_config(1)))
                server.set_in_sync(frozenset({1}))
                await stack.enter_async_context(following(s2, server, replication_config(2)))
                await wait_until(lambda: server.in_sync_candidates() == {2}, message="slave 2 a candidate")
                end = put(master, "the in-sync set committed is still {1}")
                waiting = server.when_replicated(end)
                assert not waiting.done()
                assert server.confirmed_offset() < end
                assert await waiting is PutStatus.PUT_OK
                assert s2.replica_end() == end
                await wait_until(lambda: server.confirmed_offset() == end, message="the confirmed offset")

    asyncio.run(scenario())


def test_a_joiner_that_disconnects_leaves_the_wait_unless_it_was_offered_since_the_last_ask(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "m") as (master,):
            master.begin_epoch(1)
            async with serving(master, replication_config(1)) as server:
                server.set_in_sync(frozenset({1}))
                _, never_offered = await scripted_slave(server, master, encode_hello(4, 1))
                await wait_until(lambda: server.confirmed_offset() == master.replica_end(), message="joined")
                end = put(master, "for the joiners")
                waiting = server.when_replicated(end)
                never_offered.close()  # nobody was told of slave 4: it leaves the wait at once
                assert await waiting is PutStatus.PUT_OK

                _, offered = await scripted_slave(server, master, encode_hello(5, 1))
                await wait_until(lambda: server.in_sync_candidates() == {5}, message="slave 5 offered")
                end = put(master, "slave 5 may be in a proposal on its way")
                waiting = server.when_replicated(end)
                offered.close()
                await wait_until(lambda: not server.runtime_info().ha_connection_info, message="5 gone")
                assert not waiting.done()  # until the election asks again
                assert server.in_sync_candidates() == frozenset()
                assert await waiting is PutStatus.PUT_OK

    asyncio.run(scenario())


def test_a_slave_acknowledging_one_message_behind_a_steady_stream_of_sends_is_offered(tmp_path: Path) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "m") as (master,):
            master.begin_epoch(1)
            async with serving(master, replication_config(1)) as server:
                server.set_in_sync(frozenset({1}))
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                try:
                    writer.write(encode_hello(2, 1))
                    answer = HelloAnswerDecoder()
                    while answer.feed(await reader.read(1 << 16)) is None:
                        pass
                    writer.write(encode_report(0))
                    chunks = ChunkDecoder(confirmed=True)
                    pending = answer.rest
                    received = acknowledged = 0
                    for n in range(5000):
                        end = put(master, f"message {n}")
                        while received < end:
                            for offset, body in chunks.feed(pending or await reader.read(1 << 16)):
                                received = max(received, offset + len(body))
                            pending = b""
                        # The slave holds every message but acknowledges the one before the last: each
                        # acknowledgement reaches the master after the next message was shipped.
                        writer.write(encode_report(acknowledged))
                        acknowledged = end
                        if server.in_sync_candidates() == {2}:
                            break
                    assert server.in_sync_candidates() == {2}, f"not offered after {n + 1} messages"
                finally:
                    writer.close()

    asyncio.run(scenario())


def test_a_candidate_is_offered_again_until_the_in_sync_set_holds_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "m", "s2") as (master, s2):
            master.begin_epoch(1)
            async with AsyncExitStack() as stack:
                server = await stack.enter_async_context(serving(master, replication_config(1)))
                server.set_in_sync(frozenset({1}))
                offers: list[frozenset[int]] = []
                server.on_candidates_changed = lambda: offers.append(server.in_sync_candidates())
                await stack.enter_async_context(following(s2, server, replication_config(2)))
                await wait_until(lambda: frozenset({2}) in offers, message="slave 2 offered")
                # The proposal naming slave 2 was lost: the set committed is still {1}.
                offered = len(offers)
                await wait_until(lambda: len(offers) > offered, message="slave 2 offered again")
                assert offers[-1] == {2}
                server.set_in_sync(frozenset({1, 2}))
                assert server.in_sync_candidates() == {2}
                settled = len(offers)
                server._check_candidates(until_committed=True)  # the watch's periodic check
                assert len(offers) == settled  # the set holds slave 2: no offer again

    asyncio.run(scenario())
