"""The rpc-latency histogram: plain bucket counts a request adds to without a lock, read at scrape."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Final

from prometheus_client.core import HistogramMetricFamily

from cometmq.protocol import RequestCode, ResponseCode

# RocketMQ's common labels, on every series of a server: its cluster, the kind of node, and the node
# (a broker: its brokerName; a name server: its address).
COMMON_LABELS: Final = ("cluster", "node_type", "node_id")
# RocketMQ 5's rpc-latency buckets (RemotingMetricsManager), in milliseconds.
RPC_LATENCY_BUCKETS_MS: Final = (1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)
_BOUND_TEXTS: Final = tuple(repr(bound) for bound in RPC_LATENCY_BUCKETS_MS)  # "1.0", as Prometheus writes

# The row of every request code a server does not serve, and of every response code CometMQ does not
# know: a client choosing codes must not grow the table (and every scrape) without bound.
UNKNOWN_CODE: Final = -1
UNKNOWN_LABEL: Final = "unknown"

# Label values as RocketMQ's RemotingHelper.getRequestCodeDesc / getResponseCodeDesc write them: the
# code's lower-cased name, else its number.
_REQUEST_NAMES: Final = {int(code): code.name.lower() for code in RequestCode} | {UNKNOWN_CODE: UNKNOWN_LABEL}
_RESPONSE_NAMES: Final = {int(code): code.name.lower() for code in ResponseCode} | {
    UNKNOWN_CODE: UNKNOWN_LABEL
}

_Key = tuple[int, int, bool, str]


class RpcLatency:
    """How long a server took to answer its requests, by request code, response code, long polling or
    not, and the outcome of the write: a ``RequestObserver`` (cometmq.remoting) and the source of the
    ``rocketmq_rpc_latency`` family.

    One request costs a dict lookup, a bisect and two additions. prometheus_client's Histogram would
    take a lock per observation; the event loop's single thread needs none, and the scrape runs on it
    too. Request codes answered REQUEST_CODE_NOT_SUPPORTED (the Dispatcher serves no such code) or not
    in RequestCode, and response codes not in ResponseCode, share one row each (``unknown``), checked
    only when a combination is first seen.
    """

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        # (request code, response code, long polling, result) -> a count per bucket (the last: past
        # every bound), then the sum of the latencies in ms.
        self._rows: dict[_Key, list[float]] = {}

    def __call__(
        self, request_code: int, response_code: int, seconds: float, long_polling: bool, result: str
    ) -> None:
        ms = seconds * 1000.0
        row = self._rows.get((request_code, response_code, long_polling, result))
        if row is None:
            row = self._new_row(request_code, response_code, long_polling, result)
        row[bisect_left(RPC_LATENCY_BUCKETS_MS, ms)] += 1
        row[-1] += ms

    def _new_row(self, request_code: int, response_code: int, long_polling: bool, result: str) -> list[float]:
        if response_code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED or request_code not in _REQUEST_NAMES:
            request_code = UNKNOWN_CODE
        if response_code not in _RESPONSE_NAMES:
            response_code = UNKNOWN_CODE
        key = (request_code, response_code, long_polling, result)
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = [0.0] * (len(RPC_LATENCY_BUCKETS_MS) + 2)
        return row

    def family(self, label_names: Iterable[str], label_values: Iterable[str]) -> HistogramMetricFamily:
        """``rocketmq_rpc_latency`` with the given common labels on every series."""
        names, values = list(label_names), list(label_values)
        family = HistogramMetricFamily(
            "rocketmq_rpc_latency",
            "Time from a request's arrival to its answer, in milliseconds",
            labels=[*names, "protocol_type", "request_code", "response_code", "is_long_polling", "result"],
        )
        for (request_code, response_code, long_polling, result), row in sorted(self._rows.items()):
            cumulative = 0.0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip((*_BOUND_TEXTS, "+Inf"), row[:-1], strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            labels = [
                "remoting",
                _REQUEST_NAMES.get(request_code, str(request_code)),
                _RESPONSE_NAMES.get(response_code, str(response_code)),
                "true" if long_polling else "false",
                result,
            ]
            family.add_metric([*values, *labels], buckets, sum_value=row[-1])
        return family
