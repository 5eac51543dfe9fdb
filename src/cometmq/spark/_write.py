"""Writing DataFrame rows to topics (runs in Spark's executors).

Every message gets a deterministic unique key (UNIQ_KEY, the id RocketMQ clients show as the message
id) derived from (query or job, batch, partition, row), and goes to a queue chosen from that key among
the topic's writable queues. A task that Spark retries, or a micro-batch replayed after a crash,
resends each row with the same id to the same queue, so to the same broker, while the topic's route is
unchanged; a failed send is retried on its queue, never moved to another broker. Without
deduplication the sink is at least once, as Spark's Kafka sink is, and the copies share their id; with
deduplication on for the topic, the broker that holds a row's first copy answers its resends without
storing them again, and the sink writes each row exactly once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from cometmq.client.blocking import new_event_loop
from cometmq.client.message import Message, MessageQueue
from cometmq.client.producer import RETRY_RESPONSE_CODES, Producer
from cometmq.errors import (
    BrokerError,
    ConnectionClosedError,
    OptionError,
    QueueNotRoutedError,
    RemotingTimeoutError,
)
from cometmq.spark._options import WriteOptions

__all__ = ["WriteTarget", "message_id", "queue_of", "write_batches"]

log = logging.getLogger("cometmq.spark")

# One SEND_BATCH_MESSAGE carries at most this many messages or bytes; a few are in flight at once.
BATCH_MAX_MESSAGES = 256
BATCH_MAX_BYTES = 1024 * 1024
SENDS_IN_FLIGHT = 4
# A chunk whose send failed in a way that may pass (no answer, a broker not serving) is sent to its
# queue again: 1 + RocketMQ's retryTimesWhenSendFailed attempts, with a pause between them.
SEND_ATTEMPTS = 3
RETRY_PAUSE_S = 1.0

WRITABLE_COLUMNS = ("body", "topic", "tags", "keys", "properties")


@dataclass(frozen=True, slots=True)
class WriteTarget:
    """Which write this is: ``job`` is the streaming query id (or a batch write's own id), ``batch``
    the micro-batch id (0 for a batch write), ``partition`` Spark's partition id."""

    job: str
    batch: int
    partition: int


def message_id(target: WriteTarget, row: int) -> str:
    """The UNIQ_KEY of row ``row`` of a write: 32 hex digits, the same on every attempt."""
    key = f"{target.job}/{target.batch}/{target.partition}/{row}".encode()
    return hashlib.blake2b(key, digest_size=16).hexdigest().upper()


def queue_of(key: str, queues: Sequence[MessageQueue]) -> MessageQueue:
    """The queue the row whose UNIQ_KEY is ``key`` goes to, among a topic's writable queues in route
    order (by broker name, then queue id): the same queue, so the same broker, on every attempt while
    the route is unchanged. The key is a hash, so rows spread evenly over the queues."""
    return queues[int(key, 16) % len(queues)]


def check_columns(names: list[str], options: WriteOptions) -> None:
    """Refuse a DataFrame the sink cannot write, before any task runs."""
    if "body" not in names:
        raise OptionError("the DataFrame written to CometMQ needs a 'body' column (binary or string)")
    if "topic" not in names and options.topic is None:
        raise OptionError("give the 'topic' option or a 'topic' column")
    unknown = sorted(set(names) - set(WRITABLE_COLUMNS))
    if unknown:
        raise OptionError(f"columns {unknown} cannot be written; CometMQ takes {', '.join(WRITABLE_COLUMNS)}")


def write_batches(options: WriteOptions, target: WriteTarget, batches: Iterator[pa.RecordBatch]) -> int:
    """Send every row of ``batches``; the number of messages sent."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(_write(options, target, batches))


async def _write(options: WriteOptions, target: WriteTarget, batches: Iterator[pa.RecordBatch]) -> int:
    producer = Producer(options.producer_group, options.namesrv, **options.connect.client_options())
    await producer.start()
    in_flight: set[asyncio.Future[Any]] = set()
    # Each topic's queues as routed when the task first writes to it, kept for the whole task.
    topic_queues: dict[str, list[MessageQueue]] = {}
    row = 0
    try:
        for batch in batches:
            for topic, messages in _messages(batch, options, target, row):
                queues = topic_queues.get(topic)
                if queues is None:
                    queues = topic_queues[topic] = await producer.fetch_publish_queues(topic)
                for queue, queued in _by_queue(messages, queues).items():
                    for chunk in _chunks(queued):
                        while len(in_flight) >= SENDS_IN_FLIGHT:
                            done, in_flight = await asyncio.wait(
                                in_flight, return_when=asyncio.FIRST_COMPLETED
                            )
                            for task in done:
                                task.result()
                        in_flight.add(asyncio.ensure_future(_send(producer, queue, chunk)))
            row += batch.num_rows
        for task in asyncio.as_completed(in_flight):
            await task
        in_flight.clear()
    finally:
        for task in in_flight:
            task.cancel()
        await producer.close()
    return row


def _messages(
    batch: pa.RecordBatch, options: WriteOptions, target: WriteTarget, first_row: int
) -> Iterator[tuple[str, list[Message]]]:
    """The batch's rows as messages, grouped by topic (a batch send has one topic)."""
    columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    n = batch.num_rows
    none: list[Any] = [None] * n
    bodies = columns["body"]
    topics = columns.get("topic", none)
    tags = columns.get("tags", none)
    keys = columns.get("keys", none)
    props = columns.get("properties", none)
    by_topic: dict[str, list[Message]] = {}
    for i in range(n):
        body = bodies[i]
        if body is None:
            raise OptionError(f"row {first_row + i}: body is null")
        topic = topics[i] or options.topic
        if not topic:
            raise OptionError(f"row {first_row + i}: topic is null and no 'topic' option is set")
        properties = dict(props[i] or ())
        properties["UNIQ_KEY"] = message_id(target, first_row + i)
        by_topic.setdefault(topic, []).append(
            Message(
                topic,
                body.encode() if isinstance(body, str) else body,
                tags=tags[i] or None,
                keys=keys[i] or None,
                properties=properties,
            )
        )
    return iter(by_topic.items())


async def _send(producer: Producer, queue: MessageQueue, chunk: list[Message]) -> None:
    """Send ``chunk`` to ``queue``, and to the same queue again after a failure that may pass: a resend
    to another broker would escape the deduplication of the one that may hold the chunk already."""
    for attempt in range(1, SEND_ATTEMPTS + 1):
        try:
            await producer.send_batch(chunk, queue=queue)
            return
        except (BrokerError, ConnectionClosedError, RemotingTimeoutError, QueueNotRoutedError) as exc:
            if isinstance(exc, BrokerError) and exc.code not in RETRY_RESPONSE_CODES:
                raise
            if attempt == SEND_ATTEMPTS:
                exc.add_note(f"{len(chunk)} messages to {queue}: {SEND_ATTEMPTS} attempts failed")
                raise
            log.info("sending %d messages to %s failed (%s); trying that queue again", len(chunk), queue, exc)
        await asyncio.sleep(RETRY_PAUSE_S)


def _by_queue(messages: list[Message], queues: Sequence[MessageQueue]) -> dict[MessageQueue, list[Message]]:
    """``messages`` (of one topic, each with its UNIQ_KEY) by the queue each goes to, in order."""
    by_queue: dict[MessageQueue, list[Message]] = {}
    for message in messages:
        by_queue.setdefault(queue_of(message.properties["UNIQ_KEY"], queues), []).append(message)
    return by_queue


def _chunks(messages: list[Message]) -> Iterator[list[Message]]:
    chunk: list[Message] = []
    size = 0
    for msg in messages:
        if chunk and (len(chunk) >= BATCH_MAX_MESSAGES or size + len(msg.body) > BATCH_MAX_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(msg)
        size += len(msg.body)
    if chunk:
        yield chunk
