"""The broker's collector: RocketMQ 5's broker, store and remoting metrics, read at scrape time."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from cometmq.metrics._latency import COMMON_LABELS, RpcLatency
from cometmq.metrics._versions import version_name
from cometmq.protocol.naming import RETRY_GROUP_TOPIC_PREFIX, TRANS_HALF_TOPIC, is_system_topic

if TYPE_CHECKING:
    from cometmq.broker import Broker

# RocketMQ's system consumer groups (CID_RMQ_SYS_TRANS and the like), for the is_system label.
_SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"


class BrokerMetrics(Collector):
    """A prometheus_client collector of *broker*'s metrics. Register it on a ``CollectorRegistry``
    and give :attr:`rpc_latency` to the broker's RemotingServer as its observer."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.rpc_latency = RpcLatency()
        # (topic, queue, offset) -> the store time of that message, from the last scrape: a lagging
        # group's oldest unconsumed message is the same one scrape after scrape, and its store time
        # costs a consume-queue and a commit-log read.
        self._store_times: dict[tuple[str, int, int], int] = {}

    def collect(self) -> Iterator[Metric]:
        broker = self._broker
        cfg = broker.config
        common = [cfg.broker_cluster_name, "broker", cfg.broker_name]
        yield from self._traffic(common)
        yield from self._consumers(common)
        yield from self._clients(common)
        yield from self._store(common)
        yield from self._replication(common)
        yield self.rpc_latency.family(COMMON_LABELS, common)

    def _traffic(self, common: list[str]) -> Iterator[Metric]:
        stats = self._broker.stats
        labels = [*COMMON_LABELS, "topic"]
        messages_in = CounterMetricFamily("rocketmq_messages_in_total", "Messages stored", labels=labels)
        bytes_in = CounterMetricFamily(
            "rocketmq_throughput_in_total", "Bytes of the messages stored", labels=labels
        )
        for topic, (messages, size, _) in stats.put_by_topic.items():
            messages_in.add_metric([*common, topic], messages)
            bytes_in.add_metric([*common, topic], size)
        labels = [*COMMON_LABELS, "topic", "consumer_group"]
        messages_out = CounterMetricFamily(
            "rocketmq_messages_out_total", "Messages handed to consumers", labels=labels
        )
        bytes_out = CounterMetricFamily(
            "rocketmq_throughput_out_total", "Bytes of the messages handed to consumers", labels=labels
        )
        for (group, topic), (messages, size, _) in stats.got_by_group_topic.items():
            messages_out.add_metric([*common, topic, group], messages)
            bytes_out.add_metric([*common, topic, group], size)
        dlq = CounterMetricFamily(
            "rocketmq_send_to_dlq_messages_total",
            "Messages a consumer group gave up on, sent to its dead-letter topic",
            labels=[*COMMON_LABELS, "topic", "consumer_group"],
        )
        for (group, topic), count in stats.dlq_by_group_topic.items():
            dlq.add_metric([*common, topic, group], count)
        yield from (messages_in, bytes_in, messages_out, bytes_out, dlq)

    def _consumers(self, common: list[str]) -> Iterator[Metric]:
        """Lag and in-flight messages per consumer group and topic, over the queues the group has
        committed an offset in (RocketMQ's ConsumerLagCalculator, for pull and push consumers)."""
        broker = self._broker
        store = broker.store
        pulled = broker.offsets.pulled
        now_ms = int(time.time() * 1000)
        labels = [*COMMON_LABELS, "topic", "consumer_group", "is_retry", "is_system"]
        lag = GaugeMetricFamily(
            "rocketmq_consumer_lag_messages", "Messages stored but not yet consumed", labels=labels
        )
        latency = GaugeMetricFamily(
            "rocketmq_consumer_lag_latency",
            "Age of the oldest message not yet consumed, in milliseconds",
            labels=labels,
        )
        inflight = GaugeMetricFamily(
            "rocketmq_consumer_inflight_messages",
            "Messages pulled by a consumer group but not yet committed",
            labels=labels,
        )
        # Each queue's bounds are read once per scrape however many groups consume it.
        bounds: dict[tuple[str, int], tuple[int, int]] = {}
        cached_times = self._store_times
        store_times: dict[tuple[str, int, int], int] = {}
        for key, queues in list(broker.offsets.offsets.items()):
            topic, _, group = key.partition("@")
            if broker.topics.get(topic) is None:
                continue
            behind = in_flight = 0
            oldest = 0  # store time of the oldest message not consumed (0: none)
            for queue_id, committed in list(queues.items()):
                if committed < 0:
                    continue
                queue = (topic, queue_id)
                bound = bounds.get(queue)
                if bound is None:
                    bound = bounds[queue] = (
                        store.min_offset(topic, queue_id),
                        store.max_offset(topic, queue_id),
                    )
                start, end = bound
                if end > committed:
                    behind += end - committed
                    at = (topic, queue_id, max(committed, start))
                    stamp = store_times.get(at)
                    if stamp is None:
                        stamp = cached_times.get(at)
                        if stamp is None:
                            stamp = store.store_time_at(*at)
                        store_times[at] = stamp
                    if stamp > 0 and (oldest == 0 or stamp < oldest):
                        oldest = stamp
                in_flight += max(0, pulled.get((group, topic, queue_id), committed) - committed)
            values = [
                *common,
                topic,
                group,
                _flag(topic.startswith(RETRY_GROUP_TOPIC_PREFIX)),
                _flag(is_system_topic(topic) or group.startswith(_SYSTEM_GROUP_PREFIX)),
            ]
            lag.add_metric(values, behind)
            latency.add_metric(values, max(0, now_ms - oldest) if oldest else 0)
            inflight.add_metric(values, in_flight)
        self._store_times = store_times  # only what this scrape used: the cache cannot outgrow the table
        yield from (lag, latency, inflight)

    def _clients(self, common: list[str]) -> Iterator[Metric]:
        broker = self._broker
        producers: dict[tuple[str, str], int] = {}
        for channels in broker.producers.groups.values():
            for channel in channels.values():
                client = (channel.language.lower(), version_name(channel.version))
                producers[client] = producers.get(client, 0) + 1
        family = GaugeMetricFamily(
            "rocketmq_producer_connections",
            "Producer connections, by client language and version",
            labels=[*COMMON_LABELS, "language", "version", "protocol_type"],
        )
        for (language, version), count in sorted(producers.items()):
            family.add_metric([*common, language, version, "remoting"], count)
        yield family
        consumers: dict[tuple[str, str, str, str], int] = {}
        for group, info in broker.consumers.groups.items():
            mode = "push" if info.consume_type == "CONSUME_PASSIVELY" else "pull"
            for channel in info.channels.values():
                key = (group, channel.language.lower(), version_name(channel.version), mode)
                consumers[key] = consumers.get(key, 0) + 1
        family = GaugeMetricFamily(
            "rocketmq_consumer_connections",
            "Consumer connections, by consumer group, client language and version, and consume mode",
            labels=[*COMMON_LABELS, "consumer_group", "language", "version", "consume_mode", "protocol_type"],
        )
        for (group, language, version, mode), count in sorted(consumers.items()):
            family.add_metric([*common, group, language, version, mode, "remoting"], count)
        yield family
        yield _gauge("rocketmq_topic_number", "Topics on the broker", common, len(broker.topics.topics))
        yield _gauge(
            "rocketmq_consumer_group_number",
            "Subscription groups on the broker",
            common,
            len(broker.groups.groups),
        )
        yield _gauge(
            "rocketmq_broker_permission",
            "The broker's permission (brokerPermission)",
            common,
            broker.config.broker_permission,
        )

    def _store(self, common: list[str]) -> Iterator[Metric]:
        broker = self._broker
        store = broker.store
        try:
            used = shutil.disk_usage(broker.root_dir).used
        except OSError:
            used = 0
        # As RocketMQ: what the filesystem holding the store has used.
        yield _gauge("rocketmq_storage_size", "Bytes used on the store's filesystem", common, used)
        yield _gauge(
            "rocketmq_storage_flush_behind_bytes",
            "Commit-log bytes written but not yet flushed to disk",
            common,
            store.flush_behind_bytes,
        )
        transactions = broker.transactions
        half_end = store.max_offset(TRANS_HALF_TOPIC, 0)
        settled = transactions.settled
        half = settled.count_unsettled(settled.first_unsettled, half_end)
        yield _gauge(
            "rocketmq_half_messages",
            "Transactional half messages neither committed nor rolled back",
            common,
            half,
        )

    def _replication(self, common: list[str]) -> Iterator[Metric]:
        """CometMQ's own (RocketMQ 5 has none): how far each slave is behind its master, in commit-log
        bytes, as the master sees each slave (role "master") or as a slave sees itself (role "slave")."""
        broker = self._broker
        family = GaugeMetricFamily(
            "rocketmq_replication_lag_bytes",
            "Commit-log bytes a slave is behind its master",
            labels=[*COMMON_LABELS, "role", "peer"],
        )
        if broker.ha_server is not None and not broker.is_slave:
            for link in broker.ha_server.runtime_info().ha_connection_info:
                family.add_metric([*common, "master", link.addr], link.diff)
        elif broker.ha_client is not None:
            info = broker.ha_client.runtime_info()
            client = info.ha_client_runtime_info
            behind = max(0, info.master_commit_log_max_offset - client.max_offset)
            family.add_metric([*common, "slave", client.master_addr], behind)
        yield family


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _gauge(name: str, documentation: str, common: list[str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=list(COMMON_LABELS))
    family.add_metric(common, value)
    return family
