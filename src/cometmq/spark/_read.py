"""Reading one planned offset range of one queue into Arrow batches (runs in Spark's executors)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections import deque
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from cometmq.client import MessageQueue, PullResult, PullStatus
from cometmq.errors import CometMQError, DataLossError, ProtocolError, QueueNotRoutedError, RecordError
from cometmq.protocol.subscription import SubscriptionData
from cometmq.spark._cluster import READER_GROUP, Cluster
from cometmq.spark._columns import decode_batch
from cometmq.spark._options import (
    DEFAULT_FETCH_RETRIES,
    DEFAULT_FETCH_RETRY_INTERVAL_MS,
    DEFAULT_REQUEST_TIMEOUT_MS,
    ConnectOptions,
)
from cometmq.spark._schema import ARROW_SCHEMA

__all__ = ["QueueRange", "read_range"]

log = logging.getLogger("cometmq.spark")

# The broker answers at most 1024 messages and 256 KiB per pull; several pull bodies are decoded at
# once (up to this many bytes) so Arrow's per-call costs are shared by several thousand rows.
PULL_MAX_MESSAGES = 1024
PULLS_AHEAD = 3
DECODE_CHUNK_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Offsets ``[start, end)`` of one queue, and how to read them (an InputPartition's payload)."""

    namesrv: str
    queue: MessageQueue
    start: int
    end: int
    sub_expression: str
    fail_on_data_loss: bool
    include_properties: bool
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    retries: int = DEFAULT_FETCH_RETRIES
    retry_interval_ms: int = DEFAULT_FETCH_RETRY_INTERVAL_MS


def read_range(part: QueueRange) -> Iterator[pa.RecordBatch]:
    """The rows at offsets ``[part.start, part.end)`` of ``part.queue`` that match its tag filter,
    exactly, in offset order."""
    cluster = Cluster(
        part.namesrv,
        part.connect,
        timeout_s=part.request_timeout_ms / 1000,
        retries=part.retries,
        retry_interval_s=part.retry_interval_ms / 1000,
    )
    batches = _read(cluster, part)
    try:
        cluster.run_retrying(lambda: _check_routed(cluster, part.queue), f"finding {part.queue}")
        while True:
            try:
                batch: pa.RecordBatch = cluster.run(batches.__anext__())
            except StopAsyncIteration:
                return
            yield batch
    finally:
        cluster.run(batches.aclose())
        cluster.close()


async def _read(cluster: Cluster, part: QueueRange) -> AsyncGenerator[pa.RecordBatch, None]:
    admin, queue, end = cluster.admin, part.queue, part.end
    subscription = SubscriptionData.from_expression(queue.topic, part.sub_expression)
    tags = subscription.tags
    filtered = bool(tags)

    def pull_at(offset: int, count: int) -> asyncio.Task[PullResult]:
        # Answered at once (no long polling): the range was planned from offsets that exist. A pull
        # with no answer in time is asked again, as the driver's questions are (fetchOffset.*).
        return asyncio.ensure_future(
            cluster.retrying(
                lambda: admin.pull_records(
                    queue, offset, count, group=READER_GROUP, subscription=subscription
                ),
                f"pulling {queue} at offset {offset}",
            )
        )

    # Pulls in flight, in offset order, each as (first offset, planned end, task). Without a tag
    # filter the broker answers consecutive offsets, so the next pulls can go out before this one's
    # answer is in: each asks for as many messages as the last full answer held (what the broker's
    # 256 KiB cap lets through), and an answer that stops short is completed by a pull of the rest
    # before the pulls after it are used. With a filter, one pull at a time.
    pending: deque[tuple[int, int, asyncio.Task[PullResult]]] = deque()
    per_answer = 0

    def pull_ahead(offset: int) -> None:
        depth = PULLS_AHEAD if per_answer and not filtered else 1
        at = pending[-1][1] if pending else offset
        while len(pending) < depth and at < end:
            count = min(per_answer or PULL_MAX_MESSAGES, PULL_MAX_MESSAGES, end - at)
            pending.append((at, at + count, pull_at(at, count)))
            at += count

    offset = chunk_start = part.start
    chunk: list[bytes | memoryview] = []
    chunk_bytes = 0
    pull_ahead(offset)
    try:
        while pending:
            asked_from, planned_end, task = pending.popleft()
            result = await task
            skip_to = _lost_from(result, offset, end, filtered)
            if skip_to is not None:
                _lost(part, offset, skip_to)
                if chunk and (batch := _decode(b"".join(chunk), part, chunk_start, tags)).num_rows:
                    yield batch
                chunk, chunk_bytes = [], 0
                chunk_start = skip_to
            if result.status is PullStatus.FOUND:
                chunk.append(result.body)
                chunk_bytes += len(result.body)
                next_offset = result.next_begin_offset
                answered, asked = next_offset - asked_from, planned_end - asked_from
                # Unfiltered answers show the broker's cap; a fill-in pull that came back whole does not.
                if not filtered and (answered < asked or asked >= per_answer):
                    per_answer = answered
            else:
                next_offset = skip_to if skip_to is not None else result.next_begin_offset
            if next_offset <= offset:
                raise ProtocolError(f"{queue}: the broker did not move past offset {offset}")
            offset = min(next_offset, end)
            if pending and offset != planned_end:
                if skip_to is None and result.status is PullStatus.FOUND and offset < planned_end:
                    pending.appendleft((offset, planned_end, pull_at(offset, planned_end - offset)))
                else:  # the answer jumped: the pulls ahead start at the wrong offsets
                    await _cancel([task for _, _, task in pending])
                    pending.clear()
            pull_ahead(offset)  # in flight while this chunk is decoded
            if chunk and (chunk_bytes >= DECODE_CHUNK_BYTES or offset >= end):
                if (batch := _decode(b"".join(chunk), part, chunk_start, tags)).num_rows:
                    yield batch
                chunk, chunk_bytes = [], 0
            if not chunk:
                chunk_start = offset
    finally:
        await _cancel([task for _, _, task in pending])


