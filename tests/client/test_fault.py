"""The producer's queue selection and broker fault avoidance (cometmq.client._fault), with a fake clock."""

from __future__ import annotations

from collections import Counter

import pytest

from cometmq.client._fault import (
    ISOLATION_LATENCY_MS,
    FaultStrategy,
    LatencyFaultTolerance,
    PublishInfo,
    not_available_ms,
)
from cometmq.client.message import MessageQueue


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def queues(*brokers: str, per_broker: int = 2, topic: str = "T") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, qid) for broker in brokers for qid in range(per_broker)]


@pytest.mark.parametrize(
    ("latency_ms", "expected_ms"),
    [
        (0, 0),
        (49, 0),
        (50, 0),
        (549, 0),
        (550, 30_000),
        (999, 30_000),
        (1000, 60_000),
        (2000, 120_000),
        (2999, 120_000),
        (3000, 180_000),
        (14_999, 180_000),
        (15_000, 600_000),
        (ISOLATION_LATENCY_MS, 600_000),
    ],
)
def test_latency_steps_map_to_rocketmq_4_9_8_unavailable_durations(latency_ms: int, expected_ms: int) -> None:
    assert not_available_ms(latency_ms) == expected_ms


def test_a_broker_is_unavailable_for_its_duration_and_available_after() -> None:
    clock = Clock()
    tolerance = LatencyFaultTolerance(clock)
    tolerance.update("broker-a", 600, 30_000)
    assert not tolerance.is_available("broker-a")
    assert tolerance.is_available("broker-b")  # never reported: available
    clock.now += 29.999
    assert not tolerance.is_available("broker-a")
    clock.now += 0.001
    assert tolerance.is_available("broker-a")


def test_a_fast_answer_clears_a_broker_at_once() -> None:
    clock = Clock()
    tolerance = LatencyFaultTolerance(clock)
    tolerance.update("broker-a", 3000, 180_000)
    tolerance.update("broker-a", 10, 0)
    assert tolerance.is_available("broker-a")
    assert tolerance.items == {}


def test_pick_one_at_least_prefers_available_then_low_latency() -> None:
    clock = Clock()
    tolerance = LatencyFaultTolerance(clock)
    assert tolerance.pick_one_at_least() is None
    tolerance.update("slow", 2500, 120_000)
    assert tolerance.pick_one_at_least() == "slow"  # the only one (half of 1 is 0)
    tolerance.update("slower", 5000, 180_000)
    tolerance.update("slowest", 20_000, 600_000)
    tolerance.update("recovered", 9000, 1_000)
    clock.now += 2  # "recovered" is available again; the others are not
    # Better half of 4 = 2 candidates, taken in turn: the available one, then the lowest latency.
    picks = Counter(tolerance.pick_one_at_least() for _ in range(10))
    assert picks == Counter({"recovered": 5, "slow": 5})


def test_round_robin_over_every_queue_of_the_topic() -> None:
    info = PublishInfo("T", queues("broker-a", "broker-b"), start=0)
    strategy = FaultStrategy(clock=Clock())
    picked = [strategy.select(info) for _ in range(8)]
    assert picked == [info.queues[i % 4] for i in range(1, 9)]


def test_a_failed_broker_is_skipped_until_its_duration_has_passed() -> None:
    clock = Clock()
    info = PublishInfo("T", queues("broker-a", "broker-b"), start=0)
    strategy = FaultStrategy(clock=clock)
    strategy.update("broker-b", 5.0, failed=True)  # charged as 30 s latency → 10 minutes
    assert {strategy.select(info).broker_name for _ in range(20)} == {"broker-a"}
    clock.now += 600
    assert {strategy.select(info).broker_name for _ in range(20)} == {"broker-a", "broker-b"}


def test_a_slow_broker_is_avoided_for_the_table_duration() -> None:
    clock = Clock()
    info = PublishInfo("T", queues("broker-a", "broker-b"), start=0)
    strategy = FaultStrategy(clock=clock)
    strategy.update("broker-a", 1200.0, failed=False)  # ≥ 1000 ms → 60 s
    assert {strategy.select(info).broker_name for _ in range(10)} == {"broker-b"}
    clock.now += 59.9
    assert {strategy.select(info).broker_name for _ in range(10)} == {"broker-b"}
    clock.now += 0.1
    assert {strategy.select(info).broker_name for _ in range(10)} == {"broker-a", "broker-b"}


def test_a_retry_goes_to_another_broker_when_one_is_available() -> None:
    info = PublishInfo("T", queues("broker-a", "broker-b"), start=0)
    for enabled in (True, False):
        strategy = FaultStrategy(enabled=enabled, clock=Clock())
        for _ in range(10):
            assert strategy.select(info, last_broker="broker-a").broker_name == "broker-b"


def test_a_retry_on_a_single_broker_topic_uses_that_broker() -> None:
    info = PublishInfo("T", queues("broker-a"), start=0)
    strategy = FaultStrategy(clock=Clock())
    strategy.update("broker-a", 0.0, failed=True)
    assert strategy.select(info, last_broker="broker-a").broker_name == "broker-a"


def test_when_every_broker_is_unavailable_the_least_bad_one_is_used() -> None:
    clock = Clock()
    info = PublishInfo("T", queues("broker-a", "broker-b", per_broker=3), start=0)
    strategy = FaultStrategy(clock=clock)
    strategy.update("broker-a", 20_000.0, failed=False)  # 10 minutes, high latency
    strategy.update("broker-b", 600.0, failed=False)  # 30 s, lower latency
    chosen = [strategy.select(info) for _ in range(6)]
    assert {q.broker_name for q in chosen} == {"broker-b"}
    assert {q.queue_id for q in chosen} <= {0, 1, 2}


def test_a_least_bad_broker_without_queues_in_the_topic_is_forgotten() -> None:
    clock = Clock()
    info = PublishInfo("T", queues("broker-a"), start=0)
    strategy = FaultStrategy(clock=clock)
    strategy.update("broker-a", 50.0, failed=True)
    strategy.update("broker-z", 1.0, failed=True)  # a broker of another topic, lowest latency: picked
    assert strategy.tolerance.pick_one_at_least() == "broker-z"
    assert strategy.select(info).broker_name == "broker-a"
    assert "broker-z" not in strategy.tolerance.items


def test_disabled_strategy_ignores_latencies() -> None:
    info = PublishInfo("T", queues("broker-a", "broker-b"), start=0)
    strategy = FaultStrategy(enabled=False, clock=Clock())
    strategy.update("broker-a", 0.0, failed=True)
    assert strategy.tolerance.items == {}
    assert {strategy.select(info).broker_name for _ in range(4)} == {"broker-a", "broker-b"}
