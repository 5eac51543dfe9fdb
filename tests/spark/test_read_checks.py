"""What a read refuses and how it says so, and the reader's planning options, against a real
standalone server: missing topics, options checked at load(), impossible ranges, minPartitions,
times, pushed filters, the lag in a query's progress, retries while a queue is not routed."""

from __future__ import annotations

import datetime
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan
from pyspark.sql.streaming.datasource import ReadAllAvailable
from spark_support import BROKER, create_topic, offsets_json, parquet_query, parquet_rows, run, send

from cometmq.client import AdminClient, MessageQueue
from cometmq.errors import NoRouteError, QueueNotRoutedError
from cometmq.spark import CometMQDataSource, offsets_behind_latest
from cometmq.spark._read import QueueRange, read_range
from cometmq.spark._source import CometMQBatchReader, CometMQFilteringReader, CometMQStreamReader
from processes import StandaloneServer
from waiting import next_millisecond, wait_until_blocking


def batch(spark: Any, server: StandaloneServer, topic: str, **options: str) -> Any:
    reader = spark.read.format("cometmq").option("namesrv", server.namesrv).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def planned(server: StandaloneServer, topic: str, **options: str) -> list[tuple[int, int, int]]:
    """(queue id, start, end) of each partition a batch read plans, asked as Spark asks."""
    reader = CometMQDataSource({"namesrv": server.namesrv, "topic": topic, **options}).reader(None)  # type: ignore[arg-type]
    assert isinstance(reader, CometMQBatchReader)
    return [(p.value.queue.queue_id, p.value.start, p.value.end) for p in reader.partitions()]


def stream_reader(server: StandaloneServer, topic: str, **options: str) -> CometMQStreamReader:
    reader = CometMQDataSource({"namesrv": server.namesrv, "topic": topic, **options}).streamReader(None)  # type: ignore[arg-type]
    assert isinstance(reader, CometMQStreamReader)
    return reader


# --- missing topics -------------------------------------------------------------------------------


def test_a_topic_that_does_not_exist_fails_a_batch_and_a_stream_with_a_clear_error(
    spark: Any, server: StandaloneServer, workdir: Path
) -> None:
    with pytest.raises(Exception, match=r"topic 'NoSuchTopic' does not exist .*failOnMissingTopic=false"):
        batch(spark, server, "NoSuchTopic").collect()
    query = parquet_query(spark, server.namesrv, "NoSuchTopic", workdir / "out", workdir / "ckpt")
    with pytest.raises(Exception, match="topic 'NoSuchTopic' does not exist"):
        query.awaitTermination()


def test_with_fail_on_missing_topic_false_a_batch_reads_nothing_and_a_stream_waits_for_the_topic(
    spark: Any, server: StandaloneServer, workdir: Path
) -> None:
    assert batch(spark, server, "LateTopic", failOnMissingTopic="false").collect() == []
    out = workdir / "out"
    query = parquet_query(
        spark, server.namesrv, "LateTopic", out, workdir / "ckpt", failOnMissingTopic="false"
    )
    try:
        wait_until_blocking(
            lambda: query.status["message"] == "Waiting for data to arrive",
            message="a first trigger",
            timeout=60,
        )
        create_topic(server.namesrv, "LateTopic", 1)
        send(server.namesrv, "LateTopic", {0: [b"a", b"b"]})
        rows = wait_until_blocking(
            lambda: (found := parquet_rows(spark, out)) and len(found) == 2 and found,
            message="the topic's messages once it exists",
            timeout=90,
        )
        assert sorted(rows) == [(0, 0, b"a"), (0, 1, b"b")]
    finally:
        query.stop()


def test_a_topic_deleted_under_a_stream_fails_it_saying_what_may_have_happened(
    server: StandaloneServer,
) -> None:
    create_topic(server.namesrv, "GoneTopic", 1)
    send(server.namesrv, "GoneTopic", {0: [b"x"]})
    reader = stream_reader(
        server, "GoneTopic", startingOffsets="earliest",
        **{"fetchOffset.numRetries": "1", "fetchOffset.retryIntervalMs": "10"},
    )  # fmt: skip
    start = reader.initialOffset()

    async def delete() -> None:
        async with AdminClient(server.namesrv) as admin:
            await admin.delete_topic("GoneTopic")

    run(delete())
    with pytest.raises(NoRouteError, match=r"no broker serves topic 'GoneTopic' any more \(asked 2 times\)"):
        reader.latestOffset(start, ReadAllAvailable())


