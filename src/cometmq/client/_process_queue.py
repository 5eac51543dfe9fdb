"""ProcessQueue: the messages of one assigned queue between their pull and their consumption.

It decides the offset a push consumer may commit: RocketMQ's rule is "the smallest offset not yet
consumed", so that a crash never skips a message that a slower listener call still holds, at the
price of redelivering the ones consumed after it.
"""

from __future__ import annotations

import asyncio

from cometmq.client.message import MessageQueue, ReceivedMessage


class ProcessQueue:
    """Cached messages of one queue, keyed by queue offset.

    Pulls append in offset order and a dict keeps insertion order, so the first key is always the
    smallest offset still cached: no sorted structure is needed.
    """

    __slots__ = (
        "_cache",
        "_idle",
        "_room",
        "cached_bytes",
        "consuming",
        "dropped",
        "in_flight",
        "lock_event",
        "locked",
        "max_cached",
        "max_cached_bytes",
        "max_offset_seen",
        "max_span",
        "pulled_to",
        "queue",
        "removed",
    )

    def __init__(
        self, queue: MessageQueue, max_cached: int, max_cached_bytes: int, max_span: int | None = None
    ) -> None:
        """Full (no more pulls) at ``max_cached`` messages, or ``max_cached_bytes`` of bodies, or when
        the cached offsets span more than ``max_span`` (RocketMQ's pullThresholdForQueue,
        pullThresholdSizeForQueue and consumeConcurrentlyMaxSpan; None: no span limit)."""
        self.queue = queue
        self.max_cached = max_cached
        self.max_cached_bytes = max_cached_bytes
        self.max_span = max_span
        self._cache: dict[int, ReceivedMessage] = {}
        self.cached_bytes = 0
        self.max_offset_seen = -1
        self.pulled_to = 0  # next_begin_offset of the last pull: every offset below was read or skipped
        self.dropped = False  # no longer ours: stop pulling and consuming
        self.removed = False  # its last offset is committed: never touch the offset store again
        self.in_flight = 0  # listener calls holding messages of this queue
        self._idle = asyncio.Event()
        self._idle.set()
        self._room = asyncio.Event()
        self._room.set()
        # Orderly consumption: the broker lock, and whether a worker is consuming this queue now.
        self.locked = False
        self.lock_event = asyncio.Event()
        self.consuming = False

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def full(self) -> bool:
        """Whether flow control holds the queue's pulls back (the listener is behind)."""
        cache = self._cache
        if len(cache) >= self.max_cached or self.cached_bytes >= self.max_cached_bytes:
            return True
        return self.max_span is not None and bool(cache) and self.span > self.max_span

    @property
    def span(self) -> int:
        """The largest cached offset less the smallest (0 when nothing is cached)."""
        return self.max_offset_seen - next(iter(self._cache)) if self._cache else 0

    def put(self, messages: list[ReceivedMessage], pulled_to: int) -> None:
        self.pulled_to = pulled_to
        cache = self._cache
        for message in messages:
            cache[message.queue_offset] = message
        if messages:
            self.cached_bytes += sum(len(m.body) for m in messages)
            self.max_offset_seen = max(self.max_offset_seen, messages[-1].queue_offset)
        if self.full:
            self._room.clear()

    def remove(self, messages: list[ReceivedMessage]) -> int:
        """Forget consumed messages; the offset to commit now, or -1 when nothing was cached."""
        cache = self._cache
        if not cache:
            return -1
        for message in messages:
            if cache.pop(message.queue_offset, None) is not None:
                self.cached_bytes -= len(message.body)
        if not self.full:
            self._room.set()
        # Empty: past the last message, and past what the broker's filter skipped behind it.
        return next(iter(cache)) if cache else max(self.max_offset_seen + 1, self.pulled_to)

    def head(self, count: int) -> list[ReceivedMessage]:
        """The first ``count`` cached messages, left in the cache (orderly consumption)."""
        out: list[ReceivedMessage] = []
        for message in self._cache.values():
            if len(out) >= count:
                break
            out.append(message)
        return out

    def clear(self) -> None:
        self._cache.clear()
        self.cached_bytes = 0
        self._room.set()

    async def wait_for_room(self) -> None:
        """Flow control: return once the queue is no longer :attr:`full`."""
        await self._room.wait()

    def begin_consume(self) -> None:
        self.in_flight += 1
        self._idle.clear()

    def end_consume(self) -> None:
        self.in_flight -= 1
        if self.in_flight <= 0:
            self.in_flight = 0
            self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no listener call holds messages of this queue; False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def set_locked(self, locked: bool) -> None:
        self.locked = locked
        if locked:
            self.lock_event.set()
        else:
            self.lock_event.clear()

    def drop(self) -> None:
        # The cache stays until the owner has waited for in-flight listener calls: their removals
        # still move the offset that is committed when the queue leaves.
        self.dropped = True
        # Wake anything parked on this queue so that it can see the drop and leave.
        self.lock_event.set()
        self._room.set()
