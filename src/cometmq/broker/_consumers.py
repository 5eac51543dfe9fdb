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
from cometmq.protocol.naming import (
    check_name,
    group_name_error,
    retry_topic,
    stored_topic_name_error,
    text_error,
)
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


def _enum_name(value: Any, names: tuple[str, ...]) -> str:
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        index = int(value)
        return names[index] if 0 <= index < len(names) else names[0]
    return str(value) if value in names else names[0]


class ConsumerManageProcessor:
    """The clients' bookkeeping: who is in which group, and the groups' committed offsets."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def update_consumer_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        update = UpdateConsumerOffsetRequestHeader.decode(request.ext_fields)
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
        try:
            data = fastjson.loads(request.body)
            client_id = str(data["clientID"])
            consumers = [
                (
                    str(consumer["groupName"]),
                    _enum_name(consumer.get("consumeType"), _CONSUME_TYPES),
                    _enum_name(consumer.get("messageModel", 1), _MESSAGE_MODELS),
                    _enum_name(consumer.get("consumeFromWhere"), _CONSUME_FROM),
                    [SubscriptionData.from_json(sub) for sub in consumer.get("subscriptionDataSet") or ()],
                )
                for consumer in data.get("consumerDataSet") or ()
            ]
            producer_groups = [str(producer["groupName"]) for producer in data.get("producerDataSet") or ()]
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR, f"the heartbeat body is not valid: {exc!r}"
            ) from None
        # Every name is checked before anything is registered: a group is kept (subscriptionGroup.json, its
        # retry topic in topics.json, the registration with the name server) under the name it came with.
        check_name("clientID", client_id, text_error)
        for group, _, _, _, subscriptions in consumers:
            check_name("consumerGroup", group, group_name_error)
            for subscription in subscriptions:
                check_name("subscription topic", subscription.topic, stored_topic_name_error)
                check_name("subscription expression", subscription.sub_string, text_error)
            check_heartbeat_subscriptions(group, subscriptions)
        for group in producer_groups:
            check_name("producerGroup", group, group_name_error)
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
