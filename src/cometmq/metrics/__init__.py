"""Prometheus metrics of a broker and a name server, under RocketMQ 5's metric names and labels
(docs/metrics.md).

Everything that can be read from a server's state is read when Prometheus scrapes: the collectors walk
the broker's tables on its event loop, which also serves the endpoint. Requests pay one cheap
observation each for the rpc-latency histogram, and only while metrics are on.

This module itself imports nothing heavy: a server's configuration names :class:`MetricsExporterType`,
and ``prometheus_client`` and Starlette load only when a server turns its endpoint on.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Final


class MetricsExporterType(enum.Enum):
    """RocketMQ 5's metricsExporterType, of which CometMQ has these two: no metrics, or a Prometheus
    endpoint on metricsPromExporterHost:metricsPromExporterPort."""

    DISABLE = "DISABLE"
    PROM = "PROM"


# RocketMQ 5's metricsPromExporterPort default.
DEFAULT_PROM_EXPORTER_PORT: Final = 5557

if TYPE_CHECKING:
    from cometmq.metrics._app import MetricsEndpoint, metrics_app, start_metrics_endpoint
    from cometmq.metrics._broker import BrokerMetrics
    from cometmq.metrics._latency import RpcLatency
    from cometmq.metrics._namesrv import NamesrvMetrics

_LAZY: Final = {
    "BrokerMetrics": "cometmq.metrics._broker",
    "MetricsEndpoint": "cometmq.metrics._app",
    "NamesrvMetrics": "cometmq.metrics._namesrv",
    "RpcLatency": "cometmq.metrics._latency",
    "metrics_app": "cometmq.metrics._app",
    "start_metrics_endpoint": "cometmq.metrics._app",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "DEFAULT_PROM_EXPORTER_PORT",
    "BrokerMetrics",
    "MetricsEndpoint",
    "MetricsExporterType",
    "NamesrvMetrics",
    "RpcLatency",
    "metrics_app",
    "start_metrics_endpoint",
]
