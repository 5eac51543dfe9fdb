"""ClientInstance: what every producer and consumer shares with the cluster.

One instance holds the connections (one per broker or name server, multiplexed by opaque), the topic
routes learnt from the name servers, the heartbeat that tells brokers which groups this client
belongs to, and the handler for requests brokers send to clients (rebalance now, reset offsets,
report running info). RocketMQ's Java client calls this MQClientInstance.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import ssl
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from cometmq.auth import Credentials
from cometmq.client._msgid import local_ip
from cometmq.client.message import MessageQueue, ReceivedMessage
from cometmq.errors import (
    BrokerError,
    CometMQError,
    ConfigError,
    ConnectionClosedError,
    HeaderError,
    ProtocolError,
    RemotingTimeoutError,
)
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import (
    CheckTransactionStateRequestHeader,
    ConsumerGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    ResetOffsetRequestHeader,
    UnregisterClientRequestHeader,
)
from cometmq.protocol.headers import Header
from cometmq.protocol.jsonbody import MAX_HEARTBEAT_GROUPS
from cometmq.protocol.namesrv_headers import GetRouteInfoRequestHeader
from cometmq.protocol.naming import DEFAULT_TOPIC, PERM_READ, PERM_WRITE
from cometmq.protocol.record import decode_records
from cometmq.protocol.route import MASTER_ID, ClusterInfo, TopicRouteData
from cometmq.protocol.transaction import PRODUCER_GROUP
from cometmq.remoting import Connection, RemotingClient, RequestHandler

log = logging.getLogger("cometmq.client")

# RocketMQ's client defaults (ClientConfig): how often routes are refreshed and heartbeats sent.
POLL_NAMESRV_INTERVAL_S = 30.0
HEARTBEAT_INTERVAL_S = 30.0
# A topic's route is refreshed at once when a broker of it cannot be reached, but no more often than
# this per topic: a dead broker fails every pull of every queue, which must not become a stream of
# name-server requests.
UNREACHABLE_REFRESH_MIN_INTERVAL_S = 1.0
# The range the clients' ``poll_name_server_interval`` option allows, in seconds.
POLL_NAMESRV_INTERVAL_RANGE_S = (0.1, 3600)

# A queue written as a fastjson map key in RESET_CONSUMER_CLIENT_OFFSET bodies: {"brokerName":…}:offset
_OBJECT_KEY_ENTRY = re.compile(r"(\{[^{}]*\})\s*:\s*(-?\d+)")

_H = TypeVar("_H", bound=Header)


def decode_answer(header: type[_H], response: RemotingCommand) -> _H:
    """The *header* of a server's *response*; a field missing or malformed is a :class:`ProtocolError`
    (the server, not this client, is at fault)."""
    try:
        return header.decode(response.ext_fields)
    except HeaderError as exc:
        raise ProtocolError(f"a malformed answer ({header.__name__}): {exc.remark}") from None


class ConsumerMember(Protocol):
    """What a consumer registered with an instance must answer for the broker."""

    group: str

    def consumer_data(self) -> dict[str, Any]:
        """The ConsumerData JSON object of the heartbeat (docs/protocol.md#heartbeat)."""
        ...

    def on_ids_changed(self) -> None:
        """A broker says the group's membership changed: rebalance soon."""
        ...

    def on_reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """An administrator reset the group's offsets (``cometmq group reset``)."""
        ...

    def running_info(self) -> dict[str, Any]:
        """The ConsumerRunningInfo JSON object (answer to GET_CONSUMER_RUNNING_INFO)."""
        ...


class TransactionMember(Protocol):
    """What a transaction producer registered with an instance must answer for the broker."""

    group: str

    def check_transaction_state(
        self, broker_addr: str, request: CheckTransactionStateRequestHeader, message: ReceivedMessage
    ) -> None:
        """The broker at ``broker_addr`` asks for the state of the half ``message``'s transaction
        (CHECK_TRANSACTION_STATE, oneway): answer it later with END_TRANSACTION to that address."""
        ...


def default_instance_name() -> str:
    # RocketMQ 4.9 replaces instance name DEFAULT by pid#nanotime, so that two clients in one
    # process get distinct client ids (a broker rebalances by client id).
    return f"{os.getpid()}#{time.monotonic_ns()}"


def parse_reset_offsets(body: bytes) -> dict[MessageQueue, int]:
    """A ResetOffsetBody in either form brokers send: fastjson's object-keyed ``offsetTable`` or the
    array of ``{brokerName, queueId, topic, offset}`` sent to C-style clients
    (docs/protocol.md#broker-to-client)."""
    text = body.decode("utf-8", "replace")
    try:
        table = json.loads(text).get("offsetTable")
    except ValueError:
        table = None
    offsets: dict[MessageQueue, int] = {}
    if isinstance(table, list):
        for item in table:
            queue = MessageQueue(str(item["topic"]), str(item["brokerName"]), int(item["queueId"]))
            offsets[queue] = int(item["offset"])
        return offsets
    for key_text, offset in _OBJECT_KEY_ENTRY.findall(text):
        key = json.loads(key_text)
        offsets[MessageQueue(str(key["topic"]), str(key["brokerName"]), int(key["queueId"]))] = int(offset)
    return offsets


def _answer_for(instance: weakref.ref[ClientInstance]) -> RequestHandler:
    def answer(conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        target = instance()
        return None if target is None else target._on_broker_request(conn, request)

    return answer


class ClientInstance:
    """Connections, routes and heartbeats for the producers and consumers of one client.

    ``namesrv_addr`` is ``host:port``, or several joined by ``;`` as RocketMQ's ``namesrvAddr``.
    With ``credentials`` every request to a server is signed (servers with aclEnable refuse unsigned
    ones); with ``ssl_context`` every connection is TLS.
    """

    def __init__(
        self,
        namesrv_addr: str,
        *,
        instance_name: str | None = None,
        request_timeout: float = 3.0,
        connect_timeout: float = 3.0,
        heartbeat_interval: float = HEARTBEAT_INTERVAL_S,
        route_refresh_interval: float = POLL_NAMESRV_INTERVAL_S,
        busy_poll_us: int = 0,
        busy_poll_adaptive: bool = True,
        credentials: Credentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.namesrv_addrs = [addr.strip() for addr in namesrv_addr.split(";") if addr.strip()]
        if not self.namesrv_addrs:
            raise CometMQError("no name server address given")
        self.client_ip = local_ip()
        self.client_id = f"{self.client_ip}@{instance_name or default_instance_name()}"
        self.request_timeout = request_timeout
        self.heartbeat_interval = heartbeat_interval
        self.route_refresh_interval = route_refresh_interval
        self.credentials = credentials
        self.ssl_context = ssl_context
        # The connections (held by the event loop while open) reach this object only weakly, so a
        # client dropped without close() can be collected, and its RemotingClient closes them then.
        self.remoting = RemotingClient(
            _answer_for(weakref.ref(self)),
            connect_timeout=connect_timeout,
            busy_poll_us=busy_poll_us,
            busy_poll_adaptive=busy_poll_adaptive,
            credentials=credentials,
            ssl_context=ssl_context,
        )
        self._routes: dict[str, TopicRouteData] = {}
        self._broker_addrs: dict[str, dict[int, str]] = {}  # broker name → broker id → address
        self._producer_groups: set[str] = set()
        self._consumers: dict[str, ConsumerMember] = {}
        self._transaction_members: dict[str, TransactionMember] = {}
        self._learns_brokers = False  # every broker of the cluster, on each route refresh
        self._route_listeners: list[Callable[[str, TopicRouteData | None], None]] = []
        self._unreachable_refreshes: dict[str, float] = {}  # topic → its last such refresh (clock s)
        self.clock: Callable[[], float] = time.monotonic
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False

    # life cycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the route refresh and heartbeat loops (on the running event loop)."""
        if self._tasks:
            return
        self._tasks = [
            asyncio.create_task(self._every(self.route_refresh_interval, self.refresh_routes)),
            asyncio.create_task(self._every(self.heartbeat_interval, self.send_heartbeat)),
        ]

    async def close(self) -> None:
        """Unregister from every broker, stop the loops and close every connection."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.unregister_groups(self._producer_groups, self._consumers)
        await self.remoting.close()

    async def _every(self, interval: float, job: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("client background job %s failed", getattr(job, "__name__", job))

    # requests ----------------------------------------------------------------------------------

    async def invoke(
        self,
        addr: str,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        timeout: float | None = None,
    ) -> RemotingCommand:
        """Send a request and return the response, whatever its code."""
        request = RemotingCommand(code=code, ext_fields=ext_fields or {}, body=body)
        return await self.remoting.invoke(addr, request, timeout or self.request_timeout)

    async def invoke_ok(
        self,
        addr: str,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        timeout: float | None = None,
    ) -> RemotingCommand:
        """Like :meth:`invoke`, but a non-success answer raises :class:`BrokerError`."""
        response = await self.invoke(addr, code, ext_fields, body, timeout)
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark)
        return response

    async def invoke_namesrv(
        self, addr: str, code: int, ext_fields: dict[str, str] | None = None
    ) -> RemotingCommand:
        """A request to the name server at ``addr``; the response, whatever its code, unless the
        server there does not know the request (REQUEST_CODE_NOT_SUPPORTED): then it is no name
        server (a broker's port given for the name server's is an easy slip), and
        :class:`ConfigError` says what it looks like instead."""
        response = await self.invoke(addr, code, ext_fields)
        if response.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            return response
        refusal = f"it does not serve name-server request {code} (response code {response.code})"
        try:
            looks_like = await self.invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        except CometMQError:
            looks_like = None
        if looks_like is not None and looks_like.code == ResponseCode.SUCCESS:
            raise ConfigError(f"{addr} is a broker, not a name server: {refusal}")
        raise ConfigError(f"{addr} is not a name server: {refusal}")

    # routes ------------------------------------------------------------------------------------

    async def fetch_route(self, topic: str) -> TopicRouteData | None:
        """Ask the name servers for a topic's route; None when no broker holds the topic."""
        # Standard JSON asked for explicitly, so an older name server does not send the legacy form.
        query = GetRouteInfoRequestHeader(topic=topic, accept_standard_json_only=True)
        last_error: CometMQError | None = None
        for addr in self.namesrv_addrs:
            try:
                response = await self.invoke_namesrv(addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, query.encode())
            except (ConnectionClosedError, RemotingTimeoutError) as exc:
                last_error = exc
                continue
            if response.code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            if response.code != ResponseCode.SUCCESS:
                raise BrokerError(response.code, response.remark)
            route = TopicRouteData.decode(response.body)
            self._learn_route(topic, route)
            return route
        assert last_error is not None
        raise last_error

    def _learn_route(self, topic: str, route: TopicRouteData) -> None:
        changed = self._routes.get(topic) != route
        self._routes[topic] = route
        known = len(self._broker_addrs)
        for broker in route.broker_datas:
            self._broker_addrs[broker.broker_name] = dict(broker.broker_addrs)
        if len(self._broker_addrs) > known and self._transaction_members:
            # A broker checks back only the producers that heartbeat it: tell a new one at once.
            self._tasks.append(asyncio.get_running_loop().create_task(self.send_heartbeat()))
        if changed:
            for listener in self._route_listeners:
                listener(topic, route)

    async def route(self, topic: str) -> TopicRouteData | None:
        """The cached route of a topic, fetched on first use; refreshed every
        ``route_refresh_interval`` seconds."""
        route = self._routes.get(topic)
        if route is None:
            route = await self.fetch_route(topic)
        return route

    def add_route_listener(self, listener: Callable[[str, TopicRouteData | None], None]) -> None:
        """Call ``listener(topic, route)`` whenever a topic's route changes; ``route`` is None when
        no broker holds the topic any more."""
        self._route_listeners.append(listener)

    async def refresh_routes(self) -> None:
        for topic in list(self._routes):
            await self._refresh_route(topic)
        await self.learn_brokers()

    async def refresh_route_if_unreachable(self, topic: str, error: CometMQError) -> None:
        """After a request to a broker of ``topic`` failed with ``error``: when the broker could not
        be reached (no connection, or no answer) or does not serve (SERVICE_NOT_AVAILABLE: a master
        that lost its mastership, a store refusing writes), refresh the topic's route now rather than
        at the next periodic refresh, so that a consumer whose master died goes on from a slave at
        once, and a producer reaches a newly elected master within a second of its registration. At
        most once a second per topic; other errors (a broker's refusal) change nothing."""
        if not isinstance(error, (ConnectionClosedError, RemotingTimeoutError)) and not (
            isinstance(error, BrokerError) and error.code == ResponseCode.SERVICE_NOT_AVAILABLE
        ):
            return
        await self.refresh_route_soon(topic)

    async def refresh_route_soon(self, topic: str) -> bool:
        """Look ``topic``'s route up again now, unless that was done less than a second ago; whether
        it was. For routes that may be stale: a broker of the topic failed, or the cached route names
        no master of any of its groups (the name server dropped a dead master, and names the one
        elected in its place once it registers)."""
        now = self.clock()
        last = self._unreachable_refreshes.get(topic)
        if last is not None and now - last < UNREACHABLE_REFRESH_MIN_INTERVAL_S:
            return False
        self._unreachable_refreshes[topic] = now
        await self._refresh_route(topic)
        return True

    def has_route(self, topic: str) -> bool:
        """Whether a route of ``topic`` is cached."""
        return topic in self._routes

    async def _refresh_route(self, topic: str) -> None:
        try:
            route = await self.fetch_route(topic)
        except CometMQError as exc:
            log.warning("cannot refresh the route of %s: %s", topic, exc)
            return
        if route is None:
            self._forget_route(topic)

    def _forget_route(self, topic: str) -> None:
        if self._routes.pop(topic, None) is not None:
            for listener in self._route_listeners:
                listener(topic, None)

    def broker_addr(self, broker_name: str) -> str | None:
        """The master address of a broker, as the routes know it: where sends go."""
        return self._broker_addrs.get(broker_name, {}).get(MASTER_ID)

    def knows_broker(self, broker_name: str) -> bool:
        """Whether the routes hold any address (master or slave) of a broker."""
        return bool(self._broker_addrs.get(broker_name))

    def read_addr(self, broker_name: str, broker_id: int = MASTER_ID) -> tuple[str, bool] | None:
        """Where to read from a broker group, and whether that is a slave; None when no address is
        known. RocketMQ's C++ findBrokerAddressInSubscribe: the address of ``broker_id`` if the group
        has one, else its lowest id (the master while it is up, else a slave). Offset commits and
        queries take ``broker_id`` 0, which is the C++ findBrokerAddressInAdmin."""
        addrs = self._broker_addrs.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id)
        if addr is None:
            broker_id = min(addrs)
            addr = addrs[broker_id]
        return addr, broker_id != MASTER_ID

    async def publish_queues(self, topic: str) -> tuple[list[MessageQueue], bool]:
        """Queues a producer may write to, in route order, and whether they come from the default
        topic (TBW102): a topic no broker has yet gets its queues, which a broker with
        ``autoCreateTopicEnable`` turns into the new topic on the first send."""
        route = await self.route(topic)
        if route is None or not route.queue_datas:
            template = await self.route(DEFAULT_TOPIC)
            if template is None:
                return [], True
            return self._queues(topic, template, PERM_WRITE, max_per_broker=4), True
        return self._queues(topic, route, PERM_WRITE), False

    async def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """Queues a consumer may read from, sorted as every client sorts them."""
        route = await self.route(topic)
        if route is None:
            return []
        return sorted(self._queues(topic, route, PERM_READ))

    def _queues(
        self, topic: str, route: TopicRouteData, perm: int, max_per_broker: int | None = None
    ) -> list[MessageQueue]:
        # Producers skip a broker group without a master (its slaves refuse sends); consumers keep
        # its queues while any of its brokers is registered, and read them from a slave (as RocketMQ's
        # clients do: topicRouteData2TopicPublishInfo against topicRouteData2TopicSubscribeInfo).
        if perm == PERM_WRITE:
            live = {b.broker_name for b in route.broker_datas if b.master_addr is not None}
        else:
            live = {b.broker_name for b in route.broker_datas if b.broker_addrs}
        queues: list[MessageQueue] = []
        for data in sorted(route.queue_datas, key=lambda q: q.broker_name):
            if not data.perm & perm or data.broker_name not in live:
                continue
            count = data.write_queue_nums if perm == PERM_WRITE else data.read_queue_nums
            if max_per_broker is not None:
                count = min(count, max_per_broker)
            queues.extend(MessageQueue(topic, data.broker_name, qid) for qid in range(count))
        return queues

    # membership --------------------------------------------------------------------------------

    def register_producer(self, group: str) -> None:
        self._producer_groups.add(group)

    def register_transaction_member(self, member: TransactionMember) -> None:
        """Send the check-backs of ``member.group``'s half messages to ``member`` (its group is
        registered as a producer group too), and from then on learn every broker of the cluster on each
        route refresh (:meth:`learn_brokers`): a broker checks back only producers that heartbeat it."""
        self._producer_groups.add(member.group)
        self._transaction_members[member.group] = member
        self._learns_brokers = True

    def unregister_transaction_member(self, group: str) -> None:
        """Stop taking the check-backs of *group* and stop naming it in heartbeats."""
        self._transaction_members.pop(group, None)
        self._producer_groups.discard(group)

    async def learn_brokers(self) -> None:
        """Learn the address of every broker the name server knows (GET_BROKER_CLUSTER_INFO), so that
        heartbeats reach the brokers of topics this client never looked up; forget the brokers that are
        neither in that list nor in any route. Failures are logged; a name server refusing the request
        (NO_PERMISSION: access control) is warned about once and not asked again."""
        if not self._learns_brokers:
            return
        try:
            cluster = await self._cluster_info()
        except CometMQError as exc:
            if isinstance(exc, BrokerError) and exc.code == ResponseCode.NO_PERMISSION:
                self._learns_brokers = False
                log.warning(
                    "the name server refuses to list the cluster's brokers (%s): grant this client's user "
                    "Cluster Get on the name server; until then transaction check-backs come only from the "
                    "brokers this client sent to",
                    exc.remark,
                )
            else:
                log.info("cannot list the cluster's brokers: %s", exc)
            return
        listed = {name: broker for name, broker in cluster.broker_addr_table.items() if broker.broker_addrs}
        routed = {broker.broker_name for route in self._routes.values() for broker in route.broker_datas}
        for name in [name for name in self._broker_addrs if name not in listed and name not in routed]:
            del self._broker_addrs[name]
        known = len(self._broker_addrs)
        for name, broker in listed.items():
            self._broker_addrs[name] = dict(broker.broker_addrs)
        if len(self._broker_addrs) > known:
            await self.send_heartbeat()

    async def _cluster_info(self) -> ClusterInfo:
        last_error: CometMQError | None = None
        for addr in self.namesrv_addrs:
            try:
                response = await self.invoke_namesrv(addr, RequestCode.GET_BROKER_CLUSTER_INFO)
            except (ConnectionClosedError, RemotingTimeoutError) as exc:
                last_error = exc
                continue
            if response.code != ResponseCode.SUCCESS:
                raise BrokerError(response.code, response.remark)
            return ClusterInfo.decode(response.body)
        assert last_error is not None
        raise last_error

    def register_consumer(self, consumer: ConsumerMember) -> None:
        if consumer.group in self._consumers:
            raise CometMQError(f"consumer group {consumer.group!r} is already registered in this client")
        self._consumers[consumer.group] = consumer

    def unregister_consumer(self, group: str) -> None:
        self._consumers.pop(group, None)

    def _heartbeat_addrs(self) -> list[str]:
        # A consumer's group must be known to the slaves too: while the master is away, a slave
        # lists the group's members for rebalancing (RocketMQ's clients heartbeat every broker when
        # they have consumers, masters only otherwise).
        if self._consumers:
            return sorted({addr for addrs in self._broker_addrs.values() for addr in addrs.values()})
        return sorted({addrs[MASTER_ID] for addrs in self._broker_addrs.values() if MASTER_ID in addrs})

    def heartbeat_bodies(self) -> list[bytes]:
        """The HeartbeatData bodies naming every group of this client, each with at most
        MAX_HEARTBEAT_GROUPS groups: a broker refuses a bigger body whole. A broker registers each group
        a body names and forgets none it omits, so several bodies register what one would."""
        groups: list[tuple[str, dict[str, Any]]] = [
            *(("producerDataSet", {"groupName": group}) for group in sorted(self._producer_groups)),
            *(("consumerDataSet", consumer.consumer_data()) for consumer in self._consumers.values()),
        ]
        bodies: list[bytes] = []
        for start in range(0, max(len(groups), 1), MAX_HEARTBEAT_GROUPS):
            data: dict[str, Any] = {"clientID": self.client_id, "producerDataSet": [], "consumerDataSet": []}
            for key, group_data in groups[start : start + MAX_HEARTBEAT_GROUPS]:
                data[key].append(group_data)
            bodies.append(json.dumps(data, separators=(",", ":")).encode())
        return bodies

    async def send_heartbeat(self) -> None:
        """Tell the brokers which groups this client is in: every broker when it has consumers, the
        masters otherwise. A broker refusing a body (a group it will not take) is warned about: the
        groups of that body stay unregistered there."""
        if not self._producer_groups and not self._consumers:
            return
        sends = [(addr, body) for body in self.heartbeat_bodies() for addr in self._heartbeat_addrs()]
        results = await asyncio.gather(
            *(self.invoke_ok(addr, RequestCode.HEART_BEAT, body=body) for addr, body in sends),
            return_exceptions=True,
        )
        for (addr, _), result in zip(sends, results, strict=True):
            if isinstance(result, BrokerError):
                log.warning("the broker at %s refuses a heartbeat: %s", addr, result)
            elif isinstance(result, BaseException):
                log.info("heartbeat to %s failed: %s", addr, result)

    async def unregister_groups(
        self, producer_groups: Iterable[str] = (), consumer_groups: Iterable[str] = ()
    ) -> None:
        """Tell the brokers this client heartbeats that it has left *producer_groups* and
        *consumer_groups* (rather than letting them find out when its heartbeats naming them stop);
        failures are ignored."""
        headers = [
            UnregisterClientRequestHeader(client_id=self.client_id, producer_group=group)
            for group in producer_groups
        ] + [
            UnregisterClientRequestHeader(client_id=self.client_id, consumer_group=group)
            for group in consumer_groups
        ]
        if not headers:
            return
        requests = [
            self.invoke(addr, RequestCode.UNREGISTER_CLIENT, header.encode(), timeout=1.0)
            for addr in self._heartbeat_addrs()
            for header in headers
        ]
        await asyncio.gather(*requests, return_exceptions=True)

    # requests from brokers ---------------------------------------------------------------------

    def _on_broker_request(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        # A malformed header raises HeaderError, which the transport answers (SYSTEM_ERROR + remark).
        if request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            notified = ConsumerGroupRequestHeader.decode(request.ext_fields)
            consumer = self._consumers.get(notified.consumer_group)
            if consumer is not None:
                consumer.on_ids_changed()
            return None
        if request.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            reset = ResetOffsetRequestHeader.decode(request.ext_fields)
            consumer = self._consumers.get(reset.group)
            if consumer is not None:
                try:  # a oneway request: a failure would otherwise leave no trace
                    consumer.on_reset_offsets(reset.topic, parse_reset_offsets(request.body))
                except Exception:
                    log.exception("cannot apply the offset reset of group %s", consumer.group)
            return None
        if request.code == RequestCode.CHECK_TRANSACTION_STATE:
            self._on_transaction_check(conn, request)
            return None
        if request.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            asked = GetConsumerRunningInfoRequestHeader.decode(request.ext_fields)
            consumer = self._consumers.get(asked.consumer_group)
            if consumer is None:
                return request.response(ResponseCode.SYSTEM_ERROR, "the consumer group is not in this client")
            body = json.dumps(consumer.running_info(), separators=(",", ":")).encode()
            return request.response(body=body)
        return request.response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            f"request code {request.code} is not supported by this client",
        )

    def _on_transaction_check(self, conn: Connection, request: RemotingCommand) -> None:
        checked = CheckTransactionStateRequestHeader.decode(request.ext_fields)
        try:
            records = decode_records(request.body)
        except ProtocolError as exc:  # a oneway request: a failure would otherwise leave no trace
            log.warning("a transaction check from %s carries no message: %s", conn.remote_address, exc)
            return
        if not records:
            log.warning("a transaction check from %s carries no message", conn.remote_address)
            return
        message = ReceivedMessage(records[0], checked.broker_name or "")
        group = message.properties.get(PRODUCER_GROUP, "")
        member = self._transaction_members.get(group)
        if member is None:
            log.debug(
                "a transaction check from %s for group %r, which is not in this client",
                conn.remote_address,
                group,
            )
            return
        member.check_transaction_state(conn.remote_address, checked, message)
