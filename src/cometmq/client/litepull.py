"""LitePullConsumer: the application pulls (``poll``) instead of registering a listener (asyncio).

Modelled on RocketMQ's DefaultLitePullConsumer and on aiokafka's consumer. Two ways to get queues:

* ``subscribe(topic, expression)``: the consumer joins its group (heartbeats) and the group's members
  split the topic's queues with RocketMQ's "averagely" allocation (docs/protocol.md#rebalance), rebalancing
  every 20 s and whenever a broker says the membership changed;
* ``assign(queues)``: exactly these queues, no group membership.

Either way a background task per assigned queue keeps pulling ahead (long polling on the broker) into
a bounded per-queue cache, so :meth:`LitePullConsumer.poll` only hands over what is already decoded.
A queue's *position* is the offset of the next message ``poll`` will return; ``commit`` stores the
positions as the group's consumer offsets on the brokers (docs/protocol.md#consumer-offsets), as
auto-commit does every ``auto_commit_interval`` seconds and on close.

:meth:`LitePullConsumer.read` is the bounded, low-level read for batch jobs (the Spark connector):
exactly the offsets ``[start, end)`` of one queue, no membership, no commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Any

from cometmq.auth import Credentials
from cometmq.client import _brokerapi
from cometmq.client._brokerapi import (
    LONG_POLL_SUSPEND_MS,
    LONG_POLL_TIMEOUT_S,
    PULL_LITE,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    PullStatus,
)
from cometmq.client._instance import POLL_NAMESRV_INTERVAL_RANGE_S, POLL_NAMESRV_INTERVAL_S, ClientInstance
from cometmq.client._lifecycle import RUNNING, Client, ClientState
from cometmq.client._offsets import (
    CONSUME_FROM_WHERE,
    ConsumeFrom,
    default_consume_timestamp,
    start_offset,
)
from cometmq.client._options import (
    check_choice,
    check_credentials,
    check_group,
    check_positive,
    check_range,
    tls_context,
)
from cometmq.client._rebalance import REBALANCE_INTERVAL_S, allocate_averagely
from cometmq.client.message import MessageQueue, ReceivedMessage
from cometmq.client.producer import trace_dispatcher
from cometmq.errors import ClientStateError, CometMQError, DataLossError
from cometmq.protocol.subscription import EXPRESSION_SQL92, EXPRESSION_TAG, SUB_ALL, SubscriptionData
from cometmq.protocol.trace import ConsumeReturnType
from cometmq.remoting import CLIENT_LIMIT_US, MAX_LIMIT_US

__all__ = ["ConsumeFrom", "LitePullConsumer"]

log = logging.getLogger("cometmq.client")

# A failed pull is retried after a pause.
PULL_RETRY_DELAY_S = 1.0
# The broker answers at most 256 KiB per pull, whatever maxMsgNums says; 1024 is plenty above that.
MAX_PULL_BATCH = 1024


class _QueueState:
    """One assigned queue: where pulling continues, where ``poll`` continues, and the cache between."""

    __slots__ = (
        "batches",
        "cached",
        "epoch",
        "fetch_offset",
        "in_ready",
        "paused",
        "position",
        "queue",
        "room",
        "task",
    )

    def __init__(self, queue: MessageQueue) -> None:
        self.queue = queue
        self.fetch_offset: int | None = None  # next offset to pull
        self.position: int | None = None  # next offset poll returns
        # Pulled batches not yet polled: (messages, offset after them). Empty batches advance the
        # position past messages the tag filter dropped.
        self.batches: deque[tuple[list[ReceivedMessage], int]] = deque()
        self.cached = 0
        self.paused = False
        self.in_ready = False
        self.epoch = 0  # bumped by seek: an answer to an older pull is not used
        self.room = asyncio.Event()  # set while the cache has room (and the queue is not paused)
        self.task: asyncio.Task[None] | None = None


class LitePullConsumer(Client):
    """A pull consumer of group ``group`` (clustering model) against the NameServer(s) ``namesrv``.

    ``consume_from`` says where a queue the group never committed an offset for starts: at its end
    (``"last"``), at its oldest message (``"first"``) or at ``consume_timestamp`` (ms since the epoch,
    default half an hour before the consumer was made; ``"timestamp"``). As with every RocketMQ
    client, the broker reports offset 0 for a young queue (docs/protocol.md#consumer-offsets), so a
    brand-new group reads such a queue from the start whatever this says.

    ``pull_batch_size`` is the most messages asked for per pull (1…1024; the broker also stops at
    256 KiB); ``pull_threshold_per_queue`` bounds the messages pulled ahead per queue;
    ``max_poll_messages`` is about the most one ``poll`` returns (whole pulled batches are handed over).
    ``busy_poll_us`` > 0 keeps the event loop polling its sockets after each request or response
    instead of sleeping, for a window that adapts to how soon replies come, at most that many µs, and
    closes when traffic stops (:mod:`cometmq.remoting.busypoll`); ``busy_poll_adaptive=False`` polls
    the whole ``busy_poll_us`` every time; 0 never polls. ``poll_name_server_interval`` is how often
    (seconds) the routes are looked up again (RocketMQ's pollNameServerInterval); a pull that cannot
    reach its broker looks its topic's route up at once, so a consumer whose master died goes on from a
    slave without waiting.
    ``credentials`` (:class:`cometmq.auth.Credentials`) sign every request, for servers with aclEnable;
    ``tls`` is False (plain TCP), True (TLS checked against the system's CAs and the server's name) or
    an :class:`ssl.SSLContext` of your own (a private CA, a client certificate).
    ``trace`` writes trace records of the messages each ``poll`` hands over (SubBefore and SubAfter, as
    the Java lite pull consumer writes them, marked successful) to ``trace_topic`` (default
    RMQ_SYS_TRACE_TOPIC) (docs/client.md#message-trace).
    """

    kind = "lite pull consumer"

    def __init__(
        self,
        group: str,
        namesrv: str,
        *,
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
        pull_batch_size: int = 32,
        poll_timeout: float = 5.0,
        consume_from: ConsumeFrom = "last",
        consume_timestamp: int | None = None,
        instance_name: str | None = None,
        pull_threshold_per_queue: int = 1024,
        max_poll_messages: int = 1024,
        request_timeout: float = 3.0,
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
        self._ssl_context = tls_context(tls)
        self._credentials = credentials
        check_positive("auto_commit_interval", auto_commit_interval)
        check_range("pull_batch_size", pull_batch_size, 1, MAX_PULL_BATCH)
        check_range("poll_timeout", poll_timeout, 0)
        check_choice("consume_from", consume_from, CONSUME_FROM_WHERE)
        check_range("pull_threshold_per_queue", pull_threshold_per_queue, 1)
        check_range("max_poll_messages", max_poll_messages, 1)
        check_positive("request_timeout", request_timeout)
        check_range("busy_poll_us", busy_poll_us, 0, MAX_LIMIT_US)
        check_range("poll_name_server_interval", poll_name_server_interval, *POLL_NAMESRV_INTERVAL_RANGE_S)
        super().__init__()
        self.group = group
        self.namesrv = namesrv
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval
        self.pull_batch_size = pull_batch_size
        self.poll_timeout = poll_timeout
        self.consume_from: ConsumeFrom = consume_from
        self.consume_timestamp = (
            consume_timestamp if consume_timestamp is not None else default_consume_timestamp()
        )
        self.pull_threshold_per_queue = pull_threshold_per_queue
        self.max_poll_messages = max_poll_messages
        self._instance_name = instance_name
        self._request_timeout = request_timeout
        self._busy_poll_us = busy_poll_us
        self._busy_poll_adaptive = busy_poll_adaptive
        self._poll_name_server_interval = poll_name_server_interval
        self._instance: ClientInstance | None = None
        self._subscriptions: dict[str, SubscriptionData] = {}
        self._subscriptions_all: dict[str, SubscriptionData] = {}  # "*" for assigned queues
        self._assigned_by_user = False
        self._states: dict[MessageQueue, _QueueState] = {}
        self._ready: deque[_QueueState] = deque()
        # Each waiting poll's future, resolved when a batch is ready (or by the poll's own timer).
        self._pollers: list[asyncio.Future[None]] = []
        self._committed: dict[MessageQueue, int] = {}
        self._pull_from: dict[MessageQueue, int] = {}  # the broker id each queue's last pull suggested
        self._rebalance_wanted: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._trace = None
        if trace:
            ssl_context = self._ssl_context
            self._trace = trace_dispatcher(group, "CONSUME", namesrv, credentials, ssl_context, trace_topic)

    # life cycle --------------------------------------------------------------------------------

    async def _start(self) -> None:
        """Connect, join the group if subscribed, and start pulling the assigned queues."""
        self._instance = ClientInstance(
            self.namesrv,
            instance_name=self._instance_name,
            request_timeout=self._request_timeout,
            route_refresh_interval=self._poll_name_server_interval,
            busy_poll_us=self._busy_poll_us,
            busy_poll_adaptive=self._busy_poll_adaptive,
            credentials=self._credentials,
            ssl_context=self._ssl_context,
        )
        self._instance.start()
        if self._trace is not None:
            await self._trace.start()
        self._rebalance_wanted = asyncio.Event()
        for state in self._states.values():
            self._start_pulling(state)
        if self._subscriptions:
            await self._join_group()
        self._tasks.append(asyncio.create_task(self._rebalance_loop()))
        if self.auto_commit:
            self._tasks.append(asyncio.create_task(self._auto_commit_loop()))

    async def _close(self, timeout: float) -> None:
        """Stop pulling, commit the positions (with ``auto_commit``; waiting up to ``timeout`` s for
        the brokers to confirm), leave the group, disconnect."""
        deadline = time.monotonic() + timeout
        tasks = [*self._tasks, *(s.task for s in self._states.values() if s.task is not None)]
        for task in tasks:
            task.cancel()
        # A task that had already failed must not stop the close: report it and go on.
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, Exception):
                log.warning("%s: a background task had failed: %r", self.group, outcome)
        if self._instance is None:  # its start failed before it connected
            return
        try:
            if self.auto_commit:
                try:
                    await asyncio.wait_for(self._commit_positions(only_changed=True), timeout)
                except (CometMQError, TimeoutError) as exc:
                    log.warning("%s: cannot commit offsets on close: %r", self.group, exc)
        finally:
            if self._trace is not None:
                await self._trace.close(deadline - time.monotonic())
            # Closing the instance first sends UNREGISTER_CLIENT for the group it still knows.
            await self._instance.close()
            self._instance.unregister_consumer(self.group)

    @property
    def instance(self) -> ClientInstance:
        """The client instance (connections, routes) of a started consumer (still there while it
        closes: the last commit uses it)."""
        if self._instance is None or self._state is ClientState.CLOSED:
            raise ClientStateError(self._not_running())
        return self._instance

    # choosing queues ---------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = SUB_ALL, *, sql92: bool = False) -> None:
        """Consume ``topic``'s messages matching ``expression`` as a member of the group (the
        group's members share its queues): ``*``, tags joined by ``||`` (``"TagA || TagB"``), or
        with ``sql92=True`` an SQL92 condition on message properties, which the broker evaluates (it
        must run with ``enablePropertyFilter=true``)."""
        if self._assigned_by_user:
            raise CometMQError("subscribe() and assign() cannot be mixed on one consumer")
        self._subscriptions[topic] = SubscriptionData.from_expression(
            topic, expression, EXPRESSION_SQL92 if sql92 else EXPRESSION_TAG, int(time.time() * 1000)
        )
        if self._state is ClientState.RUNNING:
            self._tasks.append(asyncio.create_task(self._join_group()))

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` (its queues are released at once)."""
        if self._subscriptions.pop(topic, None) is None:
            return
        self._set_assignment({q for q in self._states if q.topic != topic})
        if self._rebalance_wanted is not None:
            self._rebalance_wanted.set()

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly ``queues`` (see :meth:`fetch_queues`), outside any group membership.

        A queue starts at the group's committed offset, else where ``consume_from`` says."""
        if self._subscriptions:
            raise CometMQError("subscribe() and assign() cannot be mixed on one consumer")
        self._assigned_by_user = True
        self._set_assignment(set(queues))

    def assignment(self) -> set[MessageQueue]:
        """The queues this consumer reads now."""
        return set(self._states)

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic``, sorted (topic, broker, queue id), from a fresh route."""
        instance = self.instance
        route = await instance.fetch_route(topic)
        if route is None:
            raise CometMQError(f"topic {topic!r} is not routed by any name server (does it exist?)")
        return await instance.subscribe_queues(topic)

    # positions ---------------------------------------------------------------------------------

    def seek(self, queue: MessageQueue, offset: int) -> None:
        """Continue ``queue`` at ``offset``: the next ``poll`` returns its messages from there on.
        Messages pulled ahead from the old position are dropped."""
        state = self._queue_state(queue)
        state.epoch += 1
        state.fetch_offset = offset
        state.position = offset
        state.batches.clear()
        state.cached = 0
        if self._state is ClientState.RUNNING:
            if state.task is not None:
                state.task.cancel()
            self._start_pulling(state)

    async def seek_to_beginning(self, queue: MessageQueue) -> None:
        """Continue ``queue`` at its oldest message."""
        self._queue_state(queue)
        self.seek(queue, await self.begin_offset(queue))

    async def seek_to_end(self, queue: MessageQueue) -> None:
        """Continue ``queue`` after its newest message (only what arrives from now on)."""
        self._queue_state(queue)
        self.seek(queue, await self.end_offset(queue))

    async def offset_for_timestamp(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """The offset of the message stored nearest ``timestamp_ms`` (RocketMQ's search,
        docs/protocol.md#search-by-timestamp): past the newest message, the newest message's offset;
        an empty queue, 0."""
        await self._route_of(queue)
        return await _brokerapi.offset_for_timestamp(self.instance, queue, timestamp_ms)

    def position(self, queue: MessageQueue) -> int | None:
        """The offset of the next message ``poll`` returns from ``queue``; None until the queue's
        start is known (committed offset or ``consume_from`` looked up)."""
        return self._queue_state(queue).position

    async def committed(self, queue: MessageQueue) -> int | None:
        """The group's committed offset of ``queue`` on its broker; None if none was committed."""
        await self._route_of(queue)
        return await _brokerapi.query_offset(self.instance, queue, self.group)

    async def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        """Store offsets for the group on the brokers and wait for them to confirm. Without
        ``offsets``: the position of every assigned queue (what ``poll`` has returned so far)."""
        if offsets is None:
            await self._commit_positions(only_changed=False)
            return
        await self._commit(offsets)

    async def begin_offset(self, queue: MessageQueue) -> int:
        """The offset of the oldest message ``queue`` still holds (its min offset)."""
        await self._route_of(queue)
        return await _brokerapi.min_offset(self.instance, queue)

    async def end_offset(self, queue: MessageQueue) -> int:
        """The offset the next message written to ``queue`` gets (its max offset)."""
        await self._route_of(queue)
        return await _brokerapi.max_offset(self.instance, queue)

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        """Stop returning (and pulling) messages of ``queues`` until :meth:`resume`; what was pulled
        ahead is kept."""
        for queue in queues:
            state = self._queue_state(queue)
            state.paused = True
            state.room.clear()

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        """Undo :meth:`pause`."""
        for queue in queues:
            state = self._queue_state(queue)
            if not state.paused:
                continue
            state.paused = False
            if state.cached < self.pull_threshold_per_queue:
                state.room.set()
            if state.batches:
                self._mark_ready(state)

    def paused(self) -> set[MessageQueue]:
        """The queues :meth:`pause` stopped and :meth:`resume` has not restarted."""
        return {q for q, s in self._states.items() if s.paused}

    # consuming ---------------------------------------------------------------------------------

    async def poll(self, timeout: float | None = None) -> list[ReceivedMessage]:
        """The next messages of the assigned queues, in offset order within each queue; waits up to
        ``timeout`` seconds (default ``poll_timeout``) for some to arrive, else returns ``[]``."""
        if self._state is not RUNNING:
            self._check_running()
        messages = self._drain()
        if messages:
            return messages
        wait = self.poll_timeout if timeout is None else timeout
        if wait <= 0:
            return messages
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            # A future and a bare timer rather than asyncio.wait_for(event.wait()), which runs the
            # wait as a task of its own: three loop steps from a pulled batch to poll, not one
            # (``cometmq bench latency``).
            waiter = loop.create_future()
            self._pollers.append(waiter)
            timer = loop.call_later(remaining, _release, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._pollers.remove(waiter)
            messages = self._drain()
            if messages:
                return messages

    def _drain(self) -> list[ReceivedMessage]:
        out: list[ReceivedMessage] = []
        ready = self._ready
        limit = self.max_poll_messages
        threshold = self.pull_threshold_per_queue
        while ready and len(out) < limit:
            state = ready.popleft()
            state.in_ready = False
            if state.paused or not state.batches:
                continue
            messages, next_offset = state.batches.popleft()
            state.cached -= len(messages)
            out += messages
            state.position = next_offset
            if state.batches:
                state.in_ready = True
                ready.append(state)  # round robin: one batch per queue per turn
            if state.cached < threshold:
                state.room.set()
        if self._trace is not None and out:
            self._traced(out)
        return out

    def _traced(self, messages: list[ReceivedMessage]) -> None:
        """The trace records of messages handed over: a SubBefore and, at once, a successful SubAfter,
        as RocketMQ's DefaultLitePullConsumer writes them (it cannot know how the application fares)."""
        assert self._trace is not None
        before = self._trace.consuming(self.group, messages)
        if before is not None:
            self._trace.consumed(before, ConsumeReturnType.SUCCESS)

    async def read(
        self, queue: MessageQueue, start: int, end: int, *, max_batch: int = MAX_PULL_BATCH
    ) -> AsyncIterator[list[ReceivedMessage]]:
        """The messages of ``queue`` at offsets ``[start, end)``, exactly, in order, in batches.

        For batch jobs: no group membership, no commit, independent of ``poll``. Offsets not yet
        written are waited for (long polling). If retention already deleted part of the range,
        :class:`DataLossError` is raised instead of skipping anything.
        """
        if start >= end:
            return
        instance = self.instance
        await self._route_of(queue)
        subscription = SubscriptionData(queue.topic)
        max_batch = max(1, min(max_batch, MAX_PULL_BATCH))

        def pull_at(offset: int) -> asyncio.Task[_brokerapi.PullResult]:
            return asyncio.ensure_future(
                _brokerapi.pull(
                    instance,
                    queue,
                    self.group,
                    subscription,
                    offset,
                    min(max_batch, end - offset),
                    sys_flag=PULL_SUBSCRIPTION | PULL_SUSPEND | PULL_LITE,
                    suspend_ms=LONG_POLL_SUSPEND_MS,
                    timeout=LONG_POLL_TIMEOUT_S,
                )
            )

        offset = start
        pending = pull_at(offset)
        try:
            while offset < end:
                result = await pending
                if result.status is PullStatus.FOUND and result.messages:
                    messages = result.messages
                    first = messages[0].queue_offset
                    if first != offset:
                        raise DataLossError(queue, offset, first)
                    last = messages[-1].queue_offset
                    if last - first + 1 != len(messages):
                        raise DataLossError(queue, *_first_gap(messages))
                    if last >= end:
                        messages = [m for m in messages if m.queue_offset < end]
                    offset = last + 1
                    # Ask for the next batch before handing this one over: the pull travels while the
                    # caller works.
                    if offset < end:
                        pending = pull_at(offset)
                    yield messages
                    continue
                if result.status is PullStatus.OFFSET_ILLEGAL and offset < result.min_offset:
                    raise DataLossError(queue, offset, result.min_offset)
                if result.status is PullStatus.OFFSET_ILLEGAL:
                    raise CometMQError(
                        f"{queue}: offset {offset} is beyond the queue's end {result.max_offset}"
                    )
                if result.status is PullStatus.NO_MATCHED_MSG:
                    # Nothing is filtered here, so skipped units are messages being deleted.
                    raise DataLossError(queue, offset, max(result.next_begin_offset, result.min_offset))
                pending = pull_at(offset)  # NO_NEW_MSG after the hold: keep waiting
        finally:
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, CometMQError):
                    await pending

    # internals: assignment and pulling ---------------------------------------------------------

    def _queue_state(self, queue: MessageQueue) -> _QueueState:
        state = self._states.get(queue)
        if state is None:
            raise CometMQError(f"queue {queue} is not assigned to this consumer")
        return state

    async def _route_of(self, queue: MessageQueue) -> None:
        instance = self.instance
        if not instance.knows_broker(queue.broker_name):
            await instance.fetch_route(queue.topic)

    def _set_assignment(self, queues: set[MessageQueue]) -> None:
        for queue in [q for q in self._states if q not in queues]:
            state = self._states.pop(queue)
            if state.task is not None:
                state.task.cancel()
            state.batches.clear()
            state.cached = 0
            self._committed.pop(queue, None)
            self._pull_from.pop(queue, None)
        for queue in sorted(queues):
            if queue not in self._states:
                state = self._states[queue] = _QueueState(queue)
                state.room.set()
                if self._state is ClientState.RUNNING:
                    self._start_pulling(state)

    def _start_pulling(self, state: _QueueState) -> None:
        state.task = asyncio.create_task(self._pull_loop(state, state.epoch))

    def _mark_ready(self, state: _QueueState) -> bool:
        """Queue ``state`` for poll; True if a waiting poll was woken."""
        if not state.in_ready:
            state.in_ready = True
            self._ready.append(state)
        woken = False
        for waiter in self._pollers:
            woken |= _release(waiter)
        return woken

    def _subscription(self, topic: str) -> SubscriptionData:
        sub = self._subscriptions.get(topic)
        if sub is None:
            sub = self._subscriptions_all.get(topic)
            if sub is None:
                sub = self._subscriptions_all[topic] = SubscriptionData(topic)
        return sub

    async def _initial_offset(self, queue: MessageQueue) -> int:
        instance = self.instance
        await self._route_of(queue)
        committed = await _brokerapi.query_offset(instance, queue, self.group)
        if committed is not None and committed >= 0:
            self._committed[queue] = committed
            return committed
        return await start_offset(instance, queue, self.group, self.consume_from, self.consume_timestamp)

    async def _pull_loop(self, state: _QueueState, epoch: int) -> None:
        queue = state.queue
        instance = self.instance
        while True:
            try:
                if state.fetch_offset is None:
                    offset = await self._initial_offset(queue)
                    if state.epoch != epoch:
                        return
                    state.fetch_offset = offset
                    if state.position is None:
                        state.position = offset
                if state.paused or state.cached >= self.pull_threshold_per_queue:
                    state.room.clear()
                    await state.room.wait()
                    continue
                await self._route_of(queue)
                result = await _brokerapi.pull(
                    instance,
                    queue,
                    self.group,
                    self._subscription(queue.topic),
                    state.fetch_offset,
                    self.pull_batch_size,
                    sys_flag=PULL_SUBSCRIPTION | PULL_SUSPEND | PULL_LITE,
                    suspend_ms=LONG_POLL_SUSPEND_MS,
                    timeout=LONG_POLL_TIMEOUT_S,
                    pull_from=self._pull_from,
                )
            except asyncio.CancelledError:
                raise
            except CometMQError as exc:
                log.warning("%s: pulling %s failed: %s", self.group, queue, exc)
                await instance.refresh_route_if_unreachable(queue.topic, exc)
                await asyncio.sleep(PULL_RETRY_DELAY_S)
                continue
            if state.epoch != epoch:
                return  # a seek restarted this queue
            status = result.status
            if status is PullStatus.NO_NEW_MSG:
                state.fetch_offset = result.next_begin_offset
                continue
            if status is PullStatus.OFFSET_ILLEGAL:
                log.warning(
                    "%s: offset %d of %s is illegal (queue holds %d..%d); continuing at %d",
                    self.group,
                    state.fetch_offset,
                    queue,
                    result.min_offset,
                    result.max_offset,
                    result.next_begin_offset,
                )
            # FOUND, NO_MATCHED_MSG (all filtered) and OFFSET_ILLEGAL all move the position on; a
            # batch (even an empty one) carries the move to poll, in order with earlier batches.
            state.fetch_offset = result.next_begin_offset
            messages = result.messages
            state.batches.append((messages, result.next_begin_offset))
            state.cached += len(messages)
            woke_poll = not state.paused and self._mark_ready(state)
            if woke_poll and result.next_begin_offset >= result.max_offset:
                # A poll was waiting and the queue has nothing more (the next pull will be held): let
                # the poll take the batch before this task writes that pull, whose send would delay
                # the handover (bench latency). Behind, the next pull goes out first (bench consume).
                await asyncio.sleep(0)

    # internals: group membership ---------------------------------------------------------------

    async def _join_group(self) -> None:
        instance = self.instance
        for topic in self._subscriptions:
            try:
                await instance.fetch_route(topic)
            except CometMQError as exc:
                log.warning("%s: cannot fetch the route of %s: %s", self.group, topic, exc)
        with contextlib.suppress(CometMQError):  # already registered: only the subscriptions changed
            instance.register_consumer(self)
        await instance.send_heartbeat()
        await self._rebalance()

    async def _rebalance_loop(self) -> None:
        wanted = self._rebalance_wanted
        assert wanted is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wanted.wait(), REBALANCE_INTERVAL_S)
            wanted.clear()
            if not self._subscriptions:
                continue
            try:
                await self._rebalance()
            except CometMQError as exc:
                log.warning("%s: rebalance failed: %s", self.group, exc)

    async def _rebalance(self) -> None:
        instance = self.instance
        mine: set[MessageQueue] = set()
        for topic in list(self._subscriptions):
            queues = await instance.subscribe_queues(topic)
            if not queues:
                continue
            client_ids = await _brokerapi.consumer_ids(instance, queues[0], self.group)
            if instance.client_id not in client_ids:
                # The broker has not seen this member's heartbeat yet (or restarted): keep what is
                # held rather than release everything, and say hello again.
                await instance.send_heartbeat()
                mine.update(q for q in self._states if q.topic == topic)
                continue
            mine.update(allocate_averagely(queues, client_ids, instance.client_id))
        released = [q for q in self._states if q not in mine]
        if released and self.auto_commit:
            # Hand the released queues over where this member stopped (RocketMQ persists the offset
            # of a removed queue before dropping it).
            positions = {q: p for q in released if (p := self._states[q].position) is not None}
            try:
                await self._commit(positions)
            except CometMQError as exc:
                log.warning("%s: cannot commit released queues: %s", self.group, exc)
        self._set_assignment(mine)

    # ConsumerMember (what the client instance asks of a registered consumer)

    def consumer_data(self) -> dict[str, Any]:
        """Hook for the client instance: this consumer's ConsumerData for heartbeats."""
        return {
            "groupName": self.group,
            "consumeType": "CONSUME_ACTIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": CONSUME_FROM_WHERE[self.consume_from],
            "subscriptionDataSet": [sub.to_json() for sub in self._subscriptions.values()],
            "unitMode": False,
        }

    def on_ids_changed(self) -> None:
        """Hook for the client instance: a broker says the group's members changed; rebalance."""
        if self._rebalance_wanted is not None:
            self._rebalance_wanted.set()

    def on_reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Hook for the client instance: an administrator reset the group's offsets; continue there."""
        for queue, offset in offsets.items():
            if queue in self._states:
                self.seek(queue, offset)

    def running_info(self) -> dict[str, Any]:
        """Hook for the client instance: the ConsumerRunningInfo a broker relays to admin tools."""
        return {
            "properties": {
                "consumeType": "CONSUME_ACTIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": CONSUME_FROM_WHERE[self.consume_from],
                "pullBatchSize": str(self.pull_batch_size),
                "autoCommit": str(self.auto_commit).lower(),
            },
            "subscriptionSet": [sub.to_json() for sub in self._subscriptions.values()],
        }

    # internals: commits ------------------------------------------------------------------------

    async def _commit(self, offsets: dict[MessageQueue, int]) -> None:
        instance = self.instance
        for queue in offsets:
            await self._route_of(queue)
        items = list(offsets.items())
        results = await asyncio.gather(
            *(_brokerapi.commit_offset(instance, q, self.group, o) for q, o in items), return_exceptions=True
        )
        failure: BaseException | None = None
        for (queue, offset), result in zip(items, results, strict=True):
            if isinstance(result, BaseException):
                failure = failure or result
            elif result:  # one a slave holds is committed again, until the master has it
                self._committed[queue] = offset
        if failure is not None:
            raise failure

    async def _commit_positions(self, only_changed: bool) -> None:
        offsets = {
            q: s.position
            for q, s in self._states.items()
            if s.position is not None and not (only_changed and self._committed.get(q) == s.position)
        }
        if offsets:
            await self._commit(offsets)

    async def _auto_commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.auto_commit_interval)
            try:
                await self._commit_positions(only_changed=True)
            except CometMQError as exc:
                log.warning("%s: auto-commit failed: %s", self.group, exc)


def _release(waiter: asyncio.Future[None]) -> bool:
    """Wake a waiting poll; False if it had its answer already (woken, timed out or cancelled)."""
    if waiter.done():
        return False
    waiter.set_result(None)
    return True


def _first_gap(messages: list[ReceivedMessage]) -> tuple[int, int]:
    """The first missing offset of a batch with a gap, and the offset available after it."""
    for before, after in itertools.pairwise(messages):
        if after.queue_offset != before.queue_offset + 1:
            return before.queue_offset + 1, after.queue_offset
    return messages[-1].queue_offset + 1, messages[-1].queue_offset + 1
