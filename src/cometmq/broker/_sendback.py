"""CONSUMER_SEND_MSG_BACK (36): a message a consumer failed goes to ``%RETRY%<group>`` to be delivered
again after a delay, or, after its last attempt, to ``%DLQ%<group>`` (docs/protocol.md#retry-and-dlq).

The request names the message by its commit-log offset; only a message of the topic it was consumed
from (originTopic) is copied, so that a group cannot take in messages of a topic it may not read."""

from __future__ import annotations

import random
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Final

from cometmq.broker._groups import max_reconsume_times
from cometmq.broker._schedule import copy_of_record, is_delayable
from cometmq.broker._send import LEASE_LAPSED
from cometmq.errors import RecordError
from cometmq.protocol import RemotingCommand, ResponseCode
from cometmq.protocol.broker_headers import ConsumerSendMsgBackRequestHeader
from cometmq.protocol.naming import PERM_WRITE, retry_topic
from cometmq.protocol.pop import pop_retry_topic
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import DecodedRecord, decode_record_at
from cometmq.remoting import Connection
from cometmq.store import PutStatus

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker

# RocketMQ's first retry waits delay level 3 (10 s by default), each later one a level more.
FIRST_RETRY_DELAY_LEVEL: Final = 3

# Properties the retry bookkeeping sets (RocketMQ's MessageConst names).
RETRY_TOPIC: Final = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
DELAY: Final = "DELAY"


class SendBackProcessor:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def consumer_send_msg_back(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        broker = self._broker
        config = broker.config
        send_back = ConsumerSendMsgBackRequestHeader.decode(request.ext_fields)
        group = send_back.group
        offset = send_back.offset
        delay_level = send_back.delay_level
        group_config = broker.groups.find_or_create(group)
        if group_config is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group not exist, {group} (autoCreateSubscriptionGroup is off on this broker)",
            )
        if not config.broker_permission & PERM_WRITE:
            return request.response(
                ResponseCode.NO_PERMISSION, f"the broker[{config.broker_ip1}] sending message is forbidden"
            )
        if group_config.retry_queue_nums <= 0:
            return request.response()  # RocketMQ drops the message: the group wants no retries
        if broker.election is not None:
            mastership_refusal = broker.mastership_refusal()
            if mastership_refusal is not None:
                return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, mastership_refusal)
        retry_config = broker.topics.create_retry_topic(
            retry_topic(group), max(1, group_config.retry_queue_nums)
        )
        if not retry_config.perm & PERM_WRITE:
            name = retry_config.topic_name
            return request.response(
                ResponseCode.NO_PERMISSION, f"the topic[{name}] sending message is forbidden"
            )
        original = self._record_at(offset)
        if original is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")
        refusal = self._copy_refusal(conn, request, original, group, send_back.origin_topic)
        if refusal is not None:
            return request.response(ResponseCode.NO_PERMISSION, refusal)

        max_times = max_reconsume_times(group_config, request.version, send_back.max_reconsume_times)
        properties = decode_properties(original.properties)
        properties.setdefault(RETRY_TOPIC, original.topic)
        # Every copy points at the first delivery, whose id the consumer saw first.
        properties[ORIGIN_MESSAGE_ID] = properties.get(ORIGIN_MESSAGE_ID) or original.offset_msg_id
        if original.reconsume_times >= max_times or delay_level < 0:
            target = broker.topics.dead_letter_topic(group)
            level = 0  # a dead letter waits for nobody
            broker.stats.count_dlq(group, properties[RETRY_TOPIC])
        else:
            target = retry_config
            level = delay_level or FIRST_RETRY_DELAY_LEVEL + original.reconsume_times
        properties.pop(DELAY, None)
        queue_id = random.randrange(max(1, target.write_queue_nums))
        message = copy_of_record(
            original, properties, target.topic_name, queue_id, broker.store_host, original.reconsume_times + 1
        )
        if level > 0 and is_delayable(message.sys_flag):
            # Parked in SCHEDULE_TOPIC_XXXX (level capped at messageDelayLevel's count); the schedule
            # service puts it into %RETRY%<group> when its delay is over.
            message = broker.schedule.to_schedule(message, level)
        result = broker.store.put(message)
        if result.status is not PutStatus.PUT_OK:
            refusal = broker.store.write_refusal if result.status is PutStatus.SERVICE_NOT_AVAILABLE else None
            return request.response(ResponseCode.SYSTEM_ERROR, refusal or result.status.name)
        broker.stats.count_put(message.topic, 1, result.wrote_bytes)
        if broker.sync_flush or broker.sync_master:
            return self._reply_when_stored(request, result.commitlog_end_offset)
        return self._stored(request, result.commitlog_end_offset)

    async def _reply_when_stored(self, request: RemotingCommand, end: int) -> RemotingCommand:
        # As a send under SYNC_FLUSH or SYNC_MASTER: the consumer commits past the original once this
        # says SUCCESS, so the copy must be on disk and on a slave first. RocketMQ answers code 1 with the
        # status otherwise; both waits run at once and the replica's status wins, as for a send.
        broker = self._broker
        flushed = broker.store.when_flushed(end) if broker.sync_flush else None
        ha_server = broker.ha_server
        replicated = ha_server.when_replicated(end) if broker.sync_master and ha_server is not None else None
        on_disk = True if flushed is None else await flushed
        replica = PutStatus.PUT_OK if replicated is None else await replicated
        if replica is not PutStatus.PUT_OK:
            return request.response(ResponseCode.SYSTEM_ERROR, replica.name)
        if not on_disk:
            return request.response(
                ResponseCode.SYSTEM_ERROR, broker.store.flush_failure or PutStatus.FLUSH_DISK_TIMEOUT.name
            )
        return self._stored(request, end)

    def _stored(self, request: RemotingCommand, end: int) -> RemotingCommand:
        """SUCCESS, unless (failover mode) this master may no longer acknowledge: then the consumer
        keeps the message and sends it back again, as after any failed send-back."""
        broker = self._broker
        if broker.election is not None and broker.mastership_lapsed(end):
            return request.response(ResponseCode.SYSTEM_ERROR, LEASE_LAPSED)
        return request.response()

    def _copy_refusal(
        self,
        conn: Connection,
        request: RemotingCommand,
        original: DecodedRecord,
        group: str,
        origin_topic: str | None,
    ) -> str | None:
        """Why the message at the offset a consumer named may not be copied into its group's retry
        topic, or None. The copy is readable by the group, so the message must be one the consumer
        was delivered: of the topic it names (originTopic, whose Sub the access check asked for), or a
        retry of that topic for this group (in ``%RETRY%<group>``, or a POP consumer's
        ``%RETRY%<group>_<topic>``). A request naming no originTopic (the C++ client's) is
        held to the message's own topic: the sender must be allowed to read it."""
        if origin_topic:
            topic = original.topic
            if (
                topic == origin_topic
                or topic == pop_retry_topic(origin_topic, group)  # a POP consumer's redelivery
                or (
                    topic == retry_topic(group)
                    and decode_properties(original.properties).get(RETRY_TOPIC) == origin_topic
                )
            ):
                return None
            return (
                f"the message at offset {original.commitlog_offset} is of topic {topic}, not of the "
                f"originTopic {origin_topic} (nor a retry of it for group {group})"
            )
        access = self._broker.access_control
        return None if access is None else access.may_read(conn.remote_address, request, original.topic)

    def _record_at(self, offset: int) -> DecodedRecord | None:
        view = self._broker.store.message_at(offset)
        if view is None:
            return None
        try:
            return decode_record_at(view, 0, len(view))
        except RecordError:
            return None
