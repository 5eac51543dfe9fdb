"""Asyncio transports around the pure codec: one protocol class serves both ends of a connection.

Every request on a connection is handled independently: a handler that returns a coroutine runs as
its own task, and one that returns None answers later by itself (``Connection.reply``, as a held
long-polling pull does), so neither delays a heartbeat on the same connection. C++ clients drop a
connection whose heartbeat is not answered within 3 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import math
import resource
import socket
import ssl
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, cast

from cometmq.errors import (
    ConnectionClosedError,
    ProtocolError,
    RemotingTimeoutError,
    RequestRefused,
    ResponseLostError,
)
from cometmq.protocol.codec import FrameDecoder, ReadBuffer, encode
from cometmq.protocol.codes import ONEWAY_FLAG, ResponseCode
from cometmq.protocol.command import RemotingCommand
from cometmq.remoting.busypoll import BusyPoller
from cometmq.remoting.tls import HANDSHAKE_TIMEOUT_S, TlsListener, TlsMode, TlsSettings, handshake_failure

if TYPE_CHECKING:
    from cometmq.auth import Credentials

log = logging.getLogger("cometmq.remoting")

HandlerResult = RemotingCommand | None | Awaitable[RemotingCommand | None]

# A request handler gets the connection and the request and returns the response (or None for no
# response), directly or as an awaitable.
RequestHandler = Callable[["Connection", RemotingCommand], HandlerResult]

# A server's check of a request before its handler runs: None lets the handler have it, a response
# answers it instead (access control refusing it).
RequestGate = Callable[["Connection", RemotingCommand], RemotingCommand | None]

# What signs the requests a client sends (cometmq.auth.sign with the client's credentials).
RequestSigner = Callable[[RemotingCommand], None]

# What a server tells of each request it answered: the request code, the response code, the seconds
# from the request's arrival to its answer being written, whether the answer was held for messages to
# arrive (a long-polling pull), and the outcome of writing it: RESULT_SUCCESS, RESULT_ONEWAY (a oneway
# request's answer, not written) or RESULT_WRITE_CHANNEL_FAILED (the rpc-latency metric,
# cometmq.metrics, with RocketMQ 5's result names).
RequestObserver = Callable[[int, int, float, bool, str], None]
RESULT_SUCCESS: Final = "success"
RESULT_ONEWAY: Final = "oneway"
RESULT_WRITE_CHANNEL_FAILED: Final = "write_channel_failed"

# Requests in flight on one connection before the server answers SYSTEM_BUSY instead of queueing more.
MAX_PENDING_REQUESTS_PER_CONNECTION = 65536

# At most one warning in this many seconds about refused or shed connections: a flood of them is one
# line a minute, not one per connection.
_WARN_EVERY_S = 60.0


# What all of a server's connections together may hold for frames not yet whole, unless told otherwise:
# room for 64 4 MiB messages arriving at once.
DEFAULT_MAX_PARTIAL_FRAME_BYTES = 256 * 1024 * 1024


def default_max_connections() -> int:
    """10 000 connections, or fewer when the process may not open that many files: its soft limit,
    less 256 for the store's files and the listening socket."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 10_000
    return max(64, min(10_000, soft - 256))


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What the clients of a :class:`RemotingServer` may make it hold (docs/operations.md, "Connection
    limits").

    ``channel_max_idle_s``: a connection that neither read nor wrote for this long is closed (RocketMQ's
    serverChannelMaxIdleTimeSeconds, 120 s; 0 never). ``max_connections``: connections accepted past
    this many are closed at once. ``max_partial_frame_bytes``: what all connections together may hold
    for frames not yet whole (one connection holds one such frame, at most the 16 MiB frame limit).
    ``socket_backlog``: the listen queue (RocketMQ's serverSocketBacklog).
    """

    channel_max_idle_s: float = 120.0
    max_connections: int = field(default_factory=default_max_connections)
    max_partial_frame_bytes: int = DEFAULT_MAX_PARTIAL_FRAME_BYTES
    socket_backlog: int = 1024


class Dispatcher:
    """The dispatch table: request code → handler, one entry per code. Unknown codes get
    REQUEST_CODE_NOT_SUPPORTED. A *gate* sees every request of a code served before its handler does,
    and may answer it instead (access control)."""

    def __init__(self, table: Mapping[int, RequestHandler], gate: RequestGate | None = None) -> None:
        self._table = {int(code): handler for code, handler in table.items()}
        self._gate = gate

    @property
    def codes(self) -> frozenset[int]:
        """The request codes served."""
        return frozenset(self._table)

    def replace(self, table: Mapping[int, RequestHandler]) -> None:
        """Serve *table* from the next request on, on every connection (a broker switching role)."""
        self._table = {int(code): handler for code, handler in table.items()}

    def __call__(self, conn: Connection, request: RemotingCommand) -> HandlerResult:
        handler = self._table.get(request.code)
        if handler is None:
            return request.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
            )
        if self._gate is not None:
            refusal = self._gate(conn, request)
            if refusal is not None:
                return refusal
        return handler(conn, request)


class Connection(asyncio.BufferedProtocol):
    """One TCP connection speaking the remoting protocol, in either direction.

    A BufferedProtocol: the transport reads straight into the decoder's buffers, so a large frame
    (a 256 KiB pull response) is not copied through per-read ``bytes`` objects and a growing buffer.
    """

    def __init__(
        self,
        handler: RequestHandler | None,
        read_buffer: ReadBuffer | None = None,
        poller: BusyPoller | None = None,
        observer: RequestObserver | None = None,
        client: bool = False,
    ) -> None:
        self._handler = handler
        # None: requests are not timed (no clock read, nothing kept per request).
        self._observer = observer
        # While observed: id(request) → (the request, perf_counter() at its arrival). Holding the request
        # keeps its id from being reused by another while the entry lives.
        self._arrived: dict[int, tuple[RemotingCommand, float]] = {}
        # id(request) → whether it is a held pull, for the requests a handler answers later by itself.
        self._answered_later: dict[int, bool] = {}
        self._decoder = FrameDecoder(read_buffer)
        self._poller = poller  # None: the loop sleeps between reads as usual (busypoll.py)
        # A client's connection (RemotingClient): a read polls on only while requests it sent are
        # unanswered; the next thing due after the last reply is this end's own next request.
        self._client = client
        self._transport: asyncio.Transport | None = None
        # Set by every read and write, cleared by the server's idle sweep (RemotingServer).
        self.active = True
        self.quiet_since = 0.0
        # What the decoder held for a frame not yet whole when last told to the server (_held_changed).
        self._held = 0
        self._joins_parts = False
        self._held_changed: Callable[[Connection, int], None] | None = None
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._opaque = itertools.count(1)
        self._close_listeners: list[Callable[[Connection], None]] = []
        self.remote_address = ""
        # Signs each request this end sends (a client's credentials); None: sent as they are.
        self.signer: RequestSigner | None = None
        self.language = "OTHER"
        self.version = 0
        self.closed = asyncio.get_running_loop().create_future()

    # asyncio.BufferedProtocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have the same interface.
        self._transport = cast(asyncio.Transport, transport)
        # A TLS transport encrypts each buffer it is given as records of its own: a frame of many
        # parts (a batch, a pull answer's stored records) is written as one, or its small parts cost
        # a record each (several times the encryption of the whole frame).
        self._joins_parts = transport.get_extra_info("ssl_object") is not None
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.remote_address = f"{peer[0]}:{peer[1]}"

    def get_buffer(self, sizehint: int) -> memoryview:
        decoder = self._decoder
        try:
            buffer = decoder.get_buffer()
        except ProtocolError:
            # Bytes still read after a protocol error, before the close takes effect, go nowhere.
            return memoryview(bytearray(4096))
        if decoder.held != self._held:  # a frame's buffer grew
            self._tell_held()
        return buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.active = True
        poller = self._poller
        if poller is not None and not self._client:
            poller.read()  # before the requests read are answered: their replies' windows follow
        decoder = self._decoder
        try:
            commands = decoder.buffer_updated(nbytes)
        except ProtocolError as exc:
            if self.is_open:
                _refusals.note(self.remote_address, "closing connection", str(exc))
                self.close()
            return
        if decoder.held != self._held:  # a frame's buffer was taken or given back
            self._tell_held()
        for cmd in commands:
            if cmd.is_response:
                future = self._pending.pop(cmd.opaque, None)
                if future is not None and not future.done():
                    future.set_result(cmd)
            else:
                self._dispatch(cmd)
        if poller is not None and self._client:
            poller.read(poll=bool(self._pending))

    def _tell_held(self) -> None:
        self._held = self._decoder.held
        if self._held_changed is not None:
            self._held_changed(self, self._held)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ResponseLostError(f"connection to {self.remote_address} closed"))
        self._pending.clear()
        for task in list(self._tasks):
            task.cancel()
        if not self.closed.done():
            self.closed.set_result(None)
        for listener in self._close_listeners:
            try:
                listener(self)
            except Exception:
                log.exception("close listener failed")

    # requests arriving ------------------------------------------------------------------------

    def _dispatch(self, request: RemotingCommand) -> None:
        self.language = request.language
        self.version = request.version
        if self._handler is None:
            return
        if self._observer is not None:
            arrived = self._arrived
            if len(arrived) >= MAX_PENDING_REQUESTS_PER_CONNECTION:
                # Only requests answered later are left unanswered this long: forget the oldest (its
                # answer goes untimed) so that those arriving now are still timed.
                oldest = next(iter(arrived))
                del arrived[oldest]
                self._answered_later.pop(oldest, None)
            arrived[id(request)] = (request, time.perf_counter())
        if len(self._tasks) >= MAX_PENDING_REQUESTS_PER_CONNECTION:
            self.reply(request, request.response(ResponseCode.SYSTEM_BUSY, "[OVERLOAD] too many requests"))
            return
        try:
            result = self._handler(self, request)
        except Exception as exc:
            self.reply_error(request, exc)
            return
        if result is None or isinstance(result, RemotingCommand):
            self.reply(request, result)
            return
        task = asyncio.ensure_future(self._finish(request, result))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish(self, request: RemotingCommand, pending: Awaitable[RemotingCommand | None]) -> None:
        try:
            response = await pending
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            response = _error_response(request, exc, self.remote_address)
        self.reply(request, response)

    def reply(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        """Answer *request* with *response*, as the dispatcher answers what a handler returns; for a
        handler that answers later by itself (a held pull answered on a message's arrival)."""
        # The oneway bit is only a hint (C++ never sets it on the wire), so answer unless it is set.
        if response is None or request.is_oneway:
            if self._observer is not None:
                self._observe(request, response, RESULT_ONEWAY)
            return
        try:
            self.send(response)
        except ProtocolError as exc:  # e.g. a response over the frame limit: say so instead
            log.error("cannot encode the response to request code %d: %s", request.code, exc)
            self.send(request.response(ResponseCode.SYSTEM_ERROR, f"the response cannot be sent: {exc}"))
            if self._observer is not None:
                self._observe(request, response, RESULT_WRITE_CHANNEL_FAILED)
            return
        if self._observer is not None:
            # send() drops what a closed connection is given.
            self._observe(request, response, RESULT_SUCCESS if self.is_open else RESULT_WRITE_CHANNEL_FAILED)

    def hold_polling_until(self, done: asyncio.Future[Any]) -> None:
        """Another thread of the process works for this connection's loop until *done* and needs the
        GIL for it: no busy polling until then (:meth:`BusyPoller.hold_until`)."""
        if self._poller is not None:
            self._poller.hold_until(done)

    def answer_later(self, request: RemotingCommand, *, long_polling: bool = False) -> None:
        """Say that the handler answers *request* later by itself (``reply``) although it returns None
        now, so that the answer is timed from the request's arrival; *long_polling*: the request is a
        pull held until messages arrive (its own rpc-latency series)."""
        if self._observer is not None and id(request) in self._arrived:
            self._answered_later[id(request)] = long_polling

    def _observe(self, request: RemotingCommand, response: RemotingCommand | None, result: str) -> None:
        key = id(request)
        entry = self._arrived.get(key)
        if entry is None or entry[0] is not request:
            return
        if response is None:  # answered later (answer_later), or never: then forget it
            if key not in self._answered_later:
                del self._arrived[key]
            return
        del self._arrived[key]
        long_polling = self._answered_later.pop(key, False)
        assert self._observer is not None
        self._observer(request.code, response.code, time.perf_counter() - entry[1], long_polling, result)

    def reply_error(self, request: RemotingCommand, exc: Exception) -> None:
        """Answer *request* with the error *exc*, as the dispatcher answers a handler that raised: a
        ``RequestRefused``'s code and remark, else SYSTEM_ERROR (and the traceback logged)."""
        self.reply(request, _error_response(request, exc, self.remote_address))

    def reply_with(self, request: RemotingCommand, build: Callable[[], RemotingCommand | None]) -> None:
        """Answer *request* with what *build* returns, or with its error if it raises: for an answer
        made later (at a held pull's deadline, after a group commit), as the dispatcher answers a
        handler."""
        try:
            response = build()
        except Exception as exc:
            self.reply_error(request, exc)
        else:
            self.reply(request, response)

    @property
    def buffered(self) -> int:
        """Bytes received that do not form a whole frame yet."""
        return self._decoder.buffered

    # sending ----------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def send(self, cmd: RemotingCommand) -> None:
        """Write one command; silently dropped if the connection is already closed."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        parts = encode(cmd)
        if self._joins_parts and len(parts) > 1:
            transport.write(b"".join(parts))
        else:
            transport.writelines(parts)
        self.active = True
        if self._poller is not None:  # a request's reply, or the next request, may be due soon
            self._poller.wrote()

    def next_opaque(self) -> int:
        return next(self._opaque)

    async def invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response."""
        future, timer = self._expect_response(request, timeout)
        try:
            self._send_request(request)
            return await future
        finally:
            timer.cancel()
            self._pending.pop(request.opaque, None)

    def start_invoke(self, request: RemotingCommand, timeout: float) -> asyncio.Future[RemotingCommand]:
        """Write a request now, and return the future of its response: for a caller that must not
        wait for a task's first loop step before the write. The future fails as ``invoke`` fails,
        and also with the error of a request that cannot be written (a frame over the limit)."""
        future, timer = self._expect_response(request, timeout)
        opaque = request.opaque

        def settled(_: asyncio.Future[RemotingCommand]) -> None:
            timer.cancel()
            self._pending.pop(opaque, None)

        future.add_done_callback(settled)
        try:
            self._send_request(request)
        except ProtocolError as exc:
            settled(future)  # now: the caller may find the future done without waiting a loop step
            future.set_exception(exc)
        return future

    def _expect_response(
        self, request: RemotingCommand, timeout: float
    ) -> tuple[asyncio.Future[RemotingCommand], asyncio.TimerHandle]:
        if not self.is_open:
            raise ConnectionClosedError(f"connection to {self.remote_address} is closed")
        request.opaque = self.next_opaque()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RemotingCommand] = loop.create_future()
        self._pending[request.opaque] = future
        # A bare timer rather than asyncio.wait_for: wait_for wraps the future in a task, which costs a
        # visible share of a producer's synchronous send (`cometmq bench latency`).
        timer = loop.call_later(timeout, _expire_request, future, request.code, self.remote_address, timeout)
        return future, timer

    def invoke_oneway(self, request: RemotingCommand) -> None:
        request.opaque = self.next_opaque()
        request.flag |= ONEWAY_FLAG
        self._send_request(request)

    def _send_request(self, request: RemotingCommand) -> None:
        # Signed last, just before it is written: the signature covers every field and the body as sent.
        if self.signer is not None:
            self.signer(request)
        self.send(request)

    def add_close_listener(self, listener: Callable[[Connection], None]) -> None:
        self._close_listeners.append(listener)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def _expire_request(future: asyncio.Future[RemotingCommand], code: int, address: str, timeout: float) -> None:
    if not future.done():
        future.set_exception(
            RemotingTimeoutError(f"no response to request code {code} from {address} in {timeout:g} s")
        )


class PeerLogLimit:
    """Whether a line about a peer is due: at most one per peer host per *interval*, counting the ones
    not logged since. At most MAX_HOSTS hosts are remembered, so whatever peers connect and whatever
    they send, the table (and the cost of pruning it) stays bounded."""

    MAX_HOSTS: Final = 4096

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval
        self._clock = clock
        self._hosts: dict[str, tuple[float, int]] = {}  # host → (when last logged, lines not logged since)

    def __len__(self) -> int:
        return len(self._hosts)

    def due(self, peer: str) -> int | None:
        """None when a line about *peer*'s host was logged less than *interval* ago (this one counts as
        not logged); else the number not logged since that line."""
        host = peer.rpartition(":")[0] or peer
        now = self._clock()
        logged = self._hosts.get(host)
        if logged is not None and now - logged[0] < self._interval:
            self._hosts[host] = (logged[0], logged[1] + 1)
            return None
        if logged is None and len(self._hosts) >= self.MAX_HOSTS:
            self._hosts = {h: e for h, e in self._hosts.items() if now - e[0] < self._interval}
        # With MAX_HOSTS hosts logged in the last interval, a new one is logged but not remembered.
        if logged is not None or len(self._hosts) < self.MAX_HOSTS:
            self._hosts[host] = (now, 0)
        return logged[1] if logged is not None else 0


class _RefusalLog:
    """A warning line about a peer's malformed input (a request refused as malformed, a frame that
    closed its connection), at most one per peer host per *interval*: a client that sends bad input in
    a loop cannot flood the log."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = PeerLogLimit(interval, clock)

    def note(self, peer: str, action: str, detail: str) -> None:
        """Log "*action* from *peer*: *detail*" unless this host was logged less than *interval* ago."""
        not_logged = self._limit.due(peer)
        if not_logged is None:
            return
        host = peer.rpartition(":")[0] or peer
        log.warning(
            "%s from %s: %s%s",
            action,
            peer or "?",
            detail,
            f" ({not_logged} more refused from {host} not logged)" if not_logged else "",
        )


# What a plaintext client of a server that accepts only TLS is answered, before its connection closes.
TLS_ONLY_REMARK: Final = "this server accepts only TLS connections (tls.server.mode=enforcing)"

# How often a peer sending malformed requests gets a warning line.
REFUSAL_LOG_INTERVAL_S: Final = 60.0
# The codes a server refuses malformed input with (a header or body it cannot bind, a bad name or
# number, a message it will not store); other refusals (no such topic, not found) are answers.
_MALFORMED_CODES: Final = frozenset(
    {ResponseCode.SYSTEM_ERROR, ResponseCode.MESSAGE_ILLEGAL, ResponseCode.SUBSCRIPTION_PARSE_FAILED}
)
_refusals = _RefusalLog(REFUSAL_LOG_INTERVAL_S)


def _error_response(request: RemotingCommand, exc: Exception, peer: str) -> RemotingCommand:
    if isinstance(exc, RequestRefused):
        # A refusal the handler chose (bad header, illegal topic, …): its code and remark, no traceback.
        if exc.code in _MALFORMED_CODES:
            _refusals.note(peer, f"refused request code {request.code}", repr(exc.remark[:500]))
        return request.response(exc.code, exc.remark)
    # A fault of ours: the traceback goes to the log, the client learns only where to look.
    log.error("request code %d failed", request.code, exc_info=exc)
    return request.response(
        ResponseCode.SYSTEM_ERROR, f"internal error handling request code {request.code} (see the server log)"
    )


class RemotingServer:
    """Accepts connections and hands every request to ``handler``; ``busy_poll_us`` > 0 keeps the loop
    polling after each read or write, for a window that adapts up to that many µs (for that long each
    time when not ``busy_poll_adaptive``; :mod:`cometmq.remoting.busypoll`). ``limits``
    bound what clients may make it hold (:class:`ServerLimits`). ``tls`` gives its ``tls.server.*``
    settings (:mod:`cometmq.remoting.tls`; None: TLS off). ``observer`` is told of every request
    answered and how long it took (None: nothing is timed)."""

    def __init__(
        self,
        handler: RequestHandler,
        host: str,
        port: int,
        busy_poll_us: int = 0,
        busy_poll_adaptive: bool = True,
        limits: ServerLimits | None = None,
        tls: TlsSettings | None = None,
        observer: RequestObserver | None = None,
    ) -> None:
        self._handler = handler
        self._observer = observer
        self._tls_mode = tls.mode if tls is not None else TlsMode.DISABLED
        # Built here: a certificate that cannot be loaded is a ConfigError before anything listens.
        self._ssl_context = tls.server_context() if tls is not None else None
        self._tls_listener: TlsListener | None = None
        self._poller = BusyPoller(busy_poll_us, busy_poll_adaptive) if busy_poll_us else None
        self.limits = limits if limits is not None else ServerLimits()
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._idle_sweep: asyncio.Task[None] | None = None
        self._close_listeners: list[Callable[[Connection], None]] = []
        self.connections: set[Connection] = set()
        # Its connections read small frames into one buffer (they are all served by one loop), so an
        # idle connection holds no 16 KiB receive buffer of its own.
        self._read_buffer = ReadBuffer()
        # Connections holding part of a frame → the bytes they hold for it, oldest partial frame first
        # (an update keeps a connection's place; a whole frame takes it out).
        self._partial: dict[Connection, int] = {}
        self.partial_frame_bytes = 0
        self._refused = 0
        self._shed = 0
        self._last_warning = -math.inf

    def add_close_listener(self, listener: Callable[[Connection], None]) -> None:
        """Call ``listener`` whenever an accepted connection closes (clients gone: forget them)."""
        self._close_listeners.append(listener)

    def _accept(self, handler: RequestHandler | None = None) -> asyncio.BaseProtocol:
        if len(self.connections) >= self.limits.max_connections:
            self._refused += 1
            self._warn()
            return _Refused()
        conn = Connection(handler or self._handler, self._read_buffer, self._poller, self._observer)
        conn._held_changed = self._held_changed
        conn.add_close_listener(self._forget)
        for listener in self._close_listeners:
            conn.add_close_listener(listener)
        self.connections.add(conn)
        return conn

    def _held_changed(self, conn: Connection, held: int) -> None:
        previous = self._partial.pop(conn, 0) if held == 0 else self._partial.get(conn, 0)
        if held:
            self._partial[conn] = held
        self.partial_frame_bytes += held - previous
        # Over the bound, the connections whose partial frames are oldest are closed. An honest client
        # sends a frame's bytes back to back, so its partial frame is young; one that trickles bytes to
        # hold memory keeps an old one. Pausing reads instead would free nothing, and would stall the
        # honest clients as much as the others.
        while self.partial_frame_bytes > self.limits.max_partial_frame_bytes and self._partial:
            oldest = next(iter(self._partial))
            self.partial_frame_bytes -= self._partial.pop(oldest)
            oldest.close()
            self._shed += 1
            self._warn()

    def _warn(self) -> None:
        now = time.monotonic()
        if now - self._last_warning < _WARN_EVERY_S:
            return
        self._last_warning = now
        if self._refused:
            log.warning(
                "%d connections open, the most allowed (serverMaxConnections): %d new ones refused",
                len(self.connections),
                self._refused,
            )
        if self._shed:
            log.warning(
                "frames not yet whole held more than %d bytes (serverMaxPartialFrameBytes): %d connections "
                "holding the oldest closed",
                self.limits.max_partial_frame_bytes,
                self._shed,
            )
        self._refused = self._shed = 0

    def _admit(self) -> bool:
        """Whether a connection accepted by the TLS listener may wait for its first byte."""
        waiting = len(self._tls_listener.pending) if self._tls_listener is not None else 0
        if len(self.connections) + waiting < self.limits.max_connections:
            return True
        self._refused += 1
        self._warn()
        return False

    async def _serve_accepted(self, sock: socket.socket, peer: str, tls: bool) -> None:
        """A connection the TLS listener accepted, *tls* if it starts a TLS handshake."""
        conn = self._accept(_refuse_plaintext if not tls and self._tls_mode is TlsMode.ENFORCING else None)
        if not isinstance(conn, Connection):  # over the connection limit
            sock.close()
            return
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: conn,
                sock,
                ssl=self._ssl_context if tls else None,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if tls else None,
            )
        except (OSError, TimeoutError, asyncio.CancelledError) as exc:
            sock.close()
            conn.connection_lost(None)  # the transport never made it, nor will it tell it is lost
            if isinstance(exc, asyncio.CancelledError):
                raise
            _refusals.note(peer, "TLS handshake failed", handshake_failure(exc))

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._tls_mode is not TlsMode.DISABLED:
            listener = TlsListener(self._serve_accepted, self._admit)
            await listener.start(self.host, self.port, self.limits.socket_backlog)
            self._tls_listener = listener
            self.port = listener.port
            self._start_idle_sweep()
            return
        self._server = await loop.create_server(
            self._accept, self.host, self.port, reuse_address=True, backlog=self.limits.socket_backlog
        )
        sockets = self._server.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self._start_idle_sweep()

    def _start_idle_sweep(self) -> None:
        if self.limits.channel_max_idle_s > 0:
            self._idle_sweep = asyncio.get_running_loop().create_task(
                self._close_idle_forever(), name="remoting-idle-sweep"
            )

    async def _close_idle_forever(self) -> None:
        # A connection is closed between channel_max_idle_s and one sweep interval more after its last
        # read or write: each sweep clears the flag reads and writes set, and notes when it found it set.
        # (A flag costs a read or write one store; a timestamp would cost a clock call.)
        idle = self.limits.channel_max_idle_s
        interval = min(idle / 4, 10.0)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for conn in list(self.connections):
                if conn.active:
                    conn.active = False
                    conn.quiet_since = now
                elif now - conn.quiet_since >= idle and conn.is_open:
                    log.info("closing connection from %s: idle for %g s", conn.remote_address, idle)
                    conn.close()

    def _forget(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self.partial_frame_bytes -= self._partial.pop(conn, 0)

    async def stop(self) -> None:
        server, listener = self._server, self._tls_listener
        if server is None and listener is None:
            return
        if self._idle_sweep is not None:
            self._idle_sweep.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._idle_sweep
            self._idle_sweep = None
        if server is not None:
            server.close()
        if listener is not None:
            await listener.stop()
        # One loop step before the connections close: answers that callbacks scheduled just before
        # (a stopping broker's waits answered at once) are written, and a close flushes them.
        await asyncio.sleep(0)
        for conn in list(self.connections):
            conn.close()
        if server is not None:
            await server.wait_closed()
        self._server = self._tls_listener = None


def _refuse_plaintext(conn: Connection, request: RemotingCommand) -> None:
    """The handler of a plaintext connection to a server that accepts only TLS: its first request is
    answered NO_PERMISSION, saying why, and the connection closes (after the answer is written)."""
    conn.reply(request, request.response(ResponseCode.NO_PERMISSION, TLS_ONLY_REMARK))
    conn.close()


class _Refused(asyncio.Protocol):
    """A connection over the server's maximum: closed as soon as it is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class RemotingClient:
    """Connections to many servers, one per address, with request/response matching by opaque;
    ``busy_poll_us`` and ``busy_poll_adaptive`` as for :class:`RemotingServer`. With *credentials*,
    every request it sends is signed with them (a server with aclEnable=true checks the signature);
    responses never are. With *ssl_context* every connection speaks TLS (the server's certificate
    checked as the context says)."""

    def __init__(
        self,
        handler: RequestHandler | None = None,
        connect_timeout: float = 3.0,
        busy_poll_us: int = 0,
        credentials: Credentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
        busy_poll_adaptive: bool = True,
    ) -> None:
        self._handler = handler
        self._signer = _signer_of(credentials) if credentials is not None else None
        self._ssl_context = ssl_context
        self._poller = BusyPoller(busy_poll_us, busy_poll_adaptive) if busy_poll_us else None
        self._connect_timeout = connect_timeout
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}
        # Counts abort() calls: a connect that finished in the step abort() cancelled it in must not
        # keep its connection (a task cancelled while running only learns of it at its next await).
        self._aborts = 0
        # While connections are open: a task that closes them when its loop cancels it, which is
        # what asyncio.run does at its end (see _abort_when_cancelled).
        self._watch: asyncio.Task[None] | None = None

    def __del__(self) -> None:
        # Dropped without close(): the loop holds the connections' transports, so close them here.
        with contextlib.suppress(AttributeError, RuntimeError):  # half built, or its loop closed
            self.abort()

    async def connection(self, address: str) -> Connection:
        conn = self._connections.get(address)
        if conn is not None and conn.is_open:
            return conn
        # The connecting is a task of its own that every caller waits for: one caller cancelled (a
        # consumer seeking while it pulls) neither stops it nor hands its cancellation to the others.
        opening = self._connecting.get(address)
        if opening is None:
            opening = asyncio.ensure_future(self._open(address))
            self._connecting[address] = opening
            opening.add_done_callback(functools.partial(self._opened, address))
        try:
            return await asyncio.shield(opening)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if opening.cancelled() and (task is None or not task.cancelling()):
                raise ConnectionClosedError(f"connecting to {address} stopped: the client closed") from None
            raise

    def _opened(self, address: str, opening: asyncio.Future[Connection]) -> None:
        if self._connecting.get(address) is opening:
            del self._connecting[address]
        if not opening.cancelled():
            opening.exception()  # mark retrieved: nobody may be waiting any more

    async def _open(self, address: str) -> Connection:
        host, _, port_text = address.rpartition(":")
        try:
            port = int(port_text)
        except ValueError:
            raise ConnectionClosedError(f"address {address!r} is not HOST:PORT") from None
        loop = asyncio.get_running_loop()
        host = host or "127.0.0.1"
        tls = self._ssl_context is not None
        aborts = self._aborts
        try:
            transport, protocol = await asyncio.wait_for(
                loop.create_connection(
                    # With TLS: a placeholder until the handshake (whose failure is told apart from a
                    # failure to connect: a server with TLS off closes at the ClientHello).
                    asyncio.Protocol if tls else self._new_connection,
                    host,
                    port,
                ),
                self._connect_timeout,
            )
        except (OSError, TimeoutError) as exc:
            raise ConnectionClosedError(f"cannot connect to {address}: {exc or 'timed out'}") from None
        conn = await self._start_tls(transport, address, host) if tls else cast(Connection, protocol)
        if self._aborts != aborts:
            conn.close()
            raise ConnectionClosedError(f"connecting to {address} stopped: the client closed")
        conn.remote_address = address
        conn.signer = self._signer
        self._connections[address] = conn
        if self._watch is None:
            self._watch = loop.create_task(_abort_when_cancelled(weakref.ref(self)))
        return conn

    def _new_connection(self) -> Connection:
        return Connection(self._handler, poller=self._poller, client=True)

    async def _start_tls(self, plain: asyncio.BaseTransport, address: str, host: str) -> Connection:
        """A connection over TLS on the connected transport *plain*."""
        assert self._ssl_context is not None
        conn = self._new_connection()
        try:
            transport = await asyncio.get_running_loop().start_tls(
                cast(asyncio.WriteTransport, plain),
                conn,
                self._ssl_context,
                server_hostname=host,
                ssl_handshake_timeout=self._connect_timeout,
            )
        except (OSError, TimeoutError) as exc:
            plain.close()
            raise ConnectionClosedError(
                f"TLS handshake with {address} failed: {handshake_failure(exc)} (is TLS on at the server?)"
            ) from None
        if transport is None:  # closed meanwhile
            raise ConnectionClosedError(f"TLS handshake with {address} failed: the connection closed")
        conn.connection_made(transport)
        return conn

    def open_connection(self, address: str) -> Connection | None:
        """The connection to *address* if one is open now (None: ``connection`` would have to connect)."""
        conn = self._connections.get(address)
        return conn if conn is not None and conn.is_open else None

    async def invoke(self, address: str, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        conn = await self.connection(address)
        return await conn.invoke(request, timeout)

    async def invoke_oneway(self, address: str, request: RemotingCommand) -> None:
        conn = await self.connection(address)
        conn.invoke_oneway(request)

    def close_connection(self, address: str) -> None:
        conn = self._connections.pop(address, None)
        if conn is not None:
            conn.close()

    def abort(self) -> list[Connection]:
        """Start closing every connection, without waiting (for code that cannot await); returns them."""
        self._aborts += 1
        conns = list(self._connections.values())
        self._connections.clear()
        for opening in list(self._connecting.values()):
            opening.cancel()
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
        for conn in conns:
            conn.close()
        return conns

    async def close(self) -> None:
        conns = self.abort()
        for conn in conns:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(conn.closed), 1.0)


def _signer_of(credentials: Credentials) -> RequestSigner:
    # Imported here: cometmq.auth builds on this package (its request handlers), not the reverse.
    from cometmq.auth import sign

    def signer(request: RemotingCommand) -> None:
        sign(request, credentials)

    return signer


async def _abort_when_cancelled(client: weakref.ref[RemotingClient]) -> None:
    """Wait until cancelled, then close *client*'s connections: a loop that ends under a client
    nobody closed (``asyncio.run`` cancels every task left) closes its sockets while it still can.
    The client is held weakly, so that one dropped meanwhile can be collected (and close them then)."""
    try:
        await asyncio.get_running_loop().create_future()
    finally:
        target = client()
        if target is not None:
            target.abort()
