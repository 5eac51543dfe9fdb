"""The reader's options and planning helpers that need no server: option checks and their wording,
minPartitions' splitting, pushed filters, the lag from a query's progress, data-loss wording."""

from __future__ import annotations

import datetime
import itertools
import json
import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.datasource import (
    CaseInsensitiveDict,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from cometmq.client import MessageQueue
from cometmq.errors import DataLossError, OptionError
from cometmq.spark import CometMQDataSource, offsets_behind_latest
from cometmq.spark._options import ReadOptions, unknown_read_options
from cometmq.spark._pushdown import Pruning
from cometmq.spark._source import split_ranges

Q0, Q1 = MessageQueue("t", "broker-a", 0), MessageQueue("t", "broker-a", 1)


def parse(**options: str) -> ReadOptions:
    return ReadOptions.parse({"topic": "t", **options})


# --- option checks -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"maxoffsetspertrigger": "0"}, "maxOffsetsPerTrigger must be positive"),
        ({"MINPARTITIONS": "x"}, "minPartitions must be a whole number"),
        ({"failonmissingtopic": "maybe"}, "failOnMissingTopic must be true or false"),
        ({"fetchoffset.numretries": "-1"}, "fetchOffset.numRetries must be 0 or more"),
        ({"requesttimeoutms": "0"}, "requestTimeoutMs must be positive"),
        ({"endingtimestamp": "yesterday"}, "endingTimestamp must be ms since the epoch or an ISO-8601"),
        ({"startingoffsetsbytimestamp": "[]"}, "startingOffsetsByTimestamp must look like"),
    ],
)
def test_messages_name_options_in_their_documented_case(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse(**options)


def test_the_read_options_default_as_documented() -> None:
    opts = parse()
    assert (opts.min_partitions, opts.ending_offsets, opts.ending_timestamp) == (None, None, None)
    assert (opts.fail_on_missing_topic, opts.push_filters) == (True, False)
    assert (opts.request_timeout_ms, opts.fetch_retries, opts.fetch_retry_interval_ms) == (10_000, 3, 1000)


def test_timeouts_retries_and_min_partitions_are_parsed() -> None:
    opts = parse(
        requestTimeoutMs="2500", **{"fetchOffset.numRetries": "0", "fetchOffset.retryIntervalMs": "20"},
        minPartitions="6", failOnMissingTopic="false", pushFilters="true", endingTimestamp="1000",
    )  # fmt: skip
    assert (opts.request_timeout_ms, opts.fetch_retries, opts.fetch_retry_interval_ms) == (2500, 0, 20)
    assert (opts.min_partitions, opts.fail_on_missing_topic, opts.push_filters) == (6, False, True)
    assert opts.ending_timestamp == 1000


def test_ending_offsets_at_the_earliest_are_refused() -> None:
    with pytest.raises(OptionError, match="endingOffsets cannot be 'earliest'"):
        parse(endingOffsets="earliest")


def test_a_batch_read_refuses_a_start_at_the_latest_and_an_end_at_the_earliest() -> None:
    parse(startingOffsets="latest").check_stream()
    with pytest.raises(OptionError, match="startingOffsets cannot be 'latest' in a batch read"):
        parse(startingOffsets="latest").check_batch()
    with pytest.raises(OptionError, match=r"startingOffsets cannot be -1 \(latest\) .* t@broker-a:1"):
        parse(startingOffsets=json.dumps({"t": {"broker-a": {"0": 0, "1": -1}}})).check_batch()
    with pytest.raises(OptionError, match=r"endingOffsets cannot be -2 \(earliest\) .* t@broker-a:0"):
        parse(endingOffsets=json.dumps({"t": {"broker-a": {"0": -2}}})).check_batch()


@pytest.mark.parametrize("option", [{"endingOffsets": "latest"}, {"endingTimestamp": "0"}])
def test_a_streaming_read_refuses_an_end(option: dict[str, str]) -> None:
    parse(**option).check_batch()
    with pytest.raises(OptionError, match=f"{next(iter(option))} is for batch reads only"):
        parse(**option).check_stream()


def test_times_per_queue_must_not_be_negative() -> None:
    with pytest.raises(OptionError, match="startingOffsetsByTimestamp: the time of t@broker-a:0 must be ms"):
        parse(startingOffsetsByTimestamp=json.dumps({"t": {"broker-a": {"0": -2}}}))


@pytest.mark.parametrize(
    ("option", "error"),
    [
        ({"minPartitions": "10001"}, "minPartitions must be at most 10000, not 10001"),
        ({"fetchOffset.numRetries": "1000"}, "fetchOffset.numRetries must be at most 100, not 1000"),
        ({"requestTimeoutMs": "86400001"}, "requestTimeoutMs must be at most 86400000"),
        ({"fetchOffset.retryIntervalMs": "86400001"}, "fetchOffset.retryIntervalMs must be at most 86400000"),
    ],
)
def test_counts_and_waits_above_their_cap_are_refused_naming_the_option_and_the_cap(
    option: dict[str, str], error: str
) -> None:
    with pytest.raises(OptionError, match=error):
        parse(**option)


def test_counts_and_waits_at_their_cap_are_taken() -> None:
    options = parse(
        minPartitions="10000",
        **{
            "fetchOffset.numRetries": "100",
            "requestTimeoutMs": "86400000",
            "fetchOffset.retryIntervalMs": "86400000",
        },
    )
    assert (options.min_partitions, options.fetch_retries) == (10_000, 100)
    assert options.request_timeout_ms == options.fetch_retry_interval_ms == 86_400_000


def test_unknown_options_are_named_as_given_and_known_ones_in_any_case_are_not() -> None:
    given_options = {"topic": "t", "MaxOffsetsPerTrigger": "5", "colour": "red", "kafka.x": "1"}
    assert unknown_read_options(given_options) == ["colour", "kafka.x"]


def test_an_unknown_option_spark_lower_cased_is_shown_with_the_documented_option_it_is_close_to() -> None:
    given_options = CaseInsensitiveDict(
        {"topic": "t", "maxOffsetPerTrigger": "5", "startingOffset": "earliest"}
    )
    assert unknown_read_options(given_options) == [
        "maxoffsetpertrigger (did you mean maxOffsetsPerTrigger?)",
        "startingoffset (did you mean startingOffsets?)",
    ]


def test_the_schema_asked_at_load_checks_the_options_and_warns_about_unknown_ones_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(OptionError, match="give exactly one of the options 'topic'"):
        CometMQDataSource({"topicz": "t"}).schema()
    with caplog.at_level(logging.WARNING, logger="cometmq.spark"):
        CometMQDataSource({"topic": "t", "startingOffset": "earliest", "colour": "red"}).schema()
    warnings = [r.getMessage() for r in caplog.records if "does not take" in r.getMessage()]
    assert warnings == [
        "options a read does not take, ignored: colour, startingOffset (did you mean startingOffsets?) "
        "(see docs/spark.md)"
    ]


def test_a_refused_streaming_read_raises_the_refusal_at_spark_s_first_question() -> None:
    reader = CometMQDataSource({"topic": "t", "endingOffsets": "latest"}).streamReader(None)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="endingOffsets is for batch reads only"):
        reader.initialOffset()
    with pytest.raises(OptionError, match="endingOffsets is for batch reads only"):
        reader.latestOffset({}, None)  # type: ignore[arg-type]


