"""The reference pipeline (``cometmq pipeline demo``): its aggregates, in Parquet and on the result
topic, equal those computed in Python from the generated events. A real local SparkSession against
a real standalone server; the generator and the Python totals are also checked on their own."""

from __future__ import annotations

import io
import sys
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cometmq.cli import main
from cometmq.client import Message, blocking
from cometmq.spark import pipeline
from cometmq.spark.pipeline import (
    MAX_LATENESS_MS,
    RESULT_TOPIC,
    SOURCE_TOPIC,
    WATERMARK_MS,
    WINDOW_MS,
    WindowTotal,
    expected_aggregates,
    flush_event,
    generate_events,
    parse_result,
    read_parquet_results,
    run_demo,
    to_aggregates,
)
from processes import StandaloneServer, free_port

EVENTS = 2000


# The generator and the Python totals ---------------------------------------------------------------


def test_generator_is_deterministic_and_within_the_watermark() -> None:
    events = generate_events(EVENTS, seed=3)
    assert events == generate_events(EVENTS, seed=3)
    assert events != generate_events(EVENTS, seed=4)
    newest = events[0].event_time_ms
    late = 0
    for event in events:
        # Never later than the newest event before it by more than the bound, which the watermark covers.
        assert event.event_time_ms >= newest - MAX_LATENESS_MS
        late += event.event_time_ms < newest
        newest = max(newest, event.event_time_ms)
    assert MAX_LATENESS_MS < WATERMARK_MS
    assert late > EVENTS // 20  # some events really are out of order
    assert len({e.order_id for e in events}) == EVENTS
    assert all(e.amount_cents > 0 for e in events)


def test_flush_event_closes_every_window() -> None:
    events = generate_events(500)
    flush = flush_event(events)
    last_window_end = max(pipeline.window_start(e.event_time_ms) for e in events) + WINDOW_MS
    assert flush.event_time_ms - WATERMARK_MS >= last_window_end
    assert expected_aggregates([*events, flush]) == expected_aggregates(events)


def test_expected_aggregates_by_hand() -> None:
    events = [
        pipeline.OrderEvent("a", "c1", "books", 1050, 60_000),
        pipeline.OrderEvent("b", "c2", "books", 1, 119_999),
        pipeline.OrderEvent("c", "c3", "toys", 200, 120_000),
        pipeline.OrderEvent("d", "c4", "books", 99, 59_999),
    ]
    assert expected_aggregates(events) == {
        (0, "books"): WindowTotal(Decimal("0.99"), 1),
        (60_000, "books"): WindowTotal(Decimal("10.51"), 2),
        (120_000, "toys"): WindowTotal(Decimal("2.00"), 1),
    }
    assert events[0].to_json() == (
        b'{"order_id": "a", "customer": "c1", "category": "books", "amount": 10.50, "event_time": 60000}'
    )


def test_result_bodies_parse_exactly() -> None:
    body = (
        b'{"window_start":"2025-01-01T12:03:00.000Z","window_end":"2025-01-01T12:04:00.000Z",'
        b'"category":"books","revenue":2790.10,"orders":80}'
    )
    assert parse_result(body) == ((1_735_732_980_000, "books"), WindowTotal(Decimal("2790.1"), 80))
    with pytest.raises(ValueError, match="different totals"):
        to_aggregates([((0, "x"), WindowTotal(Decimal(1), 1)), ((0, "x"), WindowTotal(Decimal(2), 1))])


# End to end ------------------------------------------------------------------------------------


def _end_offsets(consumer: Any, topic: str) -> dict[Any, int]:
    return {queue: consumer.end_offset(queue) for queue in consumer.fetch_queues(topic)}


