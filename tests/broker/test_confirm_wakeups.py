"""Held pulls that found only messages past the confirmed offset are read again when the confirmed
offset reaches their message, once each, and not before: no timer, no pull waking the others."""

from __future__ import annotations

import asyncio

from cometmq.broker._longpoll import HeldPull, PullHoldService
from cometmq.remoting import Connection


def test_pulls_waiting_for_the_confirmed_offset_are_read_again_only_when_it_reaches_their_message() -> None:
    async def scenario() -> None:
        holds = PullHoldService()
        loop = asyncio.get_running_loop()
        reads: list[int] = []
        confirmed = 0
        needs = {0: 100, 1: 100, 2: 250}  # the commit-log offset each pull's message ends at

        def parked(number: int) -> HeldPull:
            def answer(held: HeldPull) -> bool:
                reads.append(number)
                if confirmed < needs[number]:
                    holds.wait_confirmed(held, needs[number])
                    return False
                return True

            conn = Connection.__new__(Connection)  # only a key: nothing is sent through it
            return holds.park(conn, "Orders", 0, 5, None, answer, lambda held: None, 30)

        for number in needs:
            parked(number)
        holds.on_arrival("Orders", 0, 6, 0)  # the messages arrive, not yet confirmed
        assert reads == [0, 1, 2]
        scheduled = len(loop._scheduled)  # type: ignore[attr-defined]
        for _ in range(10):
            await asyncio.sleep(0)
        assert reads == [0, 1, 2]  # nothing reads them again on its own
        assert len(loop._scheduled) == scheduled  # type: ignore[attr-defined]

        confirmed = 99
        holds.on_confirmed(confirmed)
        assert reads == [0, 1, 2]
        confirmed = 100
        holds.on_confirmed(confirmed)
        assert reads == [0, 1, 2, 0, 1]  # the two whose message is now confirmed, answered
        confirmed = 300
        holds.on_confirmed(confirmed)
        assert reads == [0, 1, 2, 0, 1, 2]
        holds.on_confirmed(400)
        assert reads == [0, 1, 2, 0, 1, 2]  # answered pulls are gone
        assert not holds._held

    asyncio.run(scenario())


def test_a_pull_that_still_reads_nothing_when_woken_waits_for_a_later_rise() -> None:
    """A rise the pull's own read does not see (the broker reads by another limit than the one that
    rose, as while it switches roles) answers it once, and the pull waits again: the rise must not take
    it out again and again."""

    async def scenario() -> None:
        holds = PullHoldService()
        reads: list[int] = []

        def answer(held: HeldPull) -> bool:
            reads.append(len(reads))
            holds.wait_confirmed(held, 100)  # its read's limit stays below the message
            return False

        conn = Connection.__new__(Connection)  # only a key: nothing is sent through it
        holds.park(conn, "Orders", 0, 5, None, answer, lambda held: None, 30)
        holds.on_arrival("Orders", 0, 6, 0)
        assert reads == [0]
        holds.on_confirmed(200)
        assert reads == [0, 1]  # read once more, then waiting again
        holds.on_confirmed(300)
        assert reads == [0, 1, 2]

    asyncio.run(scenario())
