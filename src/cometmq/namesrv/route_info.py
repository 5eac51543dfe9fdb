"""The NameServer's route table: clusters, broker groups, live brokers and topic queue data.

Pure bookkeeping, no I/O: callers pass the time and an opaque connection token, so expiry and
connection loss can be tested without sockets.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

from cometmq.errors import RequestRefused
from cometmq.protocol import ResponseCode
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
    """When one broker address last registered (or confirmed its data version), and with what."""

    last_update: float
    data_version: DataVersion
    ha_server_addr: str


@dataclass(slots=True)
class RegisterResult:
    """What REGISTER_BROKER answers: for a slave, its master's address and HA address."""

    master_addr: str | None = None
    ha_server_addr: str | None = None


@dataclass(slots=True)
class RouteInfoManager:
    """The routes, and who may change them.

    A broker entry (broker name + id → address) belongs to the address that registered it: a request
    naming another address can neither replace nor unregister it while that address is alive (it
    registered or confirmed its data version within ``broker_expiry_s``). Every entry also remembers the
    connection its latest registration came on; closing that connection removes it, closing any other
    does not. An address's liveness record (``broker_live_table``) lasts while some entry names it.
    """

    broker_expiry_s: float = 120.0
    topic_queue_table: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)
    broker_live_table: dict[str, BrokerLiveInfo] = field(default_factory=dict)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    # (broker name, broker id) of every entry in broker_addr_table → the connection it registered on.
    registering_connection: dict[tuple[str, int], object | None] = field(default_factory=dict)
    # Broker name → the masterEpoch its id 0 registered with (0: a master not made by a switch).
    master_epochs: dict[str, int] = field(default_factory=dict)

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
        master_epoch: int = 0,
    ) -> RegisterResult:
        """Record a registration; raises RequestRefused (NO_PERMISSION) when another live address
        holds ``broker_name`` / ``broker_id``, unless the registration is a master's of a later
        *master_epoch* than the holder's (a master elected or promoted while the one it replaces may
        still be registered: paused, or cut off)."""
        holder = self._holder(broker_name, broker_id)
        if holder is not None and holder != broker_addr:
            if broker_id == MASTER_ID and master_epoch > self.master_epochs.get(broker_name, 0):
                self._remove_addr(holder, f"master of an older epoch, replaced by {broker_addr}")
            elif self._is_live(holder, now):
                raise self._refusal("registration", broker_name, broker_id, broker_addr, holder)
            else:
                self._remove_addr(holder, f"silent for {self.broker_expiry_s:g} s, replaced by {broker_addr}")
        if broker_id == MASTER_ID:
            self.master_epochs[broker_name] = master_epoch
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
                del self.registering_connection[(broker_name, other_id)]
        first_of_addr = holder != broker_addr
        broker_data.broker_addrs[broker_id] = broker_addr
        self.registering_connection[(broker_name, broker_id)] = connection

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

        self.broker_live_table[broker_addr] = BrokerLiveInfo(now, body.data_version, ha_server_addr)
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

    def unregister_broker(self, *, broker_addr: str, broker_name: str, broker_id: int, now: float) -> None:
        """Remove ``broker_name`` / ``broker_id`` if ``broker_addr`` holds it; raises RequestRefused
        (NO_PERMISSION) when another live address does."""
        holder = self._holder(broker_name, broker_id)
        if holder != broker_addr:
            if holder is not None and self._is_live(holder, now):
                raise self._refusal("unregistration", broker_name, broker_id, broker_addr, holder)
            return  # nothing of broker_addr's to remove; an expired holder goes at the next scan
        self._forget_entry(self.broker_addr_table[broker_name], broker_id, "unregistered")

    def _holder(self, broker_name: str, broker_id: int) -> str | None:
        broker_data = self.broker_addr_table.get(broker_name)
        return broker_data.broker_addrs.get(broker_id) if broker_data is not None else None

    def _is_live(self, broker_addr: str, now: float) -> bool:
        live = self.broker_live_table.get(broker_addr)
        return live is not None and now - live.last_update <= self.broker_expiry_s

    def _refusal(
        self, action: str, broker_name: str, broker_id: int, broker_addr: str, holder: str
    ) -> RequestRefused:
        remark = (
            f"{action} of broker {broker_name} id {broker_id} at {broker_addr} refused: it is registered "
            f"at {holder}, which keeps it until it has been silent for {self.broker_expiry_s:g} s"
        )
        log.warning("%s", remark)
        return RequestRefused(ResponseCode.NO_PERMISSION, remark)

    def _forget_entry(self, broker_data: BrokerData, broker_id: int, reason: str) -> object | None:
        """Remove one broker entry (its address too when no other entry names it); returns the
        connection it registered on."""
        broker_name = broker_data.broker_name
        addr = broker_data.broker_addrs.pop(broker_id)
        connection = self.registering_connection.pop((broker_name, broker_id))
        log.info("broker removed (%s): %s id %d at %s", reason, broker_name, broker_id, addr)
        if not any(addr in data.broker_addrs.values() for data in self.broker_addr_table.values()):
            self.broker_live_table.pop(addr, None)
            self.filter_server_table.pop(addr, None)
        self._drop_empty_group(broker_name, broker_data.cluster)
        return connection

    def _remove_addr(self, broker_addr: str, reason: str) -> list[object]:
        """Forget every entry of a broker address; returns the connections they registered on."""
        connections: list[object] = []
        for broker_data in list(self.broker_addr_table.values()):
            for broker_id, addr in list(broker_data.broker_addrs.items()):
                if addr == broker_addr:
                    connection = self._forget_entry(broker_data, broker_id, reason)
                    if connection is not None:
                        connections.append(connection)
        return connections

    def _drop_empty_group(self, broker_name: str, cluster: str) -> None:
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None or broker_data.broker_addrs:
            return
        del self.broker_addr_table[broker_name]
        self.master_epochs.pop(broker_name, None)
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

    def scan_not_active(self, now: float) -> list[object]:
        """Drop the broker addresses silent for more than ``broker_expiry_s``; returns the connections
        their entries registered on, to be closed."""
        expired = [addr for addr in self.broker_live_table if not self._is_live(addr, now)]
        reason = f"no registration for {self.broker_expiry_s:g} s"
        return [connection for addr in expired for connection in self._remove_addr(addr, reason)]

    def connection_closed(self, connection: object) -> None:
        """Drop the entries whose latest registration came on ``connection``."""
        for (broker_name, broker_id), registered_on in list(self.registering_connection.items()):
            if registered_on is connection:
                self._forget_entry(self.broker_addr_table[broker_name], broker_id, "connection closed")

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
