"""The headers of the requests a name server serves and of its answers, declared once for both ends
(:mod:`cometmq.protocol.headers`). Field names, Java types and defaults are RocketMQ 4.x's
(``common/protocol/header/namesrv``). Where RocketMQ declares two classes with the same fields (the
unregistration and the data-version query, getting and deleting a KV entry, wiping and adding write
permission) one class here serves both requests.

GET_BROKER_CLUSTER_INFO, GET_ALL_TOPIC_LIST_FROM_NAMESERVER and GET_SYSTEM_TOPIC_LIST_FROM_NS carry no
header.
"""

from __future__ import annotations

from typing import Final

from cometmq.protocol.headers import Header, JavaBool, JavaInt, JavaLong, JavaString, header, wire
from cometmq.protocol.naming import broker_address_error, text_error

# MQVersion ordinal (V4_9_4) from which the Java name server answers routes in standard JSON.
STANDARD_JSON_ROUTE_VERSION: Final = 401


# brokers -------------------------------------------------------------------------------------------


@header
class RegisterBrokerRequestHeader(Header):
    """REGISTER_BROKER; the body is a RegisterBrokerBody (:mod:`cometmq.protocol.route`)."""

    broker_name: JavaString = wire("brokerName", name_rule=text_error)
    broker_addr: JavaString = wire("brokerAddr", name_rule=broker_address_error)
    cluster_name: JavaString = wire("clusterName", name_rule=text_error)
    ha_server_addr: JavaString = wire("haServerAddr", name_rule=text_error)
    # 0 is the master, slaves count up from 1: a negative id names no broker of the group.
    broker_id: JavaLong = wire("brokerId", minimum=0)
    compressed: JavaBool = wire("compressed", default=False)
    # The body's CRC32 masked to a non-negative Java int, as a message body's; 0 asks for no check.
    body_crc32: JavaInt = wire("bodyCrc32", default=0)
    # CometMQ's own (a Java name server ignores it): the epoch of a master made by a switch of role
    # (failover or by hand), which takes id 0 over from a live master of an older epoch; 0: none.
    master_epoch: JavaLong = wire("masterEpoch", default=0, minimum=0)


@header
class RegisterBrokerResponseHeader(Header):
    """The answer to REGISTER_BROKER: to a slave, its master's address and HA address."""

    ha_server_addr: JavaString | None = wire("haServerAddr", default=None)
    master_addr: JavaString | None = wire("masterAddr", default=None)


@header
class BrokerRequestHeader(Header):
    """UNREGISTER_BROKER and QUERY_DATA_VERSION: which broker asks (RocketMQ's
    UnRegisterBrokerRequestHeader and QueryDataVersionRequestHeader)."""

    broker_name: JavaString = wire("brokerName", name_rule=text_error)
    broker_addr: JavaString = wire("brokerAddr", name_rule=broker_address_error)
    cluster_name: JavaString = wire("clusterName", name_rule=text_error)
    broker_id: JavaLong = wire("brokerId", minimum=0)


@header
class QueryDataVersionResponseHeader(Header):
    """The answer to QUERY_DATA_VERSION: whether the broker's data version differs from the one the
    name server holds (which comes as the body)."""

    changed: JavaBool = wire("changed")


# routes and topics ---------------------------------------------------------------------------------


@header
class GetRouteInfoRequestHeader(Header):
    """GET_ROUTEINFO_BY_TOPIC."""

    topic: JavaString = wire("topic", name_rule=text_error)
    accept_standard_json_only: JavaBool | None = wire("acceptStandardJsonOnly", default=None)

    def wants_standard_json(self, version: int) -> bool:
        """Whether the route goes back as standard JSON rather than fastjson's legacy form (integer
        map keys unquoted): for clients from 4.9.4 on, and for older ones that ask for it."""
        return version >= STANDARD_JSON_ROUTE_VERSION or bool(self.accept_standard_json_only)


@header
class GetTopicsByClusterRequestHeader(Header):
    """GET_TOPICS_BY_CLUSTER."""

    cluster: JavaString = wire("cluster", name_rule=text_error)


@header
class DeleteTopicFromNamesrvRequestHeader(Header):
    """DELETE_TOPIC_IN_NAMESRV; without a cluster name, the topic goes from every cluster."""

    topic: JavaString = wire("topic", name_rule=text_error)
    cluster_name: JavaString | None = wire("clusterName", default=None, name_rule=text_error)


@header
class BrokerNameRequestHeader(Header):
    """WIPE_WRITE_PERM_OF_BROKER and ADD_WRITE_PERM_OF_BROKER (RocketMQ's
    WipeWritePermOfBrokerRequestHeader and AddWritePermOfBrokerRequestHeader)."""

    broker_name: JavaString = wire("brokerName", name_rule=text_error)


@header
class WipeWritePermOfBrokerResponseHeader(Header):
    """The answer to WIPE_WRITE_PERM_OF_BROKER: how many topics lost write permission."""

    wipe_topic_count: JavaInt = wire("wipeTopicCount")


@header
class AddWritePermOfBrokerResponseHeader(Header):
    """The answer to ADD_WRITE_PERM_OF_BROKER: how many topics got write permission back."""

    add_topic_count: JavaInt = wire("addTopicCount")


# KV config -----------------------------------------------------------------------------------------


@header
class PutKVConfigRequestHeader(Header):
    """PUT_KV_CONFIG."""

    namespace: JavaString = wire("namespace", name_rule=text_error)
    key: JavaString = wire("key", name_rule=text_error)
    value: JavaString = wire("value", name_rule=text_error)


@header
class KVConfigKeyRequestHeader(Header):
    """GET_KV_CONFIG and DELETE_KV_CONFIG (RocketMQ's GetKVConfigRequestHeader and
    DeleteKVConfigRequestHeader)."""

    namespace: JavaString = wire("namespace", name_rule=text_error)
    key: JavaString = wire("key", name_rule=text_error)


@header
class GetKVConfigResponseHeader(Header):
    """The answer to GET_KV_CONFIG."""

    value: JavaString | None = wire("value", default=None)


@header
class GetKVListByNamespaceRequestHeader(Header):
    """GET_KVLIST_BY_NAMESPACE."""

    namespace: JavaString = wire("namespace", name_rule=text_error)
