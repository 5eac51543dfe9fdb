"""The broker's load line (loadSummaryInterval): rates over the time since the last look, written when
messages moved, and once every ten minutes while idle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from cometmq.broker import BrokerConfig
from cometmq.broker._load import IDLE_LINE_INTERVAL_S, LoadSummary, format_bytes
from cometmq.broker._stats import BrokerStats
from cometmq.errors import ConfigError


@dataclass
class FakeStore:
    commitlog_min_offset: int = 0
    commitlog_max_offset: int = 0
    commitlog_flushed_offset: int = 0
    disk_ratio: float = 0.25

    def disk_usage_ratio(self) -> float:
        return self.disk_ratio

    @property
    def flush_behind_bytes(self) -> int:
        return max(0, self.commitlog_max_offset - self.commitlog_flushed_offset)


@dataclass
class FakeBroker:
    """What the load line reads of a broker."""

    stats: BrokerStats = field(default_factory=BrokerStats)
    store: FakeStore = field(default_factory=FakeStore)
    connection_count: int = 3


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def summary_of(broker: FakeBroker, clock: Clock) -> LoadSummary:
    return LoadSummary(cast(Any, broker), clock)


def test_the_line_gives_the_rates_since_the_last_look_and_the_store_state() -> None:
    broker, clock = FakeBroker(), Clock()
    summary = summary_of(broker, clock)
    broker.stats.count_put("T", 100, 100 * 1024)
    broker.stats.count_put("U", 20, 20 * 1024)
    broker.stats.count_got("G", "T", 60, 60 * 1024)
    broker.store.commitlog_max_offset = 3 << 30
    broker.store.commitlog_min_offset = 1 << 30
    broker.store.commitlog_flushed_offset = (3 << 30) - 4096
    clock.now += 60
    assert summary.next_line() == (
        "load (60 s): in 2.0 msg/s (2.0 KiB/s), out 1.0 msg/s (1.0 KiB/s), connections 3, "
        "commit log 2.0 GiB, disk 25 %, flush behind 4.0 KiB"
    )
    broker.stats.count_got("G", "T", 30, 30)
    broker.store.disk_ratio = -1.0  # not measurable
    clock.now += 30
    assert summary.next_line() == (
        "load (30 s): in 0.0 msg/s (0 B/s), out 1.0 msg/s (1 B/s), connections 3, "
        "commit log 2.0 GiB, disk unknown, flush behind 4.0 KiB"
    )


def test_an_idle_broker_writes_one_line_every_ten_minutes() -> None:
    broker, clock = FakeBroker(), Clock()
    summary = summary_of(broker, clock)
    looks = int(IDLE_LINE_INTERVAL_S // 60)
    lines = []
    for _ in range(2 * looks):
        clock.now += 60
        lines.append(summary.next_line())
    written = [i for i, line in enumerate(lines) if line is not None]
    assert written == [looks - 1, 2 * looks - 1]
    assert lines[looks - 1] is not None and lines[looks - 1].startswith("load (60 s): in 0.0 msg/s (0 B/s)")
    broker.stats.count_put("T", 1, 10)  # traffic: a line at the next look, whenever the last one was
    clock.now += 60
    assert summary.next_line() is not None
    clock.now += 60
    assert summary.next_line() is None


def test_a_deleted_topic_never_makes_a_negative_rate() -> None:
    broker, clock = FakeBroker(), Clock()
    broker.stats.count_put("T", 10, 10_000)
    summary = summary_of(broker, clock)
    broker.stats.forget_topic("T")
    broker.stats.count_put("U", 1, 10)
    clock.now += 10
    line = summary.next_line()
    assert line is not None and line.startswith("load (10 s): in 0.1 msg/s (0 B/s),")


def test_sizes_read_in_binary_units() -> None:
    sizes = (0, 1023, 1024, 1536, 5 << 20, 1.2 * (1 << 30), 3 << 40, 5000 << 40)
    assert [format_bytes(n) for n in sizes] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "5.0 MiB",
        "1.2 GiB",
        "3.0 TiB",
        "5000.0 TiB",
    ]


def test_the_interval_is_a_broker_conf_key_and_cannot_be_negative() -> None:
    config = BrokerConfig()
    assert config.load_summary_interval == 60
    config.update({"loadSummaryInterval": "0"})
    assert config.load_summary_interval == 0
    with pytest.raises(ConfigError, match="loadSummaryInterval -1 is negative"):
        config.update({"loadSummaryInterval": "-1"})
