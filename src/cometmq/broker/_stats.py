"""The broker's message counters and their rates, for runtime info (RocketMQ's StoreStatsService).

The send and pull paths add each request's message count and bytes to a total and to the totals of its
topic (pulls: of its consumer group and topic); a batch adds its count once.
Once a second a snapshot of the totals is kept, the last 600 of them; a rate is the difference between
the totals now and a snapshot some seconds back. Nothing is computed per message, and nothing per
request beyond the one addition.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections import deque
from collections.abc import Callable

SAMPLE_INTERVAL_S = 1.0  # RocketMQ's FREQUENCY_OF_SAMPLING
# RocketMQ's putTps / getTransferedTps windows, in seconds: "<10 s> <60 s> <600 s>".
RATE_WINDOWS_S = (10, 60, 600)


class BrokerStats:
    """Messages stored and messages handed to consumers since the broker started, and their rates."""

    __slots__ = (
        "_clock",
        "_day",
        "_snapshots",
        "day_starts",
        "dlq_by_group_topic",
        "got_by_group_topic",
        "got_messages",
        "put_by_topic",
        "put_messages",
    )

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.put_messages = 0
        self.got_messages = 0
        # topic -> [messages stored, their bytes]; (consumer group, topic) -> [messages pulled, bytes].
        self.put_by_topic: dict[str, list[int]] = {}
        self.got_by_group_topic: dict[tuple[str, str], list[int]] = {}
        # (consumer group, topic the message was consumed from) -> messages sent to %DLQ%<group>.
        self.dlq_by_group_topic: dict[tuple[str, str], int] = {}
        # (clock(), put_messages, got_messages), one a second, oldest first.
        self._snapshots: deque[tuple[float, int, int]] = deque(maxlen=max(RATE_WINDOWS_S))
        # The totals at the start of today and of yesterday (local time; 0 before the broker started),
        # as RocketMQ's msgPutTotalTodayMorning and friends: put today, got today, put yesterday, got
        # yesterday.
        self._day = datetime.date.today()
        self.day_starts = (0, 0, 0, 0)

    def count_put(self, topic: str, messages: int, size: int) -> None:
        """Count *messages* stored in *topic* in one request, *size* bytes in all."""
        self.put_messages += messages
        totals = self.put_by_topic.get(topic)
        if totals is None:
            self.put_by_topic[topic] = [messages, size]
        else:
            totals[0] += messages
            totals[1] += size

    def count_got(self, group: str, topic: str, messages: int, size: int) -> None:
        """Count *messages* of *topic* handed to *group* in one pull, *size* bytes in all."""
        self.got_messages += messages
        key = (group, topic)
        totals = self.got_by_group_topic.get(key)
        if totals is None:
            self.got_by_group_topic[key] = [messages, size]
        else:
            totals[0] += messages
            totals[1] += size

    def count_dlq(self, group: str, topic: str) -> None:
        """Count one message of *topic* that *group* gave up on, sent to its dead-letter topic."""
        key = (group, topic)
        self.dlq_by_group_topic[key] = self.dlq_by_group_topic.get(key, 0) + 1

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's counters."""
        self.put_by_topic.pop(topic, None)
        for key in [key for key in self.got_by_group_topic if key[1] == topic]:
            del self.got_by_group_topic[key]

    def sample(self) -> None:
        """Keep a snapshot of the totals (once a second, by :func:`sample_every_second`)."""
        self._snapshots.append((self._clock(), self.put_messages, self.got_messages))
        today = datetime.date.today()
        if today != self._day:
            self._day = today
            self.day_starts = (self.put_messages, self.got_messages, *self.day_starts[:2])

    def put_tps(self) -> str:
        """Messages stored per second over the last 10 s, 60 s and 600 s, RocketMQ's putTps."""
        return self._rates(1)

    def get_transferred_tps(self) -> str:
        """Messages handed to consumers per second, likewise: RocketMQ's getTransferedTps."""
        return self._rates(2)

    def _rates(self, column: int) -> str:
        # A window longer than the broker has been sampling covers what there is (RocketMQ leaves it
        # empty until it fills), so a young broker shows its rate at once; no snapshot yet: all empty.
        snapshots = self._snapshots
        if not snapshots:
            return " ".join("" for _ in RATE_WINDOWS_S)
        now = self._clock()
        total = self.put_messages if column == 1 else self.got_messages
        rates = []
        for window in RATE_WINDOWS_S:
            begin = snapshots[max(0, len(snapshots) - window)]
            elapsed = now - begin[0]
            rates.append(str(round((total - begin[column]) / elapsed, 2)) if elapsed > 0 else "0.0")
        return " ".join(rates)


async def sample_every_second(stats: BrokerStats) -> None:
    """Snapshot ``stats`` every second, for ever (a broker task)."""
    while True:
        stats.sample()
        await asyncio.sleep(SAMPLE_INTERVAL_S)
