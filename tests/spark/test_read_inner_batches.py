"""The executor's read of a planned range of a BatchCQ topic, whose batches are one record each: a row
per message at its own offset, for ranges that start or end inside a batch, run directly (no
SparkSession) against a real server."""

from __future__ import annotations

import pyarrow as pa
import pytest
from spark_support import BROKER, run, send

from cometmq.client import AdminClient, MessageQueue
from cometmq.spark import _columns, _read
from cometmq.spark._read import QueueRange, read_range
from cometmq.spark._schema import ARROW_SCHEMA
from processes import StandaloneServer

TOPIC = "ReadInnerBatches"


@pytest.fixture(scope="module")
def batched(server: StandaloneServer) -> list[bytes]:
    """2 000 messages in inner batches of 7 (the last one shorter), then 300 in batches of 50."""

    async def create() -> None:
        async with AdminClient(server.namesrv) as admin:
            await admin.create_topic(TOPIC, 1, attributes="+queue.type=BatchCQ")

    run(create())
    bodies = [b"m%05d" % i for i in range(2300)]
    send(server.namesrv, TOPIC, {0: bodies[:2000]}, chunk=7, tags="T")
    send(server.namesrv, TOPIC, {0: bodies[2000:]}, chunk=50)
    return bodies


@pytest.mark.parametrize(("start", "end"), [(0, 2300), (3, 2299), (700, 701), (1996, 2003), (2010, 2060)])
def test_a_range_cutting_batches_reads_exactly_its_offsets(
    server: StandaloneServer, batched: list[bytes], start: int, end: int
) -> None:
    part = QueueRange(server.namesrv, MessageQueue(TOPIC, BROKER, 0), start, end, "*", True, False)
    table = pa.Table.from_batches(list(read_range(part)), ARROW_SCHEMA)
    assert table.column("queue_offset").to_pylist() == list(range(start, end))
    assert table.column("body").to_pylist() == batched[start:end]
    assert set(table.column("tags").to_pylist()) <= {"T", None}
    assert len(set(table.column("msg_id").to_pylist())) == end - start


def test_an_ordinary_topics_read_does_not_look_for_inner_batches(
    server: StandaloneServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inner batches are unwrapped only when a record's sys flag says so: an ordinary topic's pulls pay a
    column test, not a second walk over their records."""

    def unwrap(data: bytes, first_offset: int) -> bytes | None:
        raise AssertionError("unwrap_inner_batches called for an ordinary topic")

    async def create() -> None:
        async with AdminClient(server.namesrv) as admin:
            await admin.create_topic("ReadPlainNoUnwrap", 1)

    run(create())
    send(server.namesrv, "ReadPlainNoUnwrap", {0: [b"p%03d" % i for i in range(100)]}, chunk=10)
    for module in (_columns, _read):  # wherever the reader would call it from
        monkeypatch.setattr(module, "unwrap_inner_batches", unwrap, raising=False)
    part = QueueRange(server.namesrv, MessageQueue("ReadPlainNoUnwrap", BROKER, 0), 3, 97, "*", True, False)
    table = pa.Table.from_batches(list(read_range(part)), ARROW_SCHEMA)
    assert table.column("queue_offset").to_pylist() == list(range(3, 97))
