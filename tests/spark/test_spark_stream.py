"""Streaming reads: exactly once through stops and crashes, new queues, data loss. A real local
SparkSession (and, for the crash, a real driver process) against a real standalone server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from spark_support import (
    BROKER,
    batch_in_flight,
    create_topic,
    parquet_query,
    parquet_rows,
    send,
    spark_env,
)

from cometmq.client import LitePullConsumer, MessageQueue
from processes import StandaloneServer, subprocess_env
from waiting import wait_until_blocking

HERE = Path(__file__).parent
QUEUES = 4
PER_QUEUE = 5_000  # 20 000 messages in all


def load_topic(server: StandaloneServer, topic: str) -> dict[tuple[int, int], bytes]:
    """20 000 messages over four queues; what each (queue id, offset) holds."""
    create_topic(server.namesrv, topic, QUEUES)
    bodies = {q: [b"%s-%d-%05d" % (topic.encode(), q, i) for i in range(PER_QUEUE)] for q in range(QUEUES)}
    send(server.namesrv, topic, bodies)
    return {(q, i): body for q, rows in bodies.items() for i, body in enumerate(rows)}


def assert_exactly_once(rows: list[tuple[int, int, bytes]], expected: dict[tuple[int, int], bytes]) -> None:
    counts = Counter((q, o) for q, o, _ in rows)
    duplicates = [key for key, n in counts.items() if n > 1]
    missing = expected.keys() - counts.keys()
    assert not duplicates, f"{len(duplicates)} messages written twice, e.g. {duplicates[:3]}"
    assert not missing, f"{len(missing)} messages missing, e.g. {sorted(missing)[:3]}"
    assert len(rows) == len(expected)
    assert all(expected[(q, o)] == body for q, o, body in rows)


def test_query_stopped_mid_batch_and_restarted_writes_every_message_once(
    spark: Any, server: StandaloneServer, workdir: Path
) -> None:
    expected = load_topic(server, "SparkStop")
    out, checkpoint = workdir / "out", workdir / "checkpoint"
    interrupted = []
    for _ in range(3):  # stop twice, each time while a batch is running
        query = parquet_query(spark, server.namesrv, "SparkStop", out, checkpoint, 1500)
        done_before = len(list((checkpoint / "commits").glob("[0-9]*"))) if checkpoint.exists() else 0

        def running_batch(done_before: int = done_before) -> int | None:
            batch = batch_in_flight(checkpoint)
            return batch if batch is not None and batch > done_before else None

        # Looked at often: the stop must land while the batch runs.
        batch = wait_until_blocking(running_batch, message="a batch in flight", timeout=120, interval=0.005)
        query.stop()
        if batch_in_flight(checkpoint) == batch:  # stopped before the batch committed
            interrupted.append(batch)
        if len(interrupted) == 2:
            break
    assert len(interrupted) == 2, "the query was never stopped mid-batch"
    parquet_query(
        spark, server.namesrv, "SparkStop", out, checkpoint, 1500, available_now=True
    ).awaitTermination()
    assert_exactly_once(parquet_rows(spark, out), expected)


def test_driver_killed_mid_batch_then_restarted_writes_every_message_once(
    spark: Any, server: StandaloneServer, workdir: Path
) -> None:
    expected = load_topic(server, "SparkKill")
    out, checkpoint = workdir / "out", workdir / "checkpoint"
    driver = subprocess.Popen(
        [sys.executable, str(HERE / "stream_driver.py"), server.namesrv, "SparkKill", str(out),
         str(checkpoint), "1500"],
        env={**subprocess_env(), **spark_env()},
        cwd=HERE,
        start_new_session=True,  # its own process group: the JVM and Python workers die with it
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        batch = wait_until_blocking(
            lambda: (b := batch_in_flight(checkpoint)) is not None and b >= 2 and b,
            message="batch 2 in flight",
            timeout=120,
            interval=0.005,
        )
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    assert batch_in_flight(checkpoint) == batch  # the killed batch was logged, never committed
    query = parquet_query(spark, server.namesrv, "SparkKill", out, checkpoint, 1500, available_now=True)
    query.awaitTermination()
    assert_exactly_once(parquet_rows(spark, out), expected)


def test_a_queue_added_mid_stream_is_read_completely(
    spark: Any, server: StandaloneServer, workdir: Path
) -> None:
    create_topic(server.namesrv, "SparkGrow", 2)
    send(server.namesrv, "SparkGrow", {0: [b"a0", b"a1"], 1: [b"b0"]})
    out, checkpoint = workdir / "out", workdir / "checkpoint"
    query = parquet_query(spark, server.namesrv, "SparkGrow", out, checkpoint)
    try:
        query.processAllAvailable()
        assert len(parquet_rows(spark, out)) == 3
        create_topic(server.namesrv, "SparkGrow", 4)  # the topic grows to four queues
        send(server.namesrv, "SparkGrow", {2: [b"c0", b"c1"], 3: [b"d0"], 0: [b"a2"]})

        def all_written() -> bool:
            query.processAllAvailable()
            return len(parquet_rows(spark, out)) == 7

        wait_until_blocking(all_written, message="7 rows written", timeout=60)
    finally:
        query.stop()
    assert sorted(parquet_rows(spark, out)) == [
        (0, 0, b"a0"), (0, 1, b"a1"), (0, 2, b"a2"), (1, 0, b"b0"),
        (2, 0, b"c0"), (2, 1, b"c1"), (3, 0, b"d0"),
    ]  # fmt: skip


@pytest.fixture
def retention_server(tmp_path: Path) -> Any:
    """A server whose retention runs now: small commit-log segments, kept one hour, cleaned now."""
    hour = time.localtime().tm_hour
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=2000\ncleanResourceInterval=100\n"
        f"fileReservedTime=1\ndeleteWhen={hour:02d};{(hour + 1) % 24:02d}\n"
    )
    standalone = StandaloneServer(tmp_path / "data", "-c", str(conf))
    standalone.start()
    yield standalone
    standalone.stop()


def expire_old_segments(server: StandaloneServer) -> int:
    """Age every commit-log segment past fileReservedTime; retention keeps the newest. The queue's
    new min offset."""
    old = int((time.time() - 2 * 3600) * 1e9)
    for segment in (server.data_dir / "commitlog").iterdir():
        os.utime(segment, ns=(old, old))

    def min_offset() -> int:
        async def ask() -> int:
            async with LitePullConsumer("GID_spark_loss", server.namesrv) as consumer:
                return await consumer.begin_offset(MessageQueue("SparkLoss", BROKER, 0))

        import asyncio

        return asyncio.run(ask())

    low: int = wait_until_blocking(
        lambda: (m := min_offset()) > 0 and m, message="retention to move the min offset", timeout=60
    )
    return low


def test_fail_on_data_loss_fails_naming_the_queue_or_skips_what_is_gone(
    spark: Any, retention_server: StandaloneServer, workdir: Path
) -> None:
    server = retention_server
    create_topic(server.namesrv, "SparkLoss", 1)
    body = b"z" * 1000
    send(server.namesrv, "SparkLoss", {0: [body + b"%04d" % i for i in range(50)]}, chunk=10)
    out, checkpoint = workdir / "out", workdir / "checkpoint"
    parquet_query(spark, server.namesrv, "SparkLoss", out, checkpoint, available_now=True).awaitTermination()
    assert len(parquet_rows(spark, out)) == 50
    # Batches of 10: a batch must fit in one of this server's 64 KiB commit-log segments.
    send(server.namesrv, "SparkLoss", {0: [body + b"%04d" % i for i in range(50, 200)]}, chunk=10)
    low = expire_old_segments(server)
    assert 50 < low < 200

    failing = parquet_query(spark, server.namesrv, "SparkLoss", out, checkpoint, available_now=True)
    with pytest.raises(Exception) as caught:
        failing.awaitTermination()
    assert (
        f"SparkLoss@{BROKER}:0: messages from offset 50 on were wanted, but offsets before {low} are gone "
        f"from the start of the queue (deleted by retention?)" in str(caught.value)
    )
    assert len(parquet_rows(spark, out)) == 50  # nothing was written by the failed run

    skipping = parquet_query(
        spark, server.namesrv, "SparkLoss", out, checkpoint, available_now=True, failOnDataLoss="false"
    )
    skipping.awaitTermination()
    rows = parquet_rows(spark, out)
    assert sorted(o for _, o, _ in rows) == list(range(50)) + list(range(low, 200))
    assert all(b == body + b"%04d" % o for _, o, b in rows)
