"""Where a consumer starts on a queue its group never committed an offset for (``start_offset``),
shared by PushConsumer and LitePullConsumer. The broker queries are replaced by stubs."""

from __future__ import annotations

import time

import pytest
from client_support import run

from cometmq.client import _brokerapi
from cometmq.client._instance import ClientInstance
from cometmq.client._offsets import (
    DEFAULT_TIMESTAMP_LOOKBACK_MS,
    default_consume_timestamp,
    start_offset,
)
from cometmq.client.message import MessageQueue

MIN, MAX, AT_TIMESTAMP = 5, 40, 17


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """Stub the offset queries (a fake: no broker); record which one was asked (and the timestamp)."""
    calls: list[tuple[str, object]] = []

    async def min_offset(_instance: object, _queue: MessageQueue) -> int:
        calls.append(("min", None))
        return MIN

    async def max_offset(_instance: object, _queue: MessageQueue) -> int:
        calls.append(("max", None))
        return MAX

    async def first_offset_at(_instance: object, _queue: MessageQueue, timestamp_ms: int, group: str) -> int:
        calls.append(("timestamp", timestamp_ms))
        assert group == "GID_orders"
        return AT_TIMESTAMP

    monkeypatch.setattr(_brokerapi, "min_offset", min_offset)
    monkeypatch.setattr(_brokerapi, "max_offset", max_offset)
    monkeypatch.setattr(_brokerapi, "first_offset_at", first_offset_at)
    return calls


@pytest.mark.parametrize(
    ("consume_from", "expected", "query"),
    [
        ("last", MAX, ("max", None)),
        ("first", MIN, ("min", None)),
        ("timestamp", AT_TIMESTAMP, ("timestamp", 1234)),
    ],
)
def test_consume_from_picks_the_end_the_oldest_message_or_the_timestamp(
    asked: list[tuple[str, object]], consume_from: str, expected: int, query: tuple[str, object]
) -> None:
    instance = ClientInstance("127.0.0.1:1")
    queue = MessageQueue("Orders", "broker-a", 0)
    assert run(start_offset(instance, queue, "GID_orders", consume_from, 1234)) == expected  # type: ignore[arg-type]
    assert asked == [query]


@pytest.mark.parametrize("consume_from", ["last", "first", "timestamp"])
def test_a_retry_topic_always_starts_at_0(asked: list[tuple[str, object]], consume_from: str) -> None:
    instance = ClientInstance("127.0.0.1:1")
    queue = MessageQueue("%RETRY%GID_orders", "broker-a", 0)
    assert run(start_offset(instance, queue, "GID_orders", consume_from, 1234)) == 0  # type: ignore[arg-type]
    assert asked == []  # retried messages are never skipped: nothing to look up


def test_the_default_timestamp_is_half_an_hour_back() -> None:
    lookback = time.time() * 1000 - default_consume_timestamp()
    assert DEFAULT_TIMESTAMP_LOOKBACK_MS <= lookback < DEFAULT_TIMESTAMP_LOOKBACK_MS + 60_000
