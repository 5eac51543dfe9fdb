"""The master's side of failover's in-sync set, between in-process stores: which slaves are candidates,
and whom a SYNC_MASTER send waits for once the set is committed (``set_in_sync``)."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path

from _stores import following, put, replication_config, serving, stores

from cometmq.protocol.ha import HelloAnswerDecoder, encode_hello, encode_report
from cometmq.replication import HAServer
from cometmq.store import MessageStore, PutStatus
from waiting import wait_until


def slaves_holding(server: HAServer, end: int) -> int:
    """How many slaves acknowledged *end*."""
    return sum(link.slave_ack_offset >= end for link in server.runtime_info().ha_connection_info)


def test_caught_up_slaves_are_candidates_and_a_closed_link_leaves_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "m", "s2", "s3") as (master, s2, s3):
            master.begin_epoch(1)
            put(master, "before the slaves")
            async with AsyncExitStack() as stack:
                server = await stack.enter_async_context(serving(master, replication_config(1)))
                seen: list[frozenset[int]] = []
                server.on_candidates_changed = lambda: seen.append(server.in_sync_candidates())
                await stack.enter_async_context(following(s2, server, replication_config(2)))
                third = await stack.enter_async_context(following(s3, server, replication_config(3)))
                await wait_until(lambda: server.in_sync_candidates() == {2, 3}, message="both candidates")
                assert seen[-1] == {2, 3}
                await third.stop()
                await wait_until(lambda: seen[-1] == {2}, message="the hook to see slave 3 leave")
                assert server.in_sync_candidates() == {2}

    asyncio.run(scenario())


def test_an_all_ack_send_waits_for_every_member_and_the_set_as_committed_decides(tmp_path: Path) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "m", "s2", "s3") as (master, s2, s3):
            master.begin_epoch(1)
            async with AsyncExitStack() as stack:
                server = await stack.enter_async_context(serving(master, replication_config(1)))
                await stack.enter_async_context(following(s2, server, replication_config(2)))
                third = await stack.enter_async_context(following(s3, server, replication_config(3)))
                await wait_until(lambda: server.in_sync_candidates() == {2, 3}, message="both candidates")
                server.set_in_sync(frozenset({1, 2, 3}))
                end = put(master, "to all")
                assert await server.when_replicated(end) is PutStatus.PUT_OK
                assert server.acknowledged_by_all_in_sync(end)
                info = server.runtime_info()
                assert (info.in_sync_replicas, info.failover, info.epoch) == ([1, 2, 3], True, 1)
                assert [link.in_sync for link in info.ha_connection_info] == [True, True]

                await third.stop()
                await wait_until(lambda: server.in_sync_candidates() == {2}, message="slave 3 gone")
                end = put(master, "slave 3 is still in the committed set")
                waiting = server.when_replicated(end)
                await wait_until(lambda: slaves_holding(server, end) == 1, message="slave 2's ack")
                assert not waiting.done()  # slave 3 counts until the set without it is committed
                assert not server.acknowledged_by_all_in_sync(end)
                server.set_in_sync(frozenset({1, 2}))
                assert await waiting is PutStatus.PUT_OK
                assert server.acknowledged_by_all_in_sync(end)
                server.set_in_sync(frozenset({1}))
                info = server.runtime_info()
                assert [link.in_sync for link in info.ha_connection_info] == [False]
                assert info.in_sync_slave_nums == 0

    asyncio.run(scenario())


def test_a_member_is_waited_for_from_the_commit_that_adds_it_to_the_one_that_removes_it(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "m", "s2") as (master, s2):
            master.begin_epoch(1)
            async with serving(master, replication_config(1)) as server:
                server.set_in_sync(frozenset({1}))
                end = put(master, "alone")
                answer = server.when_replicated(end)
                assert answer.done() and answer.result() is PutStatus.PUT_OK  # no other member: at once
                assert not server.acknowledged_by_all_in_sync(end)  # and nobody else holds it
                server.set_in_sync(frozenset({1, 2}))
                end = put(master, "for slave 2")
                waiting = server.when_replicated(end)
                assert not waiting.done()
                async with following(s2, server, replication_config(2)):
                    assert await waiting is PutStatus.PUT_OK
                end = put(master, "slave 2 has left")
                waiting = server.when_replicated(end)
                assert not waiting.done()
                server.set_in_sync(frozenset({1}))
                assert await waiting is PutStatus.PUT_OK

    asyncio.run(scenario())


def test_without_all_ack_one_in_sync_slave_is_enough(tmp_path: Path) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "m", "s2") as (master, s2):
            master.begin_epoch(1)
            config = replication_config(1, all_ack_in_sync=False)
            async with serving(master, config) as server, following(s2, server, replication_config(2)):
                server.set_in_sync(frozenset({1, 2, 3}))  # 3 is not even connected
                end = put(master, "one is enough")
                assert await server.when_replicated(end) is PutStatus.PUT_OK
                assert not server.acknowledged_by_all_in_sync(end)

    asyncio.run(scenario())


async def scripted_slave(
    server: HAServer, store: MessageStore, hello: bytes, report: int | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A slave that opens with *hello* (if any), reports *report* (None: the master's end) once, then
    stays silent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    if hello:
        writer.write(hello)
        decoder = HelloAnswerDecoder()
        while decoder.feed(await asyncio.wait_for(reader.read(1 << 16), 30)) is None:
            pass
    writer.write(encode_report(store.replica_end() if report is None else report))
    return reader, writer


def test_a_slave_leaves_the_candidates_when_it_has_not_caught_up_within_the_window(tmp_path: Path) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "m") as (master,):
            master.begin_epoch(1)
            put(master, "one")
            config = replication_config(1, max_time_slave_not_catchup_ms=300)
            async with serving(master, config) as server:
                changes: list[frozenset[int]] = []
                server.on_candidates_changed = lambda: changes.append(server.in_sync_candidates())
                _, identified = await scripted_slave(server, master, encode_hello(4, 1))
                _, anonymous = await scripted_slave(server, master, b"")
                try:
                    await wait_until(lambda: frozenset({4}) in changes, message="slave 4 a candidate")
                    await wait_until(lambda: changes[-1] == frozenset(), message="slave 4 to fall out")
                    assert changes == [frozenset({4}), frozenset()]
                    # A slave without a hello has no brokerId and is never a candidate.
                    assert len(server.runtime_info().ha_connection_info) == 2
                finally:
                    identified.close()
                    anonymous.close()

    asyncio.run(scenario())


def test_a_second_hello_with_the_same_broker_id_closes_the_earlier_link(tmp_path: Path) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "m") as (master,):
            master.begin_epoch(1)
            async with serving(master, replication_config(1)) as server:
                server.set_in_sync(frozenset({1, 5}))
                earlier_reader, earlier = await scripted_slave(server, master, encode_hello(5, 0))
                await wait_until(lambda: server.in_sync_candidates() == {5}, message="the first link")
                end = put(master, "acknowledged by the first link only")
                earlier.write(encode_report(end))
                await wait_until(lambda: server.acknowledged_by_all_in_sync(end), message="the ack")
                # The same slave again, from an empty log: its earlier link no longer answers for it.
                _, later = await scripted_slave(server, master, encode_hello(5, 0), report=0)
                try:
                    while await asyncio.wait_for(earlier_reader.read(1 << 16), 30):
                        pass  # what was streamed before the close
                    await wait_until(
                        lambda: len(server.runtime_info().ha_connection_info) == 1, message="one link left"
                    )
                    assert not server.acknowledged_by_all_in_sync(end)
                finally:
                    earlier.close()
                    later.close()

    asyncio.run(scenario())
