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
QUEUE_SIZE = 1024  # records waiting to be sent (AsyncTraceDispatcher's traceContextQueue)
# A trace message is sent once its records reach this many bytes (RocketMQ: its 128000-byte
# maxMessageSize less 10000), or once its first record is WAIT_S old.
MAX_BODY = 118_000
WAIT_S = 0.5
# The keys of a trace message (every traced message's id) stay well within the 32 KiB a record's
# properties may take.
MAX_KEYS_TEXT = 16_000
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
        self.dropped = 0  # records dropped because the queue was full
        self.failed = 0  # trace messages that could not be sent
        self._producer = producer
        self._queue: asyncio.Queue[TraceContext] = asyncio.Queue(queue_size)
        self._records: list[str] = []
        self._keys: set[str] = set()
        self._size = 0
        self._keys_size = 0
        self._task: asyncio.Task[None] | None = None
        self.request_ids = UniqueIdGenerator()  # a consumed batch's records share one (TraceContext's)

    async def start(self) -> None:
        await self._producer.start()
        self._task = asyncio.create_task(self._run())

    async def close(self, timeout: float) -> None:
        """Send what is queued, then close the producer (waiting up to ``timeout`` s for its sends)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while not self._queue.empty():
            self._add(self._queue.get_nowait())
        self._send()
        await self._producer.close(timeout)

    @property
    def waiting(self) -> int:
        """Records queued and not yet taken into a trace message."""
        return self._queue.qsize()

    def append(self, ctx: TraceContext) -> None:
        """Queue *ctx* to be sent, or drop it (counted) when the queue is full: never waits."""
        try:
            self._queue.put_nowait(ctx)
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("message trace: %d record(s) dropped, the trace queue is full", self.dropped)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        get = self._queue.get
        while True:
            self._add(await get())
            try:
                async with asyncio.timeout_at(loop.time() + WAIT_S):
                    while self._size < MAX_BODY and self._keys_size < MAX_KEYS_TEXT:
                        self._add(await get())
            except TimeoutError:
                pass
            self._send()

    def _add(self, ctx: TraceContext) -> None:
        record = encode_trace_context(ctx)
        if not record:
            return
        if self._size + len(record) > MAX_BODY or self._keys_size >= MAX_KEYS_TEXT:
            self._send()
        self._records.append(record)
        self._size += len(record)
        for key in trace_keys(ctx):
            if key not in self._keys:
                self._keys.add(key)
                self._keys_size += len(key) + 1

    def _send(self) -> None:
        if not self._records:
            return
        message = Message(self.topic, "".join(self._records).encode(), keys=sorted(self._keys))
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
        for msg, (msg_id, offset_msg_id) in zip(messages, ids, strict=False):
            bean = TraceBean(
                topic=msg.topic,
                msg_id=msg_id,
                offset_msg_id=offset_msg_id,
                tags=msg.tags or None,
                keys=_keys_text(msg),
                store_host=store_host,
                body_length=len(msg.body),
                msg_type=MessageType.Delay_Msg if msg.delay_level else msg_type,
            )
            self.append(
                TraceContext(TraceType.Pub, started_ms, result.region_id, group, cost, success, beans=[bean])
            )

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

    def consumed(self, before: TraceContext, success: bool) -> None:
        """The SubAfter record of the batch *before* started: its cost per message, and whether the
        listener succeeded (an exception counts as a failure, as in :class:`PushConsumer`)."""
        now = now_ms()
        code = ConsumeReturnType.SUCCESS if success else ConsumeReturnType.FAILED
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


def _keys_text(msg: Message) -> str | None:
    keys = msg.keys
    return (keys if isinstance(keys, str) else " ".join(keys or ())) or None
