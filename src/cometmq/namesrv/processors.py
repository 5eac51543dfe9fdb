"""Request processors of the NameServer, one small class per request family."""

from __future__ import annotations

import logging
from collections.abc import Callable

from cometmq.namesrv.kv_config import ORDER_TOPIC_CONFIG, KVConfigManager
from cometmq.namesrv.route_info import RouteInfoManager
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from cometmq.protocol.header import bool_field, int_field, str_field
from cometmq.protocol.record import body_crc
from cometmq.protocol.route import (
    DataVersion,
    RegisterBrokerBody,
    kv_table_body,
    wants_standard_route_json,
)
from cometmq.remoting import Connection

log = logging.getLogger("cometmq.namesrv")


class _Processor:
    """Maps its codes to methods; a malformed header is answered SYSTEM_ERROR, as Java ends up doing.

    The Dispatcher sends a processor only the codes it registered (:attr:`codes`) and answers
    REQUEST_CODE_NOT_SUPPORTED for the rest itself.
    """

    def __init__(self) -> None:
        self._methods: dict[int, Callable[[Connection, RemotingCommand], RemotingCommand]] = {}

    @property
    def codes(self) -> list[int]:
        return list(self._methods)

    def handle(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return self._methods[request.code](conn, request)


class BrokerRegistrationProcessor(_Processor):
    """REGISTER_BROKER, UNREGISTER_BROKER and QUERY_DATA_VERSION, which brokers send."""

    def __init__(self, routes: RouteInfoManager, kv: KVConfigManager, clock: Callable[[], float]) -> None:
        super().__init__()
        self._routes = routes
        self._kv = kv
        self._clock = clock
        self._methods = {
            RequestCode.REGISTER_BROKER: self._register,
            RequestCode.UNREGISTER_BROKER: self._unregister,
            RequestCode.QUERY_DATA_VERSION: self._query_data_version,
        }

    def _register(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        broker_name = str_field(request, "brokerName")
        broker_addr = str_field(request, "brokerAddr")
        cluster = str_field(request, "clusterName")
        broker_id = int_field(request, "brokerId")
        ha_server_addr = request.ext_fields.get("haServerAddr", "")
        expected_crc = int_field(request, "bodyCrc32") if request.ext_fields.get("bodyCrc32") else 0
        # bodyCrc32 is masked to 31 bits like a message body's CRC; 0 means "not checked".
        if expected_crc != 0 and body_crc(request.body) != expected_crc:
            log.warning("register of %s at %s rejected: body crc32 does not match", broker_name, broker_addr)
            return request.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        try:
            body = RegisterBrokerBody.decode(request.body, compressed=bool_field(request, "compressed"))
        except (ValueError, KeyError, TypeError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"register broker body is not valid: {exc}")
        result = self._routes.register_broker(
            cluster=cluster,
            broker_addr=broker_addr,
            broker_name=broker_name,
            broker_id=broker_id,
            ha_server_addr=ha_server_addr,
            body=body,
            connection=conn,
            now=self._clock(),
        )
        ext_fields: dict[str, str] = {}
        if result.ha_server_addr is not None:
            ext_fields["haServerAddr"] = result.ha_server_addr
        if result.master_addr is not None:
            ext_fields["masterAddr"] = result.master_addr
        order_conf = self._kv.namespace(ORDER_TOPIC_CONFIG)
        return request.response(ext_fields=ext_fields, body=kv_table_body(order_conf) if order_conf else b"")

    def _unregister(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self._routes.unregister_broker(
            cluster=str_field(request, "clusterName"),
            broker_addr=str_field(request, "brokerAddr"),
            broker_name=str_field(request, "brokerName"),
            broker_id=int_field(request, "brokerId"),
        )
        return request.response()

    def _query_data_version(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        broker_addr = str_field(request, "brokerAddr")
        try:
            data_version = DataVersion.from_json(fastjson.loads(request.body) if request.body else {})
        except (ValueError, TypeError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"data version body is not valid: {exc}")
        changed = self._routes.data_version_changed(broker_addr, data_version, self._clock())
        known = self._routes.data_version_of(broker_addr)
        return request.response(
            ext_fields={"changed": "true" if changed else "false"},
            body=fastjson.dumps(known.to_json()) if known is not None else b"",
        )


class RouteQueryProcessor(_Processor):
    """Routes, cluster info and topic lists, which clients and tools ask for."""

    def __init__(self, routes: RouteInfoManager, kv: KVConfigManager, order_message_enable: bool) -> None:
        super().__init__()
        self._routes = routes
        self._kv = kv
        self._order_message_enable = order_message_enable
        self._methods = {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._all_topics,
            RequestCode.GET_TOPICS_BY_CLUSTER: self._topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self._system_topics,
        }

    def _route(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        topic = str_field(request, "topic")
        route = self._routes.pickup_topic_route(topic)
        if route is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}"
            )
        if self._order_message_enable:
            route.order_topic_conf = self._kv.get(ORDER_TOPIC_CONFIG, topic)
        standard = wants_standard_route_json(request.version, request.ext_fields)
        return request.response(body=route.encode(standard_json=standard))

    def _cluster_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=self._routes.cluster_info().encode())

    def _all_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=self._routes.all_topics().encode())

    def _topics_by_cluster(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=self._routes.topics_of_cluster(str_field(request, "cluster")).encode())

    def _system_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=self._routes.system_topics().encode())


class TopicAdminProcessor(_Processor):
    """Topic deletion and broker write permission, which admin tools send."""

    def __init__(self, routes: RouteInfoManager) -> None:
        super().__init__()
        self._routes = routes
        self._methods = {
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._delete_topic,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self._wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self._add_write_perm,
        }

    def _delete_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self._routes.delete_topic(str_field(request, "topic"), request.ext_fields.get("clusterName") or None)
        return request.response()

    def _wipe_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        count = self._routes.change_write_perm(str_field(request, "brokerName"), writable=False)
        return request.response(ext_fields={"wipeTopicCount": str(count)})

    def _add_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        count = self._routes.change_write_perm(str_field(request, "brokerName"), writable=True)
        return request.response(ext_fields={"addTopicCount": str(count)})


class KVConfigProcessor(_Processor):
    """PUT/GET/DELETE_KV_CONFIG and GET_KVLIST_BY_NAMESPACE."""

    def __init__(self, kv: KVConfigManager) -> None:
        super().__init__()
        self._kv = kv
        self._methods = {
            RequestCode.PUT_KV_CONFIG: self._put,
            RequestCode.GET_KV_CONFIG: self._get,
            RequestCode.DELETE_KV_CONFIG: self._delete,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self._list,
        }

    def _put(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self._kv.put(str_field(request, "namespace"), str_field(request, "key"), str_field(request, "value"))
        return request.response()

    def _get(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        namespace = str_field(request, "namespace")
        key = str_field(request, "key")
        value = self._kv.get(namespace, key)
        if value is None:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace} Key: {key}"
            )
        return request.response(ext_fields={"value": value})

    def _delete(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self._kv.delete(str_field(request, "namespace"), str_field(request, "key"))
        return request.response()

    def _list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        namespace = str_field(request, "namespace")
        table = self._kv.namespace(namespace)
        if table is None:
            return request.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")
        return request.response(body=kv_table_body(table))
