"""Request processors of the NameServer, one small class per request family.

Each public method handles one request code (the server's table says which): it decodes the request's
header once with its declaration (:mod:`cometmq.protocol.namesrv_headers`), and refuses a request by
raising :class:`~cometmq.errors.RequestRefused`, which the transport answers with its code and remark
(a malformed header field is a :class:`~cometmq.errors.HeaderError`, answered SYSTEM_ERROR as a Java
name server does).
"""

from __future__ import annotations

from collections.abc import Callable

from cometmq.errors import ProtocolError, RequestRefused
from cometmq.namesrv.kv_config import ORDER_TOPIC_CONFIG, KVConfigManager
from cometmq.namesrv.route_info import RouteInfoManager
from cometmq.protocol import RemotingCommand, ResponseCode, fastjson
from cometmq.protocol.namesrv_headers import (
    AddWritePermOfBrokerResponseHeader,
    BrokerNameRequestHeader,
    BrokerRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    KVConfigKeyRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from cometmq.protocol.record import body_crc
from cometmq.protocol.route import DataVersion, RegisterBrokerBody, kv_table_body
from cometmq.remoting import Connection


class BrokerRegistrationProcessor:
    """REGISTER_BROKER, UNREGISTER_BROKER and QUERY_DATA_VERSION, which brokers send."""

    def __init__(self, routes: RouteInfoManager, kv: KVConfigManager, clock: Callable[[], float]) -> None:
        self._routes = routes
        self._kv = kv
        self._clock = clock

    def register_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = RegisterBrokerRequestHeader.decode(request.ext_fields)
        if header.body_crc32 != 0 and body_crc(request.body) != header.body_crc32:
            # RocketMQ's remark; the transport logs the refusal (rate-limited, with the peer's address).
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        try:
            body = RegisterBrokerBody.decode(request.body, compressed=header.compressed)
        except ProtocolError as exc:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        result = self._routes.register_broker(
            cluster=header.cluster_name,
            broker_addr=header.broker_addr,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
            ha_server_addr=header.ha_server_addr,
            master_epoch=header.master_epoch,
            body=body,
            connection=conn,
            now=self._clock(),
        )
        answer = RegisterBrokerResponseHeader(
            ha_server_addr=result.ha_server_addr, master_addr=result.master_addr
        )
        order_conf = self._kv.namespace(ORDER_TOPIC_CONFIG)
        return request.response(
            ext_fields=answer.encode(), body=kv_table_body(order_conf) if order_conf else b""
        )

    def unregister_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = BrokerRequestHeader.decode(request.ext_fields)
        self._routes.unregister_broker(
            broker_addr=header.broker_addr,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
            now=self._clock(),
        )
        return request.response()

    def query_data_version(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = BrokerRequestHeader.decode(request.ext_fields)
        try:
            data_version = DataVersion.decode(request.body)
        except ProtocolError as exc:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        changed = self._routes.data_version_changed(header.broker_addr, data_version, self._clock())
        known = self._routes.data_version_of(header.broker_addr)
        return request.response(
            ext_fields=QueryDataVersionResponseHeader(changed=changed).encode(),
            body=fastjson.dumps(known.to_json()) if known is not None else b"",
        )


class RouteQueryProcessor:
    """Routes, cluster info and topic lists, which clients and tools ask for."""

    def __init__(self, routes: RouteInfoManager, kv: KVConfigManager, order_message_enable: bool) -> None:
        self._routes = routes
        self._kv = kv
        self._order_message_enable = order_message_enable

    def route_of_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.decode(request.ext_fields)
        route = self._routes.pickup_topic_route(header.topic)
        if route is None:
            raise RequestRefused(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {header.topic}",
            )
        if self._order_message_enable:
            route.order_topic_conf = self._kv.get(ORDER_TOPIC_CONFIG, header.topic)
        return request.response(body=route.encode(standard_json=header.wants_standard_json(request.version)))

    def cluster_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=self._routes.cluster_info().encode())

    def all_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=self._routes.all_topics().encode())

    def topics_of_cluster(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetTopicsByClusterRequestHeader.decode(request.ext_fields)
        return request.response(body=self._routes.topics_of_cluster(header.cluster).encode())

    def system_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=self._routes.system_topics().encode())


class TopicAdminProcessor:
    """Topic deletion and broker write permission, which admin tools send."""

    def __init__(self, routes: RouteInfoManager) -> None:
        self._routes = routes

    def delete_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = DeleteTopicFromNamesrvRequestHeader.decode(request.ext_fields)
        # An empty cluster name counts as none: the topic goes from every cluster.
        self._routes.delete_topic(header.topic, header.cluster_name or None)
        return request.response()

    def wipe_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = BrokerNameRequestHeader.decode(request.ext_fields)
        count = self._routes.change_write_perm(header.broker_name, writable=False)
        return request.response(
            ext_fields=WipeWritePermOfBrokerResponseHeader(wipe_topic_count=count).encode()
        )

    def add_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = BrokerNameRequestHeader.decode(request.ext_fields)
        count = self._routes.change_write_perm(header.broker_name, writable=True)
        return request.response(ext_fields=AddWritePermOfBrokerResponseHeader(add_topic_count=count).encode())


class KVConfigProcessor:
    """PUT/GET/DELETE_KV_CONFIG and GET_KVLIST_BY_NAMESPACE."""

    def __init__(self, kv: KVConfigManager) -> None:
        self._kv = kv

    def put(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = PutKVConfigRequestHeader.decode(request.ext_fields)
        self._kv.put(header.namespace, header.key, header.value)
        return request.response()

    def get(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = KVConfigKeyRequestHeader.decode(request.ext_fields)
        value = self._kv.get(header.namespace, header.key)
        if value is None:
            raise RequestRefused(
                ResponseCode.QUERY_NOT_FOUND,
                f"No config item, Namespace: {header.namespace} Key: {header.key}",
            )
        return request.response(ext_fields=GetKVConfigResponseHeader(value=value).encode())

    def delete(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = KVConfigKeyRequestHeader.decode(request.ext_fields)
        self._kv.delete(header.namespace, header.key)
        return request.response()

    def list_namespace(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetKVListByNamespaceRequestHeader.decode(request.ext_fields)
        table = self._kv.namespace(header.namespace)
        if table is None:
            raise RequestRefused(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {header.namespace}"
            )
        return request.response(body=kv_table_body(table))
