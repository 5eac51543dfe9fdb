"""Administration and lookup requests: topics, queue offsets, messages by id, runtime info."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

import cometmq
from cometmq.common import fastjson
from cometmq.common.naming import PERM_READ, PERM_WRITE, is_system_topic, topic_name_error
from cometmq.common.topic_config import TopicConfig
from cometmq.errors import BrokerError
from cometmq.remoting import Connection, RemotingCommand, RequestCode, ResponseCode
from cometmq.remoting.codes import UNIQUE_KEY_QUERY_FLAG
from cometmq.remoting.header import bool_field, int_field, str_field

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker

# RocketMQ's defaultQueryMaxNum (what a unique-key query gets, whatever it asks for) and
# maxMsgsNumBatch (the most any query gets).
DEFAULT_QUERY_MAX_NUM: Final = 32
MAX_MSGS_NUM_BATCH: Final = 64


class AdminProcessor:
    codes = (
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.GET_ALL_TOPIC_CONFIG,
        RequestCode.GET_BROKER_RUNTIME_INFO,
        RequestCode.GET_TOPIC_STATS_INFO,
        RequestCode.GET_MAX_OFFSET,
        RequestCode.GET_MIN_OFFSET,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        RequestCode.GET_EARLIEST_MSG_STORETIME,
        RequestCode.VIEW_MESSAGE_BY_ID,
        RequestCode.QUERY_MESSAGE,
    )

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def handle(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        code = request.code
        store = self._broker.store
        if code == RequestCode.GET_MAX_OFFSET:
            offset = store.max_offset(str_field(request, "topic"), int_field(request, "queueId"))
            return request.response(ext_fields={"offset": str(offset)})
        if code == RequestCode.GET_MIN_OFFSET:
            offset = store.min_offset(str_field(request, "topic"), int_field(request, "queueId"))
            return request.response(ext_fields={"offset": str(offset)})
        if code == RequestCode.SEARCH_OFFSET_BY_TIMESTAMP:
            offset = store.offset_by_timestamp(
                str_field(request, "topic"), int_field(request, "queueId"), int_field(request, "timestamp")
            )
            return request.response(ext_fields={"offset": str(offset)})
        if code == RequestCode.GET_EARLIEST_MSG_STORETIME:
            stamp = store.earliest_store_time(str_field(request, "topic"), int_field(request, "queueId"))
            return request.response(ext_fields={"timestamp": str(stamp)})
        if code == RequestCode.VIEW_MESSAGE_BY_ID:
            return self._view_message(request)
        if code == RequestCode.QUERY_MESSAGE:
            return self._query_message(request)
        if code == RequestCode.UPDATE_AND_CREATE_TOPIC:
            return self._create_topic(request)
        if code == RequestCode.DELETE_TOPIC_IN_BROKER:
            return self._delete_topic(request)
        if code == RequestCode.GET_ALL_TOPIC_CONFIG:
            body = fastjson.dumps(self._broker.topics.serialize_wrapper())
            return request.response(body=body)
        if code == RequestCode.GET_TOPIC_STATS_INFO:
            return self._topic_stats(request)
        return request.response(body=fastjson.dumps({"table": self._broker.runtime_info()}))

    def _view_message(self, request: RemotingCommand) -> RemotingCommand:
        offset = int_field(request, "offset")
        record = self._broker.store.message_at(offset)
        if record is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        return request.response(body_parts=[record])

    def _query_message(self, request: RemotingCommand) -> RemotingCommand:
        topic = str_field(request, "topic")
        key = str_field(request, "key")
        max_num = int_field(request, "maxNum")
        begin = int_field(request, "beginTimestamp")
        end = int_field(request, "endTimestamp")
        unique = request.ext_fields.get(UNIQUE_KEY_QUERY_FLAG) == "true"
        if unique:
            max_num = DEFAULT_QUERY_MAX_NUM  # as RocketMQ's QueryMessageProcessor does
        result = self._broker.store.query_messages(
            topic, key, min(max_num, MAX_MSGS_NUM_BATCH), begin, end, unique
        )
        header = {
            "indexLastUpdateTimestamp": str(result.index_last_update_timestamp),
            "indexLastUpdatePhyoffset": str(result.index_last_update_phyoffset),
        }
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

    def _create_topic(self, request: RemotingCommand) -> RemotingCommand:
        broker = self._broker
        topic = str_field(request, "topic")
        problem = topic_name_error(topic)
        if problem is not None:
            raise BrokerError(ResponseCode.SYSTEM_ERROR, f"topic[{topic}]: {problem}")
        self._refuse_system_topic(topic)
        read = int_field(request, "readQueueNums", default=broker.config.default_topic_queue_nums)
        write = int_field(request, "writeQueueNums", default=read)
        if not (0 < read <= 1024 and 0 < write <= 1024):
            raise BrokerError(
                ResponseCode.SYSTEM_ERROR, f"queue numbers must be 1..1024, not read {read} / write {write}"
            )
        config = TopicConfig(
            topic,
            read,
            write,
            int_field(request, "perm", default=PERM_READ | PERM_WRITE),
            request.ext_fields.get("topicFilterType", "SINGLE_TAG"),
            int_field(request, "topicSysFlag", default=0),
            bool_field(request, "order"),
        )
        broker.topics.put(config)
        return request.response()

    def _refuse_system_topic(self, topic: str) -> None:
        """Admins may not create, change or delete a system topic (RocketMQ's wording)."""
        if is_system_topic(topic, self._broker.topics.system_topics):
            raise BrokerError(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")

    def _delete_topic(self, request: RemotingCommand) -> RemotingCommand:
        broker = self._broker
        topic = str_field(request, "topic")
        self._refuse_system_topic(topic)
        broker.topics.delete(topic)
        broker.offsets.delete_topic(topic)
        broker.store.delete_topic(topic)
        return request.response()

    def _topic_stats(self, request: RemotingCommand) -> RemotingCommand:
        broker = self._broker
        topic = str_field(request, "topic")
        config = broker.topics.get(topic)
        if config is None:
            raise BrokerError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = broker.store
        # fastjson keys this table by MessageQueue objects; standard JSON cannot, so it is a list here.
        queues = [
            {
                "brokerName": broker.config.broker_name,
                "queueId": qid,
                "topic": topic,
                "minOffset": store.min_offset(topic, qid),
                "maxOffset": store.max_offset(topic, qid),
                "lastUpdateTimestamp": max(
                    0, store.store_time_at(topic, qid, store.max_offset(topic, qid) - 1)
                ),
            }
            for qid in range(config.write_queue_nums)
        ]
        return request.response(body=fastjson.dumps({"offsetTable": queues}))


def runtime_info(broker: Broker) -> dict[str, str]:
    store = broker.store
    # One root directory, so one filesystem for both (RocketMQ reports them apart); -1.0 = unknown.
    disk_ratio = str(round(store.disk_usage_ratio(), 4))
    return {
        "commitLogDiskRatio": disk_ratio,
        "consumeQueueDiskRatio": disk_ratio,
        "brokerVersion": cometmq.__version__,
        "brokerVersionDesc": f"CometMQ {cometmq.__version__}",
        "bootTimestamp": str(broker.boot_timestamp),
        "runtime": f"{int(time.time() - broker.boot_timestamp / 1000)} s",
        "commitLogMinOffset": str(store.commitlog_min_offset),
        "commitLogMaxOffset": str(store.commitlog_max_offset),
        "msgPutTotalTodayNow": str(broker.stats.put_messages),
        "msgGetTotalTodayNow": str(broker.stats.got_messages),
        "flushDiskType": broker.config.flush_disk_type,
        "brokerRole": broker.config.broker_role,
    }
