"""The sink's pieces without Spark or a broker: where rows go, how they are cut and sent, its options."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.client import Message, MessageQueue, select_by_hash
from cometmq.errors import OptionError, RemotingTimeoutError
from cometmq.spark import _write
from cometmq.spark._options import WriteOptions
from cometmq.spark._write import (
    WriteTarget,
    _by_queue,
    _chunks,
    _messages,
    message_id,
    queue_of,
    write_batches,
)

ROUTED = [MessageQueue("t", broker, q) for broker in ("broker-a", "broker-b") for q in range(4)]


@given(st.text(min_size=1), st.integers(0, 10**6), st.integers(0, 10**6))
def test_rows_of_one_sharding_key_go_to_the_queue_rocketmqs_hash_selector_picks(
    key: str, row: int, other_row: int
) -> None:
    target = WriteTarget("job", 0, 0)
    first = queue_of(message_id(target, row), ROUTED, key)
    assert first == queue_of(message_id(target, other_row), ROUTED, key) == select_by_hash(ROUTED, key)


def test_rows_without_a_sharding_key_spread_by_their_id() -> None:
    target = WriteTarget("job", 0, 0)
    ids = [message_id(target, row) for row in range(2000)]
    assert [queue_of(i, ROUTED, None) for i in ids] == [queue_of(i, ROUTED, "") for i in ids]
    assert set(Counter(queue_of(i, ROUTED) for i in ids)) == set(ROUTED)


def test_messages_carry_each_rows_sharding_key_and_delay_level() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "body": pa.array([b"a", b"b", b"c"]),
            "sharding_key": pa.array(["order-1", None, ""], pa.string()),
            "delay_level": pa.array([None, 3, 0], pa.int32()),
        }
    )
    [(topic, messages, sharding_keys)] = _messages(
        batch, WriteOptions.parse({"topic": "t"}), WriteTarget("j", 0, 0), 0
    )
    assert topic == "t"
    assert sharding_keys == ["order-1", None, None]
    assert [m.delay_level for m in messages] == [0, 3, 0]


@pytest.mark.parametrize(
    ("column", "values", "error"),
    [
        ("sharding_key", pa.array([7], pa.int64()), "the 'sharding_key' column must be a string, not int64"),
        ("delay_level", pa.array(["3"]), "the 'delay_level' column must be an integer, not string"),
    ],
)
def test_a_sharding_key_or_delay_level_column_of_another_type_is_refused(
    column: str, values: pa.Array, error: str
) -> None:
    batch = pa.RecordBatch.from_pydict({"body": pa.array([b"a"]), column: values})
    with pytest.raises(OptionError, match=error):
        list(_messages(batch, WriteOptions.parse({"topic": "t"}), WriteTarget("j", 0, 0), 0))


def test_by_queue_keeps_a_keys_rows_together_and_in_order() -> None:
    target = WriteTarget("job", 0, 0)
    keys = [f"customer-{row % 5}" for row in range(100)]
    messages = [
        Message("t", b"%d" % row, properties={"UNIQ_KEY": message_id(target, row)}) for row in range(100)
    ]
    grouped = _by_queue(messages, ROUTED, keys)
    for queue, queued in grouped.items():
        rows = [int(m.body) for m in queued]
        assert rows == sorted(rows)
        assert {keys[r] for r in rows} <= {k for k in set(keys) if select_by_hash(ROUTED, k) == queue}


def test_a_delayed_message_goes_alone_and_order_is_kept() -> None:
    plain = [Message("t", b"%d" % i) for i in range(5)]
    delayed = Message("t", b"later", delay_level=2)
    chunks = list(_chunks([*plain[:3], delayed, *plain[3:]]))
    assert [[m.body for m in c] for c in chunks] == [[b"0", b"1", b"2"], [b"later"], [b"3", b"4"]]


def test_write_options_default_to_rocketmqs_producer_and_read_durations() -> None:
    defaults = WriteOptions.parse({})
    assert (defaults.send_timeout_ms, defaults.retries, defaults.retry_backoff_ms) == (3000, 2, 1000)
    given_ = WriteOptions.parse({"sendTimeout": "10s", "RETRIES": "0", "retryBackoff": "250ms"})
    assert (given_.send_timeout_ms, given_.retries, given_.retry_backoff_ms) == (10_000, 0, 250)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"sendTimeout": "0"}, "sendTimeout must be positive"),
        ({"sendTimeout": "soon"}, "sendTimeout must be a duration"),
        ({"retries": "-1"}, "retries must be 0 or more"),
        ({"retries": "two"}, "retries must be a whole number"),
        ({"retryBackoff": "1 fortnight"}, "retryBackoff must be a duration"),
        ({"retries": "101"}, "retries must be at most 100, not 101"),
        ({"sendTimeout": "25h"}, r"sendTimeout \(in ms\) must be at most 86400000, not 90000000"),
        ({"retryBackoff": "2 days"}, r"retryBackoff \(in ms\) must be at most 86400000"),
    ],
)
def test_bad_write_options_are_refused_by_their_documented_name(options: dict[str, str], error: str) -> None:
    with pytest.raises(OptionError, match=error):
        WriteOptions.parse(options)


class FakeProducer:
    """Records the first message of every send attempt, the messages sent, and the most sends to one
    queue under way at once; the first attempt of a chunk whose first body is in ``fail_first`` times
    out."""

    queues = [MessageQueue("t", "broker-a", q) for q in range(2)]
    fail_first: set[bytes] = set()
    last: FakeProducer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.send_timeout = kwargs["send_timeout"]
        self.attempts: list[bytes] = []
        self.sent: list[bytes] = []
        self.under_way: Counter[int] = Counter()
        self.most_at_once = 0
        FakeProducer.last = self

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        return self.queues

    async def send_batch(self, chunk: Sequence[Message], *, queue: MessageQueue) -> None:
        self.attempts.append(chunk[0].body)
        self.under_way[queue.queue_id] += 1
        self.most_at_once = max(self.most_at_once, self.under_way[queue.queue_id])
        try:
            for _ in range(3):  # other sends get their turn meanwhile
                await asyncio.sleep(0)
            if chunk[0].body in self.fail_first:
                self.fail_first.discard(chunk[0].body)
                raise RemotingTimeoutError("no answer")
            self.sent += [m.body for m in chunk]
        finally:
            self.under_way[queue.queue_id] -= 1

    async def send(self, msg: Message, *, queue: MessageQueue) -> None:
        await self.send_batch([msg], queue=queue)


def test_a_queues_chunks_are_sent_one_after_the_other_a_failed_one_retried_before_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_write, "Producer", FakeProducer)
    rows = 3 * _write.BATCH_MAX_MESSAGES
    bodies = [b"%05d" % i for i in range(rows)]
    FakeProducer.fail_first = {bodies[0]}
    batch = pa.RecordBatch.from_pydict(
        {"body": pa.array(bodies), "sharding_key": pa.array(["one-key"] * rows)}
    )
    options = WriteOptions.parse({"topic": "t", "retryBackoff": "0", "sendTimeout": "5s"})
    assert write_batches(options, WriteTarget("j", 0, 0), iter([batch])) == rows
    producer = FakeProducer.last
    assert producer.send_timeout == 5.0
    assert set(producer.under_way) == {select_by_hash(FakeProducer.queues, "one-key").queue_id}
    assert producer.most_at_once == 1
    assert producer.attempts == [bodies[0], bodies[0], bodies[256], bodies[512]]
    assert producer.sent == bodies


def test_a_send_failing_more_than_retries_times_fails_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    class AlwaysFailing(FakeProducer):
        async def send_batch(self, chunk: Sequence[Message], *, queue: MessageQueue) -> None:
            self.attempts.append(chunk[0].body)
            raise RemotingTimeoutError("no answer")

    monkeypatch.setattr(_write, "Producer", AlwaysFailing)
    batch = pa.RecordBatch.from_pydict({"body": pa.array([b"x", b"y"]), "sharding_key": pa.array(["k", "k"])})
    options = WriteOptions.parse({"topic": "t", "retries": "1", "retryBackoff": "0"})
    with pytest.raises(RemotingTimeoutError) as caught:
        write_batches(options, WriteTarget("j", 0, 0), iter([batch]))
    assert "2 attempts failed" in str(caught.value.__notes__)
    assert FakeProducer.last.attempts == [b"x", b"x"]


def test_when_several_sends_fail_the_first_failure_fails_the_task_and_the_others_are_retrieved(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class EveryQueueFailing(FakeProducer):
        queues = [MessageQueue("t", "broker-a", q) for q in range(8)]

        async def send_batch(self, chunk: Sequence[Message], *, queue: MessageQueue) -> None:
            raise RemotingTimeoutError(f"no answer from {queue}")

    monkeypatch.setattr(_write, "Producer", EveryQueueFailing)
    keys = [f"key-{i}" for i in range(64)]
    batch = pa.RecordBatch.from_pydict({"body": pa.array([b"x"] * 64), "sharding_key": pa.array(keys)})
    options = WriteOptions.parse({"topic": "t", "retries": "0"})
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(RemotingTimeoutError, match="no answer from"):
            write_batches(options, WriteTarget("j", 0, 0), iter([batch]))
        gc.collect()
    assert [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()] == []