def test_a_queue_that_is_not_routed_fails_its_read_after_the_retries_saying_why(
    server: StandaloneServer,
) -> None:
    create_topic(server.namesrv, "RoutedTopic", 1)
    retrying = {"retries": 1, "retry_interval_ms": 10}
    elsewhere = QueueRange(
        server.namesrv, MessageQueue("RoutedTopic", "broker-zz", 0), 0, 1, "*", True, False, **retrying
    )
    with pytest.raises(QueueNotRoutedError, match="broker 'broker-zz' does not serve this queue now"):
        list(read_range(elsewhere))
    nowhere = QueueRange(
        server.namesrv, MessageQueue("NoRoute", BROKER, 0), 0, 1, "*", True, False, **retrying
    )
    with pytest.raises(QueueNotRoutedError, match="no broker serves the topic now: it was deleted, or"):
        list(read_range(nowhere))


# --- options checked at load() --------------------------------------------------------------------


def test_a_bad_option_fails_load_in_batch_and_stream_with_the_real_error(
    spark: Any, server: StandaloneServer
) -> None:
    for start in (spark.read, spark.readStream):
        reader = start.format("cometmq").option("namesrv", server.namesrv).option("topic", "t")
        with pytest.raises(Exception, match="maxOffsetsPerTrigger must be positive, not 0") as caught:
            reader.option("maxOffsetsPerTrigger", "0").load()
        assert "UnboundLocalError" not in str(caught.value)


def test_ending_offsets_on_a_stream_are_refused_with_the_real_error(
    spark: Any, server: StandaloneServer, workdir: Path
) -> None:
    create_topic(server.namesrv, "StreamEnd", 1)
    query = parquet_query(
        spark, server.namesrv, "StreamEnd", workdir / "out", workdir / "ckpt", endingOffsets="latest"
    )
    with pytest.raises(Exception, match="endingOffsets is for batch reads only") as caught:
        query.awaitTermination()
    assert "UnboundLocalError" not in str(caught.value)


def test_impossible_ranges_and_unknown_brokers_are_refused(spark: Any, server: StandaloneServer) -> None:
    create_topic(server.namesrv, "Impossible", 1)
    send(server.namesrv, "Impossible", {0: [b"x"] * 10})
    with pytest.raises(
        Exception, match=f"Impossible@{BROKER}:0: the ending offset 2 is before the starting offset 5"
    ):
        batch(spark, server, "Impossible", startingOffsets=offsets_json("Impossible", {0: 5}),
              endingOffsets=offsets_json("Impossible", {0: 2})).collect()  # fmt: skip
    with pytest.raises(
        Exception, match=r"the ending offset 99 is past the end of the queue \(its next offset is 10\)"
    ):
        batch(spark, server, "Impossible", endingOffsets=offsets_json("Impossible", {0: 99})).collect()
    with pytest.raises(Exception, match="startingOffsets cannot be 'latest' in a batch read"):
        batch(spark, server, "Impossible", startingOffsets="latest").collect()
    elsewhere = json.dumps({"Impossible": {"broker-zz": {"0": 0}, BROKER: {"0": 0}}})
    with pytest.raises(
        Exception,
        match=f"names the broker 'broker-zz', which serves no queue of topic 'Impossible' "
        f".the brokers serving it: {BROKER}",
    ):
        batch(spark, server, "Impossible", startingOffsets=elsewhere).collect()


def test_an_offset_past_the_end_of_an_empty_queue_is_described_as_such(
    server: StandaloneServer, caplog: pytest.LogCaptureFixture
) -> None:
    create_topic(server.namesrv, "EmptyQueue", 1)
    reader = stream_reader(
        server, "EmptyQueue", startingOffsets=offsets_json("EmptyQueue", {0: 5}), failOnDataLoss="false"
    )
    start = reader.initialOffset()
    with caplog.at_level(logging.WARNING, logger="cometmq.spark"):
        reader.latestOffset(start, ReadAllAvailable())
    assert f"EmptyQueue@{BROKER}:0: offset 5 is past its end (it is empty, its next offset 0)" in caplog.text
    assert "..-1" not in caplog.text


# --- minPartitions, times -------------------------------------------------------------------------


def test_min_partitions_splits_a_queue_s_range_over_partitions(spark: Any, server: StandaloneServer) -> None:
    create_topic(server.namesrv, "MinParts", 1)
    send(server.namesrv, "MinParts", {0: [b"%d" % i for i in range(100)]})
    assert planned(server, "MinParts", minPartitions="4") == [
        (0, 0, 25),
        (0, 25, 50),
        (0, 50, 75),
        (0, 75, 100),
    ]
    frame = batch(spark, server, "MinParts", minPartitions="4")
    assert frame.rdd.getNumPartitions() == 4
    rows = frame.collect()
    assert sorted(r.queue_offset for r in rows) == list(range(100))
    assert all(r.body == b"%d" % r.queue_offset for r in rows)


def test_min_partitions_splits_a_micro_batch_too(server: StandaloneServer) -> None:
    create_topic(server.namesrv, "MinPartsStream", 1)
    send(server.namesrv, "MinPartsStream", {0: [b"x"] * 9})
    reader = stream_reader(server, "MinPartsStream", startingOffsets="earliest", minPartitions="3")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert [(p.value.start, p.value.end) for p in reader.partitions(start, end)] == [(0, 3), (3, 6), (6, 9)]


