"""The broker's message counters and their rates, for runtime info (RocketMQ's StoreStatsService) and
VIEW_BROKER_STATS_DATA (RocketMQ's BrokerStatsManager).

The send and pull paths add each request's message count and bytes to a total and to the totals of its
topic (pulls: of its consumer group and topic), and one to the key's request count; a batch adds its
count once. Once a second a snapshot of the two totals is kept, the last 600 of them; a rate is the
difference between the totals now and a snapshot some seconds back. Every 10 s, 10 min and hour a
copy of the per-key totals is kept too (RocketMQ's StatsItem windows: minute, hour, day), for the
per-topic and per-group rates. Nothing is computed per message, and nothing per request beyond the
additions.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cometmq.protocol.broker_stats import BrokerStatsData, StatsName, StatsWindow

SAMPLE_INTERVAL_S = 1.0  # RocketMQ's FREQUENCY_OF_SAMPLING
# RocketMQ's putTps / getTransferedTps windows, in seconds: "<10 s> <60 s> <600 s>".
RATE_WINDOWS_S = (10, 60, 600)
# RocketMQ's StatsItem windows: a copy of the per-key totals every so many samples (seconds), and how
# many copies are kept, so that the oldest is about a minute, an hour and a day old.
KEY_WINDOWS = ((10, 7), (600, 7), (3600, 25))

# Per key: [messages, bytes, requests].
Totals = list[int]


@dataclass(slots=True, frozen=True)
class _KeySnapshot:
    """The per-key totals at one moment."""

    time: float
    put: dict[str, tuple[int, ...]]
    got: dict[tuple[str, str], tuple[int, ...]]


class BrokerStats:
    """Messages stored and messages handed to consumers since the broker started, and their rates."""

    __slots__ = (
        "_clock",
        "_day",
        "_key_windows",
        "_samples",
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
        # topic -> [messages stored, their bytes, send requests];
        # (consumer group, topic) -> [messages pulled, their bytes, pull requests].
        self.put_by_topic: dict[str, Totals] = {}
        self.got_by_group_topic: dict[tuple[str, str], Totals] = {}
        # (clock(), put_messages, got_messages), one a second, oldest first.
        self._snapshots: deque[tuple[float, int, int]] = deque(maxlen=max(RATE_WINDOWS_S))
        self._samples = 0
        # Copies of the per-key totals, oldest first: the minute's, the hour's and the day's.
        self._key_windows = [deque[_KeySnapshot](maxlen=kept) for _, kept in KEY_WINDOWS]
        # (consumer group, topic the message was consumed from) -> messages sent to %DLQ%<group>.
        self.dlq_by_group_topic: dict[tuple[str, str], int] = {}
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
            self.put_by_topic[topic] = [messages, size, 1]
        else:
            totals[0] += messages
            totals[1] += size
            totals[2] += 1

    def count_got(self, group: str, topic: str, messages: int, size: int) -> None:
        """Count *messages* of *topic* handed to *group* in one pull, *size* bytes in all."""
        self.got_messages += messages
        key = (group, topic)
        totals = self.got_by_group_topic.get(key)
        if totals is None:
            self.got_by_group_topic[key] = [messages, size, 1]
        else:
            totals[0] += messages
            totals[1] += size
            totals[2] += 1

    def count_dlq(self, group: str, topic: str) -> None:
        """Count one message of *topic* that *group* gave up on, sent to its dead-letter topic."""
        key = (group, topic)
        self.dlq_by_group_topic[key] = self.dlq_by_group_topic.get(key, 0) + 1

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's counters."""
        self.put_by_topic.pop(topic, None)
        for key in [key for key in self.got_by_group_topic if key[1] == topic]:
            del self.got_by_group_topic[key]
        # A topic made again counts from 0: its old totals go from the windows too.
        for window in self._key_windows:
            for snapshot in window:
                snapshot.put.pop(topic, None)
                for key in [key for key in snapshot.got if key[1] == topic]:
                    del snapshot.got[key]

    def forget_group(self, group: str) -> None:
        """Drop a deleted group's counters."""
        for key in [key for key in self.got_by_group_topic if key[0] == group]:
            del self.got_by_group_topic[key]
        for key in [key for key in self.dlq_by_group_topic if key[0] == group]:
            del self.dlq_by_group_topic[key]
        # A group made again counts from 0: its old totals go from the windows too.
        for window in self._key_windows:
            for snapshot in window:
                for key in [key for key in snapshot.got if key[0] == group]:
                    del snapshot.got[key]

    def sample(self) -> None:
        """Keep a snapshot of the totals (once a second, by :func:`sample_every_second`), and every so
        many a copy of the per-key totals."""
        now = self._clock()
        self._snapshots.append((now, self.put_messages, self.got_messages))
        copy: _KeySnapshot | None = None
        for (every, _), window in zip(KEY_WINDOWS, self._key_windows, strict=True):
            if self._samples % every == 0:
                if copy is None:
                    copy = _KeySnapshot(
                        now,
                        {topic: tuple(totals) for topic, totals in self.put_by_topic.items()},
                        {key: tuple(totals) for key, totals in self.got_by_group_topic.items()},
                    )
                window.append(copy)
        self._samples += 1
        today = datetime.date.today()
        if today != self._day:
            self._day = today
            self.day_starts = (self.put_messages, self.got_messages, *self.day_starts[:2])

    def stats_data(self, name: str, key: str) -> BrokerStatsData | None:
        """A counter over about the last minute, hour and day (VIEW_BROKER_STATS_DATA): by RocketMQ's
        stats name and key (a topic; ``topic@group`` for the GROUP_ names). None when the broker has
        not counted anything under that name and key."""
        try:
            stats_name = StatsName(name)
        except ValueError:
            return None
        column = 1 if stats_name in (StatsName.TOPIC_PUT_SIZE, StatsName.GROUP_GET_SIZE) else 0
        put = stats_name in (StatsName.TOPIC_PUT_NUMS, StatsName.TOPIC_PUT_SIZE)
        table_key: str | tuple[str, str]
        if put:
            table_key = key
            totals = self.put_by_topic.get(key)
        else:
            topic, _, group = key.partition("@")
            table_key = (group, topic)
            totals = self.got_by_group_topic.get(table_key)
        if totals is None:
            return None
        now = self._clock()
        windows = []
        for window in self._key_windows:
            if not window:
                windows.append(StatsWindow(0, 0.0, 0.0))
                continue
            oldest = window[0]
            then: Mapping[Any, tuple[int, ...]] = oldest.put if put else oldest.got
            start = then.get(table_key) or (0, 0, 0)
            counted = totals[column] - start[column]
            requests = totals[2] - start[2]
            elapsed = now - oldest.time
            windows.append(
                StatsWindow(
                    counted,
                    round(counted / elapsed, 2) if elapsed > 0 else 0.0,
                    round(counted / requests, 2) if requests > 0 else 0.0,
                )
            )
        return BrokerStatsData(*windows)

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
