"""Which queue a producer sends to next: round robin per topic, avoiding brokers that were slow or failed.

This is RocketMQ 4.9.8's ``MQFaultStrategy`` with its ``LatencyFaultToleranceImpl``: every send reports
how long it took; a latency at or above a step of :data:`LATENCY_MAX_MS` makes the broker unavailable
for the matching :data:`NOT_AVAILABLE_MS` (a failed send counts as :data:`ISOLATION_LATENCY_MS`, so a
broker that failed is avoided for ten minutes). Queue selection walks the topic's queues round robin
from a per-topic counter and takes the first whose broker is available; when none is, it falls back to
the least bad broker (available first, then lowest latency, then soonest available).

Pure: no I/O, no asyncio; the clock is injected (seconds, monotonic) so tests can move time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cometmq.client.message import MessageQueue

__all__ = [
    "ISOLATION_LATENCY_MS",
    "LATENCY_MAX_MS",
    "NOT_AVAILABLE_MS",
    "FaultStrategy",
    "LatencyFaultTolerance",
    "PublishInfo",
    "not_available_ms",
]

# MQFaultStrategy's tables (4.9.8): a send latency ≥ LATENCY_MAX_MS[i] makes the broker unavailable
# for NOT_AVAILABLE_MS[i]. (RocketMQ 5.x uses shorter durations; we follow 4.9.8 throughout.)
LATENCY_MAX_MS: tuple[int, ...] = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_MS: tuple[int, ...] = (0, 0, 30000, 60000, 120000, 180000, 600000)
# The latency a failed send is charged with (4.9.8 updateFaultItem with isolation=true).
ISOLATION_LATENCY_MS = 30000


def not_available_ms(latency_ms: float) -> int:
    """How long a broker is avoided after a send that took ``latency_ms``."""
    for limit, duration in zip(reversed(LATENCY_MAX_MS), reversed(NOT_AVAILABLE_MS), strict=True):
        if latency_ms >= limit:
            return duration
    return 0


@dataclass(slots=True)
class _FaultItem:
    name: str
    latency_ms: float
    available_at: float  # clock seconds


class LatencyFaultTolerance:
    """The brokers that answered slowly or failed, and until when each is to be avoided.

    A broker with no entry is available. An update that makes a broker available at once removes its
    entry instead of keeping one (RocketMQ keeps it): availability is the same, and a healthy cluster
    keeps an empty table, which lets :class:`FaultStrategy` skip the availability checks on every send.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.items: dict[str, _FaultItem] = {}
        self._worst_index = random.randrange(1 << 16)

    def update(self, name: str, latency_ms: float, not_available_ms: int) -> None:
        if not_available_ms <= 0:
            self.items.pop(name, None)
            return
        until = self.clock() + not_available_ms / 1000.0
        item = self.items.get(name)
        if item is None:
            self.items[name] = _FaultItem(name, latency_ms, until)
        else:
            item.latency_ms = latency_ms
            item.available_at = until

    def is_available(self, name: str) -> bool:
        item = self.items.get(name)
        return item is None or self.clock() >= item.available_at

    def remove(self, name: str) -> None:
        self.items.pop(name, None)

    def pick_one_at_least(self) -> str | None:
        """A broker to try when every broker is to be avoided: one of the better half, in turn
        (RocketMQ's order: available first, then lower latency, then sooner available)."""
        if not self.items:
            return None
        now = self.clock()
        ranked = sorted(
            self.items.values(), key=lambda i: (now < i.available_at, i.latency_ms, i.available_at)
        )
        half = len(ranked) // 2
        if half <= 0:
            return ranked[0].name
        self._worst_index += 1
        return ranked[self._worst_index % half].name


class PublishInfo:
    """A topic's writable queues, in route order, and its round-robin position (RocketMQ's
    TopicPublishInfo). ``from_template`` marks queues borrowed from TBW102 for a topic no broker
    has yet (the first send creates it)."""

    __slots__ = ("from_template", "index", "queue_nums", "queues", "topic")

    def __init__(
        self,
        topic: str,
        queues: Sequence[MessageQueue],
        *,
        from_template: bool = False,
        start: int | None = None,
    ) -> None:
        self.topic = topic
        self.queues: tuple[MessageQueue, ...] = tuple(queues)
        self.from_template = from_template
        # Like RocketMQ's ThreadLocalIndex, start at a random position so that many producers
        # started together do not all write to queue 0 first.
        self.index = random.randrange(1 << 16) if start is None else start
        nums: dict[str, int] = {}
        for queue in self.queues:
            nums[queue.broker_name] = nums.get(queue.broker_name, 0) + 1
        self.queue_nums = nums

    def next_index(self) -> int:
        self.index += 1
        return self.index

    def select_one(self, avoid_broker: str | None = None) -> MessageQueue:
        """The next queue round robin, skipping ``avoid_broker``'s queues when another broker has any."""
        queues = self.queues
        count = len(queues)
        if avoid_broker is not None:
            for _ in range(count):
                queue = queues[self.next_index() % count]
                if queue.broker_name != avoid_broker:
                    return queue
        return queues[self.next_index() % count]


class FaultStrategy:
    """Selects the queue for each send and learns from how sends went (RocketMQ's MQFaultStrategy).

    With ``enabled=False`` (RocketMQ's default ``sendLatencyFaultEnable=false``) selection is plain
    round robin that only avoids the broker of the previous failed attempt.
    """

    def __init__(self, enabled: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = enabled
        self.tolerance = LatencyFaultTolerance(clock)

    def select(self, info: PublishInfo, last_broker: str | None = None) -> MessageQueue:
        """The queue for the next attempt; ``last_broker`` is the broker the previous attempt of the
        same message failed on (None on a first attempt)."""
        tolerance = self.tolerance
        if not self.enabled or not tolerance.items:
            # Fast path: nothing to avoid but the broker that just failed.
            return info.select_one(last_broker)
        queues = info.queues
        count = len(queues)
        index = info.next_index()
        fallback: MessageQueue | None = None
        for i in range(count):
            queue = queues[(index + i) % count]
            if tolerance.is_available(queue.broker_name):
                # RocketMQ 4.9.8 ignores the failed broker here (it is unavailable anyway after the
                # failure was reported); we still prefer another broker when one is available.
                if queue.broker_name != last_broker:
                    return queue
                if fallback is None:
                    fallback = queue
        if fallback is not None:
            return fallback
        not_best = tolerance.pick_one_at_least()
        if not_best is not None:
            nums = info.queue_nums.get(not_best, 0)
            if nums > 0:
                # Queues of a broker are numbered 0..n-1 in a route.
                return MessageQueue(info.topic, not_best, info.next_index() % nums)
            tolerance.remove(not_best)
        return info.select_one()

    def update(self, broker_name: str, latency_ms: float, failed: bool) -> None:
        """Report how a send to ``broker_name`` went."""
        if self.enabled:
            charged = ISOLATION_LATENCY_MS if failed else latency_ms
            self.tolerance.update(broker_name, latency_ms, not_available_ms(charged))

    def is_available(self, broker_name: str) -> bool:
        return self.tolerance.is_available(broker_name)

    def forget(self, broker_name: str) -> None:
        """Drop what was learnt about ``broker_name``: its master changed."""
        self.tolerance.remove(broker_name)
