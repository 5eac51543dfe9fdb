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


def make_session(tmp: Path) -> Any:
    """A local[2] SparkSession with light settings, CometMQ's source registered."""
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession

    import cometmq.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("cometmq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
        .config("spark.local.dir", str(tmp / "local"))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    cometmq.spark.register(session)
    return session


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def create_topic(namesrv: str, topic: str, queues: int) -> None:
    async def create() -> None:
        async with AdminClient(namesrv) as admin:
            await admin.create_topic(topic, queues=queues)

    run(create())


def send(namesrv: str, topic: str, bodies_by_queue: dict[int, Sequence[bytes]], **fields: Any) -> None:
    """Send each queue's bodies to that queue, in order (so offsets follow the order given)."""

    async def go() -> None:
        async with Producer("PID_spark_tests", namesrv) as producer:
            for queue_id, bodies in bodies_by_queue.items():
                queue = MessageQueue(topic, BROKER, queue_id)
                for start in range(0, len(bodies), 200):
                    chunk = [Message(topic, body, **fields) for body in bodies[start : start + 200]]
                    await producer.send_batch(chunk, queue=queue)

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