async def _check_routed(cluster: Cluster, queue: MessageQueue) -> None:
    """QueueNotRoutedError saying why, unless the name server routes ``queue`` to a broker now."""
    routed = await cluster.admin.readable_queues(queue.topic)
    if queue in routed:
        return
    if not routed:
        why = "no broker serves the topic now: it was deleted, or every broker serving it is down or"
    else:
        why = f"broker {queue.broker_name!r} does not serve this queue now: it is down, or"
    raise QueueNotRoutedError(
        f"{queue}: {why} re-registering with the name server after a restart. Spark retries the task; "
        f"raise fetchOffset.numRetries and fetchOffset.retryIntervalMs to wait longer for it"
    )


async def _cancel(tasks: list[asyncio.Task[PullResult]]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, CometMQError):
            await task


def _lost(part: QueueRange, first: int, resume: int) -> None:
    """Offsets ``[first, resume)`` of the range are gone: fail, or say so and go on (failOnDataLoss)."""
    if part.fail_on_data_loss:
        raise DataLossError(part.queue, first, resume)
    log.warning(
        "%s: offsets from %d to %d are gone (retention?); skipped as failOnDataLoss is false",
        part.queue, first, resume - 1,
    )  # fmt: skip


def _lost_from(result: PullResult, offset: int, end: int, filtered: bool) -> int | None:
    """Where reading must continue if messages from ``offset`` on are gone; None if none are."""
    if offset < result.min_offset:
        return min(result.min_offset, end)
    if result.status is PullStatus.OFFSET_ILLEGAL or result.status is PullStatus.NO_NEW_MSG:
        # The range was planned below the queue's end, so the queue shrank (deleted and re-created?).
        return end
    if result.status is PullStatus.NO_MATCHED_MSG and not filtered:
        return max(result.next_begin_offset, offset + 1)
    return None


def _decode(data: bytes, part: QueueRange, expected_first: int, tags: frozenset[str]) -> pa.RecordBatch:
    queue = part.queue
    try:
        decoded = decode_batch(
            data,
            queue.topic,
            queue.broker_name,
            queue.queue_id,
            end=part.end,
            tags=tags,
            include_properties=part.include_properties,
            unwrap_from=expected_first,
        )
    except (RecordError, zlib.error) as exc:
        raise ProtocolError(f"undecodable pull body from {queue}: {exc}") from exc
    if decoded is None:
        return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)
    if not tags and (decoded.first != expected_first or decoded.last - decoded.first + 1 != decoded.count):
        # Unfiltered pulls answer consecutive offsets: a hole is a message deleted under us.
        _lost(part, *decoded.first_gap(expected_first))
    return decoded.batch
