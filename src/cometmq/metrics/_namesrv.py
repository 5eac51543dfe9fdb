"""The name server's collector: CometMQ's own (RocketMQ 5's name server exports none), read at scrape
time, with RocketMQ's common labels (node_type "namesrv", node_id its address)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from cometmq.metrics._latency import COMMON_LABELS, RpcLatency

if TYPE_CHECKING:
    from cometmq.namesrv import NameServer


class NamesrvMetrics(Collector):
    """A prometheus_client collector of *namesrv*'s metrics: the brokers registered, the topics routed,
    and :attr:`rpc_latency` (give it to the name server's RemotingServer as its observer). A name
    server serves every cluster: its cluster label is empty, but on the broker and topic counts, which
    give the cluster they count."""

    def __init__(self, namesrv: NameServer) -> None:
        self._namesrv = namesrv
        self.rpc_latency = RpcLatency()

    def collect(self) -> Iterator[Metric]:
        namesrv = self._namesrv
        routes = namesrv.routes
        node_id = f"{namesrv.host}:{namesrv.port}"
        common = ["", "namesrv", node_id]
        brokers = GaugeMetricFamily(
            "rocketmq_namesrv_brokers",
            "Broker addresses registered with the name server, by cluster and role",
            labels=[*COMMON_LABELS, "role"],
        )
        counts: dict[tuple[str, str], int] = {}
        for data in routes.broker_addr_table.values():
            for broker_id in data.broker_addrs:
                key = (data.cluster, "master" if broker_id == 0 else "slave")
                counts[key] = counts.get(key, 0) + 1
        for (cluster, role), count in sorted(counts.items()):
            brokers.add_metric([cluster, "namesrv", node_id, role], count)
        yield brokers
        topics = GaugeMetricFamily(
            "rocketmq_namesrv_topics",
            "Topics the name server has routes for, by the cluster of their brokers",
            labels=list(COMMON_LABELS),
        )
        cluster_of = {name: data.cluster for name, data in routes.broker_addr_table.items()}
        topic_counts: dict[str, int] = {}
        for queues in routes.topic_queue_table.values():
            for cluster in {cluster_of[name] for name in queues if name in cluster_of}:
                topic_counts[cluster] = topic_counts.get(cluster, 0) + 1
        for cluster, count in sorted(topic_counts.items()):
            topics.add_metric([cluster, "namesrv", node_id], count)
        yield topics
        yield self.rpc_latency.family(COMMON_LABELS, common)
