"""AdminClient: cluster and topic administration against a NameServer and its brokers (asyncio)."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import json
import logging
import random
import ssl
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from cometmq.auth import Acl, AuthError, Credentials, PolicyType, User, UserStatus, UserType
from cometmq.client import _brokerapi
from cometmq.client._brokerapi import CLIENT_INNER_PRODUCER_GROUP, PullResult, PullStatus, send_header
from cometmq.client._instance import ClientInstance, decode_answer
from cometmq.client._lifecycle import Client
from cometmq.client._options import check_credentials, check_positive, tls_context
from cometmq.client.message import SYSFLAG_COMPRESSED, MessageQueue
from cometmq.errors import (
    BrokerError,
    CometMQError,
    ConnectionClosedError,
    ProtocolError,
    RemotingTimeoutError,
)
from cometmq.javaprops import format_properties, parse_properties
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from cometmq.protocol.auth_headers import (
    AclRequestHeader,
    DeleteAclRequestHeader,
    ListAclsRequestHeader,
    ListUsersRequestHeader,
    UserRequestHeader,
)
from cometmq.protocol.broker_headers import (
    RESET_TO_LATEST,
    CloneGroupOffsetRequestHeader,
    ConsumerGroupRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetTopicConfigRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
    ProducerGroupRequestHeader,
    QueryMessageRequestHeader,
    ResetOffsetRequestHeader,
    ResetOffsetResponseHeader,
    SendMessageResponseHeader,
    TopicRequestHeader,
    ViewBrokerStatsDataRequestHeader,
    ViewMessageRequestHeader,
)
from cometmq.protocol.broker_stats import BrokerStatsData, StatsName, group_stats_key
from cometmq.protocol.ha_status import HARuntimeInfo
from cometmq.protocol.jsonbody import BodyError, as_object, json_object
from cometmq.protocol.namesrv_headers import DeleteTopicFromNamesrvRequestHeader, GetRouteInfoRequestHeader
from cometmq.protocol.naming import (
    DEFAULT_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    TOOLS_CONSUMER_GROUP,
    TRACE_TOPIC,
    dlq_topic,
    group_name_error,
    is_system_topic,
    retry_topic,
    topic_name_error,
)
from cometmq.protocol.properties import KEY_SEPARATOR, decode_properties, encode_properties
from cometmq.protocol.record import (
    BORNHOST_V6_FLAG,
    STOREHOST_V6_FLAG,
    DecodedRecord,
    decode_host,
    decode_offset_msg_id,
    decode_records,
    inflate_body,
)
from cometmq.protocol.route import (
    MASTER_ID,
    BrokerData,
    ClusterInfo,
    QueueData,
    TopicList,
    TopicRouteData,
    parse_kv_table,
)
from cometmq.protocol.subscription import SubscriptionData
from cometmq.protocol.subscription_group import SubscriptionGroupConfig
from cometmq.protocol.topic_config import TopicConfig, parse_attribute_changes
from cometmq.protocol.trace import TraceContext, TraceType, decode_trace_contexts

log = logging.getLogger("cometmq.client")

_NO_END = (1 << 63) - 1  # Long.MAX_VALUE, what RocketMQ's tools send as "no end"
_TRACE_MESSAGES_MAX = 64  # trace messages read per message id (RocketMQ's queryMsgTraceById)
# Records of one millisecond in the order they happen.
_TRACE_ORDER = {TraceType.Pub: 0, TraceType.EndTransaction: 1, TraceType.SubBefore: 2, TraceType.SubAfter: 3}
# How many topics a message lookup without a topic asks about at once.
_TOPIC_QUERY_CONCURRENCY = 16
# The queues a topic gets on a broker where it is created without a count (mqadmin updateTopic's 8).
DEFAULT_TOPIC_QUEUES = 8
# Marks a message resent from a DLQ: the offset message id of the dead letter it copies.
RESENT_FROM_DLQ = "RESENT_FROM_DLQ"
# What the retry path (broker and clients) added to a message; a resent dead letter drops it. The
# broker adds CLUSTER again.
_RETRY_BOOKKEEPING = (
    "RETRY_TOPIC",
    "ORIGIN_MESSAGE_ID",
    "DELAY",
    "REAL_TOPIC",
    "REAL_QID",
    "CLUSTER",
    "WAIT",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "RECONSUME_TIME",
    "CONSUME_START_TIME",
)
_PULL_BATCH = 32


@dataclass(slots=True)
class Resent:
    """A copy of a stored message sent again (a dead letter to its original topic, a message to a
    group's retry topic): where, and the copy's offset message id."""

    topic: str
    msg_id: str


@dataclass(slots=True)
class QueueStatus:
    """One queue of a topic on one broker (an entry of RocketMQ's TopicStatsTable)."""

    topic: str
    broker_name: str
    queue_id: int
    min_offset: int  # the oldest offset still stored
    max_offset: int  # the queue's end: where the next message will be written
    last_store_timestamp: int  # store time of the newest message (ms), 0 if none

    @property
    def messages(self) -> int:
        """Messages stored in the queue now."""
        return max(0, self.max_offset - self.min_offset)


@dataclass(slots=True)
class QueueProgress:
    """How far a consumer group is in one queue (one entry of RocketMQ's ConsumeStats)."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int  # the queue's end: where the next message will be written
    consumer_offset: int  # the group's committed offset: the next message it will get
    last_timestamp: int  # store time of the last message the group consumed (ms), 0 if none

    @property
    def lag(self) -> int:
        """Messages stored but not yet consumed by the group."""
        return max(0, self.broker_offset - self.consumer_offset)


@dataclass(slots=True)
class ConsumeProgress:
    """A group's progress on every queue it consumes (``cometmq group progress``)."""

    group: str
    queues: list[QueueProgress]
    consume_tps: float  # messages per second the group committed over the last minute

    @property
    def total_lag(self) -> int:
        """The lag summed over every queue."""
        return sum(queue.lag for queue in self.queues)


@dataclass(slots=True)
class QueueReset:
    """One queue's offset before and after a reset."""

    topic: str
    broker_name: str
    queue_id: int
    old_offset: int  # -1: the group had no offset there
    new_offset: int


@dataclass(slots=True)
class ResetResult:
    """What ``reset_offsets`` changed, and how many online consumers were told."""

    queues: list[QueueReset]
    consumers_notified: int  # consumer connections sent the new offsets, summed over brokers


@dataclass(slots=True)
class ClientConnection:
    """One client of a producer or consumer group connected to the brokers (RocketMQ's Connection)."""

    client_id: str
    client_addr: str
    language: str
    version: int
    broker_names: list[str] = field(default_factory=list)  # the brokers it heartbeats to


@dataclass(slots=True)
class ConsumerConnections:
    """Who consumes for a group now (RocketMQ's ConsumerConnection, merged over the brokers)."""

    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: dict[str, str]  # topic → subscription expression
    connections: list[ClientConnection]


@dataclass(slots=True)
class GroupTraffic:
    """A consumer group's traffic on one topic (a row of ``statsAll``)."""

    group: str
    lag: int  # messages stored but not yet consumed
    out_tps: float  # messages pulled per second over about the last minute
    out_today: int  # messages pulled in about the last day


@dataclass(slots=True)
class TopicTraffic:
    """A topic's traffic (``statsAll``): what was stored, and each consumer group's share."""

    topic: str
    in_tps: float  # messages stored per second over about the last minute
    in_today: int  # messages stored in about the last day
    groups: list[GroupTraffic]


def _progress_of(stats: Any) -> list[QueueProgress]:
    """The queues of a ConsumeStats body."""
    queues = []
    for key, wrapper in (as_object(stats, "ConsumeStats").get("offsetTable") or {}).items():
        queue_topic, broker_name, queue_id = _queue_of(key)
        queues.append(
            QueueProgress(
                queue_topic,
                broker_name,
                queue_id,
                int(wrapper.get("brokerOffset", 0)),
                int(wrapper.get("consumerOffset", 0)),
                int(wrapper.get("lastTimestamp", 0)),
            )
        )
    return queues


def _is_group_topic(topic: str) -> bool:
    """A consumer group's retry or dead-letter topic."""
    return topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))


