"""A web dashboard for a RocketMQ-protocol cluster: its brokers and rates, topics, consumer groups and
their lag, messages, dead letters and message traces (docs/dashboard.md).

It acts only through an :class:`~cometmq.client.AdminClient` and a
:class:`~cometmq.client.Producer`, as the user their credentials name, so it works against any
cluster that speaks RocketMQ's protocol and a cluster's ACL applies to what it does.
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from collections.abc import Iterable

from cometmq.auth import Credentials
from cometmq.client import AdminClient, Producer
from cometmq.dashboard._app import DashboardState, create_app
from cometmq.dashboard._history import DEFAULT_INTERVAL_S
from cometmq.webserver import WebServer, start_web_server

__all__ = ["DEFAULT_PORT", "Dashboard", "allowed_hosts", "create_app", "start_dashboard"]

DEFAULT_PORT = 8082  # RocketMQ Dashboard's
# The producer group of the test messages the dashboard sends.
PRODUCER_GROUP = "DASHBOARD_PRODUCER"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def allowed_hosts(host: str, more: Iterable[str] = ()) -> list[str]:
    """The names a request may call the dashboard served on ``host`` by (its Host header): ``host``
    itself, this machine's loopback names when ``host`` is a loopback address, and ``more``."""
    names = [f"[{host}]" if ":" in host else host, *more]
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        names += LOOPBACK_NAMES
    return sorted({name.lower() for name in names})


class Dashboard:
    """A running dashboard: where it serves (``url``, ``host``, ``port``), and :meth:`stop`."""

    def __init__(self, state: DashboardState, server: WebServer, sampling: asyncio.Task[None]) -> None:
        self._state = state
        self._server = server
        self._sampling = sampling
        self.host, self.port = server.host, server.port

    @property
    def url(self) -> str:
        return self._server.url

    async def stop(self) -> None:
        """Stop sampling and serving, and close the dashboard's clients."""
        self._state.sampler.stop()
        self._sampling.cancel()
        await asyncio.wait({self._sampling})
        try:
            await self._server.stop()
        finally:
            await self._state.close()
            await self._state.admin.close()


async def start_dashboard(
    namesrv_addr: str,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    credentials: Credentials | None = None,
    tls: bool | ssl.SSLContext = False,
    sample_interval_s: float = DEFAULT_INTERVAL_S,
    more_hosts: Iterable[str] = (),
) -> Dashboard:
    """Serve the dashboard of the cluster at ``namesrv_addr`` on ``host``:``port`` (0: a free port)
    from the running loop, acting with ``credentials`` over ``tls`` (as the clients take them), to
    requests that call it by a name of :func:`allowed_hosts` (``host``, loopback names, ``more_hosts``).
    Raises ``OSError`` when the port cannot be had."""
    admin = AdminClient(namesrv_addr, credentials=credentials, tls=tls)
    await admin.start()
    try:
        app = create_app(
            admin,
            lambda: Producer(PRODUCER_GROUP, namesrv_addr, credentials=credentials, tls=tls),
            allowed_hosts=allowed_hosts(host, more_hosts),
            sample_interval_s=sample_interval_s,
        )
        server = await start_web_server(app, host, port)
    except BaseException:
        await admin.close()
        raise
    state: DashboardState = app.state.dashboard
    return Dashboard(state, server, asyncio.ensure_future(state.sampler.run()))
