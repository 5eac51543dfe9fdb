"""Which resources a request needs which actions on: the one table of access control.

The table is RocketMQ 5's (``DefaultAuthorizationContextBuilder`` and the ``@RocketMQAction``
annotations of its request headers): each request code gives a list of needs, each on one resource
and passed by any one of its actions. Resource names come from the request's ext fields (the
header's wire names) or, for a few requests, from the body. A field the request does not carry gives
a need on that type of resource with no name, which only ``<Type>:*`` and ``*`` entries grant. A
retry topic (``%RETRY%g``) stands for its group: what a request needs on it, it needs on group g,
besides what it needs on the group its header names. Reading a dead-letter topic (``%DLQ%g``) needs
what reading any topic needs on it, and Sub on group g.

A Cluster need is on ``Cluster:<brokerClusterName>`` at a broker and on a cluster with no name at a
name server (so only ``Cluster:*`` and ``*`` grant it there).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from cometmq.auth._model import Action, Need, Resource, ResourceType
from cometmq.protocol.codes import RequestCode
from cometmq.protocol.command import RemotingCommand
from cometmq.protocol.jsonbody import (
    MAX_HEARTBEAT_GROUPS,
    MAX_HEARTBEAT_SUBSCRIPTIONS,
    MAX_LOCK_BATCH,
    as_object,
    java_list,
    json_object,
)
from cometmq.protocol.naming import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from cometmq.protocol.pop import batch_ack_request_body

_TOPIC: Final = ResourceType.TOPIC
_GROUP: Final = ResourceType.GROUP
_CLUSTER: Final = ResourceType.CLUSTER

PUB: Final = frozenset((Action.PUB,))
SUB: Final = frozenset((Action.SUB,))
SUB_GET: Final = frozenset((Action.SUB, Action.GET))
SUB_UPDATE: Final = frozenset((Action.SUB, Action.UPDATE))
PUB_SUB_GET: Final = frozenset((Action.PUB, Action.SUB, Action.GET))
CREATE: Final = frozenset((Action.CREATE,))
UPDATE: Final = frozenset((Action.UPDATE,))
DELETE: Final = frozenset((Action.DELETE,))
GET: Final = frozenset((Action.GET,))
LIST: Final = frozenset((Action.LIST,))

NeedsRule = Callable[[RemotingCommand, "str | None"], list[Need]]


def _is_retry(name: str | None) -> bool:
    return name is not None and name.startswith(RETRY_GROUP_TOPIC_PREFIX)


def _need(resource_type: ResourceType, name: str | None, actions: frozenset[Action]) -> Need:
    return Need(Resource.of(resource_type, name), actions)


def on_topic(topic: str | None, actions: frozenset[Action]) -> list[Need]:
    """*actions* on *topic*, which a consumer reads (or names): a retry topic ``%RETRY%g`` is group
    g's (the same actions on Group g, Sub for Pub, as RocketMQ), and a dead-letter topic ``%DLQ%g``
    holds group g's failed messages, so reading it needs Sub on Group g besides the topic's own need."""
    if topic is not None:
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return [_need(_GROUP, topic, (actions - PUB) | SUB if Action.PUB in actions else actions)]
        if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            return [_need(_TOPIC, topic, actions), _need(_GROUP, topic[len(DLQ_GROUP_TOPIC_PREFIX) :], SUB)]
    return [_need(_TOPIC, topic, actions)]


def _field(resource_type: ResourceType, field: str, actions: frozenset[Action]) -> NeedsRule:
    """One need on the resource a field names."""

    def rule(request: RemotingCommand, cluster: str | None) -> list[Need]:
        return [_need(resource_type, request.ext_fields.get(field), actions)]

    return rule


def _topic(field: str, actions: frozenset[Action]) -> NeedsRule:
    """*actions* on the topic a field names (see :func:`on_topic`)."""

    def rule(request: RemotingCommand, cluster: str | None) -> list[Need]:
        return on_topic(request.ext_fields.get(field), actions)

    return rule


def _topic_and_group(topic_field: str, group_field: str, actions: frozenset[Action]) -> NeedsRule:
    """A consumer's request: the topic (see :func:`on_topic`) and the group."""

    def rule(request: RemotingCommand, cluster: str | None) -> list[Need]:
        fields = request.ext_fields
        return [*on_topic(fields.get(topic_field), actions), _need(_GROUP, fields.get(group_field), actions)]

    return rule


