"""Writing DataFrame rows to topics (runs in Spark's executors).

Every message gets a deterministic unique key (UNIQ_KEY, the id RocketMQ clients show as the message
id) derived from (query or job, batch, partition, row): a task that Spark retries resends its rows
with the same ids, so a consumer can recognise the copies. The sink is at-least-once, as Spark's Kafka
sink is: the broker stores a resent message again.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from cometmq.client.blocking import new_event_loop
from cometmq.client.message import Message
from cometmq.client.producer import Producer
from cometmq.errors import OptionError
from cometmq.spark._options import WriteOptions

__all__ = ["WriteTarget", "message_id", "write_batches"]

# One SEND_BATCH_MESSAGE carries at most this many messages or bytes; a few are in flight at once.
BATCH_MAX_MESSAGES = 256
BATCH_MAX_BYTES = 1024 * 1024
SENDS_IN_FLIGHT = 4

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
    row = 0
    try:
        for batch in batches:
            for _topic, messages in _messages(batch, options, target, row):
                for chunk in _chunks(messages):
                    while len(in_flight) >= SENDS_IN_FLIGHT:
                        done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                        for task in done:
                            task.result()
                    in_flight.add(asyncio.ensure_future(producer.send_batch(chunk)))
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
