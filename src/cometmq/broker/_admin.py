"""Administration and lookup requests: topics, queue offsets, messages by id, runtime info,
subscription groups, consumption progress and offset resets."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

import cometmq
from cometmq.broker._groups import SubscriptionGroupConfig
from cometmq.broker._timer import DELIVERED_END_KEY, TIMER_PROGRESS_KEY
from cometmq.broker.config import fixed_at_start
from cometmq.errors import ConfigError, RecordError, RequestRefused
from cometmq.javaprops import format_properties, parse_properties
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from cometmq.protocol.broker_headers import (
    RESET_TO_LATEST,
    CloneGroupOffsetRequestHeader,
    ConsumerGroupRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetBrokerConfigResponseHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetTopicConfigRequestHeader,
    OffsetResponseHeader,
    ProducerGroupRequestHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    QueueRequestHeader,
    ResetOffsetRequestHeader,
    ResetOffsetResponseHeader,
    SearchOffsetRequestHeader,
    TopicRequestHeader,
    ViewBrokerStatsDataRequestHeader,
    ViewMessageRequestHeader,
)
from cometmq.protocol.jsonbody import json_object
from cometmq.protocol.naming import is_system_topic
from cometmq.protocol.record import decode_record_at
from cometmq.protocol.topic_config import (
    MESSAGE_TYPE_ATTRIBUTE,
    QUEUE_TYPE_ATTRIBUTE,
    SIMPLE_CQ,
    TopicConfig,
    TopicMessageType,
    altered_attributes,
    parse_attribute_changes,
)
from cometmq.remoting import Connection

if TYPE_CHECKING:
    from cometmq.broker._clients import ClientChannel
    from cometmq.broker.broker import Broker

log = logging.getLogger("cometmq.broker")

# RocketMQ's defaultQueryMaxNum (what a unique-key query gets, whatever it asks for) and
# maxMsgsNumBatch (the most any query gets).
DEFAULT_QUERY_MAX_NUM: Final = 32
MAX_MSGS_NUM_BATCH: Final = 64
# Extra key of our ResetOffsetBody reply: the offsets before the reset (Java tools ignore it).
PREVIOUS_OFFSET_TABLE: Final = "previousOffsetTable"


def queue_key(topic: str, broker_name: str, queue_id: int) -> tuple[tuple[str, Any], ...]:
    """A MessageQueue as a fastjson map key (``fastjson.dumps(..., bean_keys=True)``): its properties
    in fastjson's (alphabetical) order."""
    return (("brokerName", broker_name), ("queueId", queue_id), ("topic", topic))