def _send(topic_field: str, group_field: str) -> NeedsRule:
    """A send: Pub on the topic. To a retry topic (a consumer's message sent back as a new one), Sub
    on the topic's group and, as RocketMQ, on the producer group if one is named."""

    def rule(request: RemotingCommand, cluster: str | None) -> list[Need]:
        fields = request.ext_fields
        topic = fields.get(topic_field)
        if not _is_retry(topic):
            return [_need(_TOPIC, topic, PUB)]
        producer_group = fields.get(group_field)
        return [_need(_GROUP, topic, SUB), *([_need(_GROUP, producer_group, SUB)] if producer_group else [])]

    return rule


def _send_back(request: RemotingCommand, cluster: str | None) -> list[Need]:
    """Sub on the group, and on the topic the message was consumed from (originTopic): the broker
    copies the message at the offset named only if it is of that topic (or a retry of it). A request
    naming no originTopic is checked by the broker against the message's own topic."""
    fields = request.ext_fields
    origin = fields.get("originTopic")
    return [_need(_GROUP, fields.get("group"), SUB), *(on_topic(origin, SUB) if origin else [])]


def _end_transaction(request: RemotingCommand, cluster: str | None) -> list[Need]:
    """Pub on the topic RocketMQ 5's header names. A 4.x client names none: the request then only has
    to be signed, as the half message it ends was authorized when it was sent and only a producer of
    the half message's group may end it (the broker checks the group)."""
    topic = request.ext_fields.get("topic")
    return [_need(_TOPIC, topic, PUB)] if topic else []


def _unnamed(resource_type: ResourceType, actions: frozenset[Action]) -> NeedsRule:
    """A need on every resource of a type (listing them): only ``<Type>:*`` and ``*`` grant it."""
    need = _need(resource_type, None, actions)

    def rule(request: RemotingCommand, cluster: str | None) -> list[Need]:
        return [need]

    return rule


def _cluster(actions: frozenset[Action]) -> NeedsRule:
    def rule(request: RemotingCommand, cluster: str | None) -> list[Need]:
        return [_need(_CLUSTER, cluster, actions)]

    return rule


def _unregister_client(request: RemotingCommand, cluster: str | None) -> list[Need]:
    """Pub on the producer group and Sub on the consumer group it names; naming neither, Update on
    the cluster."""
    fields = request.ext_fields
    producer_group, consumer_group = fields.get("producerGroup"), fields.get("consumerGroup")
    needs = [_need(_GROUP, producer_group, PUB)] if producer_group else []
    if consumer_group:
        needs.append(_need(_GROUP, consumer_group, SUB))
    return needs or [_need(_CLUSTER, cluster, UPDATE)]


def _group_and_topic(group_field: str, actions: frozenset[Action]) -> NeedsRule:
    """*actions* on the group the request's *group_field* names, and on its topic when it names one."""

    def rule(request: RemotingCommand, cluster: str | None) -> list[Need]:
        fields = request.ext_fields
        needs = [_need(_GROUP, fields.get(group_field), actions)]
        if fields.get("topic"):
            needs.append(_need(_TOPIC, fields["topic"], actions))
        return needs

    return rule


def _reset_offset(request: RemotingCommand, cluster: str | None) -> list[Need]:
    fields = request.ext_fields
    return [_need(_GROUP, fields.get("group"), UPDATE), _need(_TOPIC, fields.get("topic"), UPDATE)]


def _string_in(obj: Mapping[str, Any], key: str) -> str | None:
    value = obj.get(key)
    return value if isinstance(value, str) else None


def _subscribed_topics(topics: Iterable[str | None]) -> list[Need]:
    """Sub on each topic (see :func:`on_topic`), each topic once: a lock names the same topic once
    per queue."""
    return [need for topic in dict.fromkeys(topics) for need in on_topic(topic, SUB)]


def _heart_beat(request: RemotingCommand, cluster: str | None) -> list[Need]:
    """Sub on each consumer group of the HeartbeatData and on each topic it subscribes to; producer
    groups need nothing (as in RocketMQ)."""
    what = "HeartbeatData"
    data = json_object(request.body, what)
    needs = []
    for raw in java_list(data, "consumerDataSet", what, max_items=MAX_HEARTBEAT_GROUPS):
        consumer = as_object(raw, "ConsumerData")
        needs.append(_need(_GROUP, _string_in(consumer, "groupName"), SUB))
        subscriptions = java_list(
            consumer, "subscriptionDataSet", "ConsumerData", max_items=MAX_HEARTBEAT_SUBSCRIPTIONS
        )
        needs += _subscribed_topics(
            _string_in(as_object(sub, "SubscriptionData"), "topic") for sub in subscriptions
        )
    return needs


