"""SYNC_MASTER's group transfer: sends share a future between two writes to the slaves or two
acknowledgements, an acknowledgement answers every send it covers, the oldest deadline answers
FLUSH_SLAVE_TIMEOUT."""

from __future__ import annotations

import asyncio

from cometmq.replication._transfer import GroupTransfer
from cometmq.store import PutStatus
from waiting import wait_until


def started(timeout_ms: int = 60_000, max_gap: int = 1 << 20) -> GroupTransfer:
    transfer = GroupTransfer(timeout_ms, max_gap)
    transfer.start(asyncio.get_running_loop())
    return transfer


def test_sends_between_two_acks_share_one_future_and_one_ack_answers_them() -> None:
    async def scenario() -> None:
        transfer = started()
        first = transfer.when_replicated(100, slaves=1)
        second = transfer.when_replicated(250, slaves=1)
        assert first is second
        transfer.acknowledge(100)
        assert not first.done()  # the group waits for its last send's end
        later = transfer.when_replicated(300, slaves=1)
        assert later is not first  # a send after an acknowledgement starts a group of its own
        transfer.acknowledge(300)
        assert first.result() is PutStatus.PUT_OK
        assert later.result() is PutStatus.PUT_OK
        transfer.close()

    asyncio.run(scenario())


def test_sends_after_a_write_to_the_slaves_wait_in_a_group_of_their_own() -> None:
    async def scenario() -> None:
        transfer = started()
        shipped = transfer.when_replicated(100, slaves=1)
        transfer.shipped()
        later = transfer.when_replicated(250, slaves=1)
        assert later is not shipped
        assert transfer.when_replicated(300, slaves=1) is later  # until the next write, sends share one
        transfer.acknowledge(100)  # the write's acknowledgement answers the sends it carried
        assert shipped.result() is PutStatus.PUT_OK
        assert not later.done()
        transfer.close()

    asyncio.run(scenario())


def test_a_group_spans_at_most_its_span_so_an_ack_of_part_of_a_write_answers_that_part() -> None:
    async def scenario() -> None:
        transfer = GroupTransfer(60_000, 1 << 20, span=1000)
        transfer.start(asyncio.get_running_loop())
        first = transfer.when_replicated(100, slaves=1)
        assert transfer.when_replicated(1100, slaves=1) is first  # within 1000 bytes of the first end
        second = transfer.when_replicated(1101, slaves=1)
        assert second is not first
        transfer.acknowledge(1100)
        assert first.result() is PutStatus.PUT_OK
        assert not second.done()
        transfer.close()

    asyncio.run(scenario())


def test_an_acknowledged_end_is_answered_at_once() -> None:
    async def scenario() -> None:
        transfer = started()
        transfer.acknowledge(500)
        assert transfer.when_replicated(500, slaves=1).result() is PutStatus.PUT_OK
        assert transfer.when_replicated(400, slaves=0).result() is PutStatus.PUT_OK

    asyncio.run(scenario())


def test_no_slave_or_too_far_behind_is_slave_not_available() -> None:
    async def scenario() -> None:
        transfer = started(max_gap=1000)
        assert transfer.when_replicated(10, slaves=0).result() is PutStatus.SLAVE_NOT_AVAILABLE
        transfer.acknowledge(10)
        assert transfer.when_replicated(1010, slaves=1).result() is PutStatus.SLAVE_NOT_AVAILABLE
        assert not transfer.when_replicated(1009, slaves=1).done()
        transfer.close()

    asyncio.run(scenario())


def test_a_send_no_slave_confirms_times_out_and_later_ones_still_wait() -> None:
    async def scenario() -> None:
        transfer = started(timeout_ms=50)
        waiting = transfer.when_replicated(100, slaves=1)
        await wait_until(waiting.done, message="the slave timeout")
        assert waiting.result() is PutStatus.FLUSH_SLAVE_TIMEOUT
        after = transfer.when_replicated(200, slaves=1)
        assert not after.done()
        transfer.acknowledge(200)
        assert after.result() is PutStatus.PUT_OK
        transfer.close()

    asyncio.run(scenario())


def test_closing_answers_every_waiting_send() -> None:
    async def scenario() -> None:
        transfer = started()
        waiting = transfer.when_replicated(100, slaves=1)
        transfer.close()
        assert waiting.result() is PutStatus.FLUSH_SLAVE_TIMEOUT

    asyncio.run(scenario())
