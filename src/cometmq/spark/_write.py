"""Writing DataFrame rows to topics (runs in Spark's executors).

Every message gets a deterministic unique key (UNIQ_KEY, the id RocketMQ clients show as the message
id) derived from (query or job, batch, partition, row). A row with a ``sharding_key`` goes to the queue
that key hashes to (RocketMQ's SelectMessageQueueByHash, as a Java producer's orderly send picks it);
any other row to a queue chosen from its id. Either way, among the topic's writable queues in route
order, so a task that Spark retries, or a micro-batch replayed after a crash, resends each row with the
same id to the same queue, so to the same broker, while the topic's route is unchanged; a failed send
is retried on its queue, never moved to another broker. Sends to one queue go one after the other (a
chunk is sent, and retried, before the next chunk of that queue leaves), so the rows of one sharding
key keep their order within a Spark partition. Without deduplication the sink is at least once, as
Spark's Kafka sink is, and the copies share their id; with deduplication on for the topic, the broker
that holds a row's first copy answers its resends without storing them again, and the sink writes
each row exactly once.
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
from cometmq.client.producer import RETRY_RESPONSE_CODES, Producer, select_by_hash
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

# One SEND_BATCH_MESSAGE carries at most this many messages or bytes; a few are in flight at once
# (to different queues: a queue's sends go one after the other).
BATCH_MAX_MESSAGES = 256
BATCH_MAX_BYTES = 1024 * 1024
SENDS_IN_FLIGHT = 4

WRITABLE_COLUMNS = ("body", "topic", "tags", "keys", "properties", "sharding_key", "delay_level")


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


def queue_of(key: str, queues: Sequence[MessageQueue], sharding_key: str | None = None) -> MessageQueue:
    """The queue the row whose UNIQ_KEY is ``key`` goes to, among a topic's writable queues in route
    order (by broker name, then queue id): the same queue, so the same broker, on every attempt while
    the route is unchanged. A row with a ``sharding_key`` goes where :func:`select_by_hash` puts that
    key (Java's String.hashCode modulo the queue count), so all rows of a key share a queue; the
    others spread evenly over the queues, their id being a hash."""
    if sharding_key:
        return select_by_hash(queues, sharding_key)
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
    producer = Producer(
        options.producer_group,
        options.namesrv,
        send_timeout=options.send_timeout_ms / 1000,
        **options.connect.client_options(),
    )
    await producer.start()
    in_flight: set[asyncio.Future[Any]] = set()
    # The last send to each queue: the next one to that queue starts when it is done.
    last_send: dict[MessageQueue, asyncio.Future[None]] = {}
    # Each topic's queues as routed when the task first writes to it, kept for the whole task.
    topic_queues: dict[str, list[MessageQueue]] = {}
    row = 0
    try:
        for batch in batches:
            for topic, messages, sharding_keys in _messages(batch, options, target, row):
                queues = topic_queues.get(topic)
                if queues is None:
                    queues = topic_queues[topic] = await producer.fetch_publish_queues(topic)
                for queue, queued in _by_queue(messages, queues, sharding_keys).items():
                    for chunk in _chunks(queued):
                        while len(in_flight) >= SENDS_IN_FLIGHT:
                            done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                            for task in done:
                                task.result()
                            in_flight -= done
                        send = _send(producer, queue, chunk, options, after=last_send.get(queue))
                        last_send[queue] = task = asyncio.ensure_future(send)
                        in_flight.add(task)
            row += batch.num_rows
        for task in asyncio.as_completed(in_flight):
            await task
        in_flight.clear()
    finally:
        for task in in_flight:
            task.cancel()
        # Every outcome is taken, so that the other sends' failures after the first are not logged
        # as "Task exception was never retrieved".
        await asyncio.gather(*in_flight, return_exceptions=True)
        await producer.close()
    return row


def _messages(
    batch: pa.RecordBatch, options: WriteOptions, target: WriteTarget, first_row: int
) -> Iterator[tuple[str, list[Message], list[str | None]]]:
    """The batch's rows as messages, grouped by topic (a batch send has one topic), with each
    message's sharding key (None for none)."""
    schema = batch.schema
    for name, is_type, kind in (
        ("sharding_key", pa.types.is_string, "a string"),
        ("delay_level", pa.types.is_integer, "an integer"),
    ):
        if name in schema.names and not is_type(schema.field(name).type):
            raise OptionError(f"the '{name}' column must be {kind}, not {schema.field(name).type}")
    columns = {name: batch.column(name).to_pylist() for name in schema.names}
    n = batch.num_rows
    none: list[Any] = [None] * n
    bodies = columns["body"]
    topics = columns.get("topic", none)
    tags = columns.get("tags", none)
    keys = columns.get("keys", none)
    props = columns.get("properties", none)
    sharding_keys = columns.get("sharding_key", none)
    delay_levels = columns.get("delay_level", none)
    by_topic: dict[str, tuple[list[Message], list[str | None]]] = {}
    for i in range(n):
        body = bodies[i]
        if body is None:
            raise OptionError(f"row {first_row + i}: body is null")
        topic = topics[i] or options.topic
        if not topic:
            raise OptionError(f"row {first_row + i}: topic is null and no 'topic' option is set")
        properties = dict(props[i] or ())
        properties["UNIQ_KEY"] = message_id(target, first_row + i)
        topic_messages, topic_sharding_keys = by_topic.setdefault(topic, ([], []))
        topic_messages.append(
            Message(
                topic,
                body.encode() if isinstance(body, str) else body,
                tags=tags[i] or None,
                keys=keys[i] or None,
                properties=properties,
                delay_level=delay_levels[i] or 0,
            )
        )
        topic_sharding_keys.append(sharding_keys[i] or None)
    return ((topic, messages, keys) for topic, (messages, keys) in by_topic.items())


async def _send(
    producer: Producer,
    queue: MessageQueue,
    chunk: list[Message],
    options: WriteOptions,
    after: asyncio.Future[None] | None = None,
) -> None:
    """Once ``after`` (the previous send to ``queue``) is done, send ``chunk`` to ``queue``, and to the
    same queue again after a failure that may pass, up to ``options.retries`` times: a resend to
    another broker would escape the deduplication of the one that may hold the chunk already."""
    if after is not None:
        await after
    attempts = options.retries + 1
    for attempt in range(1, attempts + 1):
        try:
            if len(chunk) == 1:  # a delayed message always goes alone: batches cannot be delayed
                await producer.send(chunk[0], queue=queue)
            else:
                await producer.send_batch(chunk, queue=queue)
            return
        except (BrokerError, ConnectionClosedError, RemotingTimeoutError, QueueNotRoutedError) as exc:
            if isinstance(exc, BrokerError) and exc.code not in RETRY_RESPONSE_CODES:
                raise
            if attempt == attempts:
                exc.add_note(f"{len(chunk)} messages to {queue}: {attempts} attempts failed")
                raise
            log.info("sending %d messages to %s failed (%s); trying that queue again", len(chunk), queue, exc)
        await asyncio.sleep(options.retry_backoff_ms / 1000)


def _by_queue(
    messages: list[Message], queues: Sequence[MessageQueue], sharding_keys: Sequence[str | None] | None = None
) -> dict[MessageQueue, list[Message]]:
    """``messages`` (of one topic, each with its UNIQ_KEY; ``sharding_keys`` beside them) by the queue
    each goes to, in order."""
    by_queue: dict[MessageQueue, list[Message]] = {}
    keys = sharding_keys if sharding_keys is not None else [None] * len(messages)
    for message, sharding_key in zip(messages, keys, strict=True):
        queue = queue_of(message.properties["UNIQ_KEY"], queues, sharding_key)
        by_queue.setdefault(queue, []).append(message)
    return by_queue


def _chunks(messages: list[Message]) -> Iterator[list[Message]]:
    """``messages`` in order, cut into batches within both limits; a delayed message goes alone."""
    chunk: list[Message] = []
    size = 0
    for msg in messages:
        if chunk and (
            len(chunk) >= BATCH_MAX_MESSAGES or size + len(msg.body) > BATCH_MAX_BYTES or msg.delay_level
        ):
            yield chunk
            chunk, size = [], 0
        chunk.append(msg)
        size += len(msg.body)
        if msg.delay_level:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk
