"""The ``cometmq`` data source: Spark's entry points, planning on the driver.

A streaming read plans each micro-batch as one input partition per queue (broker name, queue id)
holding the offsets ``[start, end)`` to read; the offsets Spark checkpoints are those JSON maps, so a
micro-batch replayed after a crash reads exactly the same messages again.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
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
from cometmq.errors import DataLossError, OptionError
from cometmq.spark import _offsets
from cometmq.spark._cluster import Cluster
from cometmq.spark._offsets import EARLIEST, LATEST, QueueOffsets
from cometmq.spark._options import ReadOptions, WriteOptions
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
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return CometMQBatchReader(ReadOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return CometMQStreamReader(ReadOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        options = WriteOptions.parse(self.options)
        check_columns(schema.fieldNames(), options)
        return CometMQBatchWriter(options, job=uuid.uuid4().hex)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        options = WriteOptions.parse(self.options)
        check_columns(schema.fieldNames(), options)
        return CometMQStreamWriter(options)


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
            self._cluster = Cluster(self.options.namesrv, self.options.connect)
        return self._cluster

    def queues(self) -> list[MessageQueue]:
        options = self.options
        return self.cluster.run(self.cluster.queues(options.topics, options.topic_pattern))

    def bounds(self, queues: Sequence[MessageQueue]) -> dict[MessageQueue, tuple[int, int]]:
        return self.cluster.run(self.cluster.bounds(queues))

    def resolve(self, spec: str, bounds: dict[MessageQueue, tuple[int, int]], what: str) -> QueueOffsets:
        """Offsets per queue from ``earliest``/``latest``/JSON (with -2/-1), for every queue in
        ``bounds``; JSON must name them all (Spark's Kafka source asks the same)."""
        if spec in ("earliest", "latest"):
            pick = 0 if spec == "earliest" else 1
            return {queue: bound[pick] for queue, bound in bounds.items()}
        given = _offsets.from_json(spec, what)
        missing = sorted(set(bounds) - set(given))
        if missing:
            raise OptionError(f"{what} names no offset for {', '.join(map(str, missing))}")
        unknown = sorted(set(given) - set(bounds))
        if unknown:
            raise OptionError(f"{what} names queues that are not there: {', '.join(map(str, unknown))}")
        return {
            queue: bounds[queue][0] if off == EARLIEST else bounds[queue][1] if off == LATEST else off
            for queue, off in given.items()
        }

    def starting(self, bounds: dict[MessageQueue, tuple[int, int]], default: str) -> QueueOffsets:
        options = self.options
        if options.starting_timestamp is not None:
            return self.cluster.run(self.cluster.offsets_at(bounds, options.starting_timestamp))
        return self.resolve(options.starting_offsets or default, bounds, "startingOffsets")

    def partition(self, queue: MessageQueue, start: int, end: int) -> InputPartition:
        options = self.options
        return InputPartition(
            QueueRange(
                options.namesrv,
                queue,
                start,
                end,
                options.sub_expression,
                options.fail_on_data_loss,
                options.include_properties,
                options.connect,
            )
        )

    def check_loss(self, start: QueueOffsets, bounds: dict[MessageQueue, tuple[int, int]]) -> QueueOffsets:
        """``start`` with offsets retention removed moved up to what is left (failOnDataLoss=false),
        or :class:`DataLossError` naming the queue and offsets (failOnDataLoss=true)."""
        checked = dict(start)
        for queue, offset in start.items():
            if queue not in bounds:
                continue
            low, high = bounds[queue]
            if offset < low or offset > high:
                moved = low if offset < low else high
                if self.options.fail_on_data_loss:
                    raise DataLossError(queue, offset, moved)
                log.warning(
                    "%s: offset %d is not in the queue (it holds %d..%d); continuing at %d as "
                    "failOnDataLoss is false", queue, offset, low, high - 1, moved,
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
    """``spark.read.format("cometmq")``: the messages in [startingOffsets, endingOffsets)."""

    def partitions(self) -> Sequence[InputPartition]:
        try:
            queues = self.queues()
            bounds = self.bounds(queues)
            start = self.check_loss(self.starting(bounds, "earliest"), bounds)
            end = self.resolve(self.options.ending_offsets, bounds, "endingOffsets")
            return [self.partition(q, start[q], end[q]) for q in queues if end[q] > start[q]]
        finally:
            self.stop()


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
        bounds = self.bounds(self.queues())
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
        return [
            self.partition(queue, begin[queue], finish[queue])
            for queue in sorted(finish)
            if queue in begin and finish[queue] > begin[queue]
        ]

    def commit(self, end: dict[str, Any]) -> None:
        # Spark's checkpoint is the record of progress; nothing is stored on the brokers.
        pass


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
