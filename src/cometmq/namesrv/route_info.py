"""The NameServer's route table: clusters, broker groups, live brokers and topic queue data.

Pure bookkeeping, no I/O: callers pass the time and an opaque connection token, so expiry and
connection loss can be tested without sockets.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

from cometmq.protocol.naming import PERM_WRITE
from cometmq.protocol.route import (
    MASTER_ID,
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    RegisterBrokerBody,
    TopicList,
    TopicRouteData,
)

log = logging.getLogger("cometmq.namesrv")


@dataclass(slots=True)
class BrokerLiveInfo:
    """What keeps one broker address alive: its last registration and the connection it came on."""

    last_update: float
    data_version: DataVersion
    connection: object | None
    ha_server_addr: str


@dataclass(slots=True)
class RegisterResult:
    """What REGISTER_BROKER answers: for a slave, its master's address and HA address."""

    master_addr: str | None = None
    ha_server_addr: str | None = None


@dataclass(slots=True)
class RouteInfoManager:
    topic_queue_table: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)
    broker_live_table: dict[str, BrokerLiveInfo] = field(default_factory=dict)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)

    # registration ------------------------------------------------------------------------------

    def register_broker(
        self,
        *,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        body: RegisterBrokerBody,
        connection: object | None,
        now: float,
    ) -> RegisterResult:
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)

        broker_data = self.broker_addr_table.get(broker_name)
        first_of_group = broker_data is None
        if broker_data is None:
            broker_data = BrokerData(cluster, broker_name)
            self.broker_addr_table[broker_name] = broker_data
        # The same address under another id is a slave turned master (or back): keep one entry.
        for other_id, addr in list(broker_data.broker_addrs.items()):
            if addr == broker_addr and other_id != broker_id:
                del broker_data.broker_addrs[other_id]
        first_of_addr = broker_data.broker_addrs.get(broker_id) != broker_addr
        broker_data.broker_addrs[broker_id] = broker_addr

        previous = self.broker_live_table.get(broker_addr)
        if broker_id == MASTER_ID and (
            first_of_group or first_of_addr or previous is None or previous.data_version != body.data_version
        ):
            # Queue data comes from the master only. Topics missing from the body are kept: Java 4.9
            # brokers register just the one topic they have created (registerIncrementBrokerData).
            for config in body.topic_configs.values():
                self.topic_queue_table.setdefault(config.topic_name, {})[broker_name] = QueueData(
                    broker_name,
                    config.read_queue_nums,
                    config.write_queue_nums,
                    config.perm,
                    config.topic_sys_flag,
                )

        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            now, body.data_version, connection, ha_server_addr
        )
        if previous is None:
            log.info(
                "broker registered: %s id %d at %s (cluster %s, %d topics)",
                broker_name,
                broker_id,
                broker_addr,
                cluster,
                len(body.topic_configs),
            )
        if body.filter_server_list:
            self.filter_server_table[broker_addr] = list(body.filter_server_list)
        else:
            self.filter_server_table.pop(broker_addr, None)

        result = RegisterResult()
        if broker_id != MASTER_ID:
            master_addr = broker_data.master_addr
            if master_addr is not None:
                master_live = self.broker_live_table.get(master_addr)
                if master_live is not None:
                    result.master_addr = master_addr
                    result.ha_server_addr = master_live.ha_server_addr
        return result

    def data_version_changed(self, broker_addr: str, data_version: DataVersion, now: float) -> bool:
        """QUERY_DATA_VERSION: compare; an unchanged version counts as a sign of life."""
        live = self.broker_live_table.get(broker_addr)
        if live is None:
            return True
        changed = live.data_version != data_version
        if not changed:
            live.last_update = now
        return changed

    def data_version_of(self, broker_addr: str) -> DataVersion | None:
        live = self.broker_live_table.get(broker_addr)
        return live.data_version if live is not None else None

    def unregister_broker(self, *, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        if self.broker_live_table.pop(broker_addr, None) is not None:
            log.info("broker unregistered: %s id %d at %s", broker_name, broker_id, broker_addr)
        self.filter_server_table.pop(broker_addr, None)
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is not None and broker_data.broker_addrs.get(broker_id) == broker_addr:
            del broker_data.broker_addrs[broker_id]
        self._drop_empty_group(broker_name, cluster)

    def _remove_addr(self, broker_addr: str, reason: str) -> None:
        """Forget a broker address found dead (expired or its connection closed)."""
        if self.broker_live_table.pop(broker_addr, None) is None:
            return
        self.filter_server_table.pop(broker_addr, None)
        for broker_name, broker_data in list(self.broker_addr_table.items()):
            for broker_id, addr in list(broker_data.broker_addrs.items()):
                if addr == broker_addr:
                    del broker_data.broker_addrs[broker_id]
                    log.info("broker removed (%s): %s id %d at %s", reason, broker_name, broker_id, addr)
            self._drop_empty_group(broker_name, broker_data.cluster)

    def _drop_empty_group(self, broker_name: str, cluster: str) -> None:
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None or broker_data.broker_addrs:
            return
        del self.broker_addr_table[broker_name]
        names = self.cluster_addr_table.get(cluster)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[cluster]
        # A broker group with no broker left takes its queues with it.
        for topic, queues in list(self.topic_queue_table.items()):
            queues.pop(broker_name, None)
            if not queues:
                del self.topic_queue_table[topic]

    # liveness ----------------------------------------------------------------------------------

    def scan_not_active(self, now: float, expiry: float) -> list[BrokerLiveInfo]:
        """Drop brokers silent for more than ``expiry`` seconds; returns them so their
        connections can be closed."""
        expired = [
            (addr, live) for addr, live in self.broker_live_table.items() if now - live.last_update > expiry
        ]
        for addr, _ in expired:
            self._remove_addr(addr, f"no registration for {expiry:g} s")
        return [live for _, live in expired]

    def connection_closed(self, connection: object) -> None:
        for addr, live in list(self.broker_live_table.items()):
            if live.connection is connection:
                self._remove_addr(addr, "connection closed")

    # queries -----------------------------------------------------------------------------------

    def pickup_topic_route(self, topic: str) -> TopicRouteData | None:
        """The route for ``topic``, or None when it has no queue data or none of its brokers lives."""
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        route = TopicRouteData(queue_datas=[dataclasses.replace(q) for q in queues.values()])
        for broker_name in queues:
            broker_data = self.broker_addr_table.get(broker_name)
            if broker_data is None or not broker_data.broker_addrs:
                continue
            route.broker_datas.append(broker_data.copy())
            for addr in broker_data.broker_addrs.values():
                servers = self.filter_server_table.get(addr)
                if servers:
                    route.filter_server_table[addr] = list(servers)
        if not route.broker_datas:
            return None
        return route

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            broker_addr_table={name: data.copy() for name, data in self.broker_addr_table.items()},
            cluster_addr_table={name: sorted(names) for name, names in self.cluster_addr_table.items()},
        )

    def all_topics(self) -> TopicList:
        return TopicList(sorted(self.topic_queue_table))

    def topics_of_cluster(self, cluster: str) -> TopicList:
        names = self.cluster_addr_table.get(cluster, set())
        return TopicList(
            sorted(topic for topic, queues in self.topic_queue_table.items() if names.intersection(queues))
        )

    def system_topics(self) -> TopicList:
        """Cluster and broker names (they are topics on the brokers too) and one master address."""
        topics: set[str] = set()
        broker_addr: str | None = None
        for cluster, names in self.cluster_addr_table.items():
            topics.add(cluster)
            topics.update(names)
        for broker_data in self.broker_addr_table.values():
            if broker_addr is None and broker_data.master_addr is not None:
                broker_addr = broker_data.master_addr
        return TopicList(sorted(topics), broker_addr)

    # administration ----------------------------------------------------------------------------

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return
        if cluster:
            for broker_name in self.cluster_addr_table.get(cluster, set()):
                queues.pop(broker_name, None)
        else:
            queues.clear()
        if not queues:
            del self.topic_queue_table[topic]
        log.info("topic deleted: %s%s", topic, f" (cluster {cluster})" if cluster else "")

    def change_write_perm(self, broker_name: str, *, writable: bool) -> int:
        """Wipe or restore WRITE on every queue data of ``broker_name``; returns how many changed."""
        count = 0
        for queues in self.topic_queue_table.values():
            queue_data = queues.get(broker_name)
            if queue_data is None:
                continue
            queue_data.perm = queue_data.perm | PERM_WRITE if writable else queue_data.perm & ~PERM_WRITE
            count += 1
        log.info(
            "%s write permission of broker %s on %d topics",
            "added" if writable else "wiped",
            broker_name,
            count,
        )
        return count
