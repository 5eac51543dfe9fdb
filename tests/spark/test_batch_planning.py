"""How a batch read plans its ranges under pushed filters, with the route and offset questions
answered by a fake (no broker, no Spark session)."""

from __future__ import annotations

import json
import logging

import pytest
from pyspark.sql.datasource import EqualTo, Filter, GreaterThanOrEqual, LessThan

from cometmq.client.message import MessageQueue
from cometmq.errors import DataLossError, OptionError
from cometmq.spark._source import CometMQDataSource, CometMQFilteringReader

QUEUES = [MessageQueue("Plan", "broker-a", queue_id) for queue_id in range(4)]
RETAINED = (100, 200)  # retention deleted offsets 0..99 of every queue


def planned(filters: list[Filter], **options: str) -> list[tuple[int, int, int]]:
    """(queue id, start, end) of each planned partition."""
    source = CometMQDataSource({"topic": "Plan", "pushFilters": "true", **options})
    reader = source.reader(source.schema())  # type: ignore[arg-type]
    assert isinstance(reader, CometMQFilteringReader)
    reader.queues = lambda known=(): list(QUEUES)  # type: ignore[method-assign]
    reader.bounds = lambda queues: {queue: RETAINED for queue in queues}  # type: ignore[method-assign]
    assert list(reader.pushFilters(filters)) == []
    return [(p.value.queue.queue_id, p.value.start, p.value.end) for p in reader.partitions()]


def every_queue_at(offset: int) -> str:
    return json.dumps({"Plan": {"broker-a": {str(queue.queue_id): offset for queue in QUEUES}}})


def test_an_offset_filter_below_what_retention_kept_reads_nothing_and_reports_no_loss() -> None:
    assert planned([LessThan(("queue_offset",), 50)]) == []


def test_lost_offsets_the_offset_filter_excludes_are_no_loss() -> None:
    ranges = planned([GreaterThanOrEqual(("queue_offset",), 120)], startingOffsets=every_queue_at(50))
    assert ranges == [(queue.queue_id, 120, 200) for queue in QUEUES]


def test_lost_offsets_the_offset_filter_keeps_are_still_loss() -> None:
    with pytest.raises(DataLossError):
        planned([LessThan(("queue_offset",), 150)], startingOffsets=every_queue_at(50))
    ranges = planned(
        [LessThan(("queue_offset",), 150)], startingOffsets=every_queue_at(50), failOnDataLoss="false"
    )
    assert ranges == [(queue.queue_id, 100, 150) for queue in QUEUES]


def test_a_queue_filter_reads_the_kept_queues_from_offsets_json_naming_every_queue() -> None:
    ranges = planned([EqualTo(("queue_id",), 2)], startingOffsets=every_queue_at(150))
    assert ranges == [(2, 150, 200)]


def test_offsets_json_is_still_checked_against_every_queue_under_a_queue_filter() -> None:
    only_two = json.dumps({"Plan": {"broker-a": {"2": 150}}})
    with pytest.raises(OptionError, match="names no offset for"):
        planned([EqualTo(("queue_id",), 2)], startingOffsets=only_two)


def test_a_lost_start_is_described_as_before_the_queue_s_start_when_loss_is_allowed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="cometmq.spark"):
        planned([], startingOffsets=every_queue_at(50), failOnDataLoss="false")
    assert (
        "Plan@broker-a:2: offset 50 is before its start (it holds 100..199); continuing at 100 as "
        "failOnDataLoss is false"
    ) in caplog.text
    assert "past its end" not in caplog.text
