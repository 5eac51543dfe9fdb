"""The executor's read of a planned range of a BatchCQ topic, whose batches are one record each: a row
per message at its own offset, for ranges that start or end inside a batch, run directly (no
SparkSession) against a real server."""

from __future__ import annotations

import pyarrow as pa
import pytest
from spark_support import BROKER, run, send

from cometmq.client import AdminClient, MessageQueue
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
