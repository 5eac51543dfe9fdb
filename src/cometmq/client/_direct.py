"""Blocking sockets to brokers, for the blocking facade's sends.

A blocking ``Producer.send`` through the shared event loop would cross threads twice: the caller
hands the send to the loop thread, and the loop thread hands the result back. Each crossing wakes a
sleeping thread and moves the GIL, a large share of a synchronous send (`cometmq bench latency`).
Here the caller's own thread writes the request and reads the response, as redis-py does,
while the loop keeps the routes, heartbeats and everything else.

One connection per broker address, used by one thread at a time: a thread that finds it busy gets
``None`` and sends through the loop instead (whose connection pipelines requests), so concurrent
senders never wait on each other here. The broker never sends requests to these connections (no
heartbeat names them), so every frame read is a response.

With ``busy_poll_us`` > 0 the reading thread polls the socket without blocking for a while before it
sleeps in ``recv``, a window each connection adapts to how soon its replies come, at most
``busy_poll_us`` µs (always that long when not ``busy_poll_adaptive``), as the event loop does
(:mod:`cometmq.remoting.busypoll`): a reply that comes within the window wakes nobody.

With credentials each request is signed here, as the loop's client signs its own; with an SSL context
each socket is wrapped in TLS (one ``send`` of the joined frame then, as an SSL socket has no
``sendmsg``).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time

from cometmq.auth import Credentials, sign
from cometmq.errors import ConnectionClosedError, ProtocolError, RemotingTimeoutError
from cometmq.protocol import FrameDecoder, RemotingCommand, encode
from cometmq.protocol.command import Buffer
from cometmq.remoting.busypoll import PollWindow, preemptions

__all__ = ["DirectLane"]

_MAX_PARTS = 512  # under IOV_MAX (1024 on Linux), the most buffers one sendmsg takes


class _DirectConnection:
    __slots__ = ("address", "busy", "credentials", "decoder", "opaque", "poll_window", "sock", "ssl_context")

    def __init__(
        self,
        address: str,
        poll_window: PollWindow,
        credentials: Credentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.address = address
        self.poll_window = poll_window
        self.credentials = credentials
        self.ssl_context = ssl_context
        self.busy = threading.Lock()
        self.sock: socket.socket | None = None
        self.decoder = FrameDecoder()
        self.opaque = 0

    def invoke(self, request: RemotingCommand, timeout: float, connect_timeout: float) -> RemotingCommand:
        """Write *request* and read until its response (the caller holds ``busy``). Any failure
        closes the socket, so the next request starts on a fresh one with nothing half read. A
        request that cannot be encoded (over the frame limit) raises ``ProtocolError`` as it is."""
        deadline = time.monotonic() + timeout
        self.opaque = request.opaque = (self.opaque + 1) & 0x7FFFFFFF
        if self.credentials is not None:
            sign(request, self.credentials)
        frame = encode(request)
        try:
            sock = self.sock
            if sock is None:
                sock = _connect(self.address, min(timeout, connect_timeout))
                if self.ssl_context is not None:
                    sock = _start_tls(sock, self.address, self.ssl_context)
                self.sock = sock
                self.decoder = FrameDecoder()
            sock.settimeout(timeout)
            _send_all(sock, frame, joined=self.ssl_context is not None)
            return self._read_response(sock, request, deadline)
        except TimeoutError:
            self.close()
            raise RemotingTimeoutError(
                f"no response from {self.address} to request code {request.code} within {timeout:g} s"
            ) from None
        except (OSError, ProtocolError) as exc:
            self.close()
            raise ConnectionClosedError(f"connection to {self.address} failed: {exc}") from None

    def _read_response(
        self, sock: socket.socket, request: RemotingCommand, deadline: float
    ) -> RemotingCommand:
        decoder = self.decoder
        window = self.poll_window
        # Polled until the window ends (never past the request's deadline), then read blocking.
        poll_until = window.wrote()
        if poll_until:
            poll_until = min(poll_until, int(deadline * 1e9))
        first_read = True
        while True:
            n = _poll_into(sock, decoder.get_buffer(), poll_until, window) if poll_until else None
            if n is None:
                poll_until = 0
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                sock.settimeout(remaining)
                n = sock.recv_into(decoder.get_buffer())
            if n == 0:
                raise ConnectionResetError("closed by the broker")
            if first_read:  # how soon the reply came: the next window adapts to it (no window after it)
                window.read(poll=False)
                first_read = False
            for cmd in decoder.buffer_updated(n):
                if cmd.is_response and cmd.opaque == request.opaque:
                    return cmd

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()


def _poll_into(sock: socket.socket, buffer: memoryview, until_ns: int, window: PollWindow) -> int | None:
    """``recv_into`` without blocking, over and over until something comes (its size; 0 when the
    broker closed), ``time.monotonic_ns()`` passes *until_ns* or another process wants this CPU
    (None; *window* is told of the latter, as the event loop's poller does)."""
    sock.settimeout(0.0)
    preempted = preemptions()
    while time.monotonic_ns() < until_ns:
        try:
            return sock.recv_into(buffer)
        except (BlockingIOError, ssl.SSLWantReadError):
            # A process that is waiting for this CPU (the broker?) runs first.
            if window.gave_way(preempted):
                return None
    return None


def _send_all(sock: socket.socket, parts: list[Buffer], joined: bool = False) -> None:
    """One ``sendmsg`` of the frame's parts (no join) in the usual case; a large batch that the socket
    takes only in part, or one of more parts than a ``sendmsg`` may carry, is joined and sent whole,
    as is every frame when *joined* (a TLS socket, which has no ``sendmsg``)."""
    sent = sock.sendmsg(parts) if not joined and len(parts) <= _MAX_PARTS else 0
    if sent < sum(map(len, parts)):
        sock.sendall(memoryview(b"".join(parts))[sent:])


def _connect(address: str, timeout: float) -> socket.socket:
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise OSError(f"address {address!r} is not HOST:PORT")
    sock = socket.create_connection((host or "127.0.0.1", int(port)), timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _start_tls(sock: socket.socket, address: str, ssl_context: ssl.SSLContext) -> ssl.SSLSocket:
    """*sock* wrapped in TLS, the handshake done within the socket's timeout; a failed handshake is
    a :class:`ConnectionClosedError` saying so, as the loop's client says it."""
    try:
        return ssl_context.wrap_socket(sock, server_hostname=address.rpartition(":")[0] or "127.0.0.1")
    except (ssl.SSLError, ssl.CertificateError, ConnectionResetError, TimeoutError) as exc:
        sock.close()
        reason = exc if not isinstance(exc, TimeoutError) else "no answer in time"
        raise ConnectionClosedError(
            f"TLS handshake with {address} failed: {reason} (is TLS on at the server?)"
        ) from None
    except BaseException:
        sock.close()
        raise


class DirectLane:
    """Per broker address, a socket the calling thread drives itself (thread-safe)."""

    def __init__(
        self,
        connect_timeout: float = 3.0,
        busy_poll_us: int = 0,
        credentials: Credentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
        busy_poll_adaptive: bool = True,
    ) -> None:
        self._connect_timeout = connect_timeout
        self._busy_poll_us = busy_poll_us
        self._busy_poll_adaptive = busy_poll_adaptive
        self._credentials = credentials
        self._ssl_context = ssl_context
        self._connections: dict[str, _DirectConnection] = {}
        self._lock = threading.Lock()
        self._closed = False

    def invoke(self, address: str, request: RemotingCommand, timeout: float) -> RemotingCommand | None:
        """Send *request* to *address* and wait for its response on this thread; ``None`` if another
        thread is using that connection (or the lane is closed): send through the loop then.
        Raises ``RemotingTimeoutError`` or ``ConnectionClosedError`` as the loop's client does."""
        conn = self._connections.get(address)
        if conn is None:
            with self._lock:
                if self._closed:
                    return None
                conn = self._connections.setdefault(
                    address,
                    _DirectConnection(
                        address,
                        PollWindow(self._busy_poll_us, self._busy_poll_adaptive, time.monotonic_ns),
                        self._credentials,
                        self._ssl_context,
                    ),
                )
        if not conn.busy.acquire(blocking=False):
            return None
        try:
            if self._closed:
                return None
            return conn.invoke(request, timeout, self._connect_timeout)
        finally:
            if self._closed:
                conn.close()
            conn.busy.release()

    def close(self) -> None:
        """Close every socket; one in use is shut down now (waking its reader) and closed by its
        thread on the way out."""
        with self._lock:
            self._closed = True
            connections = list(self._connections.values())
            self._connections.clear()
        for conn in connections:
            if conn.busy.acquire(blocking=False):
                conn.close()
                conn.busy.release()
            else:
                sock = conn.sock
                if sock is not None:
                    with contextlib.suppress(OSError):  # closed meanwhile
                        sock.shutdown(socket.SHUT_RDWR)
