"""BrokerStats' per-key windows (VIEW_BROKER_STATS_DATA): what each window counts as samples go by."""

from __future__ import annotations

from cometmq.broker._stats import BrokerStats
from cometmq.protocol.broker_stats import BrokerStatsData, StatsWindow


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def tick(stats: BrokerStats, clock: Clock, seconds: int) -> None:
    """*seconds* of once-a-second samples."""
    for _ in range(seconds):
        stats.sample()
        clock.now += 1.0


def test_the_minute_window_forgets_what_was_counted_over_a_minute_ago_and_the_hour_keeps_it() -> None:
    clock = Clock()
    stats = BrokerStats(clock)
    tick(stats, clock, 1)
    stats.count_put("T", 30, 3000)  # one batch of 30
    tick(stats, clock, 100)
    stats.count_put("T", 5, 500)
    stats.count_put("T", 5, 500)
    data = stats.stats_data("TOPIC_PUT_NUMS", "T")
    assert data is not None
    assert data.minute.sum == 10 and data.minute.avgpt == 5.0
    assert data.hour.sum == 40 and data.day.sum == 40
    assert data.hour.avgpt == round(40 / 3, 2)
    assert 0 < data.minute.tps <= 10 / 60
    size = stats.stats_data("TOPIC_PUT_SIZE", "T")
    assert size is not None and (size.minute.sum, size.hour.sum) == (1000, 4000)


def test_a_group_is_counted_under_topic_at_group_and_unknown_names_or_keys_have_no_data() -> None:
    clock = Clock()
    stats = BrokerStats(clock)
    tick(stats, clock, 1)
    stats.count_got("G", "T", 7, 70)
    tick(stats, clock, 2)
    data = stats.stats_data("GROUP_GET_NUMS", "T@G")
    assert data is not None and data.minute.sum == 7 and data.minute.tps == round(7 / 3, 2)  # 3 s since
    assert stats.stats_data("GROUP_GET_NUMS", "G@T") is None
    assert stats.stats_data("TOPIC_PUT_NUMS", "T") is None
    assert stats.stats_data("NO_SUCH_STATS", "T") is None


def test_a_topic_made_again_after_deletion_counts_from_zero() -> None:
    clock = Clock()
    stats = BrokerStats(clock)
    stats.count_put("T", 50, 500)
    tick(stats, clock, 11)
    stats.forget_topic("T")
    stats.count_put("T", 2, 20)
    data = stats.stats_data("TOPIC_PUT_NUMS", "T")
    assert data is not None and data.minute.sum == 2


def test_a_deleted_group_is_forgotten_and_counts_from_zero_if_made_again() -> None:
    clock = Clock()
    stats = BrokerStats(clock)
    stats.count_got("G", "T", 40, 400)
    stats.count_got("Other", "T", 3, 30)
    stats.count_dlq("G", "%RETRY%G")
    tick(stats, clock, 11)
    stats.forget_group("G")
    assert list(stats.got_by_group_topic) == [("Other", "T")]
    assert stats.dlq_by_group_topic == {}
    assert stats.stats_data("GROUP_GET_NUMS", "T@G") is None
    stats.count_got("G", "T", 2, 20)
    data = stats.stats_data("GROUP_GET_NUMS", "T@G")
    assert data is not None and data.minute.sum == data.hour.sum == 2
    other = stats.stats_data("GROUP_GET_NUMS", "T@Other")
    assert other is not None and other.minute.sum == 0  # counted before the windows' first copy


def test_broker_stats_data_round_trips_and_today_is_the_widest_window_that_counted() -> None:
    data = BrokerStatsData(StatsWindow(3, 0.05, 1.5), StatsWindow(9, 0.0025, 1.0), StatsWindow(0, 0.0, 0.0))
    assert BrokerStatsData.decode(data.encode()) == data
    assert data.today == 9