def _lock_batch(request: RemotingCommand, cluster: str | None) -> list[Need]:
    """Sub on the LockBatchRequestBody's group and on each of its queues' topics."""
    what = "LockBatchRequestBody"
    body = json_object(request.body, what)
    queues = java_list(body, "mqSet", what, max_items=MAX_LOCK_BATCH)
    return [
        _need(_GROUP, _string_in(body, "consumerGroup"), SUB),
        *_subscribed_topics(_string_in(as_object(queue, "MessageQueue"), "topic") for queue in queues),
    ]


def _popped(topic: str | None, group: str | None, actions: frozenset[Action]) -> list[Need]:
    """A POP consumer's request: *actions* on the topic and the group. Its group's POP retry topic
    ``%RETRY%<group>_<topic>`` (where an ack names a redelivered message) stands for the topic."""
    prefix = f"{RETRY_GROUP_TOPIC_PREFIX}{group}_"
    if group is not None and topic is not None and topic.startswith(prefix):
        topic = topic[len(prefix) :]
    return [*on_topic(topic, actions), _need(_GROUP, group, actions)]


def _pop(actions: frozenset[Action]) -> NeedsRule:
    """POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, PEEK_MESSAGE, NOTIFICATION and
    POLLING_INFO: the header's topic and consumer group (RocketMQ 5's @RocketMQAction)."""

    def rule(request: RemotingCommand, cluster: str | None) -> list[Need]:
        fields = request.ext_fields
        return _popped(fields.get("topic"), fields.get("consumerGroup"), actions)

    return rule


def _batch_ack(request: RemotingCommand, cluster: str | None) -> list[Need]:
    """Sub on the topic and group of each ack of a BatchAckMessageRequestBody."""
    _, acks = batch_ack_request_body(request)
    needs = []
    for ack in acks:
        needs += _popped(ack.topic, ack.consumer_group, SUB)
    return needs


def _body_group(key: str, actions: frozenset[Action]) -> NeedsRule:
    """A need on the group a JSON body names (SubscriptionGroupConfig, CheckClientRequestBody)."""

    def rule(request: RemotingCommand, cluster: str | None) -> list[Need]:
        body = json_object(request.body, "the request body")
        return [_need(_GROUP, _string_in(body, key), actions)]

    return rule


