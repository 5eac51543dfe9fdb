"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320)."""

from __future__ import annotations

import dataclasses
import random
import socket
import time
from collections.abc import Awaitable
from functools import lru_cache
from typing import TYPE_CHECKING

from cometmq.common.batch import decode_batch_body
from cometmq.common.naming import (
    DEFAULT_TOPIC,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    SEND_FORBIDDEN_TOPICS,
    topic_name_error,
)
from cometmq.common.properties import decode_properties, encode_properties
from cometmq.common.taghash import java_string_hash
from cometmq.common.topic_config import TopicConfig
from cometmq.errors import BrokerError, ProtocolError
from cometmq.remoting import Connection, RemotingCommand, RequestCode, ResponseCode
from cometmq.remoting.header import bool_field, int_field, str_field
from cometmq.store import MessageToStore, PutResult, PutStatus

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker

MAX_PROPERTIES_LENGTH = 32767  # the record stores it in an int16

# SendMessageRequestHeaderV2 uses one-letter names for the V1 fields.
_V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "bname",
}

_STATUS_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
}


@lru_cache(maxsize=4096)
def host_bytes(address: str) -> bytes:
    """``ip:port`` as the 8 bytes of a record's host field (IPv4 address, int32 port)."""
    host, _, port = address.rpartition(":")
    try:
        packed = socket.inet_aton(host)
    except OSError:
        packed = bytes(4)  # IPv6 or unknown peers: C++ clients can only read IPv4 hosts
    return packed + int(port or 0).to_bytes(4, "big")


class SendProcessor:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def handle(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        if request.code != RequestCode.SEND_MESSAGE:
            request.ext_fields = {_V2_NAMES.get(k, k): v for k, v in request.ext_fields.items()}
        broker = self._broker
        config = broker.config
        if not config.broker_permission & PERM_WRITE:
            return request.response(
                ResponseCode.NO_PERMISSION, f"the broker[{config.broker_ip1}] sending message is forbidden"
            )
        topic = str_field(request, "topic")
        problem = topic_name_error(topic)
        if problem is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"topic[{topic}]: {problem}")
        if topic in SEND_FORBIDDEN_TOPICS:
            return request.response(
                ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden."
            )
        topic_config = self._topic_config(request, topic)
        if not topic_config.perm & PERM_WRITE:
            return request.response(
                ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"
            )
        queue_id = int_field(request, "queueId")
        queue_nums = topic_config.queue_nums
        if queue_id < 0:
            queue_id = random.randrange(topic_config.write_queue_nums or 1)
        elif queue_id >= queue_nums:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal: topic {topic} has queues 0..{queue_nums - 1}",
            )
        properties = decode_properties(request.ext_fields.get("properties", ""))
        wait_store = properties.pop("WAIT", "true").lower() != "false"
        properties["CLUSTER"] = config.broker_cluster_name
        if properties.get("TRAN_MSG", "").lower() == "true":
            return request.response(
                ResponseCode.NO_PERMISSION, "transaction messages are not supported by this broker yet"
            )
        born_host = host_bytes(conn.remote_address)
        base = MessageToStore(
            topic=topic,
            queue_id=queue_id,
            flag=int_field(request, "flag", default=0),
            body=request.body,
            properties="",
            sys_flag=int_field(request, "sysFlag", default=0),
            born_timestamp=int_field(request, "bornTimestamp", default=int(time.time() * 1000)),
            born_host=born_host,
            store_host=broker.store_host,
            reconsume_times=int_field(request, "reconsumeTimes", default=0),
        )
        if bool_field(request, "batch"):
            messages = self._batch_messages(request, base, properties)
        else:
            self._check_body(len(request.body))
            messages = [self._with_properties(base, properties)]
        result = broker.store.put(messages[0]) if len(messages) == 1 else broker.store.put_batch(messages)
        broker.stats.put_messages += len(messages)
        if result.status is PutStatus.PUT_OK and wait_store and broker.sync_flush:
            return self._reply_after_flush(request, result, queue_id)
        return self._reply(request, result, result.status, queue_id)

    def _topic_config(self, request: RemotingCommand, topic: str) -> TopicConfig:
        topics = self._broker.topics
        topic_config = topics.get(topic)
        if topic_config is not None:
            return topic_config
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            topic_config = topics.create_retry_topic(topic)
        else:
            default_topic = request.ext_fields.get("defaultTopic") or DEFAULT_TOPIC
            queue_nums = int_field(request, "defaultTopicQueueNums", default=4)
            topic_config = topics.create_in_send(topic, default_topic, queue_nums)
        if topic_config is None:
            raise BrokerError(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist, apply first please! (auto-create is "
                f"{'on' if self._broker.config.auto_create_topic_enable else 'off'} on this broker)",
            )
        self._broker.request_register()
        return topic_config

    def _check_body(self, size: int) -> None:
        limit = self._broker.config.max_message_size
        if size > limit:
            raise BrokerError(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message body size {size} is over the max value {limit} bytes",
            )

    def _with_properties(
        self,
        base: MessageToStore,
        properties: dict[str, str],
        body: bytes | None = None,
        flag: int | None = None,
    ) -> MessageToStore:
        text = encode_properties(properties)
        if len(text.encode()) > MAX_PROPERTIES_LENGTH:
            raise BrokerError(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message properties length {len(text.encode())} is over the max value "
                f"{MAX_PROPERTIES_LENGTH} bytes",
            )
        tags = properties.get("TAGS")
        return dataclasses.replace(
            base,
            body=base.body if body is None else body,
            flag=base.flag if flag is None else flag,
            properties=text,
            tags_code=java_string_hash(tags) if tags else 0,
        )

    def _batch_messages(
        self, request: RemotingCommand, base: MessageToStore, properties: dict[str, str]
    ) -> list[MessageToStore]:
        if "DELAY" in properties:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, "a batch message cannot have a delay level")
        try:
            entries = decode_batch_body(request.body)
        except ProtocolError as exc:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, f"the batch body is malformed: {exc}") from None
        if not entries:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, "the batch body holds no message")
        messages = []
        for entry in entries:
            self._check_body(len(entry.body))
            merged = decode_properties(entry.properties)
            merged.pop("WAIT", None)
            merged.update(properties)
            messages.append(self._with_properties(base, merged, entry.body, entry.flag))
        return messages

    async def _reply_after_flush(
        self, request: RemotingCommand, result: PutResult, queue_id: int
    ) -> RemotingCommand:
        flushed = await self._broker.store.wait_flushed(result.commitlog_offset + result.wrote_bytes)
        status = PutStatus.PUT_OK if flushed else PutStatus.FLUSH_DISK_TIMEOUT
        return self._reply(request, result, status, queue_id)

    def _reply(
        self, request: RemotingCommand, result: PutResult, status: PutStatus, queue_id: int
    ) -> RemotingCommand:
        code = _STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR)
        if code not in (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT):
            return request.response(code, f"storing the message failed: {status.name}")
        config = self._broker.config
        return request.response(
            code,
            None if code == ResponseCode.SUCCESS else "the message is stored but its disk flush timed out",
            {
                "msgId": ",".join(result.msg_ids),
                "queueId": str(queue_id),
                "queueOffset": str(result.queue_offset),
                "MSG_REGION": config.region_id,
                "TRACE_ON": "true" if config.trace_on else "false",
            },
        )