def _leftovers(namesrv: str) -> None:
    """What an earlier run leaves on the topics: orders up to a flush event far ahead in event time
    (read by mistake, it would push the watermark past every window of the run), and a result."""
    old = generate_events(200, seed=99, start_ms=pipeline.DEFAULT_START_MS + 3_600_000)
    far = pipeline.OrderEvent("old-flush", "-", pipeline.FLUSH_CATEGORY, 0, pipeline.DEFAULT_START_MS + 10**9)
    stale = (
        b'{"window_start":"2025-01-01T11:00:00.000Z","window_end":"2025-01-01T11:01:00.000Z",'
        b'"category":"books","revenue":1.00,"orders":1}'
    )
    with blocking.AdminClient(namesrv) as admin:
        for topic in (SOURCE_TOPIC, RESULT_TOPIC):
            admin.create_topic(topic, 4)
    with blocking.Producer("PID_pipeline_test", namesrv) as producer:
        producer.send_batch([Message(SOURCE_TOPIC, e.to_json()) for e in [*old, far]])
        producer.send(Message(RESULT_TOPIC, stale))


def _topic_results(namesrv: str, starts: dict[Any, int]) -> list[tuple[pipeline.Key, WindowTotal]]:
    """The result topic's messages from ``starts`` on, read by a consumer of the test's own."""
    results = []
    with blocking.LitePullConsumer("GID_pipeline_test", namesrv, auto_commit=False) as consumer:
        for queue, start in starts.items():
            for batch in consumer.read(queue, start, consumer.end_offset(queue)):
                results += [parse_result(m.body) for m in batch]
    return results


def test_pipeline_aggregates_equal_python(spark: Any, server: StandaloneServer, tmp_path: Path) -> None:
    _leftovers(server.namesrv)  # a run reads (and prints) only what it sent itself
    with blocking.LitePullConsumer("GID_pipeline_test", server.namesrv, auto_commit=False) as consumer:
        starts = _end_offsets(consumer, RESULT_TOPIC)
    out = io.StringIO()

    # Several micro-batches, so the watermark moves while late orders are still coming.
    result = run_demo(
        server.namesrv,
        tmp_path,
        events=EVENTS,
        rate=0,
        seed=11,
        spark=spark,
        out=out,
        max_offsets_per_trigger=EVENTS // 3 + 1,  # three batches of orders (the flush in the last)
    )

    expected = expected_aggregates(generate_events(EVENTS, seed=11))
    assert len(expected) > 20  # several windows of several categories
    parquet_rows = read_parquet_results(spark, tmp_path / "parquet")
    assert len(parquet_rows) == len(expected)  # each window written once
    assert to_aggregates(parquet_rows) == expected
    # At least once: a replayed micro-batch may publish a window again, never with another total.
    assert to_aggregates(_topic_results(server.namesrv, starts)) == expected
    assert result.parquet == expected and result.topic == expected and result.ok
    report = out.getvalue()
    assert report.count(" window ") == len(expected)  # each printed as it arrived
    assert f"OK: {len(expected)} windows" in report
    assert f"Using Spark ({spark.sparkContext.master}); work directory" in report  # the SparkSession given
    assert "NO" not in report.split()


def test_the_demo_names_the_master_of_the_session_it_got_not_the_one_it_asked_for(
    server: StandaloneServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class RunningElsewhere:
        sparkContext = SimpleNamespace(master="spark://10.0.0.7:7077")

        def stop(self) -> None:
            pass

    def stop_before_the_query(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("stopped before the query")

    monkeypatch.setattr(pipeline, "spark_session", lambda base, master: RunningElsewhere())
    monkeypatch.setattr(pipeline, "build_query", stop_before_the_query)
    out = io.StringIO()
    with pytest.raises(RuntimeError, match="stopped before the query"):
        pipeline.run_demo(server.namesrv, tmp_path, master="local[2]", out=out, progress=False)
    assert "Using Spark (spark://10.0.0.7:7077)" in out.getvalue()
    assert "local[2]" not in out.getvalue()


# The command's errors ----------------------------------------------------------------------------


def test_demo_without_pyspark_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # what importlib sees when it is not installed
    assert main(["pipeline", "demo"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["cometmq: error: the pipeline needs PySpark and PyArrow: pip install 'cometmq[spark]'"]


def test_demo_without_server_fails_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    assert main(["pipeline", "demo", "--namesrv", f"127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cometmq: error: cannot connect to 127.0.0.1:")