_CODE = RequestCode
TABLE: Final[Mapping[int, NeedsRule]] = {
    # messages
    _CODE.SEND_MESSAGE: _send("topic", "producerGroup"),
    _CODE.SEND_MESSAGE_V2: _send("b", "a"),
    _CODE.SEND_BATCH_MESSAGE: _send("b", "a"),
    _CODE.END_TRANSACTION: _end_transaction,
    _CODE.CONSUMER_SEND_MSG_BACK: _send_back,
    _CODE.PULL_MESSAGE: _topic_and_group("topic", "consumerGroup", SUB),
    _CODE.POP_MESSAGE: _pop(SUB),
    _CODE.ACK_MESSAGE: _pop(SUB),
    _CODE.BATCH_ACK_MESSAGE: _batch_ack,
    _CODE.CHANGE_MESSAGE_INVISIBLETIME: _pop(SUB),
    _CODE.PEEK_MESSAGE: _pop(SUB),
    _CODE.NOTIFICATION: _pop(SUB),
    _CODE.POLLING_INFO: _pop(GET),
    _CODE.QUERY_MESSAGE: _topic("topic", SUB_GET),
    _CODE.VIEW_MESSAGE_BY_ID: _cluster(GET),
    # clients
    _CODE.HEART_BEAT: _heart_beat,
    _CODE.UNREGISTER_CLIENT: _unregister_client,
    _CODE.GET_CONSUMER_LIST_BY_GROUP: _field(_GROUP, "consumerGroup", SUB_GET),
    _CODE.QUERY_CONSUMER_OFFSET: _topic_and_group("topic", "consumerGroup", SUB_GET),
    _CODE.UPDATE_CONSUMER_OFFSET: _topic_and_group("topic", "consumerGroup", SUB_UPDATE),
    _CODE.LOCK_BATCH_MQ: _lock_batch,
    _CODE.UNLOCK_BATCH_MQ: _lock_batch,
    _CODE.CHECK_CLIENT_CONFIG: _body_group("group", SUB),
    _CODE.GET_ROUTEINFO_BY_TOPIC: _topic("topic", PUB_SUB_GET),
    # topics and groups
    _CODE.UPDATE_AND_CREATE_TOPIC: _field(_TOPIC, "topic", CREATE),
    _CODE.DELETE_TOPIC_IN_BROKER: _field(_TOPIC, "topic", DELETE),
    _CODE.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _body_group("groupName", CREATE),
    _CODE.DELETE_SUBSCRIPTIONGROUP: _field(_GROUP, "groupName", DELETE),
    _CODE.GET_MAX_OFFSET: _field(_TOPIC, "topic", GET),
    _CODE.GET_MIN_OFFSET: _field(_TOPIC, "topic", GET),
    _CODE.GET_EARLIEST_MSG_STORETIME: _field(_TOPIC, "topic", GET),
    _CODE.SEARCH_OFFSET_BY_TIMESTAMP: _field(_TOPIC, "topic", GET),
    _CODE.GET_TOPIC_STATS_INFO: _field(_TOPIC, "topic", GET),
    _CODE.GET_TOPIC_CONFIG: _field(_TOPIC, "topic", GET),
    _CODE.GET_CONSUME_STATS: _group_and_topic("consumerGroup", GET),
    _CODE.GET_CONSUMER_CONNECTION_LIST: _field(_GROUP, "consumerGroup", GET),
    _CODE.INVOKE_BROKER_TO_RESET_OFFSET: _reset_offset,
    # Update on the destination group (and the topic), as RocketMQ 5's.
    _CODE.CLONE_GROUP_OFFSET: _group_and_topic("destGroup", UPDATE),
    _CODE.GET_ALL_TOPIC_CONFIG: _unnamed(_TOPIC, LIST),
    _CODE.GET_TOPICS_BY_CLUSTER: _unnamed(_TOPIC, LIST),
    _CODE.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: _unnamed(_TOPIC, LIST),
    _CODE.GET_SYSTEM_TOPIC_LIST_FROM_NS: _unnamed(_TOPIC, LIST),
    _CODE.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: _unnamed(_GROUP, LIST),
    # the cluster
    _CODE.GET_ALL_CONSUMER_OFFSET: _cluster(GET),
    _CODE.GET_ALL_DELAY_OFFSET: _cluster(GET),
    _CODE.GET_BROKER_RUNTIME_INFO: _cluster(GET),
    _CODE.GET_BROKER_CONFIG: _cluster(GET),
    _CODE.GET_PRODUCER_CONNECTION_LIST: _cluster(GET),
    _CODE.VIEW_BROKER_STATS_DATA: _cluster(GET),
    _CODE.GET_BROKER_CONSUME_STATS: _cluster(GET),
    _CODE.GET_BROKER_HA_STATUS: _cluster(GET),
    _CODE.GET_BROKER_CLUSTER_INFO: _cluster(GET),
    _CODE.QUERY_DATA_VERSION: _cluster(GET),
    _CODE.GET_KV_CONFIG: _cluster(GET),
    _CODE.GET_KVLIST_BY_NAMESPACE: _cluster(GET),
    _CODE.UPDATE_BROKER_CONFIG: _cluster(UPDATE),
    _CODE.REGISTER_BROKER: _cluster(UPDATE),
    _CODE.UNREGISTER_BROKER: _cluster(UPDATE),
    _CODE.PUT_KV_CONFIG: _cluster(UPDATE),
    _CODE.DELETE_KV_CONFIG: _cluster(UPDATE),
    _CODE.WIPE_WRITE_PERM_OF_BROKER: _cluster(UPDATE),
    _CODE.ADD_WRITE_PERM_OF_BROKER: _cluster(UPDATE),
    _CODE.DELETE_TOPIC_IN_NAMESRV: _cluster(UPDATE),
    _CODE.NOTIFY_BROKER_ROLE_CHANGED: _cluster(UPDATE),
    # users and ACLs
    _CODE.AUTH_CREATE_USER: _cluster(UPDATE),
    _CODE.AUTH_UPDATE_USER: _cluster(UPDATE),
    _CODE.AUTH_DELETE_USER: _cluster(UPDATE),
    _CODE.AUTH_GET_USER: _cluster(GET),
    _CODE.AUTH_LIST_USER: _cluster(GET),
    _CODE.AUTH_CREATE_ACL: _cluster(UPDATE),
    _CODE.AUTH_UPDATE_ACL: _cluster(UPDATE),
    _CODE.AUTH_DELETE_ACL: _cluster(UPDATE),
    _CODE.AUTH_GET_ACL: _cluster(GET),
    _CODE.AUTH_LIST_ACL: _cluster(GET),
}


def needs_of(request: RemotingCommand, cluster: str | None) -> list[Need] | None:
    """What *request* needs, each :class:`Need` once; None if its code is not in the table. A body
    the table reads that is not valid JSON of its shape, or lists more than the broker's handler
    takes, raises a :class:`~cometmq.errors.RequestRefused` (refused, as the handler would)."""
    rule = TABLE.get(request.code)
    return None if rule is None else list(dict.fromkeys(rule(request, cluster)))