def _queue_of(key: Any) -> tuple[str, str, int]:
    """(topic, broker name, queue id) of a MessageQueue map key as fastjson writes it."""
    if isinstance(key, tuple):
        props = dict(key)
    elif isinstance(key, str):  # a peer that wrote the key as JSON text
        props = fastjson.loads(key)
    else:
        raise ValueError(f"not a message queue: {key!r}")
    return str(props["topic"]), str(props["brokerName"]), int(props["queueId"])


class AdminClient(Client):
    """Talks to the NameServer(s) at ``namesrv_addr`` (``host:port``, or several joined by ``;`` as
    RocketMQ's ``namesrvAddr`` allows) and to the brokers they list, once started.

    Every non-success answer raises :class:`BrokerError` with the server's code and remark.

    ``credentials`` (:class:`cometmq.auth.Credentials`) sign every request, for servers with aclEnable;
    ``tls`` is False (plain TCP), True (TLS checked against the system's CAs and the server's name) or
    an :class:`ssl.SSLContext` of your own (a private CA, a client certificate).
    """

    kind = "admin client"

    def __init__(
        self,
        namesrv_addr: str,
        timeout: float = 5.0,
        connect_timeout: float = 3.0,
        *,
        credentials: Credentials | None = None,
        tls: bool | ssl.SSLContext = False,
    ) -> None:
        check_positive("timeout", timeout)
        check_positive("connect_timeout", connect_timeout)
        check_credentials(credentials)
        ssl_context = tls_context(tls)
        super().__init__()
        # The producers' and consumers' plumbing (connections, requests), never started: an admin
        # client joins no group, so it sends no heartbeat and refreshes no route.
        self._connections = ClientInstance(
            namesrv_addr,
            request_timeout=timeout,
            connect_timeout=connect_timeout,
            credentials=credentials,
            ssl_context=ssl_context,
        )
        self.namesrv_addrs = self._connections.namesrv_addrs
        self.timeout = timeout

    @property
    def instance(self) -> ClientInstance:
        """The connections and routes this client uses (for requests it has no method for)."""
        return self._instance

    @property
    def _instance(self) -> ClientInstance:
        # Every request goes through here, so a client that is not running refuses it.
        self._check_running()
        return self._connections

    async def _close(self, timeout: float) -> None:
        """Close every connection (nothing is in progress that ``timeout`` would wait for)."""
        await self._connections.close()

    # plumbing ----------------------------------------------------------------------------------

    async def _invoke_namesrv(self, code: int, ext_fields: dict[str, str] | None = None) -> RemotingCommand:
        """Ask the first name server that can be reached; a server's error answer is final."""
        last_error: ConnectionClosedError | None = None
        for addr in self.namesrv_addrs:
            try:
                return await self._namesrv_ok(addr, code, ext_fields)
            except ConnectionClosedError as exc:
                last_error = exc
        assert last_error is not None
        raise last_error

    async def _namesrv_ok(self, addr: str, code: int, ext_fields: dict[str, str] | None) -> RemotingCommand:
        """One request to the name server at ``addr``; a non-success answer raises BrokerError."""
        response = await self._instance.invoke_namesrv(addr, code, ext_fields)
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark)
        return response

    # name server queries -----------------------------------------------------------------------

    async def cluster_info(self) -> ClusterInfo:
        """Clusters, their brokers and addresses, as the name server knows them."""
        response = await self._invoke_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        return ClusterInfo.decode(response.body)

    async def topic_list(self) -> list[str]:
        """Every topic the name server knows, sorted."""
        response = await self._invoke_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        return sorted(TopicList.decode(response.body).topics)

    async def topic_route(self, topic: str) -> TopicRouteData:
        """Which brokers hold the topic's queues; BrokerError when none does."""
        # Ask for standard JSON explicitly, so an older name server does not send the legacy form.
        query = GetRouteInfoRequestHeader(topic=topic, accept_standard_json_only=True)
        response = await self._invoke_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, query.encode())
        return TopicRouteData.decode(response.body)

    async def topic_attributes(self) -> dict[str, dict[str, str]]:
        """The attributes of every topic that carries any (``queue.type``, ``deduplication``, ...), as the
        master brokers hold them (GET_ALL_TOPIC_CONFIG); a topic's first master to answer wins."""
        info = await self.cluster_info()
        found: dict[str, dict[str, str]] = {}
        for broker in sorted(info.broker_addr_table.values(), key=lambda b: b.broker_name):
            if broker.master_addr is None:
                continue
            response = await self._instance.invoke_ok(broker.master_addr, RequestCode.GET_ALL_TOPIC_CONFIG)
            table = fastjson.loads(response.body).get("topicConfigTable") or {}
            for name, raw in table.items():
                if isinstance(raw, dict) and name not in found:
                    attributes = TopicConfig.from_json(raw).attributes
                    if attributes:
                        found[name] = attributes
        return found

    async def topic_config(self, topic: str, broker_addr: str | None = None) -> TopicConfig:
        """``topic``'s TopicConfig as the broker at ``broker_addr`` holds it, or the first master of
        its route (GET_TOPIC_CONFIG): its queues, perm and attributes, ``message_type`` among them.
        BrokerError TOPIC_NOT_EXIST when that broker lacks the topic."""
        if broker_addr is None:
            masters = [b.master_addr for b in (await self.topic_route(topic)).broker_datas if b.master_addr]
            if not masters:
                raise BrokerError(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} has no master broker")
            broker_addr = min(masters)
        header = GetTopicConfigRequestHeader(topic=topic).encode()
        response = await self._instance.invoke_ok(broker_addr, RequestCode.GET_TOPIC_CONFIG, header)
        return TopicConfig.from_json(json_object(response.body, "TopicConfig"))

    async def topic_status(self, topic: str) -> list[QueueStatus]:
        """Every queue of ``topic`` on every master holding it (GET_TOPIC_STATS_INFO): its offsets and
        the store time of its newest message, sorted by broker name and queue id."""
        route = await self.topic_route(topic)
        header = TopicRequestHeader(topic=topic).encode()
        queues: list[QueueStatus] = []
        for broker in route.broker_datas:
            addr = broker.master_addr
            if addr is None:
                continue
            response = await self._instance.invoke_ok(addr, RequestCode.GET_TOPIC_STATS_INFO, header)
            table = as_object(fastjson.loads(response.body), "TopicStatsTable").get("offsetTable") or {}
            for key, offsets in table.items():
                queue_topic, broker_name, queue_id = _queue_of(key)
                queues.append(
                    QueueStatus(
                        queue_topic,
                        broker_name,
                        queue_id,
                        int(offsets.get("minOffset", 0)),
                        int(offsets.get("maxOffset", 0)),
                        int(offsets.get("lastUpdateTimestamp", 0)),
                    )
                )
        queues.sort(key=lambda q: (q.broker_name, q.queue_id))
        return queues

    # topics ------------------------------------------------------------------------------------

    async def masters_of(self, cluster: str | None = None) -> tuple[str, list[BrokerData]]:
        """The cluster meant (the only one, when ``cluster`` is None) and its master brokers."""
        info = await self.cluster_info()
        if not info.cluster_addr_table:
            raise CometMQError(
                f"no broker is registered with the name server at {';'.join(self.namesrv_addrs)}"
            )
        if cluster is None:
            if len(info.cluster_addr_table) > 1:
                names = ", ".join(sorted(info.cluster_addr_table))
                raise CometMQError(f"several clusters are registered ({names}); say which one")
            cluster = next(iter(info.cluster_addr_table))
        elif cluster not in info.cluster_addr_table:
            raise CometMQError(
                f"cluster {cluster!r} is unknown to the name server"
                f" (known: {', '.join(sorted(info.cluster_addr_table))})"
            )
        masters = [broker for broker in info.brokers_of(cluster) if broker.master_addr is not None]
        if not masters:
            raise CometMQError(f"cluster {cluster!r} has no master broker")
        return cluster, masters

    async def create_topic(
        self,
        topic: str,
        queues: int | None = None,
        cluster: str | None = None,
        perm: int | None = None,
        order: bool = False,
        wait: bool = True,
        attributes: str | None = None,
    ) -> list[BrokerData]:
        """Create (or update) ``topic`` on every master of the cluster with ``queues`` read and write
        queues and permission ``perm``, and (``wait``) until the name server routes it there; returns
        those brokers. Left out (None), ``queues`` and ``perm`` keep what a broker that has the topic
        routes already, and are 8 queues, read and write, where it is new. *attributes* changes the
        topic's attributes in RocketMQ 5's syntax, ``+name=value,-name`` (``+deduplication=true``); an
        update without it keeps them."""
        reason = topic_name_error(topic)
        if reason is not None:
            raise CometMQError(f'topic "{topic}" is illegal: {reason}')
        if attributes:
            try:
                parse_attribute_changes(attributes)
            except ValueError as exc:
                raise CometMQError(f"topic {topic}: {exc}") from None
        if queues is not None and queues < 1:
            raise CometMQError(f"a topic needs at least one queue, not {queues}")
        _, masters = await self.masters_of(cluster)
        current = await self._routed_queues(topic) if queues is None or perm is None else {}
        wanted: dict[str, int] = {}
        for broker in masters:
            assert broker.master_addr is not None
            routed = current.get(broker.broker_name)
            count = queues or (routed.write_queue_nums if routed else DEFAULT_TOPIC_QUEUES)
            header = CreateTopicRequestHeader(
                topic=topic,
                default_topic=DEFAULT_TOPIC,
                read_queue_nums=count,
                write_queue_nums=count,
                perm=perm if perm is not None else (routed.perm if routed else PERM_READ | PERM_WRITE),
                topic_filter_type="SINGLE_TAG",  # RocketMQ's TopicFilterType: tags are single strings
                order=order,
                attributes=attributes or None,
            ).encode()
            await self._instance.invoke_ok(broker.master_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
            wanted[broker.broker_name] = count
        if wait:
            await self._await_route(topic, wanted)
        return masters

    async def _routed_queues(self, topic: str) -> dict[str, QueueData]:
        """Each broker name's share of ``topic`` as the name server routes it; empty for a topic it
        does not route."""
        try:
            route = await self.topic_route(topic)
        except BrokerError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
            return {}
        return {q.broker_name: q for q in route.queue_datas}

    async def _await_route(self, topic: str, wanted: dict[str, int]) -> None:
        """Wait (at most the request timeout) until the name server routes ``topic`` to each broker
        name of ``wanted`` with its write queue count there.

        A broker re-registers its topics after creating one, a Java broker before it replies and
        ours just after; waiting here means the topic is usable as soon as create_topic returns.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while True:
            routed = await self._routed_queues(topic)
            if all(name in routed and routed[name].write_queue_nums == n for name, n in wanted.items()):
                return
            if loop.time() >= deadline:
                log.warning("topic %s created, but the name server does not route it yet", topic)
                return
            await asyncio.sleep(0.05)

    async def delete_topic(self, topic: str, cluster: str | None = None) -> list[BrokerData]:
        """Delete ``topic`` on every master of the cluster, then from the name servers;
        :class:`CometMQError` if neither the name server nor a master of the cluster has it."""
        cluster, masters = await self.masters_of(cluster)
        if not await self._topic_exists(topic, cluster, masters):
            raise CometMQError(f"topic {topic} does not exist in cluster {cluster}: nothing was deleted")
        for broker in masters:
            assert broker.master_addr is not None
            await self._instance.invoke_ok(
                broker.master_addr,
                RequestCode.DELETE_TOPIC_IN_BROKER,
                TopicRequestHeader(topic=topic).encode(),
            )
        # Every name server keeps its own table, so each one must forget the topic.
        forget = DeleteTopicFromNamesrvRequestHeader(topic=topic, cluster_name=cluster)
        for addr in self.namesrv_addrs:
            await self._namesrv_ok(addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, forget.encode())
        return masters

    async def _topic_exists(self, topic: str, cluster: str, masters: list[BrokerData]) -> bool:
        """Whether the name server routes ``topic`` to a broker of ``cluster`` or one of its
        ``masters`` has it (a broker registers its topics only every 30 s). A master that cannot say
        counts as having it: deleting what is not there does no harm."""
        try:
            route = await self.topic_route(topic)
        except BrokerError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
        else:
            if any(broker.cluster == cluster for broker in route.broker_datas):
                return True
        header = TopicRequestHeader(topic=topic).encode()
        for broker in masters:
            assert broker.master_addr is not None
            try:
                await self._instance.invoke_ok(broker.master_addr, RequestCode.GET_TOPIC_STATS_INFO, header)
            except BrokerError as exc:
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                    return True
            except (ConnectionClosedError, RemotingTimeoutError, OSError):
                return True
            else:
                return True
        return False

    # brokers -----------------------------------------------------------------------------------

    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        """The broker's runtime statistics (brokerVersionDesc, putTps, …) as strings."""
        response = await self._instance.invoke_ok(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return parse_kv_table(response.body)

    async def ha_status(self, addr: str) -> HARuntimeInfo:
        """The replication state of the broker at ``addr`` (GET_BROKER_HA_STATUS): for a master its
        connected slaves, for a slave its link to the master. A broker that does not know the request
        (RocketMQ 4.x) is a :class:`BrokerError` saying so."""
        response = await self._instance.invoke(addr, RequestCode.GET_BROKER_HA_STATUS)
        if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            raise BrokerError(
                response.code,
                f"the broker at {addr} does not report its replication state (GET_BROKER_HA_STATUS, "
                "request code 907): it is neither CometMQ nor RocketMQ 5.x",
            )
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark)
        return HARuntimeInfo.decode(response.body)

    async def notify_role_changed(self, addr: str, master_address: str, master_epoch: int) -> None:
        """Tell the broker at ``addr`` (NOTIFY_BROKER_ROLE_CHANGED) that the broker at
        ``master_address`` is its group's master from ``master_epoch`` on: ``addr`` itself becomes
        the master, any other broker a slave following the master the name server names. A broker
        in failover mode refuses (etcd elects its masters): :class:`BrokerError` with its remark."""
        header = NotifyBrokerRoleChangedRequestHeader(
            master_address=master_address, master_epoch=master_epoch, master_broker_id=MASTER_ID
        )
        await self._instance.invoke_ok(addr, RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header.encode())

    async def broker_config(self, addr: str) -> dict[str, str]:
        """The settings in effect on the broker at ``addr`` (GET_BROKER_CONFIG), by RocketMQ key."""
        response = await self._instance.invoke_ok(addr, RequestCode.GET_BROKER_CONFIG)
        try:
            return parse_properties(bytes(response.body or b"").decode())
        except UnicodeDecodeError:
            raise ProtocolError(f"the broker at {addr} answered settings that are not UTF-8 text") from None

    async def update_broker_config(self, addr: str, values: Mapping[str, str]) -> None:
        """Change settings of the broker at ``addr`` while it runs (UPDATE_BROKER_CONFIG); the broker
        keeps them for its next start. A CometMQ broker refuses a key that cannot change at run time
        (BrokerError naming it) and then changes nothing."""
        body = format_properties(values).encode()
        await self._instance.invoke_ok(addr, RequestCode.UPDATE_BROKER_CONFIG, body=body)

    async def broker_stats(self, addr: str, name: StatsName | str, key: str) -> BrokerStatsData:
        """One counter of the broker at ``addr`` over about the last minute, hour and day
        (VIEW_BROKER_STATS_DATA): ``name`` a :class:`StatsName`, ``key`` a topic or ``topic@group``.
        BrokerError when the broker has counted nothing under them."""
        header = ViewBrokerStatsDataRequestHeader(stats_name=str(name), stats_key=key).encode()
        response = await self._instance.invoke_ok(addr, RequestCode.VIEW_BROKER_STATS_DATA, header)
        return BrokerStatsData.decode(response.body)

    async def traffic(
        self, topics: list[str] | None = None, cluster: str | None = None
    ) -> list[TopicTraffic]:
        """What ``statsAll`` shows: per topic (``topics``, or every topic that is not a system topic),
        messages stored per second over the last minute and in the last day, and per consumer group
        with offsets on it the same for messages pulled, and its lag. Read from the cluster's masters
        (VIEW_BROKER_STATS_DATA, GET_ALL_CONSUMER_OFFSET, GET_CONSUME_STATS); a counter a broker has
        not kept counts 0."""
        _, masters = await self.masters_of(cluster)
        addrs = [broker.master_addr for broker in masters if broker.master_addr is not None]
        groups_of: dict[str, set[str]] = {}
        for addr in addrs:
            response = await self._instance.invoke_ok(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
            for key in (fastjson.loads(response.body) or {}).get("offsetTable") or {}:
                topic, _, group = str(key).partition("@")
                groups_of.setdefault(topic, set()).add(group)
        if topics is None:
            system = frozenset(await self._system_topics())
            topics = [
                t
                for t in await self.topic_list()
                if not is_system_topic(t, system) and not _is_group_topic(t)
            ]

        async def counted(name: StatsName, key: str) -> tuple[float, int]:
            tps, today = 0.0, 0
            for addr in addrs:
                try:
                    data = await self.broker_stats(addr, name, key)
                except BrokerError:
                    continue
                tps += data.minute.tps
                today += data.today
            return tps, today

        result = []
        for topic in sorted(topics):
            in_tps, in_today = await counted(StatsName.TOPIC_PUT_NUMS, topic)
            traffic = TopicTraffic(topic, in_tps, in_today, [])
            for group in sorted(groups_of.get(topic, ())):
                out_tps, out_today = await counted(StatsName.GROUP_GET_NUMS, group_stats_key(topic, group))
                lag = (await self.consume_progress(group, topic, cluster)).total_lag
                traffic.groups.append(GroupTraffic(group, lag, out_tps, out_today))
            result.append(traffic)
        return result

    async def _system_topics(self) -> list[str]:
        response = await self._invoke_namesrv(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)
        return TopicList.decode(response.body).topics

    # messages ----------------------------------------------------------------------------------

    async def query_message(
        self,
        topic: str,
        key: str,
        max_num: int = 32,
        begin_ms: int = 0,
        end_ms: int | None = None,
        unique: bool = False,
    ) -> list[DecodedRecord]:
        """Messages of ``topic`` with ``key`` among their KEYS (``unique``: as their UNIQ_KEY, the id
        clients show) stored in ``[begin_ms, end_ms]`` (``end_ms`` default: no limit), from every broker
        group of the topic's route (QUERY_MESSAGE; its master, else a slave); newest first, at most
        ``max_num``.

        Like RocketMQ's client, records whose key does not really match (a broker's index only
        compares hashes) are dropped, and a broker that fails is skipped unless all do.
        """
        if end_ms is None:
            end_ms = _NO_END  # not "now": the broker's clock may run ahead of ours
        route = await self.topic_route(topic)
        # Each broker group's master, else (while it is away) its lowest slave: a slave holds the same.
        addrs = sorted({b.broker_addrs[min(b.broker_addrs)] for b in route.broker_datas if b.broker_addrs})
        header = QueryMessageRequestHeader(
            topic=topic,
            key=key,
            max_num=max_num,
            begin_timestamp=begin_ms,
            end_timestamp=end_ms,
            unique_key_query=unique,
        ).encode()

        async def ask(addr: str) -> list[DecodedRecord]:
            try:
                response = await self._instance.invoke_ok(addr, RequestCode.QUERY_MESSAGE, header)
            except BrokerError as exc:
                if exc.code == ResponseCode.QUERY_NOT_FOUND:
                    return []
                raise
            return decode_records(response.body)

        answers = await asyncio.gather(*(ask(addr) for addr in addrs), return_exceptions=True)
        failures = [a for a in answers if isinstance(a, BaseException)]
        if addrs and len(failures) == len(addrs):
            raise failures[0]
        for addr, answer in zip(addrs, answers, strict=True):
            if isinstance(answer, BaseException):
                log.warning("querying messages on broker %s failed: %s", addr, answer)
        found = [
            rec
            for answer in answers
            if not isinstance(answer, BaseException)
            for rec in answer
            if _has_key(rec, topic, key, unique)
        ]
        found.sort(key=lambda rec: rec.store_timestamp, reverse=True)
        return found[:max_num]

    async def message_trace(self, msg_id: str, topic_of_trace: str = TRACE_TOPIC) -> list[TraceContext]:
        """The trace records of message ``msg_id`` (its client id, UNIQ_KEY) in trace topic
        ``topic_of_trace``, oldest first: how it was sent, ended (a transaction's) and consumed, as
        clients with tracing on wrote them (docs/client.md#message-trace). Each context holds that
        message's bean only; a bean without a client host gets the trace message's born host (the
        host of the client that wrote it). Empty when nothing was traced."""
        found = await self.query_message(topic_of_trace, msg_id, max_num=_TRACE_MESSAGES_MAX)
        contexts = []
        for rec in found:
            host, _ = decode_host(rec.born_host)
            try:
                body = inflate_body(rec.body) if rec.sys_flag & SYSFLAG_COMPRESSED else rec.body
                decoded = decode_trace_contexts(body)
            except ProtocolError as exc:  # one writer's bad record must not hide the others'
                log.warning("trace message %s of %s skipped: %s", rec.offset_msg_id, topic_of_trace, exc)
                continue
            for ctx in decoded:
                ctx.beans = [bean for bean in ctx.beans if bean.msg_id == msg_id]
                if not ctx.beans:
                    continue
                for bean in ctx.beans:
                    bean.client_host = bean.client_host or host
                contexts.append(ctx)
        contexts.sort(key=lambda ctx: (ctx.timestamp, _TRACE_ORDER[ctx.trace_type]))
        return contexts

    async def view_message(self, msg_id: str, topic: str | None = None) -> list[DecodedRecord]:
        """The message(s) with id ``msg_id``, newest first; empty if there is none.

        An offset message id (store host + commit-log offset, docs/protocol.md#message-ids) that names
        a broker of the cluster is asked of that broker (VIEW_MESSAGE_BY_ID). Anything else (a client's
        unique key has the same length, but its "address" is the client's), or an offset id that finds
        nothing there, is taken as a unique key (UNIQ_KEY, what clients show as the message id) and
        looked up with QUERY_MESSAGE in ``topic``, or without it in every topic of the cluster. No
        connection is ever made to an address the name server does not list as a broker.
        """
        found = await self._view_by_offset_id(msg_id, topic)
        if found is not None:
            return [found]
        topics = [topic] if topic is not None else await self.topic_list()
        limit = asyncio.Semaphore(_TOPIC_QUERY_CONCURRENCY)

        async def lookup(name: str) -> list[DecodedRecord]:
            async with limit:
                try:
                    return await self.query_message(name, msg_id, unique=True)
                except BrokerError as exc:
                    if topic is None and exc.code == ResponseCode.TOPIC_NOT_EXIST:
                        return []  # listed, but no broker serves it (any more)
                    raise

        results = await asyncio.gather(*(lookup(name) for name in topics))
        found_all = [rec for records in results for rec in records]
        found_all.sort(key=lambda rec: rec.store_timestamp, reverse=True)
        return found_all

    async def broker_addresses(self) -> set[str]:
        """The address of every broker (masters and slaves) the name server lists."""
        info = await self.cluster_info()
        return {addr for broker in info.broker_addr_table.values() for addr in broker.broker_addrs.values()}

    async def _view_by_offset_id(self, msg_id: str, topic: str | None) -> DecodedRecord | None:
        addr = offset_msg_id_address(msg_id)
        if addr is None:
            return None
        offset = decode_offset_msg_id(msg_id)[2]
        if addr not in await self.broker_addresses():
            log.info("%s names %s, no broker of the cluster: taking it as a unique key", msg_id, addr)
            return None
        try:
            response = await self._instance.invoke_ok(
                addr, RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset=offset).encode()
            )
            records = decode_records(response.body)
        except (CometMQError, ValueError) as exc:
            log.info("%s: not found as an offset message id (%s); trying it as a unique key", msg_id, exc)
            return None
        if not records or records[0].commitlog_offset != offset:
            return None
        if topic is not None and records[0].topic != topic:
            return None
        return records[0]

    # consumer groups ---------------------------------------------------------------------------

    async def _group_configs(self, addr: str) -> dict[str, SubscriptionGroupConfig]:
        response = await self._instance.invoke_ok(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        what = "SubscriptionGroupWrapper"
        try:
            table = as_object(json_object(response.body, what).get("subscriptionGroupTable") or {}, what)
            return {
                str(name): SubscriptionGroupConfig.from_json(as_object(raw, what))
                for name, raw in table.items()
            }
        except BodyError as exc:
            raise ProtocolError(f"unreadable subscription groups from {addr}: {exc.remark}") from None

    async def list_groups(self, cluster: str | None = None) -> dict[str, dict[str, SubscriptionGroupConfig]]:
        """Every subscription group of the cluster's masters: group → broker name → its settings there."""
        _, masters = await self.masters_of(cluster)
        groups: dict[str, dict[str, SubscriptionGroupConfig]] = {}
        for broker in masters:
            assert broker.master_addr is not None
            for name, config in (await self._group_configs(broker.master_addr)).items():
                groups.setdefault(name, {})[broker.broker_name] = config
        return dict(sorted(groups.items()))

    async def get_group(self, group: str, cluster: str | None = None) -> dict[str, SubscriptionGroupConfig]:
        """The settings of ``group`` per broker name; empty when no master of the cluster has it."""
        return (await self.list_groups(cluster)).get(group, {})

    async def _put_group(
        self, masters: list[BrokerData], configs: dict[str, SubscriptionGroupConfig]
    ) -> None:
        for broker in masters:
            assert broker.master_addr is not None
            body = fastjson.dumps(configs[broker.broker_name].to_json())
            await self._instance.invoke_ok(
                broker.master_addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body
            )

    async def create_group(
        self, config: SubscriptionGroupConfig, cluster: str | None = None
    ) -> list[BrokerData]:
        """Create the group ``config`` names, with these settings, on every master of the cluster.
        A group that exists already on one of them is an error (``update_group`` changes it)."""
        reason = group_name_error(config.group_name)
        if reason is not None:
            raise CometMQError(f'group "{config.group_name}" is illegal: {reason}')
        _, masters = await self.masters_of(cluster)
        existing = await self.get_group(config.group_name, cluster)
        if existing:
            raise CometMQError(
                f"group {config.group_name} exists already (on {', '.join(sorted(existing))}); "
                "update changes its settings"
            )
        await self._put_group(masters, {broker.broker_name: config for broker in masters})
        return masters

    async def update_group(
        self, group: str, cluster: str | None = None, **changes: Any
    ) -> tuple[list[BrokerData], SubscriptionGroupConfig]:
        """Change some settings of an existing group on every master of the cluster (a broker that
        lacks it gets it); ``changes`` are SubscriptionGroupConfig field names (``retry_max_times=3``).
        Returns the brokers and the settings now in force (as on the first broker)."""
        known = {f.name for f in dataclasses.fields(SubscriptionGroupConfig)} - {"group_name"}
        unknown = set(changes) - known
        if unknown:
            raise CometMQError(f"unknown group settings: {', '.join(sorted(unknown))}")
        _, masters = await self.masters_of(cluster)
        existing = await self.get_group(group, cluster)
        if not existing:
            raise CometMQError(f"group {group} does not exist (create makes it)")
        template = next(iter(existing.values()))
        configs = {
            broker.broker_name: dataclasses.replace(existing.get(broker.broker_name, template), **changes)
            for broker in masters
        }
        await self._put_group(masters, configs)
        return masters, configs[masters[0].broker_name]

    async def delete_group(
        self, group: str, cluster: str | None = None, remove_offsets: bool = False
    ) -> list[BrokerData]:
        """Delete ``group``'s settings on every master that has them (and, ``remove_offsets``, its
        committed offsets). A group still in use is created again on its next pull or heartbeat when
        the broker auto-creates groups (autoCreateSubscriptionGroup)."""
        _, masters = await self.masters_of(cluster)
        existing = await self.get_group(group, cluster)
        if not existing:
            raise CometMQError(f"group {group} does not exist")
        header = DeleteSubscriptionGroupRequestHeader(group_name=group, remove_offset=remove_offsets).encode()
        for broker in masters:
            assert broker.master_addr is not None
            await self._instance.invoke_ok(broker.master_addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, header)
        return masters

    async def consume_progress(
        self, group: str, topic: str | None = None, cluster: str | None = None
    ) -> ConsumeProgress:
        """Per queue, how far ``group`` is (GET_CONSUME_STATS on every master of the cluster): for
        ``topic``, or every topic the group has offsets for (its retry topic included)."""
        _, masters = await self.masters_of(cluster)
        header = GetConsumeStatsRequestHeader(consumer_group=group, topic=topic).encode()
        queues: list[QueueProgress] = []
        tps = 0.0
        for broker in masters:
            assert broker.master_addr is not None
            response = await self._instance.invoke_ok(
                broker.master_addr, RequestCode.GET_CONSUME_STATS, header
            )
            stats = fastjson.loads(response.body)
            tps += float(stats.get("consumeTps") or 0)
            queues += _progress_of(stats)
        queues.sort(key=lambda q: (q.topic, q.broker_name, q.queue_id))
        return ConsumeProgress(group, queues, tps)

    async def broker_consume_stats(self, addr: str, *, order_only: bool = False) -> list[ConsumeProgress]:
        """Every subscription group's progress on the broker at ``addr``, on each topic it has offsets
        for (GET_BROKER_CONSUME_STATS; ``order_only``: ordered topics only), sorted by group."""
        header = GetConsumeStatsInBrokerHeader(is_order=order_only).encode()
        response = await self._instance.invoke_ok(addr, RequestCode.GET_BROKER_CONSUME_STATS, header)
        body = as_object(fastjson.loads(response.body), "ConsumeStatsList")
        found: dict[str, ConsumeProgress] = {}
        for groups in body.get("consumeStatsList") or ():
            for group, per_topic in as_object(groups, "ConsumeStatsList").items():
                progress = found.setdefault(str(group), ConsumeProgress(str(group), [], 0.0))
                for stats in per_topic or ():
                    progress.consume_tps += float(stats.get("consumeTps") or 0)
                    progress.queues += _progress_of(stats)
        for progress in found.values():
            progress.queues.sort(key=lambda q: (q.topic, q.queue_id))
        return [found[group] for group in sorted(found)]

    async def reset_offsets(
        self,
        group: str,
        topic: str,
        *,
        timestamp: int | None = None,
        to: Literal["earliest", "latest"] | None = None,
        offset: int | None = None,
        queue_id: int | None = None,
        broker_name: str | None = None,
    ) -> ResetResult:
        """Move ``group``'s offsets on ``topic`` (INVOKE_BROKER_TO_RESET_OFFSET on each master of the
        topic, or only ``broker_name``), to exactly one of: ``timestamp`` (ms since the epoch: each
        queue's first message stored at or after it), ``to`` ``"earliest"`` or ``"latest"`` (each
        queue's first message or its end), or ``offset`` in the one queue ``queue_id``. ``queue_id``
        limits any of them to that queue. The brokers store the new offsets and tell the group's
        online consumers (RESET_CONSUMER_CLIENT_OFFSET), which continue from them."""
        if sum(x is not None for x in (timestamp, to, offset)) != 1:
            raise CometMQError("say where to reset to: a timestamp, earliest, latest or an offset")
        if offset is not None and queue_id is None:
            raise CometMQError("an explicit offset needs a queue: an offset is a position in one queue")
        if timestamp is not None and timestamp < 0:
            raise CometMQError(f"a timestamp cannot be negative ({timestamp})")
        route = await self.topic_route(topic)
        masters = {b.broker_name: b.master_addr for b in route.broker_datas if b.master_addr is not None}
        names = sorted({q.broker_name for q in route.queue_datas if q.broker_name in masters})
        if broker_name is not None:
            if broker_name not in names:
                raise CometMQError(f"topic {topic} has no queues on a master broker named {broker_name}")
            names = [broker_name]
        if not names:
            raise CometMQError(f"topic {topic} has no queues on any master broker")
        if offset is not None and len(names) > 1:
            raise CometMQError(
                f"topic {topic} is on several brokers ({', '.join(names)}); say which one holds the queue"
            )
        if to == "earliest":
            since = 0  # RocketMQ's tools: the first message stored at or after 0
        elif to == "latest":
            since = RESET_TO_LATEST  # RocketMQ's "now": each queue's end
        else:
            since = timestamp if timestamp is not None else RESET_TO_LATEST
        header = ResetOffsetRequestHeader(
            topic=topic,
            group=group,
            timestamp=since,
            is_force=True,
            queue_id=-1 if queue_id is None else queue_id,
            offset=offset,  # RocketMQ 5's header field, honoured with queueId
        ).encode()
        result = ResetResult([], 0)
        for name in names:
            addr = masters[name]
            assert addr is not None
            response = await self._instance.invoke_ok(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header)
            result.consumers_notified += decode_answer(ResetOffsetResponseHeader, response).consumers_notified
            body = fastjson.loads(response.body) if response.body else {}
            before = {_queue_of(k): int(v) for k, v in (body.get("previousOffsetTable") or {}).items()}
            for key, new_offset in (body.get("offsetTable") or {}).items():
                queue = _queue_of(key)
                result.queues.append(QueueReset(*queue, before.get(queue, -1), int(new_offset)))
        result.queues.sort(key=lambda q: (q.broker_name, q.queue_id))
        return result

    async def consumer_connections(self, group: str, cluster: str | None = None) -> ConsumerConnections:
        """The group's online consumers, from every master of the cluster (GET_CONSUMER_CONNECTION_LIST);
        BrokerError CONSUMER_NOT_ONLINE (206) when no broker knows one."""
        _, masters = await self.masters_of(cluster)
        merged: ConsumerConnections | None = None
        by_id: dict[str, ClientConnection] = {}
        not_online: BrokerError | None = None
        for broker in masters:
            assert broker.master_addr is not None
            try:
                response = await self._instance.invoke_ok(
                    broker.master_addr,
                    RequestCode.GET_CONSUMER_CONNECTION_LIST,
                    ConsumerGroupRequestHeader(consumer_group=group).encode(),
                )
            except BrokerError as exc:
                if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
                    raise
                not_online = exc
                continue
            body = fastjson.loads(response.body)
            if merged is None:
                merged = ConsumerConnections(
                    group,
                    str(body.get("consumeType", "")),
                    str(body.get("messageModel", "")),
                    str(body.get("consumeFromWhere", "")),
                    {},
                    [],
                )
            for topic, sub in (body.get("subscriptionTable") or {}).items():
                merged.subscriptions[str(topic)] = str(sub.get("subString", "*"))
            _add_connections(by_id, body, broker.broker_name)
        if merged is None:
            raise not_online or BrokerError(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        merged.connections = sorted(by_id.values(), key=lambda c: c.client_id)
        return merged

    async def producer_connections(self, group: str, topic: str) -> list[ClientConnection]:
        """The producers of ``group`` connected to the masters holding ``topic``
        (GET_PRODUCER_CONNECTION_LIST, as mqadmin producerConnection), each once with the brokers it
        heartbeats to; BrokerError when no broker knows one."""
        route = await self.topic_route(topic)
        header = ProducerGroupRequestHeader(producer_group=group).encode()
        by_id: dict[str, ClientConnection] = {}
        unknown: BrokerError | None = None
        for broker in sorted(route.broker_datas, key=lambda b: b.broker_name):
            if broker.master_addr is None:
                continue
            try:
                response = await self._instance.invoke_ok(
                    broker.master_addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, header
                )
            except BrokerError as exc:
                unknown = exc
                continue
            _add_connections(by_id, fastjson.loads(response.body) or {}, broker.broker_name)
        if not by_id:
            raise unknown or BrokerError(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        return sorted(by_id.values(), key=lambda c: c.client_id)

    async def clone_group_offsets(
        self, source: str, dest: str, topic: str, *, offline: bool = False
    ) -> list[BrokerData]:
        """Give group ``dest`` the offsets group ``source`` committed on ``topic``, on every master
        holding it (CLONE_GROUP_OFFSET); ``dest`` then continues where ``source`` is. Unless
        ``offline``, a broker skips the topic while ``source`` is online without subscribing to it (as
        RocketMQ's). The masters asked."""
        route = await self.topic_route(topic)
        header = CloneGroupOffsetRequestHeader(
            src_group=source, dest_group=dest, topic=topic, offline=offline
        ).encode()
        masters = [broker for broker in route.broker_datas if broker.master_addr is not None]
        for broker in masters:
            assert broker.master_addr is not None
            await self._instance.invoke_ok(broker.master_addr, RequestCode.CLONE_GROUP_OFFSET, header)
        return masters

    # dead letters ------------------------------------------------------------------------------

    async def dead_letters(self, group: str, max_num: int | None = None) -> list[DecodedRecord]:
        """The dead letters of consumer group ``group`` (topic ``%DLQ%<group>``) on every broker group
        of that topic (its master, else a slave), oldest first per queue, at most ``max_num``; empty when
        the group has none (no such topic). Read as :meth:`dead_letter_batches` reads them."""
        found: list[DecodedRecord] = []
        async for batch in self.dead_letter_batches(group):
            found += batch
            if max_num is not None and len(found) >= max_num:
                return found[:max_num]
        return found

    async def dead_letter_batches(self, group: str) -> AsyncGenerator[list[DecodedRecord], None]:
        """The dead letters of consumer group ``group`` a pull's batch at a time, queue by queue, so
        that however many there are only one batch is held. Read with pulls that commit no offset as
        RocketMQ's tools group, so that looking at them is not counted as the group's consumption (and
        works for a group that may not consume)."""
        topic = dlq_topic(group)
        route = await self._instance.fetch_route(topic)  # learnt by the instance, for _brokerapi
        if route is None:
            return
        subscription = SubscriptionData(topic)
        for queue in sorted(route.queue_datas, key=lambda q: q.broker_name):
            if not queue.perm & PERM_READ:  # read from the master, else a slave (_brokerapi)
                continue
            for queue_id in range(queue.read_queue_nums):
                mq = MessageQueue(topic, queue.broker_name, queue_id)
                offset = await _brokerapi.min_offset(self._instance, mq)
                end = await _brokerapi.max_offset(self._instance, mq)
                while offset < end:
                    # Undecoded pulls (a dead letter is resent as stored, compressed body included);
                    # no commit, no suspend.
                    result = await _brokerapi.pull(
                        self._instance,
                        mq,
                        TOOLS_CONSUMER_GROUP,
                        subscription,
                        offset,
                        _PULL_BATCH,
                        decode=False,
                    )
                    if result.status is PullStatus.NO_NEW_MSG:
                        break
                    if result.status is PullStatus.FOUND:
                        yield decode_records(result.body)
                    if result.next_begin_offset <= offset:
                        break
                    offset = result.next_begin_offset

    async def resent_copies(self, dead_letter: DecodedRecord) -> list[DecodedRecord]:
        """Copies of ``dead_letter`` that ``resend_dead_letter`` already put into its original
        topic, newest first (found through the message index by unique key)."""
        props = decode_properties(dead_letter.properties)
        topic = props.get("RETRY_TOPIC")
        if not topic:
            return []
        try:
            found = await self.query_message(
                topic, props.get("UNIQ_KEY") or dead_letter.offset_msg_id, unique=True
            )
        except BrokerError as exc:
            if exc.code in (ResponseCode.TOPIC_NOT_EXIST, ResponseCode.QUERY_NOT_FOUND):
                return []
            raise
        mark = dead_letter.offset_msg_id
        return [rec for rec in found if decode_properties(rec.properties).get(RESENT_FROM_DLQ) == mark]

    async def resend_dead_letter(self, dead_letter: DecodedRecord) -> Resent:
        """Send a copy of ``dead_letter`` to its original topic (its RETRY_TOPIC property) on a
        writable master, as a fresh message (reconsume times 0): the same body, flag, keys, tags
        and properties, without the retry bookkeeping, marked with ``RESENT_FROM_DLQ``. A message
        without a UNIQ_KEY gets the dead letter's offset message id as one, so the copy can be found."""
        props = decode_properties(dead_letter.properties)
        topic = props.get("RETRY_TOPIC")
        if not topic:
            raise CometMQError(
                f"dead letter {dead_letter.offset_msg_id} has no RETRY_TOPIC: its original topic is unknown"
            )
        for name in _RETRY_BOOKKEEPING:
            props.pop(name, None)
        props.setdefault("UNIQ_KEY", dead_letter.offset_msg_id)
        props[RESENT_FROM_DLQ] = dead_letter.offset_msg_id
        route = await self.topic_route(topic)
        masters = {b.broker_name: b.master_addr for b in route.broker_datas if b.master_addr is not None}
        writable = [
            (masters[q.broker_name], q.write_queue_nums)
            for q in route.queue_datas
            if q.perm & PERM_WRITE and q.write_queue_nums > 0 and q.broker_name in masters
        ]
        if not writable:
            raise CometMQError(f"topic {topic} has no writable queue on any master broker")
        addr, queues = random.choice(writable)
        return await self._send_copy(addr, topic, random.randrange(queues), props, dead_letter)

    async def resend_to_group(self, record: DecodedRecord, group: str) -> Resent:
        """Put a copy of ``record`` into ``group``'s retry topic ``%RETRY%<group>``, as a consumer's
        send-back does, so that the group (and only it) consumes the message once more, at once and
        with reconsume times 0. The copy keeps the body, flag, keys, tags, properties and UNIQ_KEY and
        names the original topic in RETRY_TOPIC; it goes to the master that stored ``record`` (else
        any master of its topic), which creates the retry topic if the group has none yet."""
        props = decode_properties(record.properties)
        original_topic = props.get("RETRY_TOPIC") or record.topic
        for name in _RETRY_BOOKKEEPING:
            props.pop(name, None)
        props["RETRY_TOPIC"] = original_topic
        props.setdefault("ORIGIN_MESSAGE_ID", props.get("UNIQ_KEY") or record.offset_msg_id)
        route = await self.topic_route(record.topic)
        masters = sorted(b.master_addr for b in route.broker_datas if b.master_addr is not None)
        if not masters:
            raise CometMQError(f"topic {record.topic} has no master broker")
        stored_by = offset_msg_id_address(record.offset_msg_id)
        addr = stored_by if stored_by in masters else masters[0]
        # Queue 0: a retry topic has retryQueueNums queues, one unless the group says otherwise.
        return await self._send_copy(addr, retry_topic(group), 0, props, record)

    async def _send_copy(
        self, addr: str, topic: str, queue_id: int, props: dict[str, str], record: DecodedRecord
    ) -> Resent:
        """Send ``record``'s body and flags with ``props`` to queue ``queue_id`` of ``topic`` at ``addr``."""
        header = send_header(
            CLIENT_INNER_PRODUCER_GROUP,
            topic,
            encode_properties(props),
            # A compressed body is sent as it is stored; the hosts are the receiving broker's to mark.
            record.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG),
            record.flag,
            queue_id=queue_id,
        )
        response = await self._instance.invoke_ok(
            addr, RequestCode.SEND_MESSAGE_V2, header.encode(compact=True), record.body
        )
        return Resent(topic, decode_answer(SendMessageResponseHeader, response).msg_id)

    # users and ACLs ----------------------------------------------------------------------------

    async def auth_targets(self) -> list[str]:
        """Where user and ACL changes go unless told otherwise: every broker the name servers list
        (masters and slaves, as each keeps its own users and ACLs), then the name servers."""
        return sorted(await self.broker_addresses()) + list(self.namesrv_addrs)

    async def create_user(self, addr: str, user: User) -> None:
        """Create *user* at the server (a broker or a name server) at *addr* (AUTH_CREATE_USER)."""
        await self._auth_request(
            addr, RequestCode.AUTH_CREATE_USER, _user_header(user.username), user.to_json()
        )

    async def update_user(
        self,
        addr: str,
        username: str,
        *,
        password: str | None = None,
        user_type: UserType | None = None,
        user_status: UserStatus | None = None,
    ) -> None:
        """Change what is given of a user at *addr* (AUTH_UPDATE_USER); the rest stays as it is."""
        info: dict[str, str] = {"username": username}
        if password is not None:
            info["password"] = password
        if user_type is not None:
            info["userType"] = user_type.value
        if user_status is not None:
            info["userStatus"] = user_status.value
        await self._auth_request(addr, RequestCode.AUTH_UPDATE_USER, _user_header(username), json.dumps(info))

    async def delete_user(self, addr: str, username: str) -> None:
        """Delete a user at *addr* (AUTH_DELETE_USER)."""
        await self._auth_request(addr, RequestCode.AUTH_DELETE_USER, _user_header(username))

    async def get_user(self, addr: str, username: str) -> User | None:
        """A user at *addr* (AUTH_GET_USER), without its password: servers never send it. None when
        there is no such user (the server answers an empty body, as RocketMQ's)."""
        response = await self._auth_request(addr, RequestCode.AUTH_GET_USER, _user_header(username))
        return _decoded(User.from_json, response.body, "UserInfo") if response.body else None

    async def list_users(self, addr: str, name_filter: str | None = None) -> list[User]:
        """The users at *addr* whose name contains *name_filter* (all if None), without passwords."""
        response = await self._auth_request(
            addr, RequestCode.AUTH_LIST_USER, ListUsersRequestHeader(filter=name_filter).encode()
        )
        return [_decoded(User.from_dict, item, "UserInfo") for item in _json_list(response.body)]

    async def create_acl(self, addr: str, acl: Acl) -> None:
        """Create the ACL of ``acl.subject`` at *addr*, or add its entries to the one there
        (AUTH_CREATE_ACL)."""
        header = AclRequestHeader(subject=acl.subject).encode()
        await self._auth_request(addr, RequestCode.AUTH_CREATE_ACL, header, acl.to_json())

    async def update_acl(self, addr: str, acl: Acl) -> None:
        """Replace the entries of ``acl.subject`` on the resources *acl* names, at *addr*
        (AUTH_UPDATE_ACL)."""
        header = AclRequestHeader(subject=acl.subject).encode()
        await self._auth_request(addr, RequestCode.AUTH_UPDATE_ACL, header, acl.to_json())

    async def delete_acl(
        self, addr: str, subject: str, policy_type: PolicyType | None = None, resource: str | None = None
    ) -> None:
        """Delete the ACL of *subject* at *addr*, or only its entries on *resource* (a resource key)
        of the policy *policy_type* (Custom when None) (AUTH_DELETE_ACL)."""
        header = DeleteAclRequestHeader(
            subject=subject,
            policy_type=policy_type.value if policy_type is not None else None,
            resource=resource,
        )
        await self._auth_request(addr, RequestCode.AUTH_DELETE_ACL, header.encode())

    async def get_acl(self, addr: str, subject: str) -> Acl | None:
        """The ACL of *subject* at *addr* (AUTH_GET_ACL); None when the user has none."""
        header = AclRequestHeader(subject=subject).encode()
        response = await self._auth_request(addr, RequestCode.AUTH_GET_ACL, header)
        return _decoded(Acl.from_json, response.body, "AclInfo") if response.body else None

    async def list_acls(
        self, addr: str, subject_filter: str | None = None, resource_filter: str | None = None
    ) -> list[Acl]:
        """The ACLs at *addr* whose subject contains *subject_filter* and that have an entry whose
        resource key contains *resource_filter* (None: no condition) (AUTH_LIST_ACL)."""
        header = ListAclsRequestHeader(subject_filter=subject_filter, resource_filter=resource_filter)
        response = await self._auth_request(addr, RequestCode.AUTH_LIST_ACL, header.encode())
        return [_decoded(Acl.from_dict, item, "AclInfo") for item in _json_list(response.body)]

    async def _auth_request(
        self, addr: str, code: int, ext_fields: dict[str, str], body: str = ""
    ) -> RemotingCommand:
        return await self._instance.invoke_ok(addr, code, ext_fields, body.encode())

    # reading queues, for batch readers (the Spark connector) -----------------------------------

    async def readable_queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic`` from a fresh route; [] when no name server routes it."""
        instance = self._instance
        if await instance.fetch_route(topic) is None:
            return []
        return await instance.subscribe_queues(topic)

    async def offset_bounds(self, queue: MessageQueue) -> tuple[int, int]:
        """(min offset, max offset) of ``queue``: its oldest message held, and the next to be written."""
        return await _brokerapi.offset_bounds(await self._routed(queue), queue)

    async def first_offset_at(
        self, queue: MessageQueue, timestamp_ms: int, *, group: str, bounds: tuple[int, int] | None = None
    ) -> int:
        """The offset of the first message of ``queue`` stored at or after ``timestamp_ms``, the
        queue's end if there is none; found with a pull as ``group`` that commits nothing.
        ``bounds``: the queue's :meth:`offset_bounds` when the caller has them already."""
        instance = await self._routed(queue)
        return await _brokerapi.first_offset_at(instance, queue, timestamp_ms, group, bounds)

    async def pull_records(
        self, queue: MessageQueue, offset: int, max_nums: int, *, group: str, subscription: SubscriptionData
    ) -> PullResult:
        """One pull of up to ``max_nums`` messages of ``queue`` from ``offset``, as ``group``, that
        commits nothing and is answered at once; the stored records come undecoded in the result's
        ``body`` (and a tag filter is the broker's, by tag hash only)."""
        instance = await self._routed(queue)
        return await _brokerapi.pull(instance, queue, group, subscription, offset, max_nums, decode=False)

    async def _routed(self, queue: MessageQueue) -> ClientInstance:
        """The connections, knowing the address of ``queue``'s broker."""
        instance = self._instance
        if not instance.knows_broker(queue.broker_name):
            await instance.fetch_route(queue.topic)
        return instance


def offset_msg_id_address(msg_id: str) -> str | None:
    """The broker address (``ip:port``) an offset message id names, or None when ``msg_id`` cannot
    be one (not 32 or 56 hex characters, a port out of range, a negative offset). A client's unique
    key of 32 hex characters may still decode: whether the address is a broker tells them apart."""
    try:
        address, port, offset = decode_offset_msg_id(msg_id)
    except ValueError:
        return None
    if not 0 < port < 65536 or offset < 0:
        return None
    host = ipaddress.ip_address(address)
    return f"{host}:{port}" if host.version == 4 else f"[{host}]:{port}"


def _has_key(rec: DecodedRecord, topic: str, key: str, unique: bool) -> bool:
    """Whether a record a broker found for ``key`` really has it (RocketMQ's client checks too)."""
    props = decode_properties(rec.properties)
    if unique:
        # What a Java client calls the msgId: UNIQ_KEY, else the offset message id.
        return rec.topic == topic and props.get("UNIQ_KEY", rec.offset_msg_id) == key
    return rec.topic == topic and key in props.get("KEYS", "").split(KEY_SEPARATOR)


def _user_header(username: str) -> dict[str, str]:
    return UserRequestHeader(username=username).encode()


_T = TypeVar("_T")


def _decoded(parse: Callable[[Any], _T], value: Any, what: str) -> _T:
    """*value* parsed by *parse*; what it refuses is the server's fault here (a malformed answer)."""
    try:
        return parse(value)
    except AuthError as exc:
        raise ProtocolError(f"a malformed answer ({what}): {exc.remark}") from None


def _json_list(body: bytes) -> list[Any]:
    try:
        items = json.loads(body) if body else []
    except ValueError as exc:
        raise ProtocolError(f"a malformed answer (not JSON): {exc}") from None
    if not isinstance(items, list):
        raise ProtocolError("a malformed answer: not a JSON array")
    return items


def _add_connections(by_id: dict[str, ClientConnection], body: dict[str, Any], broker_name: str) -> None:
    """Merge the ``connectionSet`` of a connection list answer into ``by_id``: a client connected to
    several brokers is listed once, with each broker's name."""
    for conn in body.get("connectionSet") or ():
        client_id = str(conn.get("clientId", ""))
        known = by_id.get(client_id)
        if known is None:
            known = by_id[client_id] = ClientConnection(
                client_id,
                str(conn.get("clientAddr", "")),
                str(conn.get("language", "")),
                int(conn.get("version", 0)),
            )
        known.broker_names.append(broker_name)
