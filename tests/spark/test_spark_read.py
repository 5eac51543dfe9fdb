"""Batch reads (spark.read.format("cometmq")): which messages the offset options select, and the
columns each message becomes. A real local SparkSession against a real standalone server."""

from __future__ import annotations

import time
from typing import Any

import pytest
from spark_support import BROKER, create_topic, offsets_json, send

from processes import StandaloneServer
from waiting import next_millisecond


def read(spark: Any, server: StandaloneServer, topic: str, **options: str) -> list[Any]:
    reader = spark.read.format("cometmq").option("namesrv", server.namesrv).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load().collect()


def offsets_of(rows: list[Any]) -> set[tuple[int, int]]:
    return {(row.queue_id, row.queue_offset) for row in rows}


def test_batch_read_returns_every_column_of_every_message(spark: Any, server: StandaloneServer) -> None:
    create_topic(server.namesrv, "SparkCols", 2)
    send(server.namesrv, "SparkCols", {0: [b"a0", b"a1"], 1: [b"b0"]}, tags="TagA", keys=["k1", "k2"],
         properties={"region": "eu", "n": "1"})  # fmt: skip
    before = time.time()
    rows = read(spark, server, "SparkCols", includeProperties="true")
    assert sorted((r.queue_id, r.queue_offset, r.body) for r in rows) == [
        (0, 0, b"a0"), (0, 1, b"a1"), (1, 0, b"b0"),
    ]  # fmt: skip
    for row in rows:
        assert (row.topic, row.broker, row.tags, row.keys) == ("SparkCols", BROKER, "TagA", ["k1", "k2"])
        assert row.properties == {"region": "eu", "n": "1"}  # user properties only
        assert len(row.msg_id) == 32 and int(row.msg_id, 16) >= 0
        assert row.reconsume_times == 0
        assert abs(row.store_timestamp.timestamp() - before) < 120
        assert row.born_timestamp <= row.store_timestamp
    assert len({r.msg_id for r in rows}) == 3
    # Without includeProperties the column is there but null.
    assert {r.properties for r in read(spark, server, "SparkCols")} == {None}


def test_starting_and_ending_offsets_select_exactly_the_range(spark: Any, server: StandaloneServer) -> None:
    create_topic(server.namesrv, "SparkRange", 3)
    send(server.namesrv, "SparkRange", {q: [b"%d-%d" % (q, i) for i in range(10)] for q in range(3)})
    assert len(read(spark, server, "SparkRange")) == 30  # earliest to latest by default
    rows = read(
        spark, server, "SparkRange",
        startingOffsets=offsets_json("SparkRange", {0: 2, 1: -2, 2: 9}),
        endingOffsets=offsets_json("SparkRange", {0: 5, 1: 3, 2: -1}),
    )  # fmt: skip
    assert offsets_of(rows) == {(0, 2), (0, 3), (0, 4), (1, 0), (1, 1), (1, 2), (2, 9)}
    assert {r.body for r in rows if r.queue_id == 0} == {b"0-2", b"0-3", b"0-4"}


def test_offsets_json_must_name_every_queue_and_only_real_ones(spark: Any, server: StandaloneServer) -> None:
    create_topic(server.namesrv, "SparkStrict", 2)
    send(server.namesrv, "SparkStrict", {0: [b"x"], 1: [b"y"]})
    with pytest.raises(Exception, match=r"startingOffsets names no offset for SparkStrict@broker-a:1"):
        read(spark, server, "SparkStrict", startingOffsets=offsets_json("SparkStrict", {0: 0}))
    with pytest.raises(Exception, match=r"queues that are not there: SparkStrict@broker-a:7"):
        read(spark, server, "SparkStrict", startingOffsets=offsets_json("SparkStrict", {0: 0, 1: 0, 7: 0}))
    with pytest.raises(Exception, match="give exactly one of the options 'topic'"):
        spark.read.format("cometmq").option("namesrv", server.namesrv).load().collect()


def test_starting_timestamp_starts_at_the_first_message_stored_at_or_after_it(
    spark: Any, server: StandaloneServer
) -> None:
    create_topic(server.namesrv, "SparkTime", 2)
    send(server.namesrv, "SparkTime", {0: [b"old0", b"old1"], 1: [b"old2"]})
    cut = next_millisecond()
    send(server.namesrv, "SparkTime", {0: [b"new0"], 1: [b"new1", b"new2"]})
    rows = read(spark, server, "SparkTime", startingTimestamp=str(cut))
    assert sorted(r.body for r in rows) == [b"new0", b"new1", b"new2"]
    assert all(r.store_timestamp.timestamp() * 1000 >= cut for r in rows)
    # A time after every message: nothing; before every message: everything.
    assert read(spark, server, "SparkTime", startingTimestamp=str(int(time.time() * 1000) + 60_000)) == []
    assert len(read(spark, server, "SparkTime", startingTimestamp="2000-01-01T00:00:00")) == 6


def test_sub_expression_keeps_only_the_tags_named(spark: Any, server: StandaloneServer) -> None:
    create_topic(server.namesrv, "SparkTags", 1)
    for tag in ("A", "B", "C", "A"):
        send(server.namesrv, "SparkTags", {0: [tag.encode()]}, tags=tag)
    send(server.namesrv, "SparkTags", {0: [b"untagged"]})
    rows = read(spark, server, "SparkTags", subExpression="A || C")
    assert sorted((r.queue_offset, r.tags) for r in rows) == [(0, "A"), (2, "C"), (3, "A")]


def test_topic_pattern_reads_every_matching_user_topic(spark: Any, server: StandaloneServer) -> None:
    for name in ("PatOrders1", "PatOrders2", "PatOther"):
        create_topic(server.namesrv, name, 1)
        send(server.namesrv, name, {0: [name.encode()]})
    reader = spark.read.format("cometmq").option("namesrv", server.namesrv)
    rows = reader.option("topicPattern", "PatOrders.*").load().collect()
    assert sorted(r.body for r in rows) == [b"PatOrders1", b"PatOrders2"]
