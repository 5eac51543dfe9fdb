"""PushConsumer: the asyncio consumer that pulls for you and hands messages to your code.

How it works (RocketMQ's DefaultMQPushConsumer, in one event loop):

* **Rebalance** (every 20 s, at once when a broker says the group changed, sooner while a topic has
  no route yet): for each subscribed topic, the queues from the route and the group's client ids
  from a broker are sorted and split by the allocation strategy (``_rebalance.py``); broadcasting
  consumers take every queue. A queue that leaves stops being pulled, waits briefly for listener
  calls that hold its messages, commits its offset (and, orderly, unlocks) before anybody else can
  have it. In clustering mode the group's retry topic ``%RETRY%<group>`` is subscribed too.
* **Pull**: one task per assigned queue, long polling (the broker holds a pull up to 15 s). A queue
  with ``max_cached_messages_per_queue`` unconsumed messages, or ``max_cached_bytes_per_queue`` of
  their bodies, or (concurrent listeners) cached offsets more than ``max_offset_span`` apart, is not
  pulled until it drains.
* **Consume**: ``concurrency`` worker tasks take batches of up to ``consume_batch_size`` messages.
  Concurrent consumers run batches of any queue in parallel; orderly consumers hold the broker lock of
  a queue and run its batches one at a time, in queue order.
* **Offsets**: the offset committed for a queue is its smallest message not yet consumed (a slow
  batch holds the offset back, so a crash can redeliver but never skip). Offsets are written every
  5 s, when a queue leaves, and on close: to the brokers (clustering) or to a local file
  (broadcasting).
* **Retry**: a failed batch (``RECONSUME_LATER`` or an exception) is sent back to its broker with
  CONSUMER_SEND_MSG_BACK; the broker redelivers it through ``%RETRY%<group>`` after delay level
  3 + reconsume times, and makes it a dead letter (``%DLQ%<group>``) after ``max_reconsume_times``
  (16 when it is -1, the default). If the send-back fails the message is sent as a new message to
  ``%RETRY%<group>``, and if that fails too it is kept and consumed again locally after 5 s (all
  three as RocketMQ). Orderly consumers retry a failed batch locally after 1 s, for ever by default
  as RocketMQ's do (a dead letter would let what is behind it pass out of order); given a
  ``max_reconsume_times`` of 0 or more they send a message to the DLQ once it has failed that many
  retries. Broadcasting consumers do not retry.

Listeners: ``async def`` callbacks run on the event loop; plain functions run in a thread pool of
``concurrency`` threads so that a blocking listener never stalls pulls, heartbeats or other queues.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

from cometmq.auth import Credentials
from cometmq.client import _brokerapi
from cometmq.client._brokerapi import (
    CLIENT_INNER_PRODUCER_GROUP,
    LONG_POLL_SUSPEND_MS,
    LONG_POLL_TIMEOUT_S,
    PULL_COMMIT_OFFSET,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    PullStatus,
    broker_addr_of,
    send_header,
)
from cometmq.client._instance import POLL_NAMESRV_INTERVAL_RANGE_S, POLL_NAMESRV_INTERVAL_S, ClientInstance
from cometmq.client._lifecycle import Client, ClientState
from cometmq.client._offsets import (
    CONSUME_FROM_WHERE,
    PERSIST_INTERVAL_S,
    ConsumeFrom,
    LocalOffsetStore,
    RemoteOffsetStore,
    default_consume_timestamp,
    local_offsets_path,
    start_offset,
)
from cometmq.client._options import check_choice, check_credentials, check_group, check_range, tls_context
from cometmq.client._process_queue import ProcessQueue
from cometmq.client._rebalance import REBALANCE_INTERVAL_S, STRATEGIES
from cometmq.client.message import (
    PROPERTY_DELAY,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    MessageQueue,
    ReceivedMessage,
)
from cometmq.client.producer import trace_dispatcher
from cometmq.errors import ClientStateError, CometMQError
from cometmq.protocol import RequestCode, fastjson
from cometmq.protocol.broker_headers import ConsumerSendMsgBackRequestHeader
from cometmq.protocol.naming import RETRY_GROUP_TOPIC_PREFIX, dlq_topic, retry_topic
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.subscription import EXPRESSION_SQL92, EXPRESSION_TAG, SubscriptionData
from cometmq.protocol.trace import ConsumeReturnType
from cometmq.remoting import CLIENT_LIMIT_US, MAX_LIMIT_US

__all__ = ["ConsumeResult", "PushConsumer"]

log = logging.getLogger("cometmq.client")

# RocketMQ's push consumer timings (DefaultMQPushConsumer / DefaultMQPushConsumerImpl).
REBALANCE_RETRY_S = 1.0  # while a topic has no route or we are not yet in the member list
PULL_ERROR_BACKOFF_S = 3.0  # pullTimeDelayMillsWhenException
LOCK_RENEW_INTERVAL_S = 20.0  # REBALANCE_LOCK_INTERVAL
LOCK_RETRY_S = 1.0  # a queue assigned to us whose lock its previous owner still holds
ORDERLY_SUSPEND_S = 1.0  # suspendCurrentQueueTimeMillis
DEFAULT_MAX_RECONSUME_TIMES = 16  # what maxReconsumeTimes -1 means for a concurrent listener
JAVA_INT_MAX = 2**31 - 1  # ... and for an orderly one (Integer.MAX_VALUE)
LOCAL_RETRY_DELAY_S = 5.0  # submitConsumeRequestLater, when even the retry send failed
SEND_BACK_TIMEOUT_S = 5.0
FIRST_RETRY_DELAY_LEVEL = 3  # the broker's 3 + reconsume times

PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"


class ConsumeResult(enum.Enum):
    """What a listener answers for a batch. Returning None counts as SUCCESS; raising an exception
    counts as RECONSUME_LATER."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


