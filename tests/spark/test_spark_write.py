"""Writing to topics (df.write / df.writeStream format "cometmq"), read back by CometMQ's consumer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spark_support import BROKER, consume_all, create_topic, send

from cometmq.client import MessageQueue, ReceivedMessage, select_by_hash
from cometmq.spark import message_id
from cometmq.spark._write import WriteTarget
from processes import StandaloneServer
from waiting import wait_until_blocking


def test_batch_write_round_trip_keeps_bodies_tags_keys_and_properties(
    spark: Any, server: StandaloneServer
) -> None:
    for topic in ("WriteA", "WriteB"):
        create_topic(server.namesrv, topic, 2)
    rows = [
        (b"order-1", "WriteA", "paid", ["o-1", "c-9"], {"region": "eu", "amount": "12.50"}),
        (b"order-2", "WriteA", None, None, None),
        (b"order-3", "WriteB", "refund", ["o-3"], {"region": "us"}),
    ]
    schema = "body binary, topic string, tags string, keys array<string>, properties map<string,string>"
    spark.createDataFrame(rows, schema).write.format("cometmq").mode("append").option(
        "namesrv", server.namesrv
    ).save()

    received = {m.body: m for topic in ("WriteA", "WriteB") for m in consume_all(server.namesrv, topic)}
    assert sorted(received) == [b"order-1", b"order-2", b"order-3"]
    one, two, three = received[b"order-1"], received[b"order-2"], received[b"order-3"]
    assert (one.topic, one.tags, one.keys) == ("WriteA", "paid", ["o-1", "c-9"])
    assert {k: one.properties[k] for k in ("region", "amount")} == {"region": "eu", "amount": "12.50"}
    assert (two.topic, two.tags, two.keys) == ("WriteA", None, [])
    assert (three.topic, three.tags, three.keys, three.properties["region"]) == (
        "WriteB",
        "refund",
        ["o-3"],
        "us",
    )
    ids = [m.msg_id for m in received.values()]
    assert len(set(ids)) == 3 and all(len(i) == 32 for i in ids)


def test_string_bodies_go_to_the_topic_option(spark: Any, server: StandaloneServer) -> None:
    create_topic(server.namesrv, "WriteText", 1)
    df = spark.createDataFrame([("héllo", "k1 k2"), ("world", None)], "body string, keys string")
    df.write.format("cometmq").mode("append").option("namesrv", server.namesrv).option(
        "topic", "WriteText"
    ).save()
    received = sorted((m.body, m.keys) for m in consume_all(server.namesrv, "WriteText"))
    assert received == [("héllo".encode(), ["k1", "k2"]), (b"world", [])]


def test_streaming_write_gives_each_message_the_id_of_its_query_batch_partition_and_row(
    spark: Any, server: StandaloneServer, workdir: Path
) -> None:
    create_topic(server.namesrv, "PipeIn", 2)
    create_topic(server.namesrv, "PipeOut", 2)
    send(
        server.namesrv,
        "PipeIn",
        {0: [b"in-%d" % i for i in range(30)], 1: [b"in-%d" % i for i in range(30, 50)]},
    )
    source = (
        spark.readStream.format("cometmq")
        .option("namesrv", server.namesrv)
        .option("topic", "PipeIn")
        .option("startingOffsets", "earliest")
        .load()
    )
    query = (
        source.select("body", "tags")
        .writeStream.format("cometmq")
        .option("namesrv", server.namesrv)
        .option("topic", "PipeOut")
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    received = consume_all(server.namesrv, "PipeOut")
    assert sorted(m.body for m in received) == sorted(b"in-%d" % i for i in range(50))
    # One batch (0), one partition per input queue: every id is that of some (partition, row).
    possible = {message_id(WriteTarget(f"{query.id}/PipeOut", 0, p), r) for p in range(2) for r in range(50)}
    assert {m.msg_id for m in received} <= possible
    assert len({m.msg_id for m in received}) == 50


def test_a_dataframe_the_sink_cannot_write_is_refused_with_a_clear_error(
    spark: Any, server: StandaloneServer
) -> None:
    writer = spark.createDataFrame([("x",)], "payload string").write.format("cometmq").mode("append")
    with pytest.raises(Exception, match="needs a 'body' column"):
        writer.option("namesrv", server.namesrv).option("topic", "WriteBad").save()
    reserved = spark.createDataFrame([(b"x", {"DELAY": "3"})], "body binary, properties map<string,string>")
    with pytest.raises(Exception, match=r"property names \['DELAY'\] are reserved"):
        reserved.write.format("cometmq").mode("append").option("namesrv", server.namesrv).option(
            "topic", "WriteBad"
        ).save()


def test_rows_of_one_sharding_key_land_in_one_queue_in_their_order(
    spark: Any, server: StandaloneServer
) -> None:
    create_topic(server.namesrv, "WriteKeyed", 4)
    rows = [
        (f"{customer}:{n}", customer) for n in range(200) for customer in ("ann", "bob", "cy", "dee", "eve")
    ]
    df = spark.createDataFrame(rows, "body string, sharding_key string").coalesce(1)
    df.write.format("cometmq").mode("append").option("namesrv", server.namesrv).option(
        "topic", "WriteKeyed"
    ).save()
    received = sorted(consume_all(server.namesrv, "WriteKeyed"), key=lambda m: (m.queue_id, m.queue_offset))
    assert len(received) == len(rows)
    routed = [MessageQueue("WriteKeyed", BROKER, q) for q in range(4)]
    for customer in ("ann", "bob", "cy", "dee", "eve"):
        own = [m for m in received if m.body.startswith(customer.encode() + b":")]
        assert {m.queue_id for m in own} == {select_by_hash(routed, customer).queue_id}
        assert [int(m.body.split(b":")[1]) for m in own] == list(range(200))


def test_a_row_with_a_delay_level_arrives_after_its_delay(spark: Any, server: StandaloneServer) -> None:
    create_topic(server.namesrv, "WriteDelayed", 1)
    df = spark.createDataFrame([(b"now", None), (b"later", 1)], "body binary, delay_level int")
    df.write.format("cometmq").mode("append").option("namesrv", server.namesrv).option(
        "topic", "WriteDelayed"
    ).save()

    def both_rows() -> list[ReceivedMessage] | None:
        received = consume_all(server.namesrv, "WriteDelayed")
        return received if len(received) == 2 else None

    received = wait_until_blocking(both_rows, message="both rows in the topic")
    # The delayed row went through the broker's schedule topic, which leaves REAL_TOPIC on it.
    assert {m.body: m.properties.get("REAL_TOPIC") for m in received} == {
        b"now": None,
        b"later": "WriteDelayed",
    }