def test_starting_offsets_by_timestamp_and_ending_timestamp_select_by_store_time(
    spark: Any, server: StandaloneServer
) -> None:
    create_topic(server.namesrv, "ByTime", 2)
    send(server.namesrv, "ByTime", {0: [b"old0"], 1: [b"old1"]})
    middle = next_millisecond()
    send(server.namesrv, "ByTime", {0: [b"mid0"], 1: [b"mid1"]})
    late = next_millisecond()
    send(server.namesrv, "ByTime", {0: [b"new0"], 1: [b"new1"]})
    per_queue = offsets_json("ByTime", {0: middle, 1: late})
    rows = batch(spark, server, "ByTime", startingOffsetsByTimestamp=per_queue).collect()
    assert sorted(r.body for r in rows) == [b"mid0", b"new0", b"new1"]
    rows = batch(spark, server, "ByTime", endingTimestamp=str(late)).collect()
    assert sorted(r.body for r in rows) == [b"mid0", b"mid1", b"old0", b"old1"]
    rows = batch(spark, server, "ByTime", startingTimestamp=str(middle), endingTimestamp=str(late)).collect()
    assert sorted(r.body for r in rows) == [b"mid0", b"mid1"]
    with pytest.raises(Exception, match="startingOffsetsByTimestamp names no offset for ByTime@broker-a:1"):
        batch(
            spark, server, "ByTime", startingOffsetsByTimestamp=offsets_json("ByTime", {0: middle})
        ).collect()


# --- pushed filters -------------------------------------------------------------------------------


def test_pushed_filters_narrow_the_planned_ranges(server: StandaloneServer) -> None:
    create_topic(server.namesrv, "Pushed", 3)
    send(server.namesrv, "Pushed", {q: [b"early"] * 10 for q in range(3)})
    cut = next_millisecond()
    send(server.namesrv, "Pushed", {q: [b"late"] * 5 for q in range(3)})
    reader = CometMQDataSource({"namesrv": server.namesrv, "topic": "Pushed", "pushFilters": "true"}).reader(
        None
    )  # type: ignore[arg-type]
    assert isinstance(reader, CometMQFilteringReader)
    by_time = GreaterThanOrEqual(("store_timestamp",), _utc(cut))
    by_queue = [In(("queue_id",), (0, 2)), EqualTo(("queue_id",), 2)]
    by_offset = [GreaterThanOrEqual(("queue_offset",), 3), LessThan(("queue_offset",), 14)]
    left = reader.pushFilters([*by_queue, *by_offset, by_time])
    assert list(left) == [by_time]  # store times are checked again by Spark
    assert [(p.value.queue.queue_id, p.value.start, p.value.end) for p in reader.partitions()] == [
        (2, 10, 14)
    ]


def test_a_where_clause_is_pushed_into_the_read_when_spark_allows_it(
    spark: Any, server: StandaloneServer
) -> None:
    create_topic(server.namesrv, "PushedSql", 3)
    send(server.namesrv, "PushedSql", {q: [b"%d-%d" % (q, i) for i in range(10)] for q in range(3)})
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        frame = batch(spark, server, "PushedSql", pushFilters="true").where(
            "queue_id = 1 AND queue_offset >= 7"
        )
        assert frame.rdd.getNumPartitions() == 1
        assert sorted(r.body for r in frame.collect()) == [b"1-7", b"1-8", b"1-9"]
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
    # Without pushFilters the same query is answered by Spark's own filter over every queue.
    frame = batch(spark, server, "PushedSql").where("queue_id = 1 AND queue_offset >= 7")
    assert frame.rdd.getNumPartitions() == 3
    assert sorted(r.body for r in frame.collect()) == [b"1-7", b"1-8", b"1-9"]


# --- lag ------------------------------------------------------------------------------------------


def test_the_offsets_behind_latest_come_out_of_the_query_s_progress(
    spark: Any, server: StandaloneServer, workdir: Path
) -> None:
    create_topic(server.namesrv, "Lagging", 2)
    send(server.namesrv, "Lagging", {0: [b"x"] * 30, 1: [b"y"] * 10})
    query = parquet_query(
        spark,
        server.namesrv,
        "Lagging",
        workdir / "out",
        workdir / "ckpt",
        per_trigger=20,
        available_now=True,
    )
    query.awaitTermination()
    progresses = [p for p in query.recentProgress if p.numInputRows > 0]
    assert [offsets_behind_latest(p.sources[0]) for p in progresses] == [
        {"avgOffsetsBehindLatest": 10.0, "maxOffsetsBehindLatest": 15.0, "minOffsetsBehindLatest": 5.0},
        {"avgOffsetsBehindLatest": 0.0, "maxOffsetsBehindLatest": 0.0, "minOffsetsBehindLatest": 0.0},
    ]


def _utc(millis: int) -> datetime.datetime:
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=millis)
