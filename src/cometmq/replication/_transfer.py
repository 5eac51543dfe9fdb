"""SYNC_MASTER's group transfer: a send waits until a slave has acknowledged the commit-log bytes up to
its record's end.

Sends that land between two writes to the slaves (or two acknowledgements), within *span* bytes of
the first one's end, share one future, and one acknowledgement answers every send at or below it in
one pass (as the flush's group commit does): a busy SYNC_MASTER handles one future per chunk of
haTransferBatchSize, not one per message, and a slave reporting part of a write answers the sends in
that part (batches keep flowing while the slave applies the rest). One timer, for the oldest deadline,
answers the sends a slave did not confirm within ``slaveTimeout``.
"""

from __future__ import annotations

import asyncio
from collections import deque

from cometmq.store import PutStatus

# A waiting group takes more sends for at most this share of slaveTimeout, so a send joining it late
# is still given nearly all of its wait.
_JOIN_WINDOW_SHARE = 0.1


class _Group:
    __slots__ = ("deadline", "first", "future", "joinable_until", "target")

    def __init__(self, target: int, future: asyncio.Future[PutStatus], deadline: float, join: float) -> None:
        self.first = target  # the first send's end
        self.target = target
        self.future = future
        self.deadline = deadline
        self.joinable_until = join


class GroupTransfer:
    """The acknowledged offset and the sends waiting for it. Under the classic rule it is the largest
    any slave confirmed and never goes down, as RocketMQ's ``push2SlaveMaxOffset``; with an in-sync set
    it is what the set confirmed, and moves with the set (``reset``)."""

    def __init__(self, slave_timeout_ms: int, max_gap: int, span: int = 1 << 62) -> None:
        self.acked = 0
        self._span = span
        self._timeout = slave_timeout_ms / 1000
        self._join_window = self._timeout * _JOIN_WINDOW_SHARE
        self._max_gap = max_gap
        self._groups: deque[_Group] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: dict[PutStatus, asyncio.Future[PutStatus]] = {}

    def when_replicated(self, end: int, slaves: int | None) -> asyncio.Future[PutStatus]:
        """A future answering PUT_OK once the acknowledged offset reaches *end*, FLUSH_SLAVE_TIMEOUT
        after slaveTimeout; done at once with SLAVE_NOT_AVAILABLE when *slaves* is 0 or the gap reaches
        haMaxGapNotInSync (RocketMQ's ``isSlaveOK``). *slaves* None (an in-sync set decides whom to
        wait for): no such shortcut."""
        if end <= self.acked:
            return self.answered(PutStatus.PUT_OK)
        if slaves is not None and (not slaves or end - self.acked >= self._max_gap):
            return self.answered(PutStatus.SLAVE_NOT_AVAILABLE)
        loop = self._loop
        assert loop is not None
        now = loop.time()
        groups = self._groups
        if groups:
            last = groups[-1]
            if now < last.joinable_until and end - last.first <= self._span:
                if end > last.target:
                    last.target = end
                return last.future
        group = _Group(end, loop.create_future(), now + self._timeout, now + self._join_window)
        groups.append(group)
        if self._timer is None:
            self._arm(group.deadline)
        return group.future

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def acknowledge(self, offset: int) -> None:
        """A slave confirmed the bytes below *offset*: answer every send it covers, and start a new
        group for the sends that follow."""
        if offset > self.acked:
            self.reset(offset)

    def reset(self, offset: int) -> None:
        """The acknowledged offset is *offset*, lower or higher (the brokers acknowledging changed):
        answer every send it covers."""
        self.acked = offset
        groups = self._groups
        while groups and groups[0].target <= offset:
            future = groups.popleft().future
            if not future.done():
                future.set_result(PutStatus.PUT_OK)
        if groups:
            groups[-1].joinable_until = 0.0  # sends after this ack wait in a group of their own

    def shipped(self) -> None:
        """A link wrote the commit log to its end: the sends waiting now are all on their way, and
        the sends that follow wait in a group of their own. Otherwise a send joining after the write
        would hold every send of its group back for one more acknowledgement."""
        if self._groups:
            self._groups[-1].joinable_until = 0.0

    def close(self) -> None:
        """Stopping: answer every waiting send FLUSH_SLAVE_TIMEOUT (its message is stored)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._groups:
            future = self._groups.popleft().future
            if not future.done():
                future.set_result(PutStatus.FLUSH_SLAVE_TIMEOUT)

    def _arm(self, when: float) -> None:
        assert self._loop is not None
        self._timer = self._loop.call_at(when, self._expire)

    def _expire(self) -> None:
        self._timer = None
        assert self._loop is not None
        now = self._loop.time()
        groups = self._groups
        while groups and groups[0].deadline <= now:
            future = groups.popleft().future
            if not future.done():
                future.set_result(PutStatus.FLUSH_SLAVE_TIMEOUT)
        if groups:
            self._arm(groups[0].deadline)

    def answered(self, status: PutStatus) -> asyncio.Future[PutStatus]:
        """A future done with *status*. One per answer, shared: a caller only reads it (done() and
        result())."""
        future = self._done.get(status)
        if future is None:
            assert self._loop is not None
            future = self._done[status] = self._loop.create_future()
            future.set_result(status)
        return future