class AdminProcessor:
    """What administrators and their tools ask a broker: topics, groups, offsets, messages, stats."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def get_max_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        queue = QueueRequestHeader.decode(request.ext_fields)
        offset = self._broker.store.max_offset(queue.topic, queue.queue_id)
        return request.response(ext_fields=OffsetResponseHeader(offset=offset).encode())

    def get_min_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        queue = QueueRequestHeader.decode(request.ext_fields)
        offset = self._broker.store.min_offset(queue.topic, queue.queue_id)
        return request.response(ext_fields=OffsetResponseHeader(offset=offset).encode())

    def search_offset_by_timestamp(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        search = SearchOffsetRequestHeader.decode(request.ext_fields)
        offset = self._broker.store.offset_by_timestamp(search.topic, search.queue_id, search.timestamp)
        return request.response(ext_fields=OffsetResponseHeader(offset=offset).encode())

    def get_earliest_msg_storetime(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        queue = QueueRequestHeader.decode(request.ext_fields)
        stamp = self._broker.store.earliest_store_time(queue.topic, queue.queue_id)
        return request.response(ext_fields=GetEarliestMsgStoretimeResponseHeader(timestamp=stamp).encode())

    def get_all_topic_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=fastjson.dumps(self._broker.topics.serialize_wrapper()))

    def get_topic_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """One topic's TopicConfig (RocketMQ 5's TopicConfigAndQueueMapping, without a mapping)."""
        topic = GetTopicConfigRequestHeader.decode(request.ext_fields).topic
        config = self._broker.topics.get(topic)
        if config is None:
            raise RequestRefused(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")
        return request.response(body=fastjson.dumps(config.to_json()))

    def get_all_subscription_group_config(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        return request.response(body=fastjson.dumps(self._broker.groups.wrapper()))

    def get_all_consumer_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Every committed offset, ``{"offsetTable": {"topic@group": {queue id: offset}}}`` as RocketMQ's
        ConsumerOffsetManager writes it (queue ids unquoted): what a slave copies from its master."""
        offsets = self._broker.offsets.offsets
        table = {key: dict(sorted(queues.items())) for key, queues in sorted(offsets.items())}
        return request.response(body=fastjson.dumps({"offsetTable": table}, numeric_keys_unquoted=True))

    def get_all_delay_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        # delayOffset.json as it would be written now; fastjson writes the level keys unquoted. The timer
        # progress and where the delivered copies end ride along for a CometMQ slave (a RocketMQ slave
        # reads offsetTable only).
        broker = self._broker
        table = {
            "offsetTable": dict(sorted(broker.schedule.offsets.items())),
            TIMER_PROGRESS_KEY: broker.timer.progress_json(),
            DELIVERED_END_KEY: max(broker.schedule.delivered_end, broker.timer.delivered_end),
        }
        return request.response(body=fastjson.dumps(table, numeric_keys_unquoted=True))

    def get_broker_runtime_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=fastjson.dumps({"table": self._broker.runtime_info()}))

    # broker settings and statistics ---------------------------------------------------------------

    def get_broker_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONFIG: every setting in effect as Java properties text (secrets left out), with
        the version of the settings (a DataVersion, counted up by each change)."""
        broker = self._broker
        version = GetBrokerConfigResponseHeader(version=json.dumps(broker.config_version.to_json()))
        body = format_properties(broker.config.properties()).encode()
        return request.response(ext_fields=version.encode(), body=body)

    def update_broker_config(self, conn: Connection, request: RemotingCommand) -> Awaitable[RemotingCommand]:
        """UPDATE_BROKER_CONFIG: change settings given as Java properties text, only keys that can
        change while the broker runs (RocketMQ refuses its black-listed keys the same way, with
        NO_PERMISSION); applied at once and kept for the next start before the answer."""
        try:
            values = parse_properties(bytes(request.body or b"").decode())
        except UnicodeDecodeError:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, "the settings are not UTF-8 text") from None
        refusal = fixed_at_start(values)
        if refusal is not None:
            raise RequestRefused(ResponseCode.NO_PERMISSION, refusal)
        try:
            write = self._broker.change_settings(values) if values else None
        except ConfigError as exc:
            raise RequestRefused(ResponseCode.INVALID_PARAMETER, str(exc)) from None
        log.info("settings changed by %s: %s", conn.remote_address, ", ".join(sorted(values)))
        return self._written_then(write, request.response())

    def view_broker_stats_data(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """VIEW_BROKER_STATS_DATA: one counter over about the last minute, hour and day."""
        asked = ViewBrokerStatsDataRequestHeader.decode(request.ext_fields)
        data = self._broker.stats.stats_data(asked.stats_name, asked.stats_key)
        if data is None:
            # RocketMQ's wording
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR, f"The stats <{asked.stats_name}> <{asked.stats_key}> not exist"
            )
        return request.response(body=data.encode())

    def view_message_by_id(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        offset = ViewMessageRequestHeader.decode(request.ext_fields).offset
        record = self._broker.store.message_at(offset)
        if record is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        # The access check let the request through knowing only the offset: whoever asks must also
        # be allowed to read the topic of the message found there.
        access = self._broker.access_control
        if access is not None:
            try:
                topic = decode_record_at(record, 0, len(record)).topic
            except RecordError:
                return request.response(
                    ResponseCode.SYSTEM_ERROR, f"no message is stored at the offset {offset}"
                )
            refusal = access.may_read(conn.remote_address, request, topic)
            if refusal is not None:
                return request.response(ResponseCode.NO_PERMISSION, refusal)
        return request.response(body_parts=[record])

    def query_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        query = QueryMessageRequestHeader.decode(request.ext_fields)
        topic, key, begin, end = query.topic, query.key, query.begin_timestamp, query.end_timestamp
        unique = query.unique_key_query
        # As RocketMQ's QueryMessageProcessor: a unique-key query gets DEFAULT_QUERY_MAX_NUM.
        max_num = DEFAULT_QUERY_MAX_NUM if unique else min(query.max_num, MAX_MSGS_NUM_BATCH)
        result = self._broker.store.query_messages(topic, key, max_num, begin, end, unique)
        header = QueryMessageResponseHeader(
            index_last_update_timestamp=result.index_last_update_timestamp,
            index_last_update_phyoffset=result.index_last_update_phyoffset,
        ).encode()
        if not result.buffers:
            what = "unique key" if unique else "key"
            remark = (
                f"can not find message, maybe time range not correct: no message of topic {topic} "
                f"with {what} {key!r} stored between {begin} and {end}"
            )
            if not self._broker.config.message_index_enable:
                remark = "can not find message: the message index is off on this broker (messageIndexEnable)"
            return request.response(ResponseCode.QUERY_NOT_FOUND, remark, header)
        return request.response(ext_fields=header, body_parts=result.buffers)

    def update_and_create_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        broker = self._broker
        create = CreateTopicRequestHeader.decode(request.ext_fields)
        topic = create.topic
        self._refuse_system_topic(topic)
        current = broker.topics.get(topic)
        attributes = current.attributes if current is not None else {}
        if create.attributes:
            try:
                changes = parse_attribute_changes(create.attributes)
                attributes = altered_attributes(attributes, changes)
            except ValueError as exc:  # RocketMQ refuses unknown attributes too
                raise RequestRefused(ResponseCode.INVALID_PARAMETER, f"topic {topic}: {exc}") from None
            if (
                changes.get(MESSAGE_TYPE_ATTRIBUTE) == TopicMessageType.MIXED.value
                and not broker.config.enable_mixed_message_type
            ):
                raise RequestRefused(ResponseCode.INVALID_PARAMETER, "MIXED message type is not supported.")
            queue_type = attributes.get(QUEUE_TYPE_ATTRIBUTE, SIMPLE_CQ)
            # RocketMQ's queue.type is not changeable: the queues' files differ.
            if current is not None and queue_type != current.attributes.get(QUEUE_TYPE_ATTRIBUTE, SIMPLE_CQ):
                raise RequestRefused(
                    ResponseCode.INVALID_PARAMETER,
                    f"topic {topic}: attempt to update an unchangeable attribute {QUEUE_TYPE_ATTRIBUTE}",
                )
        config = TopicConfig(
            topic,
            create.read_queue_nums,
            create.write_queue_nums,
            create.perm,
            create.topic_filter_type,
            create.topic_sys_flag,
            create.order,
            attributes,
        )
        broker.topics.put(config)
        return request.response()

    def _refuse_system_topic(self, topic: str) -> None:
        """Admins may not create, change or delete a system topic (RocketMQ's wording)."""
        if is_system_topic(topic, self._broker.topics.system_topics):
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic."
            )

    def delete_topic_in_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        broker = self._broker
        topic = TopicRequestHeader.decode(request.ext_fields).topic
        self._refuse_system_topic(topic)
        broker.topics.delete(topic)
        broker.stats.forget_topic(topic)
        broker.offsets.delete_topic(topic)
        broker.pop.forget_topic(topic)
        broker.store.delete_topic(topic)
        return request.response()

    def get_topic_stats_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        broker = self._broker
        topic = TopicRequestHeader.decode(request.ext_fields).topic
        config = broker.topics.get(topic)
        if config is None:
            raise RequestRefused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = broker.store
        table: dict[Any, dict[str, int]] = {}
        for qid in range(config.write_queue_nums):
            max_offset = store.max_offset(topic, qid)
            # RocketMQ's TopicStatsTable: Map<MessageQueue, TopicOffset>, fields in fastjson's order.
            table[queue_key(topic, broker.config.broker_name, qid)] = {
                "lastUpdateTimestamp": max(0, store.store_time_at(topic, qid, max_offset - 1)),
                "maxOffset": max_offset,
                "minOffset": store.min_offset(topic, qid),
            }
        return request.response(body=fastjson.dumps({"offsetTable": table}, bean_keys=True))

    # subscription groups ------------------------------------------------------------------------

    def update_and_create_subscription_group(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        # The group name, and every count and setting, checked by the decoding (docs/operations.md).
        config = SubscriptionGroupConfig.from_json(json_object(request.body, "SubscriptionGroupConfig"))
        self._broker.groups.put(config)
        return request.response()

    def delete_subscription_group(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        broker = self._broker
        delete = DeleteSubscriptionGroupRequestHeader.decode(request.ext_fields)
        group = delete.group_name
        broker.groups.delete(group)  # RocketMQ answers SUCCESS for an unknown group too
        broker.stats.forget_group(group)
        broker.pop.forget_group(group)
        if delete.remove_offset:
            broker.offsets.delete_group(group)
        return request.response()

    # consumption progress -----------------------------------------------------------------------

    def get_consume_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """ConsumeStats of a group (docs/protocol.md#admin-bodies), for one topic or every topic it has
        offsets for."""
        stats = GetConsumeStatsRequestHeader.decode(request.ext_fields)
        group, topic_asked = stats.consumer_group, stats.topic
        topics = [topic_asked] if topic_asked else self._broker.offsets.topics_of(group)
        table: dict[Any, dict[str, int]] = {}
        tps = 0.0
        for topic in topics:
            found = self._consume_stats(group, topic)
            if found is not None:
                table.update(found[0])
                tps += found[1]
        body = {"consumeTps": round(tps, 3), "offsetTable": table}
        return request.response(body=fastjson.dumps(body, bean_keys=True))

    def get_broker_consume_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONSUME_STATS: ConsumeStats of every group on every topic it has offsets for (with
        ``isOrder``, ordered topics only), and the lag over all of them (RocketMQ's ConsumeStatsList).
        RocketMQ lists the subscription groups only; a group with offsets but no subscription group
        (``autoCreateSubscriptionGroup=false``, or offsets committed by an admin tool) is listed too."""
        broker = self._broker
        order_only = GetConsumeStatsInBrokerHeader.decode(request.ext_fields).is_order
        groups: list[dict[str, list[dict[str, Any]]]] = []
        total_diff = 0
        topics_of = broker.offsets.topics_by_group()
        for group in sorted(broker.groups.groups.keys() | topics_of.keys()):
            per_topic = []
            for topic in topics_of.get(group, ()):
                config = broker.topics.get(topic)
                if config is None or (order_only and not config.order):
                    continue
                found = self._consume_stats(group, topic)
                if found is None:
                    continue
                table, tps = found
                total_diff += sum(q["brokerOffset"] - q["consumerOffset"] for q in table.values())
                per_topic.append({"consumeTps": round(tps, 3), "offsetTable": table})
            groups.append({group: per_topic})
        body = {"brokerAddr": broker.config.broker_addr, "consumeStatsList": groups, "totalDiff": total_diff}
        return request.response(body=fastjson.dumps(body, bean_keys=True))

    def _consume_stats(self, group: str, topic: str) -> tuple[dict[Any, dict[str, int]], float] | None:
        """A group's offsets on each queue of a topic, and its consume rate there; None when the topic
        does not exist or the group is online without subscribing to it (as RocketMQ: an online group
        reports only the topics it subscribes to)."""
        broker = self._broker
        store = broker.store
        config = broker.topics.get(topic)
        if config is None:
            return None
        members = broker.consumers.groups.get(group)
        if members is not None and members.subscriptions and topic not in members.subscriptions:
            return None
        table: dict[Any, dict[str, int]] = {}
        for qid in range(config.read_queue_nums):
            broker_offset = max(0, store.max_offset(topic, qid))
            consumer_offset = max(0, broker.offsets.query(group, topic, qid))
            last = store.store_time_at(topic, qid, consumer_offset - 1) if consumer_offset > 0 else 0
            table[queue_key(topic, broker.config.broker_name, qid)] = {
                "brokerOffset": broker_offset,
                "consumerOffset": consumer_offset,
                "lastTimestamp": max(0, last),
            }
        return table, broker.offsets.consume_tps(group, topic)

    def get_consumer_connection_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        group = ConsumerGroupRequestHeader.decode(request.ext_fields).consumer_group
        info = self._broker.consumers.groups.get(group)
        if info is None or not info.channels:
            raise RequestRefused(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        body = {
            "connectionSet": _connection_set(info.channels.values()),
            "consumeFromWhere": info.consume_from_where,
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "subscriptionTable": {topic: sub.to_json() for topic, sub in sorted(info.subscriptions.items())},
        }
        return request.response(body=fastjson.dumps(body))

    def get_producer_connection_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_PRODUCER_CONNECTION_LIST: the producers of a group that heartbeat to this broker."""
        group = ProducerGroupRequestHeader.decode(request.ext_fields).producer_group
        channels = self._broker.producers.groups.get(group)
        if not channels:
            # RocketMQ's wording
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        body = {"connectionSet": _connection_set(channels.values())}
        return request.response(body=fastjson.dumps(body))

    def clone_group_offset(self, conn: Connection, request: RemotingCommand) -> Awaitable[RemotingCommand]:
        """CLONE_GROUP_OFFSET: the destination group gets the source group's committed offsets, on one
        topic or every topic the source has offsets for, replacing its own there (RocketMQ's
        cloneOffset). Unless ``offline``, topics an online source group does not subscribe to are
        skipped, as RocketMQ's."""
        broker = self._broker
        clone = CloneGroupOffsetRequestHeader.decode(request.ext_fields)
        source, dest = clone.src_group, clone.dest_group
        topics = [clone.topic] if clone.topic else broker.offsets.topics_of(source)
        members = broker.consumers.groups.get(source)
        subscribed = members.subscriptions if members is not None and not clone.offline else {}
        cloned = []
        for topic in topics:
            if broker.topics.get(topic) is None:
                continue
            if subscribed and topic not in subscribed:
                continue
            if broker.offsets.clone(source, dest, topic):
                cloned.append(topic)
        log.info("offsets of group %s cloned to %s on %s", source, dest, ", ".join(cloned) or "no topic")
        return self._persist_then(request.response())

    # offset reset -------------------------------------------------------------------------------

    def invoke_broker_to_reset_offset(
        self, conn: Connection, request: RemotingCommand
    ) -> Awaitable[RemotingCommand]:
        """INVOKE_BROKER_TO_RESET_OFFSET: compute the queues' new offsets, store them, and tell every
        online consumer of the group (RESET_CONSUMER_CLIENT_OFFSET).

        Unlike RocketMQ 4.9, which only tells the consumers (and answers CONSUMER_NOT_ONLINE without
        any), the broker stores the offsets itself, as RocketMQ 5's server-side reset does, so a group
        with nobody online resumes from them. ``queueId`` and ``offset`` are RocketMQ 5's header fields
        for one queue set to an explicit offset.
        """
        broker = self._broker
        store = broker.store
        reset = ResetOffsetRequestHeader.decode(request.ext_fields)
        topic, group, timestamp = reset.topic, reset.group, reset.timestamp
        config = broker.topics.get(topic)
        if config is None:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}",
            )
        members = broker.consumers.groups.get(group)
        if (
            broker.groups.get(group) is None
            and members is None
            and topic not in broker.offsets.topics_of(group)
        ):
            raise RequestRefused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {group} does not exist")
        read_queues = config.read_queue_nums
        if reset.queue_id >= read_queues:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{reset.queue_id}] is illegal: topic {topic} has read queues 0..{read_queues - 1}",
            )
        queue_ids = [reset.queue_id] if reset.queue_id >= 0 else list(range(read_queues))
        name = broker.config.broker_name
        new_table: dict[Any, int] = {}
        old_table: dict[Any, int] = {}
        given = reset.offset if reset.queue_id >= 0 and reset.offset != -1 else None
        for qid in queue_ids:
            low, high = store.min_offset(topic, qid), store.max_offset(topic, qid)
            if given is not None:
                target = given
                if not low <= target <= high:
                    raise RequestRefused(
                        ResponseCode.SYSTEM_ERROR,
                        f"Target offset {target} not in consume queue range [{low}-{high}]",
                    )
            elif timestamp <= RESET_TO_LATEST:
                target = high
            else:
                # Exactly from there: SEARCH_OFFSET_BY_TIMESTAMP may answer the older neighbour
                # (docs/protocol.md#search-by-timestamp).
                target = store.first_offset_at(topic, qid, timestamp)
            current = broker.offsets.query(group, topic, qid)
            if not reset.is_force and 0 <= current <= target:
                target = current  # RocketMQ: without isForce, a reset only ever moves back
            old_table[queue_key(topic, name, qid)] = current
            new_table[queue_key(topic, name, qid)] = target
            broker.offsets.reset(group, topic, qid, target)
            broker.pop.reset(group, topic, qid, target)
        notified = self._tell_consumers(group, topic, timestamp, new_table)
        log.info(
            "offsets of group %s on %s reset (timestamp %d): %s; %d consumer(s) told",
            group, topic, timestamp, {dict(k)["queueId"]: v for k, v in new_table.items()}, notified,
        )  # fmt: skip
        body = fastjson.dumps({"offsetTable": new_table, PREVIOUS_OFFSET_TABLE: old_table}, bean_keys=True)
        response = request.response(
            ext_fields=ResetOffsetResponseHeader(consumers_notified=notified).encode(), body=body
        )
        return self._persist_then(response)

    def _tell_consumers(self, group: str, topic: str, timestamp: int, table: dict[Any, int]) -> int:
        info = self._broker.consumers.groups.get(group)
        if info is None:
            return 0
        header = ResetOffsetRequestHeader(
            topic=topic, group=group, timestamp=timestamp, is_force=False
        ).encode()
        # Both ResetOffsetBody forms (docs/protocol.md#broker-to-client): C++ reads only the array, Java
        # only the map.
        c_style = fastjson.dumps(
            {"offsetTable": [{**dict(key), "offset": offset} for key, offset in table.items()]}
        )
        java_style = fastjson.dumps({"offsetTable": table}, bean_keys=True)
        told = 0
        for channel in list(info.channels.values()):
            request = RemotingCommand(
                code=RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                ext_fields=header.copy(),
                body=c_style if channel.language == "CPP" else java_style,
                language="JAVA",
            )
            channel.conn.invoke_oneway(request)
            told += 1
        return told

    def _persist_then(self, response: RemotingCommand) -> Awaitable[RemotingCommand]:
        # The offsets are on disk before the administrator hears it is done (commits wait for the
        # period).
        return self._written_then(self._broker.offsets.persist_later(), response)

    @staticmethod
    async def _written_then(write: Callable[[], None] | None, response: RemotingCommand) -> RemotingCommand:
        if write is not None:
            await asyncio.get_running_loop().run_in_executor(None, write)
        return response


