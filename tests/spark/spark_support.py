"""Helpers of the Spark connector tests: a test SparkSession, topics, sends and reading results back."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cometmq.client import AdminClient, LitePullConsumer, Message, MessageQueue, Producer, ReceivedMessage

BROKER = "broker-a"  # the standalone server's broker name


def spark_env() -> dict[str, str]:
    """What Spark's Python workers need: this interpreter (with CometMQ installed) and loopback only."""
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


def make_session(tmp: Path, master: str = "local[2]") -> Any:
    """The pipeline's SparkSession (light settings, quiet logs, CometMQ's source registered), local[2]
    or on the cluster at ``master``, its Python workers running this interpreter."""
    os.environ.update(spark_env())
    from cometmq.spark.pipeline import spark_session

    return spark_session(tmp, "cometmq-tests", master=master)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def create_topic(namesrv: str, topic: str, queues: int) -> None:
    async def create() -> None:
        async with AdminClient(namesrv) as admin:
            await admin.create_topic(topic, queues=queues)

    run(create())


def send(
    namesrv: str, topic: str, bodies_by_queue: dict[int, Sequence[bytes]], chunk: int = 200, **fields: Any
) -> None:
    """Send each queue's bodies to that queue, in order (so offsets follow the order given), ``chunk``
    messages per batch."""

    async def go() -> None:
        async with Producer("PID_spark_tests", namesrv) as producer:
            for queue_id, bodies in bodies_by_queue.items():
                queue = MessageQueue(topic, BROKER, queue_id)
                for start in range(0, len(bodies), chunk):
                    batch = [Message(topic, body, **fields) for body in bodies[start : start + chunk]]
                    await producer.send_batch(batch, queue=queue)

    run(go())


def consume_all(namesrv: str, topic: str) -> list[ReceivedMessage]:
    """Every message of ``topic`` now, read with CometMQ's own LitePullConsumer."""

    async def go() -> list[ReceivedMessage]:
        async with LitePullConsumer("GID_spark_tests", namesrv, auto_commit=False) as consumer:
            out: list[ReceivedMessage] = []
            for queue in await consumer.fetch_queues(topic):
                end = await consumer.end_offset(queue)
                begin = await consumer.begin_offset(queue)
                async for batch in consumer.read(queue, begin, end):
                    out += batch
            return out

    result: list[ReceivedMessage] = run(go())
    return result


def offsets_json(topic: str, offsets: dict[int, int]) -> str:
    import json

    return json.dumps({topic: {BROKER: {str(q): o for q, o in offsets.items()}}})


def parquet_query(
    spark: Any,
    namesrv: str,
    topic: str,
    out: Path,
    checkpoint: Path,
    per_trigger: int | None = None,
    *,
    available_now: bool = False,
    **options: str,
) -> Any:
    """Start streaming ``topic`` (from its earliest offsets) into Parquet at ``out``."""
    reader = spark.readStream.format("cometmq").option("namesrv", namesrv).option("topic", topic)
    reader = reader.option("startingOffsets", "earliest")
    if per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(per_trigger))
    for name, value in options.items():
        reader = reader.option(name, value)
    writer = (
        reader.load()
        .select("queue_id", "queue_offset", "body")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def batch_in_flight(checkpoint: Path) -> int | None:
    """The micro-batch whose offsets are logged but not yet committed, if any: one is running (or
    was interrupted)."""
    logged = {int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*")}
    committed = {int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")}
    pending = logged - committed
    return max(pending) if pending else None


def parquet_rows(spark: Any, out: Path) -> list[tuple[int, int, bytes]]:
    """(queue id, queue offset, body) of every row the Parquet sink committed (its _spark_metadata
    log decides which files count, as for any reader of the sink)."""
    return [(r.queue_id, r.queue_offset, bytes(r.body)) for r in spark.read.parquet(str(out)).collect()]