Listener: TypeAlias = Callable[
    [list[ReceivedMessage]], "Awaitable[ConsumeResult | None] | ConsumeResult | None"
]


@dataclass(slots=True)
class _ConsumeRequest:
    pq: ProcessQueue
    messages: list[ReceivedMessage]  # orderly: empty, the worker takes batches from the queue's head


class PushConsumer(Client):
    """A consumer group member that pulls its share of the subscribed topics' queues and passes the
    messages to a listener, or to an ``async for`` loop.

    >>> consumer = PushConsumer("GID_orders", "127.0.0.1:9876")
    >>> consumer.subscribe("Orders", "created || paid")
    >>> consumer.listen(handle)                 # async def handle(messages) -> ConsumeResult | None
    >>> await consumer.start()
    ...
    >>> await consumer.close()

    Without a listener, iterate it instead: ``async for message in consumer:``. A message counts as
    consumed when the loop asks for the next one (or when the consumer is closed while the message is
    in hand); ``consumer.retry_later(message)`` in the loop body has it delivered again later.

    ``message_model``: ``"clustering"`` (each message to one member of the group; offsets on the
    brokers) or ``"broadcasting"`` (every member gets every message; offsets in a local file under
    ``offsets_dir``, default ``~/.cometmq/offsets``, named by client id: give ``instance_name`` to find
    them again after a restart). ``consume_from`` applies only to queues the group never committed an
    offset for: ``"last"`` (new messages only), ``"first"``, or ``"timestamp"``
    (``consume_timestamp`` in ms, default half an hour ago). As in RocketMQ, a brand-new group on a
    queue whose first message is still in memory starts at 0 even with ``"last"``.

    ``busy_poll_us`` > 0 keeps the event loop polling its sockets after each request or response
    instead of sleeping, for a window that adapts to how soon replies come, at most that many µs, and
    closes when traffic stops (:mod:`cometmq.remoting.busypoll`); ``busy_poll_adaptive=False`` polls
    the whole ``busy_poll_us`` every time; 0 never polls. Quicker replies, for a CPU kept busy while
    they keep coming.

    ``poll_name_server_interval`` is how often (seconds) the routes are looked up again (RocketMQ's
    pollNameServerInterval): how the consumer learns of queues added or moved, and that a broker
    group's master came back. A pull that cannot reach its broker looks its topic's route up at once,
    so a consumer whose master died goes on from a slave without waiting for this.

    ``credentials`` (:class:`cometmq.auth.Credentials`) sign every request, for servers with aclEnable;
    ``tls`` is False (plain TCP), True (TLS checked against the system's CAs and the server's name) or
    an :class:`ssl.SSLContext` of your own (a private CA, a client certificate).

    ``trace`` writes trace records around each consumed batch (which message, when, how long the
    listener took, whether it succeeded, how many times it was retried) to ``trace_topic`` (default
    RMQ_SYS_TRACE_TOPIC), as the Java client's enableMsgTrace does (docs/client.md#message-trace).
    """

    kind = "push consumer"

    def __init__(
        self,
        group: str,
        namesrv: str,
        *,
        message_model: Literal["clustering", "broadcasting"] = "clustering",
        consume_from: ConsumeFrom = "last",
        consume_timestamp: int | None = None,
        allocate: Literal["averagely", "consistent_hash"] = "averagely",
        orderly: bool = False,
        pull_batch_size: int = 32,
        consume_batch_size: int = 1,
        max_cached_messages_per_queue: int = 1000,
        max_cached_bytes_per_queue: int = 100 * 1024 * 1024,
        max_offset_span: int = 2000,
        max_reconsume_times: int = -1,
        concurrency: int = 20,
        instance_name: str | None = None,
        offsets_dir: str | Path | None = None,
        busy_poll_us: int = CLIENT_LIMIT_US,
        busy_poll_adaptive: bool = True,
        poll_name_server_interval: float = POLL_NAMESRV_INTERVAL_S,
        credentials: Credentials | None = None,
        tls: bool | ssl.SSLContext = False,
        trace: bool = False,
        trace_topic: str | None = None,
    ) -> None:
        check_group("consumer", group)
        check_credentials(credentials)
        ssl_context = tls_context(tls)
        check_choice("message_model", message_model, ("clustering", "broadcasting"))
        check_choice("consume_from", consume_from, CONSUME_FROM_WHERE)
        check_choice("allocate", allocate, STRATEGIES)
        # RocketMQ's ranges (DefaultMQPushConsumerImpl.checkConfig; its size limit is in MiB).
        check_range("pull_batch_size", pull_batch_size, 1, 1024)
        check_range("consume_batch_size", consume_batch_size, 1, 1024)
        check_range("max_cached_messages_per_queue", max_cached_messages_per_queue, 1, 65535)
        check_range("max_cached_bytes_per_queue", max_cached_bytes_per_queue, 1, 1024 * 1024 * 1024)
        check_range("max_offset_span", max_offset_span, 1, 65535)
        check_range("max_reconsume_times", max_reconsume_times, -1)  # -1: RocketMQ's default
        check_range("concurrency", concurrency, 1, 1000)
        check_range("busy_poll_us", busy_poll_us, 0, MAX_LIMIT_US)
        check_range("poll_name_server_interval", poll_name_server_interval, *POLL_NAMESRV_INTERVAL_RANGE_S)
        super().__init__()
        self.group = group
        self.message_model = message_model
        self.consume_from = consume_from
        self.consume_timestamp = (
            consume_timestamp if consume_timestamp is not None else default_consume_timestamp()
        )
        self.orderly = orderly
        self.pull_batch_size = pull_batch_size
        self.consume_batch_size = consume_batch_size
        self.max_cached_messages_per_queue = max_cached_messages_per_queue
        self.max_cached_bytes_per_queue = max_cached_bytes_per_queue
        self.max_offset_span = max_offset_span
        self.max_reconsume_times = max_reconsume_times
        # RocketMQ's reading of -1: 16 retries for a concurrent listener, no end for an orderly one
        # (a dead letter would let the messages behind it pass, out of order).
        self._retry_limit = (
            max_reconsume_times
            if max_reconsume_times >= 0
            else (JAVA_INT_MAX if orderly else DEFAULT_MAX_RECONSUME_TIMES)
        )
        self.concurrency = concurrency
        self._allocate = STRATEGIES[allocate]
        self._clustering = message_model == "clustering"
        # Brokers lock queues for orderly consumers of a clustering group only: in broadcasting
        # every member reads every queue anyway.
        self._needs_lock = orderly and self._clustering
        self._retry_topic = retry_topic(group)
        self._instance = ClientInstance(
            namesrv,
            instance_name=instance_name,
            route_refresh_interval=poll_name_server_interval,
            busy_poll_us=busy_poll_us,
            busy_poll_adaptive=busy_poll_adaptive,
            credentials=credentials,
            ssl_context=ssl_context,
        )
        self._offsets: RemoteOffsetStore | LocalOffsetStore = (
            RemoteOffsetStore(self._instance, group)
            if self._clustering
            else LocalOffsetStore(
                local_offsets_path(
                    self._instance.client_id, group, Path(offsets_dir) if offsets_dir is not None else None
                )
            )
        )
        self._subscriptions: dict[str, SubscriptionData] = {}
        self._listener: Listener | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._pqs: dict[MessageQueue, ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._pull_from: dict[MessageQueue, int] = {}  # the broker id each queue's last pull suggested
        self._requests: asyncio.Queue[_ConsumeRequest] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []
        self._loops: list[asyncio.Task[None]] = []
        self._side_tasks: set[asyncio.Task[Any]] = set()
        self._rebalance_wakeup = asyncio.Event()
        self._rebalance_lock = asyncio.Lock()
        self._rebalance_complete = False
        # The ``async for`` form: workers hand messages over here and wait for the loop's verdict.
        self._handoff: asyncio.Queue[tuple[ReceivedMessage, asyncio.Future[ConsumeResult]] | None] | None = (
            None
        )
        self._current: tuple[ReceivedMessage, asyncio.Future[ConsumeResult]] | None = None
        self._current_retry = False
        self.consumed_count = 0  # messages whose listener call succeeded, for running info
        self._trace = (
            trace_dispatcher(group, "CONSUME", namesrv, credentials, ssl_context, trace_topic)
            if trace
            else None
        )

    # configuration -----------------------------------------------------------------------------

    @property
    def client_id(self) -> str:
        """This member's id in the group, as brokers list it."""
        return self._instance.client_id

    @property
    def offsets_path(self) -> Path | None:
        """The local offsets file of a broadcasting consumer (None in clustering mode)."""
        return self._offsets.path if isinstance(self._offsets, LocalOffsetStore) else None

    @property
    def assigned_queues(self) -> frozenset[MessageQueue]:
        """The queues this member reads now (its share after the last rebalance)."""
        return frozenset(self._pqs)

    def subscribe(self, topic: str, expression: str = "*", *, sql92: bool = False) -> None:
        """Consume ``topic``'s messages matching ``expression``: ``*``, tags joined by ``||``
        (``"TagA || TagB"``), or with ``sql92=True`` an SQL92 condition on message properties, which
        the broker evaluates (it must run with ``enablePropertyFilter=true``)."""
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise ValueError("retry topics are subscribed automatically")
        self._subscriptions[topic] = SubscriptionData.from_expression(
            topic, expression, EXPRESSION_SQL92 if sql92 else EXPRESSION_TAG, int(time.time() * 1000)
        )
        if self._state is ClientState.RUNNING:
            self._spawn(self._instance.send_heartbeat())
            self._rebalance_wakeup.set()

    def listen(self, callback: Listener) -> None:
        """Set the listener, before :meth:`start`: ``callback(messages)`` gets a list of up to
        ``consume_batch_size`` messages and returns ``ConsumeResult.SUCCESS`` or None (consumed) or
        ``ConsumeResult.RECONSUME_LATER`` (deliver again later); an exception counts as
        RECONSUME_LATER. A coroutine function runs on the event loop; a plain function runs in a
        thread pool."""
        if self._state is not ClientState.CREATED:
            raise ClientStateError(
                f"this push consumer is {self._state.value}: set the listener before start()"
            )
        self._listener = callback

    # life cycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Join the group: learn routes, heartbeat, take a share of the queues and start consuming."""
        if self._state is ClientState.CREATED and not self._subscriptions:
            raise ClientStateError("subscribe to at least one topic before start()")
        await super().start()

    async def _start(self) -> None:
        if self._clustering:
            # RocketMQ consumers read their group's retry topic themselves (docs/protocol.md#retry-and-dlq).
            self._subscriptions[self._retry_topic] = SubscriptionData.from_expression(
                self._retry_topic, "*", EXPRESSION_TAG, int(time.time() * 1000)
            )
        if self._listener is None:
            self._handoff = asyncio.Queue()
            self.consume_batch_size = 1  # one message per verdict of the loop
        elif not _is_async_callable(self._listener):
            self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix=f"cometmq-{self.group}")
        instance = self._instance
        for topic in self._subscriptions:
            try:
                await instance.fetch_route(topic)
            except CometMQError as exc:
                log.warning("cannot fetch the route of %s: %s", topic, exc)
        instance.register_consumer(self)
        instance.add_route_listener(self._on_route_changed)
        instance.start()
        await instance.send_heartbeat()
        if self._trace is not None:
            await self._trace.start()
        self._workers = [asyncio.create_task(self._worker()) for _ in range(self.concurrency)]
        try:
            await self._rebalance()
        except CometMQError as exc:
            log.warning("first rebalance of %s failed: %s", self.group, exc)
        self._loops = [
            asyncio.create_task(self._rebalance_loop()),
            asyncio.create_task(self._persist_loop()),
        ]
        if self._needs_lock:
            self._loops.append(asyncio.create_task(self._lock_loop()))

    async def _close(self, timeout: float) -> None:
        """Leave the group: stop pulling, wait up to ``timeout`` seconds for listener calls in
        progress, commit offsets, unlock (orderly), unregister and close the connections."""
        deadline = time.monotonic() + timeout
        for task in self._loops:
            task.cancel()
        await _finish(self._loops)
        pqs = list(self._pqs.values())
        for pq in pqs:
            pq.drop()
        await _finish(list(self._pull_tasks.values()), cancel=True)
        if self._handoff is not None:
            self._end_handoff()
        for pq in pqs:
            await pq.wait_idle(max(0.0, deadline - time.monotonic()))
        await _finish(self._workers, cancel=True)
        await _finish(list(self._side_tasks), cancel=True)
        for pq in pqs:
            pq.removed = True
        try:
            # Everything still in the table, including a queue whose removal close() interrupted.
            await self._offsets.persist(None)
        except (CometMQError, OSError) as exc:
            log.warning("cannot persist the offsets of %s: %s", self.group, exc)
        if self._needs_lock:
            await self._unlock([pq.queue for pq in pqs])
        if self._trace is not None:
            await self._trace.close(deadline - time.monotonic())
        await self._instance.close()
        self._instance.unregister_consumer(self.group)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        self._pqs.clear()
        self._pull_tasks.clear()

    def _abort(self) -> None:
        """Let go of tasks, sockets and threads without talking to anybody: the event loop is
        shutting down (or the object is being collected) while the consumer was never closed."""
        if self._state is ClientState.CLOSED:
            return
        self._state = ClientState.CLOSED
        tasks = [*self._loops, *self._workers, *self._pull_tasks.values(), *self._side_tasks]
        for task in tasks:
            if not task.done():
                with contextlib.suppress(RuntimeError):  # the loop may be closed already
                    task.cancel()
        with contextlib.suppress(RuntimeError):
            self._instance.remoting.abort()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def __del__(self) -> None:
        if getattr(self, "_state", ClientState.CLOSED) in (ClientState.RUNNING, ClientState.CLOSING):
            self._abort()

    # the ``async for`` form --------------------------------------------------------------------

    def __aiter__(self) -> PushConsumer:
        return self

    async def __anext__(self) -> ReceivedMessage:
        handoff = self._handoff
        if handoff is None:
            self._check_running()
            raise ClientStateError("this push consumer has a listener: it cannot be iterated too")
        self._settle_current()
        while True:
            item = await handoff.get()
            if item is None:
                handoff.put_nowait(None)  # closed: every further __anext__ stops too
                raise StopAsyncIteration
            message, verdict = item
            if verdict.done():  # its worker gave up (the queue went elsewhere)
                continue
            self._current = item
            self._current_retry = False
            return message

    def retry_later(self, message: ReceivedMessage | None = None) -> None:
        """In an ``async for`` body: have the current message delivered again later instead of
        counting it as consumed when the loop moves on."""
        if self._current is None or (message is not None and message is not self._current[0]):
            raise CometMQError("retry_later() applies to the message the loop is processing")
        self._current_retry = True

    def _settle_current(self) -> None:
        current, self._current = self._current, None
        if current is not None and not current[1].done():
            current[1].set_result(
                ConsumeResult.RECONSUME_LATER if self._current_retry else ConsumeResult.SUCCESS
            )

    def _end_handoff(self) -> None:
        """Closing: the message in the loop's hands counts as consumed, and its worker records that
        before the workers stop (so a ``break`` followed by close commits it); the messages queued
        behind it were never handed out: their workers give them up, for the queue's next reader."""
        assert self._handoff is not None
        self._settle_current()
        while not self._handoff.empty():
            item = self._handoff.get_nowait()
            if item is not None:
                item[1].cancel()
        self._handoff.put_nowait(None)  # every further __anext__ stops

    async def _iterator_listener(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        assert self._handoff is not None
        verdict: asyncio.Future[ConsumeResult] = asyncio.get_running_loop().create_future()
        self._handoff.put_nowait((messages[0], verdict))
        try:
            return await verdict
        finally:
            if not verdict.done():
                verdict.cancel()

    # ConsumerMember (called by the ClientInstance) ---------------------------------------------

    def consumer_data(self) -> dict[str, Any]:
        """Hook for the client instance: this consumer's ConsumerData for heartbeats."""
        return {
            "groupName": self.group,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": self.message_model.upper(),
            "consumeFromWhere": CONSUME_FROM_WHERE[self.consume_from],
            "subscriptionDataSet": [sub.to_json() for sub in self._subscriptions.values()],
            "unitMode": False,
        }

    def on_ids_changed(self) -> None:
        """Hook for the client instance: a broker says the group's members changed; rebalance."""
        self._rebalance_wakeup.set()

    def on_reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Hook for the client instance: an administrator reset the group's offsets; continue there."""
        if self._state is ClientState.RUNNING:
            self._spawn(self._apply_reset(offsets))

    def running_info(self) -> dict[str, Any]:
        """Hook for the client instance: the ConsumerRunningInfo a broker relays to admin tools."""
        return {
            "properties": {
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": self.message_model.upper(),
                "consumeOrderly": str(self.orderly).lower(),
                "consumeFromWhere": CONSUME_FROM_WHERE[self.consume_from],
                "consumeThreadMax": str(self.concurrency),
                "pullBatchSize": str(self.pull_batch_size),
                "consumeMessageBatchMaxSize": str(self.consume_batch_size),
                "maxReconsumeTimes": str(self.max_reconsume_times),
                "PROP_CLIENT_VERSION": "cometmq",
            },
            "subscriptionSet": [sub.to_json() for sub in self._subscriptions.values()],
            "mqTable": {
                str(q): {
                    "cachedMsgCount": len(pq),
                    "cachedMsgSizeInMiB": pq.cached_bytes // (1024 * 1024),
                    "locked": pq.locked,
                }
                for q, pq in self._pqs.items()
            },
            "statusTable": {},
            "jstack": "",
        }

    # rebalance ---------------------------------------------------------------------------------

    def _on_route_changed(self, topic: str, _route: object) -> None:
        if topic in self._subscriptions:
            self._rebalance_wakeup.set()

    async def _rebalance_loop(self) -> None:
        retry = REBALANCE_RETRY_S
        try:
            while True:
                if self._rebalance_complete:
                    retry = REBALANCE_RETRY_S
                    interval = REBALANCE_INTERVAL_S
                else:
                    # Sooner while a topic has no route yet (the retry topic right after the first
                    # heartbeat created it), backing off to the normal interval.
                    interval = retry
                    retry = min(retry * 2, REBALANCE_INTERVAL_S)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._rebalance_wakeup.wait(), interval)
                self._rebalance_wakeup.clear()
                try:
                    await self._rebalance()
                except CometMQError as exc:
                    log.warning("rebalance of %s failed: %s", self.group, exc)
                except Exception:
                    log.exception("rebalance of %s failed", self.group)
        finally:
            if self._state is ClientState.RUNNING:
                # Cancelled without close(): the event loop is shutting down under us.
                self._abort()

    async def _rebalance(self) -> None:
        async with self._rebalance_lock:
            if self._state is not ClientState.RUNNING:
                return
            complete = True
            wanted: set[MessageQueue] = set()
            for topic in list(self._subscriptions):
                mine = await self._share_of(topic)
                if mine is None:  # unknown for now: keep what we have of the topic
                    complete = False
                    mine = [q for q in self._pqs if q.topic == topic]
                wanted.update(mine)
            removed = [q for q in self._pqs if q not in wanted]
            await asyncio.gather(*(self._remove_queue(q) for q in removed))
            for queue in sorted(wanted):
                if queue not in self._pqs:
                    self._add_queue(queue)
            self._rebalance_complete = complete

    async def _share_of(self, topic: str) -> list[MessageQueue] | None:
        try:
            queues = await self._instance.subscribe_queues(topic)
        except CometMQError as exc:
            log.info("no route for %s yet: %s", topic, exc)
            return None
        if not queues:
            return None
        if not self._clustering:
            return queues
        try:
            members = await _brokerapi.consumer_ids(self._instance, queues[0], self.group)
        except CometMQError as exc:
            log.info("cannot list the members of %s: %s", self.group, exc)
            return None
        if self.client_id not in members:
            # Our heartbeat has not reached that broker yet: allocating now would drop every queue.
            self._spawn(self._instance.send_heartbeat())
            return None
        return self._allocate(queues, members, self.client_id)

    def _add_queue(self, queue: MessageQueue) -> None:
        pq = ProcessQueue(
            queue,
            self.max_cached_messages_per_queue,
            self.max_cached_bytes_per_queue,
            # Orderly queues are consumed in order: their span is their size (RocketMQ checks it
            # for concurrent consumers only).
            None if self.orderly else self.max_offset_span,
        )
        pq.locked = not self._needs_lock
        self._pqs[queue] = pq
        self._pull_tasks[queue] = asyncio.create_task(self._pull_loop(pq))
        log.debug("%s now reads %s", self.client_id, queue)

    async def _remove_queue(self, queue: MessageQueue) -> None:
        pq = self._pqs.pop(queue)
        task = self._pull_tasks.pop(queue)
        self._pull_from.pop(queue, None)
        pq.drop()
        task.cancel()
        # Give listener calls holding its messages a moment, so that the offset committed below
        # covers them and the next owner does not consume them again. Orderly waits longer: the lock
        # (and with it the order) passes on as soon as we unlock.
        await pq.wait_idle(10.0 if self.orderly else 3.0)
        pq.removed = True
        try:
            await self._offsets.persist([queue])
        except (CometMQError, OSError) as exc:
            log.warning("cannot commit the offset of %s: %s", queue, exc)
        if self._clustering:
            self._offsets.forget(queue)
        if self._needs_lock:
            await self._unlock([queue])
        pq.clear()
        await _finish([task])
        log.debug("%s no longer reads %s", self.client_id, queue)

    async def _apply_reset(self, offsets: dict[MessageQueue, int]) -> None:
        async with self._rebalance_lock:
            for queue, offset in offsets.items():
                pq = self._pqs.get(queue)
                if pq is None:  # another member's queue: it follows the reset itself (RocketMQ too)
                    continue
                self._offsets.update(queue, offset)
                # The cached messages and any listener call still holding some belong to the old
                # position: that process queue may never move the offset again.
                pq.drop()
                pq.removed = True
                pq.clear()
                self._pull_tasks[queue].cancel()
                del self._pqs[queue]
                self._add_queue(queue)
            try:
                await self._offsets.persist(list(offsets))
            except (CometMQError, OSError) as exc:
                log.warning("cannot persist reset offsets of %s: %s", self.group, exc)

    # orderly locks -----------------------------------------------------------------------------

    def _lock_body(self, queues: list[MessageQueue]) -> bytes:
        mq_set = [{"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id} for q in queues]
        body = {"consumerGroup": self.group, "clientId": self.client_id, "mqSet": mq_set}
        return json.dumps(body, separators=(",", ":")).encode()

    async def _lock(self, queues: list[MessageQueue]) -> set[MessageQueue]:
        """LOCK_BATCH_MQ ``queues`` on their brokers; the ones now held by this client."""
        held: set[MessageQueue] = set()
        for broker_name in sorted({q.broker_name for q in queues}):
            batch = [q for q in queues if q.broker_name == broker_name]
            try:
                response = await self._instance.invoke_ok(
                    broker_addr_of(self._instance, batch[0]),
                    RequestCode.LOCK_BATCH_MQ,
                    body=self._lock_body(batch),
                )
                for item in fastjson.loads(response.body or b"{}").get("lockOKMQSet", []):
                    held.add(MessageQueue(str(item["topic"]), str(item["brokerName"]), int(item["queueId"])))
            except (CometMQError, ValueError, KeyError) as exc:
                log.info("cannot lock queues of %s on %s: %s", self.group, broker_name, exc)
        return held

    async def _unlock(self, queues: list[MessageQueue]) -> None:
        for broker_name in sorted({q.broker_name for q in queues}):
            batch = [q for q in queues if q.broker_name == broker_name]
            try:
                await self._instance.invoke_ok(
                    broker_addr_of(self._instance, batch[0]),
                    RequestCode.UNLOCK_BATCH_MQ,
                    body=self._lock_body(batch),
                    timeout=1.0,
                )
            except CometMQError as exc:
                log.info("cannot unlock queues of %s on %s: %s", self.group, broker_name, exc)

    async def _lock_loop(self) -> None:
        while True:
            await asyncio.sleep(LOCK_RENEW_INTERVAL_S)
            pqs = [pq for pq in self._pqs.values() if not pq.dropped]
            held = await self._lock([pq.queue for pq in pqs])
            for pq in pqs:
                if pq.dropped:
                    continue
                pq.set_locked(pq.queue in held)
                if pq.locked and len(pq) and not pq.consuming:
                    self._dispatch_orderly(pq)

    # pulling -----------------------------------------------------------------------------------

    async def _first_offset(self, queue: MessageQueue) -> int:
        """Where to start reading a queue: the stored offset, else by ``consume_from``."""
        stored = await self._offsets.read(queue)
        if stored is not None and stored >= 0:
            return stored
        offset = await start_offset(
            self._instance, queue, self.group, self.consume_from, self.consume_timestamp
        )
        self._offsets.update(queue, offset)
        return offset

    async def _pull_loop(self, pq: ProcessQueue) -> None:
        queue = pq.queue
        try:
            if self._needs_lock:
                while not pq.dropped:
                    if queue in await self._lock([queue]):
                        pq.set_locked(True)
                        break
                    await asyncio.sleep(LOCK_RETRY_S)
            offset: int | None = None
            while offset is None and not pq.dropped:
                try:
                    offset = await self._first_offset(queue)
                except CometMQError as exc:
                    log.info("cannot find the start offset of %s: %s", queue, exc)
                    await asyncio.sleep(PULL_ERROR_BACKOFF_S)
            while offset is not None and not pq.dropped:
                if not pq.locked:
                    await pq.lock_event.wait()
                    continue
                if pq.full:
                    await pq.wait_for_room()  # flow control: the listener is behind
                    continue
                offset = await self._pull_once(pq, offset)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pulling %s stopped", queue)

    async def _pull_once(self, pq: ProcessQueue, offset: int) -> int:
        queue = pq.queue
        committed = self._offsets.offsets.get(queue, 0)
        sys_flag = PULL_SUSPEND | PULL_SUBSCRIPTION
        if self._clustering and committed > 0:
            sys_flag |= PULL_COMMIT_OFFSET
        try:
            result = await _brokerapi.pull(
                self._instance,
                queue,
                self.group,
                self._subscriptions[queue.topic],
                offset,
                self.pull_batch_size,
                sys_flag=sys_flag,
                commit_offset=committed,
                suspend_ms=LONG_POLL_SUSPEND_MS,
                timeout=LONG_POLL_TIMEOUT_S,
                pull_from=self._pull_from,
            )
        except CometMQError as exc:
            log.info("pull from %s failed: %s", queue, exc)
            await self._instance.refresh_route_if_unreachable(queue.topic, exc)
            await asyncio.sleep(PULL_ERROR_BACKOFF_S)
            return offset
        if pq.dropped:
            return offset
        next_offset = result.next_begin_offset
        messages = result.messages
        if messages:
            if queue.topic == self._retry_topic:
                for message in messages:
                    # RocketMQ's resetRetryAndNamespace: show the topic the message was sent to.
                    original = message.properties.get(PROPERTY_RETRY_TOPIC)
                    if original:
                        message.topic = original
            pq.put(messages, next_offset)
            if self.orderly:
                if not pq.consuming:
                    self._dispatch_orderly(pq)
            else:
                size = self.consume_batch_size
                for start in range(0, len(messages), size):
                    self._requests.put_nowait(_ConsumeRequest(pq, messages[start : start + size]))
        elif result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning("offset %d of %s is illegal; continuing at %d", offset, queue, next_offset)
            if not len(pq):
                self._offsets.update(queue, next_offset)
        elif not len(pq):
            # Nothing (or nothing matching) up to next_offset, and nothing pending: the committed
            # offset may move past the filtered-out messages (RocketMQ's correctTagsOffset).
            self._offsets.update(queue, next_offset, increase_only=True)
        return next_offset

    # consuming ---------------------------------------------------------------------------------

    def _dispatch_orderly(self, pq: ProcessQueue) -> None:
        pq.consuming = True
        self._requests.put_nowait(_ConsumeRequest(pq, []))

    async def _worker(self) -> None:
        while True:
            request = await self._requests.get()
            pq = request.pq
            if pq.dropped:
                pq.consuming = False
                continue
            try:
                if self.orderly:
                    await self._consume_orderly(pq)
                else:
                    await self._consume_concurrently(pq, request.messages)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("consuming %s failed", pq.queue)

    async def _call_listener(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        trace = self._trace
        before = None if trace is None else trace.consuming(self.group, messages)
        listener = self._listener
        try:
            if listener is None:
                answer: object = await self._iterator_listener(messages)
            elif self._executor is not None:
                answer = await asyncio.get_running_loop().run_in_executor(self._executor, listener, messages)
            else:
                answer = listener(messages)
            if inspect.isawaitable(answer):
                answer = await answer
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the listener of %s failed; the messages will be consumed again", self.group)
            if before is not None:
                assert trace is not None
                trace.consumed(before, ConsumeReturnType.EXCEPTION)
            return ConsumeResult.RECONSUME_LATER
        if answer is ConsumeResult.RECONSUME_LATER:
            result, code = ConsumeResult.RECONSUME_LATER, ConsumeReturnType.FAILED
        else:
            result, code = ConsumeResult.SUCCESS, ConsumeReturnType.SUCCESS
        if before is not None:
            assert trace is not None
            trace.consumed(before, code)
        return result

    async def _consume_concurrently(self, pq: ProcessQueue, messages: list[ReceivedMessage]) -> None:
        pq.begin_consume()
        try:
            result = await self._call_listener(messages)
            done = messages
            if result is ConsumeResult.SUCCESS:
                self.consumed_count += len(messages)
            elif not self._clustering:
                log.warning("broadcasting: dropping %d messages the listener failed", len(messages))
            elif pq.dropped:
                done = []  # the queue's next owner consumes them again
            else:
                kept: list[ReceivedMessage] = []
                for message in messages:
                    if not await self._send_back(pq, message):
                        message.reconsume_times += 1
                        kept.append(message)
                if kept:
                    done = [m for m in messages if m not in kept]
                    self._retry_locally(pq, kept)
            offset = pq.remove(done)
            if offset >= 0 and not pq.removed:
                self._offsets.update(pq.queue, offset, increase_only=True)
        finally:
            pq.end_consume()

    def _retry_locally(self, pq: ProcessQueue, messages: list[ReceivedMessage]) -> None:
        async def later() -> None:
            await asyncio.sleep(LOCAL_RETRY_DELAY_S)
            if not pq.dropped:
                self._requests.put_nowait(_ConsumeRequest(pq, messages))

        self._spawn(later())

    async def _consume_orderly(self, pq: ProcessQueue) -> None:
        try:
            while not pq.dropped and pq.locked:
                messages = pq.head(self.consume_batch_size)
                if not messages:
                    break
                pq.begin_consume()
                try:
                    result = await self._call_listener(messages)
                    if result is ConsumeResult.SUCCESS:
                        self.consumed_count += len(messages)
                        done = messages
                    else:
                        done = []
                        for message in messages:
                            # Out of retries: a dead letter (delay level -1 skips the retry topic).
                            if message.reconsume_times >= self._retry_limit and await self._send_back(
                                pq, message, delay_level=-1
                            ):
                                done.append(message)
                                continue
                            message.reconsume_times += 1
                    if done:
                        offset = pq.remove(done)
                        if offset >= 0 and not pq.removed:
                            self._offsets.update(pq.queue, offset, increase_only=True)
                finally:
                    pq.end_consume()
                if len(done) < len(messages):
                    # The same messages again, after a pause, before anything behind them.
                    await asyncio.sleep(ORDERLY_SUSPEND_S)
        finally:
            pq.consuming = False

    # retries -----------------------------------------------------------------------------------

    async def _send_back(self, pq: ProcessQueue, message: ReceivedMessage, delay_level: int = 0) -> bool:
        """Hand a failed message back to the broker for a later retry (or, ``delay_level`` -1, the
        DLQ); False when neither the send-back nor the fallback send worked. A message of an inner batch
        goes straight to the fallback: the broker's send-back takes a whole record, here the batch."""
        if not message.is_inner_batch:
            fields = ConsumerSendMsgBackRequestHeader(
                offset=message.commitlog_offset,
                group=self.group,
                delay_level=delay_level,
                origin_msg_id=message.msg_id,
                origin_topic=message.topic,
                max_reconsume_times=self._retry_limit,
            ).encode()
            try:
                await self._instance.invoke_ok(
                    broker_addr_of(self._instance, pq.queue),
                    RequestCode.CONSUMER_SEND_MSG_BACK,
                    fields,
                    timeout=SEND_BACK_TIMEOUT_S,
                )
                return True
            except CometMQError as exc:
                log.warning("send-back of %s failed (%s); sending it to the retry topic", message, exc)
        try:
            await self._send_as_retry_message(pq, message, dead=delay_level < 0)
            return True
        except CometMQError as exc:
            log.warning("cannot send %s to the retry topic: %s", message, exc)
            return False

    async def _send_as_retry_message(self, pq: ProcessQueue, message: ReceivedMessage, dead: bool) -> None:
        """RocketMQ's sendMessageBackAsNormalMessage: a new message for ``%RETRY%<group>`` carrying
        the retry bookkeeping in its properties (or straight to ``%DLQ%<group>``)."""
        times = message.reconsume_times
        props = dict(message.properties)
        props.pop(PROPERTY_TRANSACTION_PREPARED, None)
        props.pop(PROPERTY_DELAY, None)
        props[PROPERTY_RETRY_TOPIC] = message.topic
        props[PROPERTY_ORIGIN_MESSAGE_ID] = props.get(PROPERTY_ORIGIN_MESSAGE_ID) or message.msg_id
        props[PROPERTY_RECONSUME_TIME] = str(times + 1)
        props[PROPERTY_MAX_RECONSUME_TIMES] = str(self._retry_limit)
        if not dead:
            props[PROPERTY_DELAY] = str(FIRST_RETRY_DELAY_LEVEL + times)
        header = send_header(
            CLIENT_INNER_PRODUCER_GROUP,
            dlq_topic(self.group) if dead else self._retry_topic,
            encode_properties(props),
            flag=message.flag,  # sysFlag 0: the body was inflated when it was pulled
            queue_id=0,
            reconsume_times=times + 1,
            max_reconsume_times=self._retry_limit,
        )
        await self._instance.invoke_ok(
            broker_addr_of(self._instance, pq.queue),
            RequestCode.SEND_MESSAGE_V2,
            header.encode(compact=True),
            message.body,
        )

    # offsets -----------------------------------------------------------------------------------

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(PERSIST_INTERVAL_S)
            try:
                await self._offsets.persist(list(self._pqs) if self._clustering else None)
            except (CometMQError, OSError) as exc:
                log.warning("cannot persist the offsets of %s: %s", self.group, exc)

    # helpers -----------------------------------------------------------------------------------

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)


def _is_async_callable(callback: object) -> bool:
    # A coroutine function, or an object whose __call__ is one.
    return inspect.iscoroutinefunction(callback) or inspect.iscoroutinefunction(type(callback).__call__)


async def _finish(tasks: list[asyncio.Task[Any]], cancel: bool = False) -> None:
    """Wait for tasks to end (cancelling them first if asked), swallowing what they raise."""
    if cancel:
        for task in tasks:
            task.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
