"""The ``/metrics`` endpoint: a Starlette application serving a registry in Prometheus's text format,
started inside the server's event loop (cometmq.webserver)."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from cometmq.errors import ConfigError
from cometmq.webserver import WebServer, start_web_server


class _Merged:
    """A registry's families with those of one name joined: a name server and a broker in one process
    (``cometmq standalone``) both give ``rocketmq_rpc_latency``, told apart by their node_type label,
    and the text format allows one family per name."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for family in self._registry.collect():
            known = families.get(family.name)
            if known is None:
                families[family.name] = family
            else:
                known.samples.extend(family.samples)
        yield from families.values()


class _Collected:
    """Families already collected, as ``generate_latest`` reads a registry."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def metrics_app(registry: CollectorRegistry) -> Starlette:
    """An ASGI application answering ``GET /metrics`` with what *registry*'s collectors give now."""
    merged = _Merged(registry)

    async def metrics(request: Request) -> Response:
        # Collected on the event loop: the collectors read the servers' tables between two of their
        # requests. Written out as text in a thread: for thousands of series the text takes several
        # times as long as the reading, and the families are copies the loop no longer touches.
        families = _Collected(list(merged.collect()))
        return Response(await asyncio.to_thread(generate_latest, families), media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[Route("/metrics", metrics)])


class MetricsEndpoint:
    """A running ``/metrics`` endpoint; ``registry`` is what it serves."""

    def __init__(self, registry: CollectorRegistry, server: WebServer) -> None:
        self.registry = registry
        self._server = server

    @property
    def url(self) -> str:
        return f"{self._server.url}/metrics"

    async def stop(self) -> None:
        await self._server.stop()


async def start_metrics_endpoint(registry: CollectorRegistry, host: str, port: int) -> MetricsEndpoint:
    """Serve *registry* on http://*host*:*port*/metrics (0: a free port). ConfigError naming the key
    and the flag when the port is taken."""
    try:
        server = await start_web_server(metrics_app(registry), host, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"the metrics port {host}:{port} is already in use (is another CometMQ running?): stop it, "
                "or choose another with --metrics-port (metricsPromExporterPort), or turn metrics off "
                "with --no-metrics (metricsExporterType=DISABLE)"
            ) from None
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    return MetricsEndpoint(registry, server)
