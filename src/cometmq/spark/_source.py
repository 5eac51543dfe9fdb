"""The ``cometmq`` data source: Spark's entry points, planning on the driver.

A streaming read plans each micro-batch as one input partition per queue (broker name, queue id)
holding the offsets ``[start, end)`` to read; the offsets Spark checkpoints are those JSON maps, so a
micro-batch replayed after a crash reads exactly the same messages again.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    Filter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from cometmq.client.message import MessageQueue
from cometmq.errors import DataLossError, NoRouteError, OptionError
from cometmq.spark import _offsets
from cometmq.spark._cluster import Cluster
from cometmq.spark._offsets import EARLIEST, LATEST, QueueOffsets
from cometmq.spark._options import ReadOptions, WriteOptions, unknown_read_options
from cometmq.spark._pushdown import Pruning
from cometmq.spark._read import QueueRange, read_range
from cometmq.spark._schema import SCHEMA_DDL
from cometmq.spark._write import WriteTarget, check_columns, write_batches

__all__ = ["CometMQDataSource"]

log = logging.getLogger("cometmq.spark")


class CometMQDataSource(DataSource):
    """``spark.readStream.format("cometmq")``, ``spark.read``, ``df.write`` and ``df.writeStream``:
    see docs/spark.md for the options."""

    @classmethod
    def name(cls) -> str:
        return "cometmq"

    def schema(self) -> str:
        # Spark asks a read (batch or stream, never a write) for its schema in load(): the options
        # are checked here so that a bad one fails there, not at the first action.
        ReadOptions.parse(self.options)
        unknown = unknown_read_options(self.options)
        if unknown:
            log.warning("options a read does not take, ignored: %s (see docs/spark.md)", ", ".join(unknown))
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        options = ReadOptions.parse(self.options)
        options.check_batch()
        # Spark refuses a reader that can take filters unless spark.sql.python.filterPushdown.enabled
        # is set: only the option pushFilters asks for one.
        return CometMQFilteringReader(options) if options.push_filters else CometMQBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            options = ReadOptions.parse(self.options)
            options.check_stream()
        except OptionError as exc:
            # PySpark's stream planner hides an error raised here behind an UnboundLocalError of its
            # own (its clean-up uses the reader this did not return): fail at the first question.
            return _RefusedStreamReader(exc)
        return CometMQStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        options = WriteOptions.parse(self.options)
        check_columns(schema.fieldNames(), options)
        return CometMQBatchWriter(options, job=uuid.uuid4().hex)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        options = WriteOptions.parse(self.options)
        check_columns(schema.fieldNames(), options)
        return CometMQStreamWriter(options)


Bounds = dict[MessageQueue, tuple[int, int]]


class _Planner:
    """Driver-side reader state shared by the batch and streaming readers; the connection is not
    pickled with the reader (``read()`` runs on a pickled copy in an executor)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._cluster: Cluster | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cluster"] = None
        return state

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            options = self.options
            self._cluster = Cluster(
                options.namesrv,
                options.connect,
                timeout_s=options.request_timeout_ms / 1000,
                retries=options.fetch_retries,
                retry_interval_s=options.fetch_retry_interval_ms / 1000,
            )
        return self._cluster

    def queues(self, known: Iterable[str] = ()) -> list[MessageQueue]:
        """The queues to read. A topic of the option ``topic`` that no broker serves fails the read
        (failOnMissingTopic) or is waited for; one the read has met before (``known``) is asked for
        again first, as its brokers may be re-registering with the name server."""
        options, cluster = self.options, self.cluster
        seen = set(known)
        for attempt in range(options.fetch_retries + 1):
            by_topic = cluster.run_retrying(
                lambda: cluster.queues_by_topic(options.topics, options.topic_pattern), "finding the queues"
            )
            missing = [topic for topic in options.topics if not by_topic.get(topic)]
            if not missing or not options.fail_on_missing_topic or not seen.intersection(missing):
                break
            if attempt < options.fetch_retries:
                time.sleep(options.fetch_retry_interval_ms / 1000)
        if missing and options.fail_on_missing_topic:
            raise NoRouteError(_missing_topic(missing[0], missing[0] in seen, options.fetch_retries))
        if missing:
            log.warning("no broker serves the topic(s) %s (yet): waiting for them", ", ".join(missing))
        return sorted(queue for queues in by_topic.values() for queue in queues)

    def bounds(self, queues: Sequence[MessageQueue]) -> Bounds:
        return self.cluster.run_retrying(
            lambda: self.cluster.bounds(queues), "asking for the queues' offsets"
        )

    def offsets_at(self, bounds: Bounds, timestamp_ms: int) -> QueueOffsets:
        return self.cluster.run_retrying(
            lambda: self.cluster.offsets_at(bounds, timestamp_ms), "searching the queues by time"
        )

    def resolve(
        self, spec: str, bounds: Bounds, what: str, named: Collection[MessageQueue] | None = None
    ) -> QueueOffsets:
        """Offsets per queue from ``earliest``/``latest``/JSON (with -2/-1), for every queue in
        ``bounds``. JSON must name every queue of ``named`` (default: those of ``bounds``), as Spark's
        Kafka source asks; the queues a pushed filter left out of ``bounds`` are named but not read."""
        if spec in ("earliest", "latest"):
            pick = 0 if spec == "earliest" else 1
            return {queue: bound[pick] for queue, bound in bounds.items()}
        given = _offsets.from_json(spec, what)
        _check_named(given, bounds if named is None else named, what)
        return {
            queue: bounds[queue][0] if off == EARLIEST else bounds[queue][1] if off == LATEST else off
            for queue, off in given.items()
            if queue in bounds
        }

    def starting(
        self, bounds: Bounds, default: str, named: Collection[MessageQueue] | None = None
    ) -> QueueOffsets:
        """Where each queue starts: startingTimestamp, else startingOffsetsByTimestamp, else
        startingOffsets (Spark's Kafka source has the same precedence); ``named`` as for resolve."""
        options = self.options
        if options.starting_timestamp is not None:
            return self.offsets_at(bounds, options.starting_timestamp)
        if options.starting_offsets_by_timestamp is not None:
            times = _offsets.from_json(options.starting_offsets_by_timestamp, "startingOffsetsByTimestamp")
            _check_named(times, bounds if named is None else named, "startingOffsetsByTimestamp")
            found = [self.offsets_at({q: bounds[q]}, at) for q, at in times.items() if q in bounds]
            return {queue: offset for one in found for queue, offset in one.items()}
        return self.resolve(options.starting_offsets or default, bounds, "startingOffsets", named)

    def partitions_of(self, ranges: Iterable[tuple[MessageQueue, int, int]]) -> list[InputPartition]:
        """An input partition per non-empty range, the ranges cut up to give at least minPartitions."""
        options = self.options
        wanted = [(queue, start, end) for queue, start, end in ranges if end > start]
        return [
            InputPartition(
                QueueRange(
                    options.namesrv,
                    queue,
                    start,
                    end,
                    options.sub_expression,
                    options.fail_on_data_loss,
                    options.include_properties,
                    options.connect,
                    options.request_timeout_ms,
                    options.fetch_retries,
                    options.fetch_retry_interval_ms,
                )
            )
            for queue, start, end in split_ranges(wanted, options.min_partitions or 0)
        ]

    def check_loss(self, start: QueueOffsets, bounds: Bounds) -> QueueOffsets:
        """``start`` with offsets that are not in their queue moved to what is there (failOnDataLoss
        false), or :class:`DataLossError` naming the queue and offsets (failOnDataLoss true)."""
        checked = dict(start)
        for queue, offset in start.items():
            if queue not in bounds:
                continue
            low, high = bounds[queue]
            if offset < low or offset > high:
                moved = low if offset < low else high
                if self.options.fail_on_data_loss:
                    raise DataLossError(queue, offset, moved)
                held = f"it holds {low}..{high - 1}" if high > low else f"it is empty, its next offset {high}"
                where = "before its start" if offset < low else "past its end"
                log.warning(
                    "%s: offset %d is %s (%s); continuing at %d as failOnDataLoss is false",
                    queue, offset, where, held, moved,
                )  # fmt: skip
                checked[queue] = moved
        return checked

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition.value, QueueRange):
            return iter(())  # Spark reads one empty partition when the plan has none
        return read_range(partition.value)

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


