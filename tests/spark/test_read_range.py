"""The executor's read of one planned range, run directly (no SparkSession) against a real server:
pulls go out several at a time, and answers that the broker's 256 KiB cap cuts short at changing
message sizes must still give every offset of the range once, in order."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pytest
from spark_support import BROKER, create_topic, send

from cometmq.client import AdminClient, MessageQueue
from cometmq.errors import RemotingTimeoutError
from cometmq.spark._read import QueueRange, read_range
from cometmq.spark._schema import ARROW_SCHEMA
from processes import StandaloneServer


def read(server: StandaloneServer, topic: str, start: int, end: int, sub_expression: str = "*") -> pa.Table:
    part = QueueRange(server.namesrv, MessageQueue(topic, BROKER, 0), start, end, sub_expression, True, False)
    batches = list(read_range(part))
    assert all(batch.schema.equals(ARROW_SCHEMA) for batch in batches)
    return pa.Table.from_batches(batches, ARROW_SCHEMA)


@pytest.fixture(scope="module")
def mixed_sizes(server: StandaloneServer) -> list[bytes]:
    """Small messages (about 1 100 per 256 KiB answer), then 20 KiB ones (12 per answer), then small
    ones again: the reader's idea of how many messages an answer holds is wrong twice."""
    bodies = (
        [os.urandom(200) for _ in range(3000)]
        + [os.urandom(20_000) for _ in range(120)]
        + [os.urandom(200) for _ in range(3000)]
    )
    create_topic(server.namesrv, "ReadMixed", 1)
    send(server.namesrv, "ReadMixed", {0: bodies}, chunk=20)
    return bodies


@pytest.mark.parametrize(("start", "end"), [(0, 6120), (5, 6119), (2990, 3130), (3100, 3101)])
def test_every_offset_of_the_range_is_read_once_in_order_whatever_the_answers_hold(
    server: StandaloneServer, mixed_sizes: list[bytes], start: int, end: int
) -> None:
    table = read(server, "ReadMixed", start, end)
    assert table.column("queue_offset").to_pylist() == list(range(start, end))
    assert table.column("body").to_pylist() == mixed_sizes[start:end]


def test_a_tag_filtered_range_reads_only_the_matching_messages(server: StandaloneServer) -> None:
    create_topic(server.namesrv, "ReadTagged", 1)
    send(server.namesrv, "ReadTagged", {0: [b"a%d" % i for i in range(2500)]}, tags="TagA")
    send(server.namesrv, "ReadTagged", {0: [b"b%d" % i for i in range(2500)]}, tags="TagB")
    table = read(server, "ReadTagged", 100, 4900, "TagB")
    assert table.column("queue_offset").to_pylist() == list(range(2500, 4900))
    assert set(table.column("tags").to_pylist()) == {"TagB"}


def test_a_pull_without_an_answer_in_time_is_asked_again_with_the_fetch_retries(
    server: StandaloneServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_topic(server.namesrv, "ReadTimedOut", 1)
    send(server.namesrv, "ReadTimedOut", {0: [b"m%d" % i for i in range(10)]})
    real_pull = AdminClient.pull_records
    asked: list[int] = []

    async def first_pull_unanswered(
        self: AdminClient, queue: MessageQueue, offset: int, *args: Any, **kw: Any
    ) -> Any:
        asked.append(offset)
        if len(asked) == 1:
            raise RemotingTimeoutError("no answer in time (injected)")
        return await real_pull(self, queue, offset, *args, **kw)

    monkeypatch.setattr(AdminClient, "pull_records", first_pull_unanswered)
    part = QueueRange(
        server.namesrv,
        MessageQueue("ReadTimedOut", BROKER, 0),
        0,
        10,
        "*",
        True,
        False,
        retries=1,
        retry_interval_ms=0,
    )
    table = pa.Table.from_batches(list(read_range(part)), ARROW_SCHEMA)
    assert asked == [0, 0]
    assert table.column("body").to_pylist() == [b"m%d" % i for i in range(10)]