# --- data-loss wording ----------------------------------------------------------------------------


def test_data_loss_says_whether_the_offsets_are_before_the_start_or_past_the_end() -> None:
    before = str(DataLossError(Q0, 50, 183))
    assert before == (
        "t@broker-a:0: messages from offset 50 on were wanted, but offsets before 183 are gone from the "
        "start of the queue (deleted by retention?)"
    )
    past = str(DataLossError(Q0, 90, 10))
    assert "past the end of the queue, whose next offset is 10" in past


# --- minPartitions --------------------------------------------------------------------------------

ranges = st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 5000)), min_size=1, max_size=6).map(
    lambda spans: [(MessageQueue("t", "b", i), start, start + size) for i, (start, size) in enumerate(spans)]
)


@given(ranges, st.integers(0, 40))
def test_split_ranges_cover_each_range_exactly_in_order(
    spans: list[tuple[MessageQueue, int, int]], min_partitions: int
) -> None:
    pieces = split_ranges(spans, min_partitions)
    assert [q for q, _, _ in pieces] == sorted(q for q, _, _ in pieces)
    for queue, start, end in spans:
        mine = [(s, e) for q, s, e in pieces if q == queue]
        assert mine[0][0] == start and mine[-1][1] == end
        assert all(a[1] == b[0] for a, b in itertools.pairwise(mine))
        assert all(e > s for s, e in mine)
        sizes = {e - s for s, e in mine}
        assert max(sizes) - min(sizes) <= 1
    if len(spans) >= min_partitions:
        assert pieces == spans


