"""Client bookkeeping requests: HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP, and
QUERY/UPDATE_CONSUMER_OFFSET."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cometmq.broker._clients import ClientChannel
from cometmq.broker._filter import check_heartbeat_subscriptions
from cometmq.errors import RequestRefused
from cometmq.protocol import RemotingCommand, ResponseCode, fastjson
from cometmq.protocol.broker_headers import (
    ConsumerGroupRequestHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from cometmq.protocol.jsonbody import (
    MAX_HEARTBEAT_GROUPS,
    MAX_HEARTBEAT_SUBSCRIPTIONS,
    as_object,
    java_list,
    java_string,
    json_object,
)
from cometmq.protocol.naming import group_name_error, retry_topic, text_error
from cometmq.protocol.subscription import SubscriptionData
from cometmq.remoting import Connection

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker

# Heartbeat enums arrive as names (Java, JS) or ordinals (C++).
_CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
_MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
_CONSUME_FROM = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)

_Consumer = tuple[str, str, str, str, list[SubscriptionData]]


def _heartbeat(body: bytes) -> tuple[list[_Consumer], list[str], str]:
    """The consumers, producer groups and client id of a HeartbeatData body; BodyError for what a Java
    broker could not bind, a name it would not keep, or more groups or subscriptions than allowed."""
    what = "HeartbeatData"
    data = json_object(body, what)
    client_id = java_string(data, "clientID", what, name_rule=text_error)
    consumers = []
    for raw in java_list(data, "consumerDataSet", what, max_items=MAX_HEARTBEAT_GROUPS):
        consumer = as_object(raw, "ConsumerData")
        subscriptions = java_list(
            consumer, "subscriptionDataSet", "ConsumerData", max_items=MAX_HEARTBEAT_SUBSCRIPTIONS
        )
        consumers.append(
            (
                java_string(consumer, "groupName", "ConsumerData", name_rule=group_name_error),
                _enum_name(consumer.get("consumeType"), _CONSUME_TYPES),
                _enum_name(consumer.get("messageModel", 1), _MESSAGE_MODELS),
                _enum_name(consumer.get("consumeFromWhere"), _CONSUME_FROM),
                [SubscriptionData.from_json(sub) for sub in subscriptions],
            )
        )
    producer_groups = [
        java_string(as_object(raw, "ProducerData"), "groupName", "ProducerData", name_rule=group_name_error)
        for raw in java_list(data, "producerDataSet", what, max_items=MAX_HEARTBEAT_GROUPS)
    ]
    return consumers, producer_groups, client_id


def _enum_name(value: Any, names: tuple[str, ...]) -> str:
    """An enum by name or ordinal; anything else (a value of a newer client) is the first name."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 10:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return names[value] if 0 <= value < len(names) else names[0]
    return value if isinstance(value, str) and value in names else names[0]


class ConsumerManageProcessor:
    """The clients' bookkeeping: who is in which group, and the groups' committed offsets."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def update_consumer_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        update = UpdateConsumerOffsetRequestHeader.decode(request.ext_fields)
        # An offset is kept only for a queue that exists: it is served back to clients and tools.
        topic_config = self._broker.topics.get(update.topic)
        if topic_config is None:  # RocketMQ's code and remark
            raise RequestRefused(ResponseCode.TOPIC_NOT_EXIST, f"Topic {update.topic} not exist!")
        if update.queue_id >= topic_config.queue_nums:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{update.queue_id}] is illegal: topic {update.topic} has queues "
                f"0..{topic_config.queue_nums - 1}",
            )
        self._broker.offsets.commit(
            update.consumer_group, update.topic, update.queue_id, update.commit_offset
        )
        return request.response()

    def query_consumer_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        query = QueryConsumerOffsetRequestHeader.decode(request.ext_fields)
        offset = self._broker.offsets.query(query.consumer_group, query.topic, query.queue_id)
        if offset < 0 and self._broker.store.min_offset(query.topic, query.queue_id) <= 0:
            # RocketMQ serves a young queue (its first message still readily readable) from offset 0,
            # so a group that boots after the first sends still receives them.
            offset = 0
        if offset >= 0:
            return request.response(ext_fields=OffsetResponseHeader(offset=offset).encode())
        return request.response(
            ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
        )

    def heart_beat(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        broker = self._broker
        consumers, producer_groups, client_id = _heartbeat(request.body)
        # Every name is checked (by the decoding) before anything is registered: a group is kept
        # (subscriptionGroup.json, its retry topic in topics.json, the registration with the name
        # server) under the name it came with.
        for group, _, _, _, subscriptions in consumers:
            check_heartbeat_subscriptions(group, subscriptions)
        channel = ClientChannel(client_id, conn, request.language, request.version)
        for group, consume_type, message_model, consume_from, subscriptions in consumers:
            group_config = broker.groups.find_or_create(group)
            if group_config is not None:
                broker.topics.create_retry_topic(retry_topic(group), max(1, group_config.retry_queue_nums))
            changed = broker.consumers.register(
                group, channel, consume_type, message_model, consume_from, subscriptions
            )
            if changed and (group_config is None or group_config.notify_consumer_ids_changed_enable):
                broker.consumers.notify_ids_changed(group)
        for group in producer_groups:
            broker.producers.register(group, channel)
        return request.response()

    def unregister_client(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        broker = self._broker
        unregister = UnregisterClientRequestHeader.decode(request.ext_fields)
        if unregister.producer_group:
            broker.producers.unregister(unregister.producer_group, unregister.client_id)
        group = unregister.consumer_group
        if group and broker.consumers.unregister(group, unregister.client_id):
            broker.consumers.notify_ids_changed(group)
        return request.response()

    def get_consumer_list_by_group(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        group = ConsumerGroupRequestHeader.decode(request.ext_fields).consumer_group
        info = self._broker.consumers.groups.get(group)
        if info is None or not info.channels:
            return request.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        body = fastjson.dumps({"consumerIdList": info.client_ids()})
        return request.response(body=body)
