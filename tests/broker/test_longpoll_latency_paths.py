"""Long polling on a real broker over real sockets: every way a held pull ends (answered by an
arrival, kept held past messages its tag filter rejects, timed out, released, failed, or its
connection gone), and that none is left behind in the PullHoldService. The SQL92 filter's case is in
test_sql92_filter.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from _support import broker_and_client, create_topic, held_pulls, pull, send, send_request, wait_until

from cometmq.broker._longpoll import HeldPull, PullHoldService
from cometmq.broker.broker import Broker
from cometmq.common.batch import BatchEntry, encode_batch_body
from cometmq.common.properties import encode_properties
from cometmq.common.record import DecodedRecord
from cometmq.errors import ConnectionClosedError
from cometmq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

HOLD_MS = 20000  # far longer than any of these tests waits for an answer


PullTask = asyncio.Task[tuple[RemotingCommand, list[DecodedRecord]]]


def held_pull(
    client: RemotingClient, addr: str, topic: str, offset: int = 0, **kwargs: str | int
) -> PullTask:
    return asyncio.ensure_future(pull(client, addr, topic, 0, offset, suspend_ms=HOLD_MS, **kwargs))


async def parked(
    broker: Broker, client: RemotingClient, addr: str, topic: str, offset: int = 0, **kwargs: str | int
) -> PullTask:
    """A pull of queue 0 of *topic* from *offset*, once the broker holds it (and nothing else)."""
    waiting = held_pull(client, addr, topic, offset, **kwargs)
    await wait_until(lambda: held_pulls(broker) == 1, message="the pull is held")
    return waiting


def test_a_held_pull_is_answered_by_the_message_that_lands_and_then_forgotten(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Arrive", 1)
            waiting = await parked(broker, client, addr, "Arrive")
            await send(client, addr, "Arrive", b"first")
            response, records = await waiting
            assert response.code == ResponseCode.SUCCESS
            assert [r.body for r in records] == [b"first"]
            assert response.ext_fields["nextBeginOffset"] == "1"
            await wait_until(lambda: held_pulls(broker) == 0, message="the answered pull is forgotten")
            # The next pull from the new offset is held and answered the same way.
            again = await parked(broker, client, addr, "Arrive", 1)
            await send(client, addr, "Arrive", b"second")
            response, records = await again
            assert [r.body for r in records] == [b"second"]

    asyncio.run(scenario())


def test_a_held_pull_woken_by_a_batch_gets_the_whole_batch(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Batch", 1)
            waiting = await parked(broker, client, addr, "Batch")
            entries = [BatchEntry(0, b"m%d" % i, encode_properties({"TAGS": "T"})) for i in range(3)]
            batch = send_request("Batch", encode_batch_body(entries), 0, m="true")
            batch.code = RequestCode.SEND_BATCH_MESSAGE
            assert (await client.invoke(addr, batch)).code == ResponseCode.SUCCESS
            response, records = await waiting
            assert [r.body for r in records] == [b"m0", b"m1", b"m2"]
            assert response.ext_fields["nextBeginOffset"] == "3"

    asyncio.run(scenario())


def test_a_message_the_tag_filter_rejects_leaves_the_pull_held(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Tags", 1)
            waiting = await parked(broker, client, addr, "Tags", subscription="TagA")
            # Same connection: an answer to the pull would be read before this send's reply.
            await send(client, addr, "Tags", b"other", TAGS="TagB")
            assert not waiting.done() and held_pulls(broker) == 1
            await send(client, addr, "Tags", b"wanted", TAGS="TagA")
            response, records = await waiting
            assert [r.body for r in records] == [b"wanted"]
            assert response.ext_fields["nextBeginOffset"] == "2"
            await wait_until(lambda: held_pulls(broker) == 0, message="the answered pull is forgotten")

    asyncio.run(scenario())


def test_a_held_pull_that_times_out_is_answered_not_found_and_forgotten(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Quiet", 1)
            waiting = asyncio.ensure_future(pull(client, addr, "Quiet", 0, 0, suspend_ms=300))
            await wait_until(lambda: held_pulls(broker) == 1, message="the pull is held")
            response, records = await waiting
            assert response.code == ResponseCode.PULL_NOT_FOUND and records == []
            assert response.ext_fields["nextBeginOffset"] == "0"
            assert held_pulls(broker) == 0

    asyncio.run(scenario())


def test_wake_all_answers_every_held_pull_with_what_is_there(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Stop", 2)
            first = held_pull(client, addr, "Stop")
            second = asyncio.ensure_future(pull(client, addr, "Stop", 1, 0, suspend_ms=HOLD_MS))
            await wait_until(lambda: held_pulls(broker) == 2, message="both pulls are held")
            broker.pull_holds.wake_all()
            for waiting in (first, second):
                response, _ = await waiting
                assert response.code == ResponseCode.PULL_NOT_FOUND
            assert held_pulls(broker) == 0

    asyncio.run(scenario())


def test_a_held_pull_whose_connection_closes_is_forgotten(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Gone", 1)
            leaving = RemotingClient()
            waiting = await parked(broker, leaving, addr, "Gone")
            await leaving.close()
            with pytest.raises(ConnectionClosedError):
                await waiting
            await wait_until(lambda: held_pulls(broker) == 0, message="the dropped pull is forgotten")
            # The queue still works for everyone else.
            await send(client, addr, "Gone", b"after")
            _, records = await pull(client, addr, "Gone", 0, 0, suspend_ms=HOLD_MS)
            assert [r.body for r in records] == [b"after"]

    asyncio.run(scenario())


def test_a_held_pull_that_cannot_be_read_on_arrival_gets_an_error_answer(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Broken", 1)
            waiting = await parked(broker, client, addr, "Broken")

            def unreadable(*args: object, **kwargs: object) -> None:
                raise OSError("the disk went away")

            broker.store.get_messages = unreadable  # type: ignore[method-assign]
            await send(client, addr, "Broken", b"lost")
            response, _ = await waiting
            assert response.code == ResponseCode.SYSTEM_ERROR
            assert "the disk went away" in (response.remark or "")
            await wait_until(lambda: held_pulls(broker) == 0, message="the failed pull is forgotten")

    asyncio.run(scenario())


def test_a_held_pull_nobody_awaits_is_forgotten_at_its_deadline() -> None:
    """A connection that closes before its pull's task first runs cancels the task before it awaits
    the held pull. Sockets cannot order that reliably, so this parks on the service directly and
    never awaits, as that task would; the entry must still go."""

    async def scenario() -> None:
        holds = PullHoldService()
        answered: list[int] = []

        def answer(held: HeldPull) -> bool:
            answered.append(held.offset)
            return True

        never_awaited = holds.park("Orphan", 0, 0, None, answer, 0.05)
        cancelled = holds.park("Orphan", 0, 0, None, lambda held: True, HOLD_MS / 1000)
        cancelled.wake.cancel()
        await wait_until(lambda: not holds._held, message="both entries are forgotten")
        assert never_awaited.wake.result() is False  # released by its deadline, not answered
        holds.on_arrival("Orphan", 0, 1, 0)
        assert answered == []

    asyncio.run(scenario())
