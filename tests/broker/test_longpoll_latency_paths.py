"""Long polling on a real broker over real sockets: every way a held pull ends (answered by an
arrival, kept held past messages its tag filter rejects, timed out, released, failed, or its
connection gone), and that none is left behind in the PullHoldService. The SQL92 filter's case is in
test_sql92_filter.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import pytest
from _support import broker_and_client, create_topic, held_pulls, pull, send, send_request

from cometmq.broker import _longpoll
from cometmq.broker._longpoll import HeldPull, PullHoldService
from cometmq.broker.broker import Broker
from cometmq.errors import ConnectionClosedError
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import DecodedRecord
from cometmq.remoting import Connection, RemotingClient
from waiting import wait_until

HOLD_MS = 3_600_000  # an hour: far longer than any of these tests waits for an answer


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


def test_one_message_answers_every_pull_held_on_its_queue_that_it_matches(tmp_path: Path) -> None:
    """Pulls of several consumers held on one queue (as with broadcasting): one message answers the
    ones whose filter it matches, at once, and leaves the others held."""

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Many", 1)
            consumers = [RemotingClient() for _ in range(4)]
            try:
                matching = [held_pull(c, addr, "Many") for c in consumers[:3]]
                other = held_pull(consumers[3], addr, "Many", subscription="TagA")
                await wait_until(lambda: held_pulls(broker) == 4, message="four pulls are held")
                await send(client, addr, "Many", b"to all", TAGS="TagB")
                for waiting in matching:
                    _, records = await waiting
                    assert [r.body for r in records] == [b"to all"]
                assert held_pulls(broker) == 1 and not other.done()
                await send(client, addr, "Many", b"tagged", TAGS="TagA")
                assert [r.body for r in (await other)[1]] == [b"tagged"]
                assert held_pulls(broker) == 0
            finally:
                for c in consumers:
                    await c.close()

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


@pytest.mark.parametrize("readable", [True, False], ids=["readable", "store-read-fails"])
def test_wake_all_answers_every_held_pull_with_what_is_there(tmp_path: Path, readable: bool) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Stop", 2)
            first = held_pull(client, addr, "Stop")
            second = asyncio.ensure_future(pull(client, addr, "Stop", 1, 0, suspend_ms=HOLD_MS))
            await wait_until(lambda: held_pulls(broker) == 2, message="both pulls are held")

            def unreadable(*args: object, **kwargs: object) -> None:
                raise OSError("the disk went away")

            if not readable:  # each pull still gets an answer: an error one
                broker.store.get_messages = unreadable  # type: ignore[method-assign]
            broker.pull_holds.wake_all()
            for waiting in (first, second):
                response, _ = await waiting
                if readable:
                    assert response.code == ResponseCode.PULL_NOT_FOUND
                else:
                    assert response.code == ResponseCode.SYSTEM_ERROR
                    assert "internal error handling request code 11" in (response.remark or "")
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
            # At once, not at its deadline (HOLD_MS away).
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
            assert "internal error handling request code 11" in (response.remark or "")
            await wait_until(lambda: held_pulls(broker) == 0, message="the failed pull is forgotten")

    asyncio.run(scenario())


def test_the_service_answers_each_held_pull_once_and_a_dropped_one_never() -> None:
    """On the service alone, every timer short: a pull answered on arrival is not expired later, one
    past its deadline is expired once, one whose connection closed is neither; an arrival after that
    answers nothing. The connections are stand-in objects (the service only files pulls under them)."""

    async def scenario() -> None:
        holds = PullHoldService()
        first, second, closing = (cast(Connection, object()) for _ in range(3))
        calls: list[tuple[str, int]] = []

        def answer(held: HeldPull) -> bool:
            calls.append(("answer", held.offset))
            return True

        def expire(held: HeldPull) -> None:
            calls.append(("expire", held.offset))

        holds.park(first, "Orphan", 0, 3, None, answer, expire, 0.05)
        holds.park(second, "Orphan", 1, 5, None, answer, expire, 0.05)
        holds.park(closing, "Orphan", 0, 7, None, answer, expire, 0.05)
        holds.drop_connection(closing)
        holds.on_arrival("Orphan", 0, 4, 0)
        await wait_until(lambda: ("expire", 5) in calls, message="the unanswered pull expired")
        assert not holds._held and not holds._by_conn
        holds.on_arrival("Orphan", 0, 10, 0)
        holds.on_arrival("Orphan", 1, 10, 0)
        assert calls == [("answer", 3), ("expire", 5)]

    asyncio.run(scenario())


def test_an_expire_that_raises_does_not_stop_wake_all() -> None:
    async def scenario() -> None:
        holds = PullHoldService()
        expired: list[int] = []

        def expire(held: HeldPull) -> None:
            expired.append(held.offset)
            if held.offset == 0:
                raise RuntimeError("a bug in one pull's answer")

        for offset in range(3):
            holds.park(cast(Connection, object()), "T", offset, offset, None, lambda held: True, expire, 20)
        holds.wake_all()
        assert expired == [0, 1, 2] and not holds._held and not holds._by_conn

    asyncio.run(scenario())


def test_pulls_held_for_one_connection_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_longpoll, "MAX_PENDING_REQUESTS_PER_CONNECTION", 2)

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Bounded", 1)
            held = [held_pull(client, addr, "Bounded") for _ in range(2)]
            await wait_until(lambda: held_pulls(broker) == 2, message="two pulls are held")
            response, _ = await pull(client, addr, "Bounded", 0, 0, suspend_ms=HOLD_MS)
            assert response.code == ResponseCode.SYSTEM_BUSY
            assert "too many pulls held" in (response.remark or "")
            assert held_pulls(broker) == 2
            await send(client, addr, "Bounded", b"for both")
            for waiting in held:
                _, records = await waiting
                assert [r.body for r in records] == [b"for both"]
            # Answered pulls no longer count: two more are held.
            again = [held_pull(client, addr, "Bounded", 1) for _ in range(2)]
            await wait_until(lambda: held_pulls(broker) == 2, message="two more pulls are held")
            await send(client, addr, "Bounded", b"next")
            assert [r.body for r in (await again[0])[1]] == [b"next"]

    asyncio.run(scenario())
