"""Serve an ASGI application over HTTP inside the running event loop (the metrics endpoint, the
dashboard), with uvicorn.

The servers run beside the broker on its loop rather than in threads: whatever a page or a scrape
reads (topics, offsets, counters) is only ever touched by the loop's thread. The listening socket is
bound here, before anything is served, so that a port in use fails the caller at once with a clear
error and port 0 picks a free one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn

# uvicorn logs a line per server started and stopped at INFO, and every request when access logs are on.
for _name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
    logging.getLogger(_name).setLevel(logging.WARNING)


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The process's own shutdown handling owns SIGINT and SIGTERM; uvicorn's would replace it.
        yield


class WebServer:
    """An ASGI application served on a bound socket until :meth:`stop`."""

    def __init__(self, server: uvicorn.Server, sock: socket.socket, task: asyncio.Task[None]) -> None:
        self._server = server
        self._socket = sock
        self._task = task
        self.host, self.port = sock.getsockname()[:2]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        """Stop serving: open requests get a moment to finish, then the socket is closed."""
        self._server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), 5.0)
        except TimeoutError:
            self._server.force_exit = True
            await self._task
        finally:
            self._socket.close()


async def start_web_server(app: Any, host: str, port: int) -> WebServer:
    """Serve the ASGI *app* on *host*:*port* (0: a free port) from the running loop. Raises
    ``OSError`` when the address cannot be bound (a port in use)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    config = uvicorn.Config(app, lifespan="off", access_log=False, log_config=None, log_level="warning")
    server = _EmbeddedServer(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():  # it failed to start: say why
            sock.close()
            task.result()
            raise OSError(f"the web server on {host}:{port} stopped at start")
        await asyncio.sleep(0.01)
    return WebServer(server, sock, task)
