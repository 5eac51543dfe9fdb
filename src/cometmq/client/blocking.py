"""Blocking clients for scripts, notebooks and Spark executors.

``Producer``, ``PushConsumer``, ``LitePullConsumer``, ``SimpleConsumer`` and ``AdminClient`` here take
the same arguments as their asyncio counterparts and have the same methods, synchronous: each call runs
the asyncio method on one event loop shared by every blocking client of the process, in a daemon thread
named ``cometmq-client-loop``. The thread starts with the first blocking client and stops when the last
one is closed (or garbage-collected: a client that is dropped without ``close()`` is closed then, so its
sockets never leak).

    >>> from cometmq.client.blocking import LitePullConsumer
    >>> with LitePullConsumer("GID_report", "127.0.0.1:9876", consume_from="first") as consumer:
    ...     consumer.subscribe("Orders")
    ...     messages = consumer.poll(timeout=5)

Methods are forwarded generically, so the facade follows the asyncio classes as they grow:
coroutine methods block until done, async iterators (``LitePullConsumer.read``) become plain
iterators, other methods run on the loop thread (they may touch the loop's objects) and return their
result. Callbacks run where the asyncio class runs them: a ``PushConsumer`` listener that is a plain
function runs in the consumer's worker threads, ``Producer.send_with_callback`` callbacks on the loop
thread (keep them short). The clients are thread-safe: several threads may call one at once.

For type checkers each class declares its asyncio counterpart's constructor, methods and properties
with blocking return types, under ``TYPE_CHECKING`` so nothing changes at run time;
``tests/client/test_blocking_types.py`` fails when the declarations fall out of step.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import importlib
import inspect
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from cometmq.client._lifecycle import ClientState
from cometmq.client.message import Message, MessageQueue, SendResult, SendStatus
from cometmq.client.transaction import TransactionSendResult, TransactionState
from cometmq.errors import ClientStateError

if TYPE_CHECKING:
    import ssl
    from collections.abc import Iterable, Mapping
    from pathlib import Path
    from typing import Literal

    from cometmq.auth import Acl, Credentials, PolicyType, User, UserStatus, UserType
    from cometmq.client._brokerapi import PullResult
    from cometmq.client._offsets import ConsumeFrom
    from cometmq.client.admin import (
        ClientConnection,
        ConsumeProgress,
        ConsumerConnections,
        QueueStatus,
        Resent,
        ResetResult,
        TopicTraffic,
    )
    from cometmq.client.consumer import Listener
    from cometmq.client.message import ReceivedMessage
    from cometmq.client.producer import QueueSelector, SendCallback
    from cometmq.client.transaction import CheckFn
    from cometmq.client.transaction import Transaction as AsyncTransaction
    from cometmq.client.transaction import TransactionProducer as AsyncTransactionProducer
    from cometmq.protocol.broker_stats import BrokerStatsData, StatsName
    from cometmq.protocol.ha_status import HARuntimeInfo
    from cometmq.protocol.record import DecodedRecord
    from cometmq.protocol.route import BrokerData, ClusterInfo, TopicRouteData
    from cometmq.protocol.subscription import SubscriptionData
    from cometmq.protocol.subscription_group import SubscriptionGroupConfig
    from cometmq.protocol.topic_config import TopicConfig
    from cometmq.protocol.trace import TraceContext

__all__ = [
    "AdminClient",
    "LitePullConsumer",
    "Producer",
    "PushConsumer",
    "SimpleConsumer",
    "Transaction",
    "TransactionProducer",
]

log = logging.getLogger("cometmq.client")

T = TypeVar("T")

LOOP_THREAD_NAME = "cometmq-client-loop"
# How long closing a dropped (garbage-collected) client may take before it is abandoned.
_FINALIZE_TIMEOUT_S = 15.0


class _SharedLoop:
    """The one event loop thread of the blocking clients, reference-counted by open clients."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def acquire(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    try:
                        loop.run_forever()
                    finally:
                        _shutdown_loop(loop)

                thread = threading.Thread(target=run, name=LOOP_THREAD_NAME, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            self._users += 1
            return self._loop

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users > 0 or self._loop is None or self._thread is None:
                return
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if threading.current_thread() is thread:
            # Released on the loop itself (a client collected there): the loop stops after this
            # callback and the thread finishes what is pending and closes it on its way out.
            loop.stop()
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop when installed, as the servers use it (COMETMQ_EVENT_LOOP=asyncio
    keeps the standard one)."""
    if os.environ.get("COMETMQ_EVENT_LOOP", "uvloop") != "asyncio":
        with contextlib.suppress(ImportError):
            import uvloop

            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def _shutdown_loop(loop: asyncio.AbstractEventLoop) -> None:
    # Runs in the loop thread after the last client let go. Closes still under way (of a client
    # collected on the loop) may finish; whatever else a client left behind is cancelled, so nothing
    # keeps sockets open once the last client is gone.
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if pending:
        loop.run_until_complete(asyncio.wait(pending, timeout=_FINALIZE_TIMEOUT_S))
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


_SHARED = _SharedLoop()


def loop_thread() -> threading.Thread | None:
    """The shared event-loop thread, or None while no blocking client is open."""
    return _SHARED.thread


def _on_the_loop_thread() -> bool:
    return _SHARED.thread is threading.current_thread()


def _check_off_the_loop(coro: Coroutine[Any, Any, Any] | None = None) -> None:
    """A blocking call on the loop thread would wait for itself (or stall the loop): refuse it, and
    close the call's *coro*, which then never runs (so it warns of no "never awaited")."""
    if _on_the_loop_thread():
        if coro is not None:
            coro.close()
        raise RuntimeError("a blocking CometMQ client was called from its own event loop thread")


def _run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the shared loop and wait for its result (from any thread but the loop's)."""
    _check_off_the_loop(coro)
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return future.result()
    except BaseException:
        if not future.done():  # interrupted (KeyboardInterrupt): stop the operation too
            future.cancel()
        raise


async def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` on the loop, and what it hands back awaited if it is awaitable."""
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


async def _construct(cls: type[T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    # On the loop: asyncio objects may look for the running loop when they are created.
    return cls(*args, **kwargs)


def _close_client(loop: asyncio.AbstractEventLoop, client: Any, timeout: float | None = None) -> None:
    """Close ``client`` on the loop (from any thread), with its ``close(timeout)`` (its default
    timeout when None), then let go of the loop."""
    try:
        close = getattr(client, "close", None)
        if close is None:
            return
        args = () if timeout is None else (timeout,)
        if _SHARED.thread is threading.current_thread():
            result = close(*args)
            if inspect.isawaitable(result):
                loop.create_task(_await_quietly(result))
            return
        future = asyncio.run_coroutine_threadsafe(_call(close, *args), loop)
        try:
            future.result(_FINALIZE_TIMEOUT_S + (timeout or 0.0))
        except Exception as exc:
            log.warning("closing %s failed: %s", type(client).__name__, exc)
    finally:
        _SHARED.release()


async def _await_quietly(awaitable: Any) -> None:
    try:
        await awaitable
    except Exception as exc:
        log.warning("closing a collected client failed: %s", exc)


class _BlockingClient:
    """Wraps one asyncio client object and forwards every public attribute to it synchronously."""

    _target = ""  # "module:Class" of the asyncio client, imported on first use

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        module, _, name = self._target.partition(":")
        cls = getattr(importlib.import_module(module), name)
        loop = _SHARED.acquire()
        try:
            client = _run(loop, _construct(cls, args, kwargs))
        except BaseException:
            _SHARED.release()
            raise
        self._loop = loop
        self._client = client
        # Runs once: on close(), when this wrapper is collected, or at interpreter exit. It holds the
        # asyncio client, never the wrapper, so the wrapper can be collected.
        self._finalizer = weakref.finalize(self, _close_client, loop, client)

    @property
    def aio(self) -> Any:
        """The wrapped asyncio client (use it only on the shared loop)."""
        return self._client

    @property
    def closed(self) -> bool:
        """Whether the client was closed (by ``close``, a ``with`` block's end or garbage collection)."""
        return not self._finalizer.alive

    @property
    def state(self) -> ClientState:
        """Where the asyncio client is in its life cycle."""
        state: ClientState = self._client.state
        return state

    def close(self, timeout: float | None = None) -> None:
        """Close the client (its sockets and tasks), waiting up to ``timeout`` seconds for work in
        progress (the asyncio client's default when None); the loop thread stops with the last client."""
        if self._finalizer.detach() is not None:  # None once closed: closing again does nothing
            _close_client(self._loop, self._client, timeout)

    def __enter__(self) -> Self:
        if callable(getattr(type(self._client), "start", None)):
            try:
                self.__getattr__("start")()
            except BaseException:
                self.close()
                raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        client = self.__dict__.get("_client")
        if client is None:
            raise AttributeError(name)
        attr = getattr(type(client), name, None)
        if inspect.iscoroutinefunction(attr):
            return self._blocking(getattr(client, name))
        if inspect.isasyncgenfunction(attr):
            return self._iterating(getattr(client, name))
        if callable(attr) and not isinstance(attr, type):
            return self._on_loop(getattr(client, name))
        if isinstance(attr, property) and self._finalizer.alive and not _on_the_loop_thread():
            # Computed on the loop: a property may walk state the loop changes meanwhile (a consumer's
            # queues during a rebalance), which from another thread can fail mid-way ("dictionary
            # changed size during iteration"). Once closed, nothing changes it any more.
            return _run(self._loop, _call(getattr, client, name))
        return getattr(client, name)  # plain data attributes: one read, safe from any thread

    def _check_open(self) -> None:
        if not self._finalizer.alive:
            raise ClientStateError(f"this blocking {type(self).__name__} is closed: make a new one")

    def _blocking(self, method: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            self._check_open()
            return _run(self._loop, method(*args, **kwargs))

        return call

    def _on_loop(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            self._check_open()
            return _run(self._loop, _call(method, *args, **kwargs))

        return call

    def _iterating(self, method: Callable[..., AsyncIterator[Any]]) -> Callable[..., Iterator[Any]]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Iterator[Any]:
            self._check_open()
            return _iterate(self._loop, method(*args, **kwargs))

        return call

    def __iter__(self) -> Iterator[Any]:
        """``for message in consumer`` where the asyncio client supports ``async for``."""
        if not hasattr(self._client, "__anext__"):
            raise TypeError(f"{type(self).__name__} is not iterable")
        self._check_open()
        return _iterate(self._loop, self._client)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<blocking {type(self._client).__name__} ({state})>"


def _iterate(loop: asyncio.AbstractEventLoop, iterator: AsyncIterator[Any]) -> Iterator[Any]:
    async def step() -> tuple[bool, Any]:
        try:
            return True, await iterator.__anext__()
        except StopAsyncIteration:
            return False, None

    try:
        while True:
            more, item = _run(loop, step())
            if not more:
                return
            yield item
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError, concurrent.futures.CancelledError):
                _run(loop, aclose())


class Producer(_BlockingClient):
    """Blocking :class:`cometmq.client.producer.Producer`: ``Producer(group, namesrv, **options)``,
    then ``start()``, ``send(msg)``, ``send_batch(msgs)``, ``send_oneway(msg)``, ``close()``.

    ``send`` and ``send_batch`` write the request and read the broker's answer on the calling thread,
    over a socket of their own per broker, rather than handing the send to the loop thread and
    waiting for it there (half the latency of a send on a 2-core machine). The loop still finds the
    routes, and takes over a send whose first attempt fails (retries on another broker), that needs
    a route it has not looked up yet, or that finds that socket in use by another thread.
    """

    _target = "cometmq.client.producer:Producer"

    if TYPE_CHECKING:
        # For type checkers only: at run time __getattr__ forwards these to the asyncio client.
        # tests/client/test_blocking_types.py keeps them in step with it.
        def __init__(
            self,
            group: str,
            namesrv: str,
            *,
            instance_name: str | None = ...,
            send_timeout: float = ...,
            retry_times: int = ...,
            compress_over: int = ...,
            max_message_size: int = ...,
            fault_avoidance: bool = ...,
            queue_selector: QueueSelector | None = ...,
            busy_poll_us: int = ...,
            busy_poll_adaptive: bool = ...,
            poll_name_server_interval: float = ...,
            credentials: Credentials | None = ...,
            tls: bool | ssl.SSLContext = ...,
            trace: bool = ...,
            trace_topic: str | None = ...,
            inner_batches: bool = ...,
        ) -> None: ...
        @property
        def client_id(self) -> str: ...
        def fetch_publish_queues(self, topic: str) -> list[MessageQueue]: ...
        def send_oneway(
            self, msg: Message, *, queue: MessageQueue | None = ..., sharding_key: str | None = ...
        ) -> None: ...
        def send_with_callback(
            self,
            msg: Message,
            callback: SendCallback,
            *,
            queue: MessageQueue | None = ...,
            sharding_key: str | None = ...,
        ) -> None: ...
        def start(self) -> None: ...

    def send(
        self, msg: Message, *, queue: MessageQueue | None = None, sharding_key: str | None = None
    ) -> SendResult:
        """As :meth:`cometmq.client.producer.Producer.send`, blocking."""
        self._check_direct_call()
        return self._finish(self._client._send_direct(msg, queue, sharding_key))

    def send_batch(
        self, msgs: Sequence[Message], *, queue: MessageQueue | None = None, sharding_key: str | None = None
    ) -> SendResult:
        """As :meth:`cometmq.client.producer.Producer.send_batch`, blocking."""
        self._check_direct_call()
        return self._finish(self._client._send_batch_direct(msgs, queue, sharding_key))

    def _check_direct_call(self) -> None:
        self._check_open()
        _check_off_the_loop()

    def _finish(self, outcome: SendResult | Coroutine[Any, Any, SendResult]) -> SendResult:
        if isinstance(outcome, SendResult):
            return outcome
        return _run(self._loop, outcome)


class TransactionProducer(Producer):
    """Blocking :class:`cometmq.client.transaction.TransactionProducer`: a blocking :class:`Producer`
    that also sends transactional messages. ``check`` is a plain function (it runs in a worker
    thread); ``send_in_transaction`` runs ``execute`` on the calling thread; ``with
    producer.transaction() as tx: tx.send(msg)`` commits at the end of the block, or rolls back when
    it raises. The guarantees are the asyncio class's."""

    _target = "cometmq.client.transaction:TransactionProducer"

    if TYPE_CHECKING:
        # For type checkers only, as in Producer.
        def __init__(
            self,
            group: str,
            namesrv: str,
            *,
            check: CheckFn,
            instance_name: str | None = ...,
            send_timeout: float = ...,
            retry_times: int = ...,
            compress_over: int = ...,
            max_message_size: int = ...,
            fault_avoidance: bool = ...,
            queue_selector: QueueSelector | None = ...,
            busy_poll_us: int = ...,
            busy_poll_adaptive: bool = ...,
            poll_name_server_interval: float = ...,
            credentials: Credentials | None = ...,
            tls: bool | ssl.SSLContext = ...,
            trace: bool = ...,
            trace_topic: str | None = ...,
            inner_batches: bool = ...,
        ) -> None: ...

    def send_in_transaction(
        self, message: Message, execute: Callable[[Message], TransactionState]
    ) -> TransactionSendResult:
        """As :meth:`cometmq.client.transaction.TransactionProducer.send_in_transaction`, blocking, with
        ``execute`` (a plain function: a coroutine function is refused with TypeError) called on this
        thread."""
        if inspect.iscoroutinefunction(execute):
            raise TypeError(f"execute must be a plain function here, not the coroutine function {execute!r}")
        self._check_direct_call()
        loop = self._loop
        client: AsyncTransactionProducer = self._client
        transaction, sent = _run(loop, client._send_alone(message))
        if sent.status is not SendStatus.SEND_OK:
            return _run(loop, client._end_alone(transaction, sent, TransactionState.ROLLBACK))
        try:
            answer = execute(message)
        except BaseException:  # interrupted too: the transaction must not stay open
            _run(loop, transaction._end(TransactionState.UNKNOWN))
            raise
        return _run(loop, client._end_alone(transaction, sent, answer))

    def transaction(self) -> Transaction:
        """As :meth:`cometmq.client.transaction.TransactionProducer.transaction`: a new transaction of
        several messages, best used as ``with``."""
        self._check_direct_call()
        return Transaction(self._loop, _run(self._loop, _call(self._client.transaction)))


class Transaction:
    """Blocking :class:`cometmq.client.transaction.Transaction` (from
    :meth:`TransactionProducer.transaction`): ``send``, ``commit``, ``rollback``; ``with`` commits when
    the block ends normally and rolls back when it raises."""

    def __init__(self, loop: asyncio.AbstractEventLoop, transaction: AsyncTransaction) -> None:
        self._loop = loop
        self._transaction = transaction

    @property
    def transaction_id(self) -> str:
        """32 hex digits, the same on every message of the transaction."""
        return self._transaction.transaction_id

    @property
    def state(self) -> TransactionState | None:
        """How the transaction was ended; None while it is open."""
        return self._transaction.state

    @property
    def pending(self) -> tuple[SendResult, ...]:
        """The halves not known settled: all of them until their ENDs were answered, then those whose
        END got no answer (left to the check-back)."""
        return self._transaction.pending

    def send(self, message: Message) -> SendResult:
        """Send ``message`` as a half message of this transaction."""
        return _run(self._loop, self._transaction.send(message))

    def commit(self) -> None:
        _run(self._loop, self._transaction.commit())

    def rollback(self) -> None:
        _run(self._loop, self._transaction.rollback())

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _run(self._loop, self._transaction.__aexit__(exc_type, exc, tb))


class PushConsumer(_BlockingClient):
    """Blocking :class:`cometmq.client.consumer.PushConsumer`: ``subscribe(topic, expression)``,
    ``listen(fn)`` with a plain function (it runs in the consumer's worker threads, never on the
    event loop), ``start()``, ``close()``; or ``for message in consumer`` without a listener."""

    _target = "cometmq.client.consumer:PushConsumer"

    if TYPE_CHECKING:
        # For type checkers only, as in Producer.
        def __init__(
            self,
            group: str,
            namesrv: str,
            *,
            message_model: Literal["clustering", "broadcasting"] = ...,
            consume_from: ConsumeFrom = ...,
            consume_timestamp: int | None = ...,
            allocate: Literal["averagely", "consistent_hash"] = ...,
            orderly: bool = ...,
            pull_batch_size: int = ...,
            consume_batch_size: int = ...,
            max_cached_messages_per_queue: int = ...,
            max_cached_bytes_per_queue: int = ...,
            max_offset_span: int = ...,
            max_reconsume_times: int = ...,
            concurrency: int = ...,
            instance_name: str | None = ...,
            offsets_dir: str | Path | None = ...,
            busy_poll_us: int = ...,
            busy_poll_adaptive: bool = ...,
            poll_name_server_interval: float = ...,
            credentials: Credentials | None = ...,
            tls: bool | ssl.SSLContext = ...,
            trace: bool = ...,
            trace_topic: str | None = ...,
        ) -> None: ...
        @property
        def assigned_queues(self) -> frozenset[MessageQueue]: ...
        @property
        def client_id(self) -> str: ...
        @property
        def offsets_path(self) -> Path | None: ...
        def listen(self, callback: Listener) -> None: ...
        def retry_later(self, message: ReceivedMessage | None = ...) -> None: ...
        def start(self) -> None: ...
        def subscribe(self, topic: str, expression: str = ..., *, sql92: bool = ...) -> None: ...
        def __iter__(self) -> Iterator[ReceivedMessage]: ...


class LitePullConsumer(_BlockingClient):
    """Blocking :class:`cometmq.client.litepull.LitePullConsumer`: ``subscribe``/``assign``,
    ``poll(timeout)``, ``seek*``, ``commit``, ``read(queue, start, end)`` (a plain iterator of batches)
    and the rest, with the same names."""

    _target = "cometmq.client.litepull:LitePullConsumer"

    if TYPE_CHECKING:
        # For type checkers only, as in Producer.
        def __init__(
            self,
            group: str,
            namesrv: str,
            *,
            auto_commit: bool = ...,
            auto_commit_interval: float = ...,
            pull_batch_size: int = ...,
            poll_timeout: float = ...,
            consume_from: ConsumeFrom = ...,
            consume_timestamp: int | None = ...,
            instance_name: str | None = ...,
            pull_threshold_per_queue: int = ...,
            max_poll_messages: int = ...,
            request_timeout: float = ...,
            busy_poll_us: int = ...,
            busy_poll_adaptive: bool = ...,
            poll_name_server_interval: float = ...,
            credentials: Credentials | None = ...,
            tls: bool | ssl.SSLContext = ...,
            trace: bool = ...,
            trace_topic: str | None = ...,
        ) -> None: ...
        def assign(self, queues: Iterable[MessageQueue]) -> None: ...
        def assignment(self) -> set[MessageQueue]: ...
        def begin_offset(self, queue: MessageQueue) -> int: ...
        def commit(self, offsets: dict[MessageQueue, int] | None = ...) -> None: ...
        def committed(self, queue: MessageQueue) -> int | None: ...
        def end_offset(self, queue: MessageQueue) -> int: ...
        def fetch_queues(self, topic: str) -> list[MessageQueue]: ...
        def offset_for_timestamp(self, queue: MessageQueue, timestamp_ms: int) -> int: ...
        def pause(self, queues: Iterable[MessageQueue]) -> None: ...
        def paused(self) -> set[MessageQueue]: ...
        def poll(self, timeout: float | None = ...) -> list[ReceivedMessage]: ...
        def position(self, queue: MessageQueue) -> int | None: ...
        def read(
            self, queue: MessageQueue, start: int, end: int, *, max_batch: int = ...
        ) -> Iterator[list[ReceivedMessage]]: ...
        def resume(self, queues: Iterable[MessageQueue]) -> None: ...
        def seek(self, queue: MessageQueue, offset: int) -> None: ...
        def seek_to_beginning(self, queue: MessageQueue) -> None: ...
        def seek_to_end(self, queue: MessageQueue) -> None: ...
        def start(self) -> None: ...
        def subscribe(self, topic: str, expression: str = ..., *, sql92: bool = ...) -> None: ...
        def unsubscribe(self, topic: str) -> None: ...


class SimpleConsumer(_BlockingClient):
    """Blocking :class:`cometmq.client.simple.SimpleConsumer`: ``receive``, ``ack``,
    ``change_invisible_duration``, ``subscribe`` and the rest, with the same names."""

    _target = "cometmq.client.simple:SimpleConsumer"

    if TYPE_CHECKING:
        # For type checkers only, as in Producer.
        def __init__(
            self,
            group: str,
            namesrv: str,
            *,
            subscriptions: Mapping[str, str] | None = ...,
            await_duration: float = ...,
            fifo: bool = ...,
            consume_from: str = ...,
            instance_name: str | None = ...,
            request_timeout: float = ...,
            poll_name_server_interval: float = ...,
            credentials: Credentials | None = ...,
            tls: bool | ssl.SSLContext = ...,
        ) -> None: ...
        def ack(self, message: ReceivedMessage) -> None: ...
        def change_invisible_duration(self, message: ReceivedMessage, duration: float) -> None: ...
        def receive(
            self,
            max_messages: int = ...,
            invisible_duration: float = ...,
            *,
            await_duration: float | None = ...,
        ) -> list[ReceivedMessage]: ...
        def start(self) -> None: ...
        def subscribe(self, topic: str, expression: str = ..., *, sql92: bool = ...) -> None: ...
        def subscriptions(self) -> dict[str, str]: ...
        def unsubscribe(self, topic: str) -> None: ...


class AdminClient(_BlockingClient):
    """Blocking :class:`cometmq.client.admin.AdminClient` (``create_topic``, ``topic_route``, …)."""

    _target = "cometmq.client.admin:AdminClient"

    if TYPE_CHECKING:
        # For type checkers only, as in Producer.
        def __init__(
            self,
            namesrv_addr: str,
            timeout: float = ...,
            connect_timeout: float = ...,
            *,
            credentials: Credentials | None = ...,
            tls: bool | ssl.SSLContext = ...,
        ) -> None: ...
        def auth_targets(self) -> list[str]: ...
        def broker_addresses(self) -> set[str]: ...
        def broker_config(self, addr: str) -> dict[str, str]: ...
        def broker_consume_stats(self, addr: str, *, order_only: bool = ...) -> list[ConsumeProgress]: ...
        def broker_runtime_info(self, addr: str) -> dict[str, str]: ...
        def broker_stats(self, addr: str, name: StatsName | str, key: str) -> BrokerStatsData: ...
        def clone_group_offsets(
            self, source: str, dest: str, topic: str, *, offline: bool = ...
        ) -> list[BrokerData]: ...
        def cluster_info(self) -> ClusterInfo: ...
        def consume_progress(
            self, group: str, topic: str | None = ..., cluster: str | None = ...
        ) -> ConsumeProgress: ...
        def consumer_connections(self, group: str, cluster: str | None = ...) -> ConsumerConnections: ...
        def create_acl(self, addr: str, acl: Acl) -> None: ...
        def create_user(self, addr: str, user: User) -> None: ...
        def create_group(
            self, config: SubscriptionGroupConfig, cluster: str | None = ...
        ) -> list[BrokerData]: ...
        def create_topic(
            self,
            topic: str,
            queues: int | None = ...,
            cluster: str | None = ...,
            perm: int | None = ...,
            order: bool = ...,
            wait: bool = ...,
            attributes: str | None = ...,
        ) -> list[BrokerData]: ...
        def dead_letter_batches(self, group: str) -> Iterator[list[DecodedRecord]]: ...
        def dead_letters(self, group: str, max_num: int | None = ...) -> list[DecodedRecord]: ...
        def delete_acl(
            self, addr: str, subject: str, policy_type: PolicyType | None = ..., resource: str | None = ...
        ) -> None: ...
        def delete_user(self, addr: str, username: str) -> None: ...
        def get_acl(self, addr: str, subject: str) -> Acl | None: ...
        def get_user(self, addr: str, username: str) -> User | None: ...
        def list_acls(
            self, addr: str, subject_filter: str | None = ..., resource_filter: str | None = ...
        ) -> list[Acl]: ...
        def list_users(self, addr: str, name_filter: str | None = ...) -> list[User]: ...
        def update_acl(self, addr: str, acl: Acl) -> None: ...
        def update_user(
            self,
            addr: str,
            username: str,
            *,
            password: str | None = ...,
            user_type: UserType | None = ...,
            user_status: UserStatus | None = ...,
        ) -> None: ...
        def delete_group(
            self, group: str, cluster: str | None = ..., remove_offsets: bool = ...
        ) -> list[BrokerData]: ...
        def delete_topic(self, topic: str, cluster: str | None = ...) -> list[BrokerData]: ...
        def get_group(self, group: str, cluster: str | None = ...) -> dict[str, SubscriptionGroupConfig]: ...
        def ha_status(self, addr: str) -> HARuntimeInfo: ...
        def list_groups(self, cluster: str | None = ...) -> dict[str, dict[str, SubscriptionGroupConfig]]: ...
        def masters_of(self, cluster: str | None = ...) -> tuple[str, list[BrokerData]]: ...
        def notify_role_changed(self, addr: str, master_address: str, master_epoch: int) -> None: ...
        def producer_connections(self, group: str, topic: str) -> list[ClientConnection]: ...
        def query_message(
            self,
            topic: str,
            key: str,
            max_num: int = ...,
            begin_ms: int = ...,
            end_ms: int | None = ...,
            unique: bool = ...,
        ) -> list[DecodedRecord]: ...
        def resend_dead_letter(self, dead_letter: DecodedRecord) -> Resent: ...
        def resend_to_group(self, record: DecodedRecord, group: str) -> Resent: ...
        def resent_copies(self, dead_letter: DecodedRecord) -> list[DecodedRecord]: ...
        def readable_queues(self, topic: str) -> list[MessageQueue]: ...
        def offset_bounds(self, queue: MessageQueue) -> tuple[int, int]: ...
        def first_offset_at(
            self, queue: MessageQueue, timestamp_ms: int, *, group: str, bounds: tuple[int, int] | None = ...
        ) -> int: ...
        def pull_records(
            self,
            queue: MessageQueue,
            offset: int,
            max_nums: int,
            *,
            group: str,
            subscription: SubscriptionData,
        ) -> PullResult: ...
        def start(self) -> None: ...
        def reset_offsets(
            self,
            group: str,
            topic: str,
            *,
            timestamp: int | None = ...,
            to: Literal["earliest", "latest"] | None = ...,
            offset: int | None = ...,
            queue_id: int | None = ...,
            broker_name: str | None = ...,
        ) -> ResetResult: ...
        def topic_list(self) -> list[str]: ...
        def topic_route(self, topic: str) -> TopicRouteData: ...
        def topic_attributes(self) -> dict[str, dict[str, str]]: ...
        def topic_config(self, topic: str, broker_addr: str | None = ...) -> TopicConfig: ...
        def topic_status(self, topic: str) -> list[QueueStatus]: ...
        def traffic(
            self, topics: list[str] | None = ..., cluster: str | None = ...
        ) -> list[TopicTraffic]: ...
        def update_broker_config(self, addr: str, values: Mapping[str, str]) -> None: ...
        def update_group(
            self, group: str, cluster: str | None = ..., **changes: Any
        ) -> tuple[list[BrokerData], SubscriptionGroupConfig]: ...
        def view_message(self, msg_id: str, topic: str | None = ...) -> list[DecodedRecord]: ...
        def message_trace(self, msg_id: str, topic_of_trace: str = ...) -> list[TraceContext]: ...
