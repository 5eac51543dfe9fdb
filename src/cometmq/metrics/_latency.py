"""The rpc-latency histogram: plain bucket counts a request adds to without a lock, read at scrape."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Final

from prometheus_client.core import HistogramMetricFamily

# RocketMQ 5's rpc-latency buckets (RemotingMetricsManager), in milliseconds.
RPC_LATENCY_BUCKETS_MS: Final = (1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)
_BOUND_TEXTS: Final = tuple(repr(bound) for bound in RPC_LATENCY_BUCKETS_MS)  # "1.0", as Prometheus writes


class RpcLatency:
    """How long a server took to answer its requests, by request code and response code: a
    ``RequestObserver`` (cometmq.remoting) and the source of the ``rocketmq_rpc_latency`` family.

    One request costs a bisect and two additions. prometheus_client's Histogram would take a lock
    per observation; the event loop's single thread needs none, and the scrape runs on it too.
    """

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        # (request code, response code) -> a count per bucket (the last: past every bound), then the
        # sum of the latencies in ms.
        self._rows: dict[tuple[int, int], list[float]] = {}

    def __call__(self, request_code: int, response_code: int, seconds: float) -> None:
        ms = seconds * 1000.0
        row = self._rows.get((request_code, response_code))
        if row is None:
            row = self._rows[(request_code, response_code)] = [0.0] * (len(RPC_LATENCY_BUCKETS_MS) + 2)
        row[bisect_left(RPC_LATENCY_BUCKETS_MS, ms)] += 1
        row[-1] += ms

    def family(self, label_names: Iterable[str], label_values: Iterable[str]) -> HistogramMetricFamily:
        """``rocketmq_rpc_latency`` with the given common labels on every series."""
        names, values = list(label_names), list(label_values)
        family = HistogramMetricFamily(
            "rocketmq_rpc_latency",
            "Time from a request's arrival to its answer, in milliseconds",
            labels=[*names, "request_code", "response_code"],
        )
        for (request_code, response_code), row in sorted(self._rows.items()):
            cumulative = 0.0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip((*_BOUND_TEXTS, "+Inf"), row[:-1], strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric([*values, str(request_code), str(response_code)], buckets, sum_value=row[-1])
        return family
