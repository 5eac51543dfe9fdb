"""How the stream reader plans micro-batches (on the driver), asked directly as Spark asks it: no
SparkSession, a real server. Admission limits, availableNow, new queues, partitions."""

from __future__ import annotations

import pkgutil
from typing import Any

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from spark_support import BROKER, create_topic, send

from cometmq.client import MessageQueue
from cometmq.protocol.naming import is_system_topic
from cometmq.spark import CometMQDataSource
from cometmq.spark._read import QueueRange
from cometmq.spark._source import CometMQStreamReader
from processes import StandaloneServer
from waiting import wait_until_blocking


def stream_reader(server: StandaloneServer, topic: str, **options: str) -> CometMQStreamReader:
    source = CometMQDataSource(
        {"namesrv": server.namesrv, "topic": topic, "startingOffsets": "earliest", **options}
    )
    reader = source.streamReader(None)  # type: ignore[arg-type]
    assert isinstance(reader, CometMQStreamReader)
    return reader


def queue_offsets(offsets: dict[str, Any], topic: str) -> dict[int, int]:
    return {int(q): o for q, o in offsets[topic][BROKER].items()}


def test_max_offsets_per_trigger_is_shared_in_proportion_to_what_each_queue_has(
    server: StandaloneServer,
) -> None:
    create_topic(server.namesrv, "PlanShare", 2)
    send(server.namesrv, "PlanShare", {0: [b"a"] * 30, 1: [b"b"] * 10})
    reader = stream_reader(server, "PlanShare", maxOffsetsPerTrigger="20")
    start = reader.initialOffset()
    assert queue_offsets(start, "PlanShare") == {0: 0, 1: 0}
    assert reader.getDefaultReadLimit() == ReadMaxRows(20)
    first = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert queue_offsets(first, "PlanShare") == {0: 15, 1: 5}
    # The engine may ask for everything regardless of the option (a trigger's own semantics).
    assert queue_offsets(reader.latestOffset(first, ReadAllAvailable()), "PlanShare") == {0: 30, 1: 10}
    ranges = [p.value for p in reader.partitions(start, first)]
    assert ranges == [
        QueueRange(server.namesrv, MessageQueue("PlanShare", BROKER, 0), 0, 15, "*", True, False),
        QueueRange(server.namesrv, MessageQueue("PlanShare", BROKER, 1), 0, 5, "*", True, False),
    ]
    assert reader.partitions(first, first) == []


def test_min_offsets_per_trigger_waits_for_enough_messages_or_the_max_trigger_delay(
    server: StandaloneServer,
) -> None:
    create_topic(server.namesrv, "PlanMin", 1)
    send(server.namesrv, "PlanMin", {0: [b"x"] * 5})
    patient = stream_reader(server, "PlanMin", minOffsetsPerTrigger="10", maxTriggerDelay="1h")
    start = patient.initialOffset()
    assert patient.latestOffset(start, ReadAllAvailable()) == start  # 5 < 10: no batch yet
    send(server.namesrv, "PlanMin", {0: [b"x"] * 5})
    assert queue_offsets(patient.latestOffset(start, ReadAllAvailable()), "PlanMin") == {0: 10}

    hasty = stream_reader(server, "PlanMin", minOffsetsPerTrigger="100", maxTriggerDelay="1s")
    start = hasty.initialOffset()
    assert hasty.latestOffset(start, ReadAllAvailable()) == start
    # Once the delay has passed, a batch runs with fewer messages than the minimum.
    wait_until_blocking(
        lambda: queue_offsets(hasty.latestOffset(start, ReadAllAvailable()), "PlanMin") == {0: 10},
        message="a batch after maxTriggerDelay",
    )


def test_available_now_stops_at_what_was_there_when_the_query_started(server: StandaloneServer) -> None:
    create_topic(server.namesrv, "PlanNow", 1)
    send(server.namesrv, "PlanNow", {0: [b"x"] * 8})
    reader = stream_reader(server, "PlanNow", maxOffsetsPerTrigger="5")
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    send(server.namesrv, "PlanNow", {0: [b"later"] * 4})
    first = reader.latestOffset(start, reader.getDefaultReadLimit())
    second = reader.latestOffset(first, reader.getDefaultReadLimit())
    assert (queue_offsets(first, "PlanNow"), queue_offsets(second, "PlanNow")) == ({0: 5}, {0: 8})
    assert reader.latestOffset(second, reader.getDefaultReadLimit()) == second  # done
    assert queue_offsets(reader.reportLatestOffset() or {}, "PlanNow") == {0: 12}


def test_a_new_queue_enters_at_its_earliest_offset_and_is_read_from_the_next_batch(
    server: StandaloneServer,
) -> None:
    create_topic(server.namesrv, "PlanGrow", 1)
    send(server.namesrv, "PlanGrow", {0: [b"x"] * 3})
    reader = stream_reader(server, "PlanGrow")
    start = reader.initialOffset()
    create_topic(server.namesrv, "PlanGrow", 2)
    send(server.namesrv, "PlanGrow", {1: [b"y"] * 4})
    first = reader.latestOffset(start, ReadAllAvailable())
    assert queue_offsets(first, "PlanGrow") == {0: 3, 1: 0}
    assert [p.value.queue.queue_id for p in reader.partitions(start, first)] == [0]
    second = reader.latestOffset(first, ReadAllAvailable())
    assert queue_offsets(second, "PlanGrow") == {0: 3, 1: 4}
    assert [
        (p.value.queue.queue_id, p.value.start, p.value.end) for p in reader.partitions(first, second)
    ] == [(1, 0, 4)]


def test_pyspark_finds_the_source_by_itself() -> None:
    # What Spark's lookup_data_sources does: every top-level pyspark_* module with a DefaultSource.
    found = {m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_")}
    assert "pyspark_cometmq" in found
    import pyspark_cometmq

    assert pyspark_cometmq.DefaultSource is CometMQDataSource
    assert CometMQDataSource.name() == "cometmq"


def test_a_topic_pattern_leaves_out_system_retry_and_dead_letter_topics(server: StandaloneServer) -> None:
    for name in ("PlanPat", "%RETRY%PlanPat", "%DLQ%PlanPat"):
        create_topic(server.namesrv, name, 1)
    reader = CometMQDataSource({"namesrv": server.namesrv, "topicPattern": ".*PlanPat"}).streamReader(None)  # type: ignore[arg-type]
    assert isinstance(reader, CometMQStreamReader)
    assert {q.topic for q in reader.queues()} == {"PlanPat"}
    everything = CometMQDataSource({"namesrv": server.namesrv, "topicPattern": ".*"}).streamReader(None)  # type: ignore[arg-type]
    assert isinstance(everything, CometMQStreamReader)
    topics = {q.topic for q in everything.queues()}
    assert "PlanPat" in topics
    # Whatever system topics the server holds (TBW102, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT, ...).
    assert not any(is_system_topic(t) or t.startswith(("%RETRY%", "%DLQ%")) for t in topics), topics
