"""Message trace on the client side, as RocketMQ's ``enableMsgTrace``: the records of sends, consumed
batches and transaction ends are queued here and sent, batched, to the trace topic by a producer of
their own (docs/client.md#message-trace; the record format is :mod:`cometmq.protocol.trace`).

Tracing never slows or fails the traced work: a record is put on a bounded queue without waiting,
and one that finds it full is dropped and counted (:attr:`TraceDispatcher.dropped`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from cometmq.client._msgid import UniqueIdGenerator
from cometmq.client.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    Message,
    ReceivedMessage,
    SendResult,
    SendStatus,
)
from cometmq.errors import CometMQError
from cometmq.protocol.naming import TRACE_TOPIC
from cometmq.protocol.record import MAX_PROPERTIES_SIZE
from cometmq.protocol.trace import (
    DEFAULT_REGION,
    ConsumeReturnType,
    MessageType,
    TraceBean,
    TraceContext,
    TraceType,
    encode_trace_context,
    trace_keys,
)

if TYPE_CHECKING:
    from cometmq.client.producer import Producer

__all__ = ["TraceDispatcher", "now_ms", "trace_group"]

log = logging.getLogger("cometmq.client")

GROUP_PREFIX = "_INNER_TRACE_PRODUCER"  # TraceConstants.GROUP_NAME_PREFIX
# Entries waiting to be sent (AsyncTraceDispatcher's traceContextQueue): one per send or consumed
# batch, however many messages it holds.
QUEUE_SIZE = 1024
# A trace message is sent once its records reach this many bytes (RocketMQ: its 128000-byte
# maxMessageSize less 10000), or once its first record is WAIT_S old.
MAX_BODY = 118_000
WAIT_S = 0.5
# The keys of a trace message (every traced message's id, in UTF-8 bytes with their separators) stay
# within the properties a stored message may have, leaving room for its other properties.
MAX_KEYS_BYTES = MAX_PROPERTIES_SIZE - 2_048
# At close, the records still queued get at most this long to be sent (Java's flush waits 500 ms).
CLOSE_MAX_S = 1.0
_MSG_REGION = "MSG_REGION"
_TRACE_ON = "TRACE_ON"
_group_numbers = itertools.count(1)


def trace_group(group: str, kind: str) -> str:
    """The group of the producer sending a client's trace records (AsyncTraceDispatcher's
    ``_INNER_TRACE_PRODUCER-<group>-<PRODUCE|CONSUME>-<n>``)."""
    return f"{GROUP_PREFIX}-{group}-{kind}-{next(_group_numbers)}"


def now_ms() -> int:
    return int(time.time() * 1000)


class TraceDispatcher:
    """Batches trace records into messages of ``topic`` sent by ``producer`` (started and closed
    with the dispatcher; it must not trace itself).

    ``queue_size`` bounds the records waiting; ``append`` drops a record that finds the queue full.
    """

    def __init__(self, producer: Producer, topic: str | None, *, queue_size: int = QUEUE_SIZE) -> None:
        self.topic = topic or TRACE_TOPIC
        self.dropped = 0  # records dropped: the queue was full, or the dispatcher closed
        self.failed = 0  # trace messages that could not be sent
        self._producer = producer
        # A send's Pub records come as one list, whatever the size of its batch.
        self._queue: asyncio.Queue[TraceContext | list[TraceContext]] = asyncio.Queue(queue_size)
        self._closed = False
        self._records: list[bytes] = []
        self._keys: set[str] = set()
        self._size = 0
        self._keys_size = 0
        self._task: asyncio.Task[None] | None = None
        self.request_ids = UniqueIdGenerator()  # a consumed batch's records share one (TraceContext's)

    async def start(self) -> None:
        await self._producer.start()
        self._task = asyncio.create_task(self._run())

    async def close(self, timeout: float) -> None:
        """Send what is queued, then close the producer, waiting up to ``timeout`` s (at most
        CLOSE_MAX_S) for its sends. Records appended later are dropped."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while not self._queue.empty():
            self._add(self._queue.get_nowait())
        self._send()
        await self._producer.close(min(max(timeout, 0.0), CLOSE_MAX_S))

    @property
    def waiting(self) -> int:
        """Entries (a record, or a send's records) queued and not yet taken into a trace message."""
        return self._queue.qsize()

    def append(self, entry: TraceContext | list[TraceContext]) -> None:
        """Queue *entry* (a record, or the records of one send) to be sent, or drop it (counted) when
        the queue is full or the dispatcher closed: never waits."""
        if not self._closed:
            try:
                self._queue.put_nowait(entry)
                return
            except asyncio.QueueFull:
                pass
        before = self.dropped
        self.dropped += len(entry) if isinstance(entry, list) else 1
        if before == 0 or before // 1000 != self.dropped // 1000:
            why = "the dispatcher is closed" if self._closed else "the trace queue is full"
            log.warning("message trace: %d record(s) dropped, %s", self.dropped, why)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        get = self._queue.get
        while True:
            self._add(await get())
            try:
                async with asyncio.timeout_at(loop.time() + WAIT_S):
                    while self._size < MAX_BODY:
                        self._add(await get())
            except TimeoutError:
                pass
            self._send()

    def _add(self, entry: TraceContext | list[TraceContext]) -> None:
        """Take *entry* into the trace message being filled; a consumed batch's records bean by bean,
        so that a large batch spreads over several trace messages."""
        for ctx in entry if isinstance(entry, list) else (entry,):
            if len(ctx.beans) > 1 and ctx.trace_type in (TraceType.SubBefore, TraceType.SubAfter):
                for bean in ctx.beans:
                    self._add_record(replace(ctx, beans=[bean]))
            else:
                self._add_record(ctx)

    def _add_record(self, ctx: TraceContext) -> None:
        record = encode_trace_context(ctx).encode()
        if not record:
            return
        keys = trace_keys(ctx)
        if _keys_size(keys) > MAX_KEYS_BYTES:  # a message's own keys alone are too many
            keys = {ctx.beans[0].msg_id}
        added = keys - self._keys
        if self._size + len(record) > MAX_BODY or self._keys_size + _keys_size(added) > MAX_KEYS_BYTES:
            self._send()
            added = keys
        self._records.append(record)
        self._size += len(record)
        self._keys |= added
        self._keys_size += _keys_size(added)

    def _send(self) -> None:
        if not self._records:
            return
        message = Message(self.topic, b"".join(self._records), keys=sorted(self._keys))
        self._records = []
        self._keys = set()
        self._size = self._keys_size = 0
        try:
            self._producer.send_with_callback(message, self._sent)
        except CometMQError as exc:
            self._sent(exc)

    def _sent(self, outcome: SendResult | BaseException) -> None:
        if isinstance(outcome, BaseException):
            self.failed += 1
            log.warning("message trace: sending trace records to %s failed: %s", self.topic, outcome)

    # the records -------------------------------------------------------------------------------

    def sent(
        self,
        group: str,
        messages: Sequence[Message],
        result: SendResult,
        started_ms: int,
        store_host: str,
        msg_type: MessageType = MessageType.Normal_Msg,
    ) -> None:
        """A Pub record for each message of a send that *result* answers (SendMessageTraceHookImpl):
        a batch's messages each get one, with the batch's cost."""
        if not result.trace_on or messages[0].topic == self.topic:
            return
        cost = now_ms() - started_ms
        success = result.status is SendStatus.SEND_OK
        # A batch's ids are joined by commas, one per message.
        ids = zip(result.msg_id.split(","), result.offset_msg_id.split(","), strict=False)
        records = []
        for msg, (msg_id, offset_msg_id) in zip(messages, ids, strict=False):
            bean = TraceBean(
                topic=msg.topic,
                msg_id=msg_id,
                offset_msg_id=offset_msg_id,
                tags=msg.tags or None,
                keys=_keys_text(msg),
                store_host=store_host,
                body_length=len(msg.body),
                msg_type=MessageType.Delay_Msg
                if msg.delay_level or msg.deliver_at_ms is not None or msg.delay_ms is not None
                else msg_type,
            )
            records.append(
                TraceContext(TraceType.Pub, started_ms, result.region_id, group, cost, success, beans=[bean])
            )
        self.append(records)

    def transaction_ended(
        self,
        group: str,
        message: Message | ReceivedMessage,
        msg_id: str,
        store_host: str,
        transaction_id: str,
        state: str,
        from_check: bool,
    ) -> None:
        """An EndTransaction record (EndTransactionTraceHookImpl) of the half *message* (``msg_id``);
        *state* is LocalTransactionState's name."""
        if isinstance(message, Message):
            tags, keys, region = message.tags or None, _keys_text(message), DEFAULT_REGION
        else:
            props = message.properties
            tags, keys = props.get(PROPERTY_TAGS) or None, props.get(PROPERTY_KEYS) or None
            region = props.get(_MSG_REGION) or DEFAULT_REGION
        bean = TraceBean(
            topic=message.topic,
            msg_id=msg_id,
            tags=tags,
            keys=keys,
            store_host=store_host,
            msg_type=MessageType.Trans_msg_Commit,  # whatever the state, as RocketMQ writes it
            transaction_id=transaction_id,
            transaction_state=state,
            from_transaction_check=from_check,
        )
        self.append(TraceContext(TraceType.EndTransaction, now_ms(), region, group, beans=[bean]))

    def consuming(self, group: str, messages: Sequence[ReceivedMessage]) -> TraceContext | None:
        """The SubBefore record of a batch about to be consumed (ConsumeMessageTraceHookImpl), queued;
        None when no message of it is traced (a message whose TRACE_ON property is ``false`` is not)."""
        beans = []
        region = DEFAULT_REGION
        for msg in messages:
            props = msg.properties
            if props.get(_TRACE_ON) == "false":
                continue
            region = props.get(_MSG_REGION) or region
            # No keys are written null, never empty: RocketMQ's reader drops an empty last field and
            # then fails on the record.
            keys = props.get(PROPERTY_KEYS) or None
            beans.append(TraceBean(msg_id=msg.msg_id, keys=keys, retry_times=msg.reconsume_times))
        if not beans:
            return None
        before = TraceContext(
            TraceType.SubBefore, now_ms(), region, group, request_id=self.request_ids.next_id(), beans=beans
        )
        self.append(before)
        return before

    def consumed(self, before: TraceContext, code: ConsumeReturnType) -> None:
        """The SubAfter record of the batch *before* started: its cost per message and how the
        listener ended (ConsumeMessageConcurrentlyService's return type: EXCEPTION when it raised,
        FAILED when it asked to consume later); only SUCCESS counts as a success."""
        now = now_ms()
        success = code is ConsumeReturnType.SUCCESS
        cost = (now - before.timestamp) // len(before.beans)
        self.append(
            TraceContext(
                TraceType.SubAfter,
                now,
                before.region_id,
                before.group_name,
                cost,
                success,
                before.request_id,
                int(code),
                before.beans,
            )
        )


def _keys_size(keys: set[str]) -> int:
    """The bytes *keys* take in a message's KEYS property, each with its separator."""
    return sum(len(key.encode()) + 1 for key in keys)


def _keys_text(msg: Message) -> str | None:
    keys = msg.keys
    return (keys if isinstance(keys, str) else " ".join(keys or ())) or None