class CometMQBatchReader(_Planner, DataSourceReader):
    """``spark.read.format("cometmq")``: the messages in [start, end), the start from startingOffsets
    (or a time), the end from endingOffsets or endingTimestamp."""

    pruning: Pruning | None = None

    def partitions(self) -> Sequence[InputPartition]:
        options, pruning = self.options, self.pruning or Pruning()
        try:
            every = self.queues()
            queues = [queue for queue in every if pruning.keeps(queue)]
            bounds = self.bounds(queues)
            start = self.starting(bounds, "earliest", every)
            if options.ending_timestamp is not None:
                end = self.offsets_at(bounds, options.ending_timestamp)
            else:
                end = self.resolve(options.ending_offsets or "latest", bounds, "endingOffsets", every)
            _check_range(start, end, bounds)
            start, end = self._narrowed(start, end, bounds, pruning)
            # Loss is only what the pushed offset and time bounds still ask for: a lost offset they
            # exclude is one Spark would have dropped anyway, and a range they empty is not read.
            start |= self.check_loss({q: start[q] for q in queues if end[q] > start[q]}, bounds)
            return self.partitions_of((q, start[q], end[q]) for q in queues)
        finally:
            self.stop()

    def _narrowed(
        self, start: QueueOffsets, end: QueueOffsets, bounds: Bounds, pruning: Pruning
    ) -> tuple[QueueOffsets, QueueOffsets]:
        """``start`` and ``end`` narrowed to the pushed offset and time bounds (an empty range where
        they leave nothing)."""
        after = {} if pruning.time_from_ms is None else self.offsets_at(bounds, pruning.time_from_ms)
        before = {} if pruning.time_to_ms is None else self.offsets_at(bounds, pruning.time_to_ms)
        first, last = dict(start), dict(end)
        for queue in start:
            last[queue] = min(end[queue], before.get(queue, end[queue]))
            if pruning.offset_to is not None:
                last[queue] = min(last[queue], pruning.offset_to)
            lowest = max(start[queue], after.get(queue, 0), pruning.offset_from or 0)
            first[queue] = min(lowest, last[queue])
        return first, last