def runtime_info(broker: Broker) -> dict[str, str]:
    store = broker.store
    stats = broker.stats
    # One root directory, so one filesystem for both (RocketMQ reports them apart); -1.0 = unknown.
    disk_ratio = str(round(store.disk_usage_ratio(), 4))
    transferred = stats.get_transferred_tps()
    put_today, got_today, put_yesterday, got_yesterday = stats.day_starts
    put_bytes = sum(totals[1] for totals in stats.put_by_topic.values())
    try:
        disk = shutil.disk_usage(broker.root_dir)
        capacity = f"Total : {_human_bytes(disk.total)}, Free : {_human_bytes(disk.free)}."
    except OSError:
        capacity = "Total : 0 B, Free : 0 B."
    return {
        "commitLogDiskRatio": disk_ratio,
        "consumeQueueDiskRatio": disk_ratio,
        "brokerVersion": cometmq.__version__,
        "brokerVersionDesc": f"CometMQ {cometmq.__version__}",
        "bootTimestamp": str(broker.boot_timestamp),
        "runtime": f"{int(time.time() - broker.boot_timestamp / 1000)} s",
        "commitLogMinOffset": str(store.commitlog_min_offset),
        "commitLogMaxOffset": str(store.commitlog_max_offset),
        "msgPutTotalTodayNow": str(stats.put_messages),
        "msgGetTotalTodayNow": str(stats.got_messages),
        # The totals at local midnight (0 for a day the broker started in): RocketMQ's tools show
        # today's count as TodayNow - TodayMorning, yesterday's as TodayMorning - YesterdayMorning.
        "msgPutTotalTodayMorning": str(put_today),
        "msgGetTotalTodayMorning": str(got_today),
        "msgPutTotalYesterdayMorning": str(put_yesterday),
        "msgGetTotalYesterdayMorning": str(got_yesterday),
        "putMessageTimesTotal": str(stats.put_messages),
        "putMessageSizeTotal": str(put_bytes),
        "putMessageAverageSize": str(round(put_bytes / stats.put_messages, 2) if stats.put_messages else 0.0),
        "earliestMessageTimeStamp": str(earliest_message_timestamp(broker)),
        "remainHowManyDataToFlush": str(store.flush_behind_bytes),
        "remainHowManyDataToCommit": "0",  # no transient store pool: written bytes are committed
        "commitLogDirCapacity": capacity,
        # Requests are served on the event loop as they arrive: no thread pool queues them and no
        # page-cache lock is held across a put. RocketMQ's clusterList parses these as numbers.
        "sendThreadPoolQueueSize": "0",
        "pullThreadPoolQueueSize": "0",
        "sendThreadPoolQueueHeadWaitTimeMills": "0",
        "pullThreadPoolQueueHeadWaitTimeMills": "0",
        "pageCacheLockTimeMills": "0",
        "startAcceptSendRequestTimeStamp": "0",
        "putTps": stats.put_tps(),
        # RocketMQ 4's tools read the first spelling, RocketMQ 5's the second.
        "getTransferedTps": transferred,
        "getTransferredTps": transferred,
        "flushDiskType": broker.config.flush_disk_type.value,
        "brokerRole": broker.role.value,  # the role now (a switch changes it)
        # Not RocketMQ's: with commitLogMaxOffset, what `cometmq cluster list` compares between a
        # master and its slave for the slave's lag: the commit log's last record's store time.
        "lastMessageStoreTimestamp": str(broker.store.last_store_timestamp),
    }


def earliest_message_timestamp(broker: Broker) -> int:
    """Store time (ms) of the oldest message in the commit log, 0 when there is none (RocketMQ's
    earliestMessageTimeStamp)."""
    store = broker.store
    if store.commitlog_max_offset <= store.commitlog_min_offset:
        return 0
    record = store.message_at(store.commitlog_min_offset)
    if record is None:
        return 0
    try:
        return decode_record_at(record, 0, len(record)).store_timestamp
    except RecordError:
        return 0
    finally:
        del record  # a live slice would pin the segment's mapping


def _human_bytes(size: int) -> str:
    """Java's MixAll.humanReadableByteCount(size, false): "1.5 GiB"."""
    if size < 1024:
        return f"{size} B"
    exponent = min(6, int(math.log(size, 1024)))
    return f"{size / 1024**exponent:.1f} {'KMGTPE'[exponent - 1]}iB"


def _connection_set(channels: Iterable[ClientChannel]) -> list[dict[str, Any]]:
    """The ``connectionSet`` of a connection list answer (RocketMQ's Connection objects)."""
    return [
        {
            "clientAddr": channel.conn.remote_address,
            "clientId": channel.client_id,
            "language": channel.language,
            "version": channel.version,
        }
        for channel in channels
    ]