def test_split_ranges_share_the_partitions_in_proportion_to_the_sizes() -> None:
    pieces = split_ranges([(Q0, 0, 3000), (Q1, 100, 1100)], 8)
    assert [(q.queue_id, s, e) for q, s, e in pieces] == [
        (0, 0, 500), (0, 500, 1000), (0, 1000, 1500), (0, 1500, 2000), (0, 2000, 2500), (0, 2500, 3000),
        (1, 100, 600), (1, 600, 1100),
    ]  # fmt: skip
    assert split_ranges([(Q0, 0, 10), (Q1, 0, 10)], 2) == [(Q0, 0, 10), (Q1, 0, 10)]


# --- pushed filters -------------------------------------------------------------------------------


def test_queue_and_offset_filters_become_exact_bounds_and_are_not_handed_back() -> None:
    pruning = Pruning()
    pushed = [
        EqualTo(("topic",), "t"),
        In(("queue_id",), (1, 3)),
        EqualTo(("queue_id",), 1),
        GreaterThanOrEqual(("queue_offset",), 5),
        LessThan(("queue_offset",), 20),
        LessThanOrEqual(("queue_offset",), 30),
        GreaterThan(("queue_offset",), 4),
    ]
    assert list(pruning.take(pushed)) == []
    assert (pruning.topics, pruning.queue_ids, pruning.brokers) == ({"t"}, {1}, None)
    assert (pruning.offset_from, pruning.offset_to) == (5, 20)
    assert pruning.keeps(Q1) and not pruning.keeps(Q0)
    assert not pruning.keeps(MessageQueue("u", "broker-a", 1))


def test_store_time_filters_bound_whole_milliseconds_and_spark_checks_them_again() -> None:
    at = datetime.datetime(2026, 1, 2, 3, 4, 5, 678_500, tzinfo=datetime.UTC)  # 678.5 ms
    ms = int(datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC).timestamp()) * 1000 + 678
    for pushed, bounds in [
        (GreaterThan(("store_timestamp",), at), (ms + 1, None)),
        (GreaterThanOrEqual(("store_timestamp",), at), (ms + 1, None)),
        (LessThan(("store_timestamp",), at), (None, ms + 1)),
        (LessThanOrEqual(("store_timestamp",), at), (None, ms + 1)),
        (GreaterThanOrEqual(("store_timestamp",), at.replace(microsecond=678_000)), (ms, None)),
        (LessThan(("store_timestamp",), at.replace(microsecond=678_000)), (None, ms)),
        (EqualTo(("store_timestamp",), at.replace(tzinfo=None)), (ms, ms + 1)),
    ]:
        pruning = Pruning()
        assert list(pruning.take([pushed])) == [pushed]
        assert (pruning.time_from_ms, pruning.time_to_ms) == bounds


def test_filters_on_other_columns_or_of_other_kinds_are_handed_back() -> None:
    others: list[Any] = [
        EqualTo(("body",), b"x"),
        StringStartsWith(("topic",), "t"),
        GreaterThan(("queue_id",), 2),
        EqualTo(("queue_offset",), "5"),
    ]
    pruning = Pruning()
    assert list(pruning.take(others)) == others
    assert pruning == Pruning()


# --- lag from the progress ------------------------------------------------------------------------


def test_offsets_behind_latest_come_from_the_progress_end_and_latest_offsets() -> None:
    end = {"t": {"broker-a": {"0": 10, "1": 40, "2": 7}}}
    latest = {"t": {"broker-a": {"0": 30, "1": 40, "2": 17}}}
    source = {"endOffset": json.dumps(end), "latestOffset": json.dumps(latest)}
    assert offsets_behind_latest(source) == {
        "avgOffsetsBehindLatest": 10.0,
        "maxOffsetsBehindLatest": 20.0,
        "minOffsetsBehindLatest": 0.0,
    }
    assert offsets_behind_latest({"endOffset": json.dumps(end), "latestOffset": None}) == {}