class CometMQFilteringReader(CometMQBatchReader):
    """A batch reader that takes Spark's pushed filters (option pushFilters, with
    ``spark.sql.python.filterPushdown.enabled`` on): see :mod:`cometmq.spark._pushdown`."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.pruning = Pruning()
        return list(self.pruning.take(filters))


class CometMQStreamReader(_Planner, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("cometmq")``."""

    def __init__(self, options: ReadOptions) -> None:
        super().__init__(options)
        self._latest: QueueOffsets = {}
        self._available_now: QueueOffsets | None = None
        self._last_batch_at = time.monotonic()

    def initialOffset(self) -> dict[str, Any]:
        bounds = self.bounds(self.queues())
        return _offsets.to_json(self.starting(bounds, "latest"))

    def prepareForTriggerAvailableNow(self) -> None:
        bounds = self.bounds(self.queues())
        self._available_now = {queue: high for queue, (_, high) in bounds.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        checkpointed = _offsets.from_json(start, "the checkpointed offsets")
        bounds = self.bounds(self.queues(known={queue.topic for queue in checkpointed}))
        self._latest = {queue: high for queue, (_, high) in bounds.items()}
        begin = self.check_loss(checkpointed, bounds)
        # A queue met for the first time (a topic grown, a broker added, a new topic matching the
        # pattern) enters the offsets at its earliest offset and is read from the next batch on:
        # every batch's start then comes from the checkpoint, never from a second look at the broker.
        new = {queue: low for queue, (low, _) in bounds.items() if queue not in begin}
        target = self._latest if self._available_now is None else self._available_now
        # A queue that left the route (or appeared after an availableNow start) has nothing to read.
        available = {
            q: max(0, min(target.get(q, off), self._latest.get(q, off)) - off) for q, off in begin.items()
        }
        total = sum(available.values())
        if self._available_now is None and not new and self._too_early(total):
            return start
        budget = min(total, limit.max_rows) if isinstance(limit, ReadMaxRows) else total
        end = {q: begin[q] + n for q, n in _share(available, budget).items()} | new
        if end != checkpointed:
            self._last_batch_at = time.monotonic()
        return _offsets.to_json(end)

    def _too_early(self, available: int) -> bool:
        """minOffsetsPerTrigger: wait for more messages, but not longer than maxTriggerDelay."""
        wanted = self.options.min_offsets_per_trigger
        if wanted is None or available >= wanted:
            return False
        return (time.monotonic() - self._last_batch_at) * 1000 < self.options.max_trigger_delay_ms

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return _offsets.to_json(self._latest) if self._latest else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = _offsets.from_json(start, "the batch's start offsets")
        finish = _offsets.from_json(end, "the batch's end offsets")
        return self.partitions_of(
            (queue, begin[queue], finish[queue]) for queue in sorted(finish) if queue in begin
        )

    def commit(self, end: dict[str, Any]) -> None:
        # Spark's checkpoint is the record of progress; nothing is stored on the brokers.
        pass


class _RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read whose options were refused: every question Spark asks raises the refusal."""

    def __init__(self, error: OptionError) -> None:
        self.error = error

    def initialOffset(self) -> dict[str, Any]:
        raise self.error

    def prepareForTriggerAvailableNow(self) -> None:
        raise self.error

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        raise self.error

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise self.error


def _check_named(given: QueueOffsets, queues: Collection[MessageQueue], what: str) -> None:
    """JSON offsets (or times) must name every queue of ``queues`` and only those; a broker that
    serves none of a topic's queues is named as such."""
    missing = sorted(set(queues) - set(given))
    if missing:
        raise OptionError(f"{what} names no offset for {', '.join(map(str, missing))}")
    unknown = sorted(set(given) - set(queues))
    if not unknown:
        return
    serving: dict[str, set[str]] = {}
    for queue in queues:
        serving.setdefault(queue.topic, set()).add(queue.broker_name)
    for queue in unknown:
        brokers = serving.get(queue.topic, set())
        if queue.broker_name not in brokers:
            known = (
                f"the brokers serving it: {', '.join(sorted(brokers))}" if brokers else "no broker serves it"
            )
            raise OptionError(
                f"{what} names the broker {queue.broker_name!r}, which serves no queue of topic "
                f"{queue.topic!r} ({known})"
            )
    raise OptionError(f"{what} names queues that are not there: {', '.join(map(str, unknown))}")


def _check_range(start: QueueOffsets, end: QueueOffsets, bounds: Bounds) -> None:
    """Refuse ranges that cannot be read, as Spark's Kafka source does: an end before the start, or
    past the queue's end."""
    for queue in sorted(start):
        if end[queue] < start[queue]:
            raise OptionError(
                f"{queue}: the ending offset {end[queue]} is before the starting offset {start[queue]}"
            )
        if end[queue] > bounds[queue][1]:
            raise OptionError(
                f"{queue}: the ending offset {end[queue]} is past the end of the queue "
                f"(its next offset is {bounds[queue][1]})"
            )


def _missing_topic(topic: str, known: bool, retries: int) -> str:
    if known:
        return (
            f"no broker serves topic {topic!r} any more (asked {retries + 1} times): it was deleted, or "
            f"every broker serving it is down or re-registering with the name server after a restart. "
            f"Restart the query once it is served again, raise fetchOffset.numRetries and "
            f"fetchOffset.retryIntervalMs to wait longer, or set failOnMissingTopic=false to wait for it"
        )
    return (
        f"topic {topic!r} does not exist (no broker serves it): check its name, or set "
        f"failOnMissingTopic=false to wait for it to be created"
    )


def split_ranges(
    ranges: Sequence[tuple[MessageQueue, int, int]], min_partitions: int
) -> list[tuple[MessageQueue, int, int]]:
    """``ranges`` (none empty) cut into about ``min_partitions`` pieces when there are fewer ranges:
    each into a number of pieces in proportion to its size (rounded, at least one), of sizes
    differing by one at most, as Spark's Kafka source cuts its offset ranges for minPartitions."""
    total = sum(end - start for _, start, end in ranges)
    if len(ranges) >= min_partitions or total == 0:
        return list(ranges)
    pieces: list[tuple[MessageQueue, int, int]] = []
    for queue, start, end in ranges:
        size = end - start
        parts = min(size, max(1, round(size * min_partitions / total)))
        step, extra = divmod(size, parts)
        at = start
        for part in range(parts):
            following = at + step + (1 if part < extra else 0)
            pieces.append((queue, at, following))
            at = following
    return pieces


def _share(available: dict[MessageQueue, int], budget: int) -> dict[MessageQueue, int]:
    """Split ``budget`` messages over the queues in proportion to what each has available (largest
    remainder, so the shares add up to the budget exactly)."""
    total = sum(available.values())
    if budget >= total:
        return dict(available)
    shares = {q: n * budget // total for q, n in available.items()}
    left = budget - sum(shares.values())
    by_remainder = sorted(available, key=lambda q: (-(available[q] * budget % total), q))
    for queue in by_remainder[:left]:
        shares[queue] += 1
    return shares


@dataclass
class _Written(WriterCommitMessage):
    partition: int
    messages: int


class _WriterBase:
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def _write(self, job: str | None, batches: Iterator[pa.RecordBatch]) -> _Written:
        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        query = context.getLocalProperty("sql.streaming.queryId") if context is not None else None
        batch = 0
        if query is not None:
            # A streaming write, or a batch write inside foreachBatch: ids follow the query and its
            # micro-batch, so a replayed batch resends with the same ids. The topic option tells
            # two writes of one micro-batch apart.
            assert context is not None
            job = f"{query}/{self.options.topic or ''}"
            batch = int(context.getLocalProperty("streaming.sql.batchId") or 0)
        sent = write_batches(self.options, WriteTarget(job or "unknown", batch, partition), batches)
        return _Written(partition, sent)


class CometMQBatchWriter(_WriterBase, DataSourceArrowWriter):
    """``df.write.format("cometmq")``."""

    def __init__(self, options: WriteOptions, job: str) -> None:
        super().__init__(options)
        self.job = job

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self._write(self.job, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("wrote %d messages", sum(m.messages for m in messages if isinstance(m, _Written)))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("write aborted; messages already sent stay in their topics")


class CometMQStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """``df.writeStream.format("cometmq")``."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self._write(None, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("micro-batch %d aborted; messages already sent stay in their topics", batchId)
