"""Long polling: pulls that found nothing wait here until a message lands in their queue."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass

from cometmq.errors import RequestRefused
from cometmq.protocol import ResponseCode
from cometmq.remoting import Connection
from cometmq.remoting.transport import MAX_PENDING_REQUESTS_PER_CONNECTION

log = logging.getLogger("cometmq.broker")


@dataclass(eq=False, slots=True)
class HeldPull:
    conn: Connection
    key: tuple[str, int]  # (topic, queue id)
    offset: int
    codes: frozenset[int] | None  # tag codes that wake it; None: any message
    # Called on a matching arrival: answers the pull and returns True, or returns False to keep it
    # held (it may move ``offset`` on, past messages a filter rejected).
    answer: Callable[[HeldPull], bool]
    # Called at the deadline, or at release (shutdown): answers the pull with what is there.
    expire: Callable[[HeldPull], None]
    timer: asyncio.TimerHandle | None = None
    parked: bool = True  # False once answered, expired or dropped
    # The commit-log offset that must be confirmed before its read finds anything (-1: none): the
    # pull waits for the confirmed offset to reach it (failover mode).
    needed: int = -1


class PullHoldService:
    """Parks pulls per (topic, queue id) and answers them when a matching message arrives.

    RocketMQ re-checks held pulls every 5 s; here the store's arrival callback answers the exact pulls
    a message matches, in the same loop step, so a consumer sees a new message as soon as it is stored.

    A held pull is an entry and a timer, answered by callbacks: no task, future or coroutine per pull
    (a consumer keeps one held per queue it reads, and each message it gets is followed by a new one).
    """

    def __init__(self) -> None:
        self._held: dict[tuple[str, int], list[HeldPull]] = {}
        # The pulls waiting for the confirmed offset, by the offset each needs (a heap of (needed, n,
        # pull)); entries of pulls answered meanwhile are skipped, and cleared out when they pile up.
        self._confirming: list[tuple[int, int, HeldPull]] = []
        self._confirming_gone = 0
        self._order = itertools.count()
        # Per connection, as a dict for an ordered set: forgotten at once when it closes, and bounded.
        self._by_conn: dict[Connection, dict[HeldPull, None]] = {}

    def park(
        self,
        conn: Connection,
        topic: str,
        queue_id: int,
        offset: int,
        codes: frozenset[int] | None,
        answer: Callable[[HeldPull], bool],
        expire: Callable[[HeldPull], None],
        timeout: float,
    ) -> HeldPull:
        """Register a pull in the same loop step as the read that found nothing, so a message stored
        right after it (even one from the same socket read) cannot slip past. A matching arrival calls
        ``answer``; ``timeout`` seconds later, or at :meth:`wake_all`, ``expire`` is called instead.
        Either way the entry is gone before the call; it also goes, unanswered, when its connection
        closes (:meth:`drop_connection`). Returns the held pull (see :meth:`wait_confirmed`)."""
        of_conn = self._by_conn.get(conn)
        if of_conn is None:
            of_conn = self._by_conn[conn] = {}
        elif len(of_conn) >= MAX_PENDING_REQUESTS_PER_CONNECTION:
            raise RequestRefused(
                ResponseCode.SYSTEM_BUSY, "[OVERLOAD] too many pulls held for this connection"
            )
        held = HeldPull(conn, (topic, queue_id), offset, codes, answer, expire)
        held.timer = asyncio.get_running_loop().call_later(timeout, self._expire, held)
        of_conn[held] = None
        waiting = self._held.get(held.key)
        if waiting is None:
            self._held[held.key] = [held]
        else:
            waiting.append(held)
        return held

    def _forget(self, held: HeldPull) -> None:
        waiting = self._held[held.key]
        waiting.remove(held)
        if not waiting:
            del self._held[held.key]
        self._unfile(held)

    def _unfile(self, held: HeldPull) -> None:
        """Everything of *held* but its place in its queue's list: its timer and its connection's entry."""
        assert held.timer is not None
        held.timer.cancel()
        held.parked = False
        if held.needed >= 0:
            self._confirming_gone += 1
        of_conn = self._by_conn[held.conn]
        del of_conn[held]
        if not of_conn:
            del self._by_conn[held.conn]

    def _expire(self, held: HeldPull) -> None:
        self._forget(held)
        self._call_expire(held)

    def _call_expire(self, held: HeldPull) -> None:
        try:
            held.expire(held)
        except Exception:  # a bug (the pull's own expire replies to its failures): wake_all goes on
            log.exception("answering a held pull of %s:%d at its deadline failed", *held.key)

    def on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        """The store's arrival listener: answer the held pulls this message can satisfy.

        Answered here, in the sender's loop step and before the send's own reply, rather than a loop
        step later: a loop step is a visible share of the end-to-end latency ``cometmq bench latency``
        measures. The queue's list is rebuilt once, not searched per answered pull
        (a broadcast topic can have a pull of every consumer held on one queue).
        """
        key = (topic, queue_id)
        waiting = self._held.get(key)
        if not waiting:
            return
        kept = []
        for held in waiting:
            if max_offset > held.offset and (held.codes is None or tags_code in held.codes):
                try:
                    answered = held.answer(held)
                except Exception:  # a bug: the pull's own answer replies to its failures
                    log.exception("answering a held pull of %s:%d failed", topic, queue_id)
                    answered = True
                if answered:
                    self._unfile(held)
                    continue
            kept.append(held)
        if kept:
            self._held[key] = kept
        else:
            del self._held[key]

    def wait_confirmed(self, held: HeldPull, needed: int) -> None:
        """*held* found only messages beyond the confirmed offset: :meth:`on_confirmed` answers it once
        the confirmed offset reaches *needed* (an arrival in its queue still does, as before)."""
        if held.needed == needed or not held.parked:
            return
        if held.needed >= 0:
            self._confirming_gone += 1  # its earlier entry
        held.needed = needed
        confirming = self._confirming
        if self._confirming_gone > 64 and self._confirming_gone * 2 > len(confirming):
            confirming[:] = [entry for entry in confirming if entry[2].parked and entry[2].needed == entry[0]]
            heapq.heapify(confirming)
            self._confirming_gone = 0
        heapq.heappush(confirming, (needed, next(self._order), held))

    def on_confirmed(self, confirmed: int) -> None:
        """The confirmed offset rose to *confirmed*: answer the pulls waiting for it that it reached,
        and only those."""
        confirming = self._confirming
        reached: list[HeldPull] = []
        while confirming and confirming[0][0] <= confirmed:
            needed, _, held = heapq.heappop(confirming)
            if not held.parked or held.needed != needed:
                self._confirming_gone -= 1
                continue
            held.needed = -1
            reached.append(held)
        # Answered once taken out: a pull that still finds nothing it may read waits again, for a later
        # rise, rather than being taken out again by this one (which would never end).
        for held in reached:
            if not held.parked:  # forgotten meanwhile (its connection closed as another was answered)
                continue
            try:
                answered = held.answer(held)
            except Exception:  # a bug: the pull's own answer replies to its failures
                log.exception("answering a held pull of %s:%d failed", *held.key)
                answered = True
            if answered:
                self._forget(held)

    def drop_connection(self, conn: Connection) -> None:
        """Forget the pulls held for a connection that closed (nobody to answer)."""
        for held in list(self._by_conn.get(conn, ())):
            self._forget(held)

    def wake_all(self) -> None:
        """Answer every held pull with what is there now (shutdown). The queues' lists are taken
        whole, not searched per pull, as in :meth:`on_arrival`."""
        held_per_queue, self._held = self._held, {}
        for waiting in held_per_queue.values():
            for held in waiting:
                self._unfile(held)
                self._call_expire(held)
