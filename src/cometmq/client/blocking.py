"""Blocking clients for scripts, notebooks and Spark executors.

``Producer``, ``PushConsumer``, ``LitePullConsumer`` and ``AdminClient`` here take the same arguments
as their asyncio counterparts and have the same methods, synchronous: each call runs the asyncio
method on one event loop shared by every blocking client of the process, in a daemon thread named
``cometmq-client-loop``. The thread starts with the first blocking client and stops when the last one
is closed (or garbage-collected: a client that is dropped without ``close()`` is closed then, so its
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
from typing import Any, Self, TypeVar

from cometmq.client.message import Message, MessageQueue, SendResult

__all__ = ["AdminClient", "LitePullConsumer", "Producer", "PushConsumer"]

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


def _check_off_the_loop() -> None:
    """A blocking call on the loop thread would wait for itself (or stall the loop): refuse it."""
    if _SHARED.thread is threading.current_thread():
        raise RuntimeError("a blocking CometMQ client was called from its own event loop thread")


def _run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the shared loop and wait for its result (from any thread but the loop's)."""
    try:
        _check_off_the_loop()
    except RuntimeError:
        coro.close()
        raise
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


def _close_client(loop: asyncio.AbstractEventLoop, client: Any) -> None:
    """Close ``client`` on the loop (from any thread), then let go of the loop."""
    try:
        close = getattr(client, "close", None)
        if close is None:
            return
        if _SHARED.thread is threading.current_thread():
            result = close()
            if inspect.isawaitable(result):
                loop.create_task(_await_quietly(result))
            return
        future = asyncio.run_coroutine_threadsafe(_call(close), loop)
        try:
            future.result(_FINALIZE_TIMEOUT_S)
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

    def close(self) -> None:
        """Close the client (its sockets and tasks); the loop thread stops with the last client."""
        self._finalizer()

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
        return getattr(client, name)  # data attributes and properties: read as they are

    def _check_open(self) -> None:
        if not self._finalizer.alive:
            raise RuntimeError(f"this {type(self).__name__} is closed")

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


class PushConsumer(_BlockingClient):
    """Blocking :class:`cometmq.client.consumer.PushConsumer`: ``subscribe(topic, expression)``,
    ``listen(fn)`` with a plain function (it runs in the consumer's worker threads, never on the
    event loop), ``start()``, ``close()``; or ``for message in consumer`` without a listener."""

    _target = "cometmq.client.consumer:PushConsumer"


class LitePullConsumer(_BlockingClient):
    """Blocking :class:`cometmq.client.litepull.LitePullConsumer`: ``subscribe``/``assign``,
    ``poll(timeout)``, ``seek*``, ``commit``, ``read(queue, start, end)`` (a plain iterator of batches)
    and the rest, with the same names."""

    _target = "cometmq.client.litepull:LitePullConsumer"


class AdminClient(_BlockingClient):
    """Blocking :class:`cometmq.client.admin.AdminClient` (``create_topic``, ``topic_route``, …)."""

    _target = "cometmq.client.admin:AdminClient"
