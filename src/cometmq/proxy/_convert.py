"""RocketMQ 5's v2.Message against CometMQ's records: the one place the gRPC protocol's system properties
meet RocketMQ's message properties (docs/protocol.md, "RocketMQ 5 proxy").

Sent: a v2.Message becomes the properties, body and sys flag of a remoting send, checked as RocketMQ's
proxy checks it (each refusal a :class:`Refusal` with the v2 code the clients expect). Received: a stored
record becomes a v2.Message with its system properties filled from the record and its properties.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass
from typing import Final

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from cometmq.client.message import ReceivedMessage
from cometmq.protocol.naming import SEND_FORBIDDEN_TOPICS, SYSTEM_TOPIC_PREFIX, topic_name_error
from cometmq.protocol.transaction import (
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    PRODUCER_GROUP,
    TRANSACTION_PREPARED,
    TransactionType,
)
from cometmq.proxy._pb import definition_pb2 as v2

# RocketMQ's message property names (MessageConst) the conversions read or write.
UNIQ_KEY: Final = "UNIQ_KEY"
TAGS: Final = "TAGS"
KEYS: Final = "KEYS"
DELAY: Final = "DELAY"
SHARDING_KEY: Final = "__SHARDINGKEY"  # the message group of a FIFO message
TRACE_CONTEXT: Final = "TRACE_CONTEXT"
TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
BORN_HOST: Final = "__BORNHOST"
BORN_TIMESTAMP: Final = "BORN_TIMESTAMP"
POP_CK: Final = "POP_CK"  # the receipt handle of a popped message
DLQ_ORIGIN_TOPIC: Final = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID: Final = "DLQ_ORIGIN_MESSAGE_ID"

# The properties RocketMQ keeps for itself (MessageConst.STRING_HASH_SET): a v2.Message may not carry them
# as user properties, and a received message shows them only through its system properties. The message
# group and trace context are left out of RocketMQ's set but travel as system properties here too.
SYSTEM_PROPERTIES: Final = frozenset(
    {
        "TRACE_ON", "MSG_REGION", KEYS, TAGS, "WAIT", DELAY, "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID",
        TRANSACTION_PREPARED, PRODUCER_GROUP, "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", UNIQ_KEY, "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME", POP_CK, "POP_CK_OFFSET", "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO", "EXTEND_UNIQ_INFO", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
        "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET", TIMER_DELAY_MS,
        TIMER_DELAY_SEC, TIMER_DELIVER_MS, "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL", BORN_HOST, BORN_TIMESTAMP,
        DLQ_ORIGIN_TOPIC, DLQ_ORIGIN_MESSAGE_ID, "__CRC32#", SHARDING_KEY, TRACE_CONTEXT,
        CHECK_IMMUNITY_TIME_IN_SECONDS, "__transactionId__", "TRANSACTION_CHECK_TIMES",
    }
)  # fmt: skip

# RocketMQ proxy's limits (ProxyConfig): body size, user properties (count and bytes with tag and keys),
# message group bytes.
MAX_BODY_SIZE: Final = 4 * 1024 * 1024
MAX_USER_PROPERTIES: Final = 128
MAX_USER_PROPERTY_BYTES: Final = 16 * 1024
MAX_MESSAGE_GROUP_BYTES: Final = 64
# The last second a google.protobuf.Timestamp may hold (9999-12-31T23:59:59Z).
MAX_TIMESTAMP_SECONDS: Final = 253_402_300_799
# The longest a half message may ask to be spared check-backs (maxTransactionRecoverySecond).
MAX_TRANSACTION_RECOVERY_S: Final = 3600

# TopicMessageType, the topic attribute ``message.type``, against the v2 message types.
MESSAGE_TYPE_ATTRIBUTE: Final = "message.type"
_ACCEPTED_TYPES: Final[dict[str, tuple[int, ...]]] = {
    "NORMAL": (v2.NORMAL,),
    "FIFO": (v2.FIFO,),
    "DELAY": (v2.DELAY,),
    "TRANSACTION": (v2.TRANSACTION,),
    "MIXED": (v2.NORMAL, v2.FIFO, v2.DELAY, v2.TRANSACTION),
}
_TYPE_NAME: Final = {v2.NORMAL: "NORMAL", v2.FIFO: "FIFO", v2.DELAY: "DELAY", v2.TRANSACTION: "TRANSACTION"}


class Refusal(Exception):
    """A request the proxy answers with a v2 status other than OK: ``code`` (a v2.Code) and a message
    for the client's user."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def accepted_message_types(topic_type: str | None) -> list[int]:
    """The v2 message types a topic of ``message.type`` *topic_type* accepts (RocketMQ proxy's
    parseTopicMessageType): its one, all four for MIXED, MESSAGE_TYPE_UNSPECIFIED (so none) for
    UNSPECIFIED. A topic whose type the proxy could not read (None) is said to take all four, and the
    proxy does not check its sends."""
    if topic_type is None:
        return list(_ACCEPTED_TYPES["MIXED"])
    return list(_ACCEPTED_TYPES.get(topic_type, (v2.MESSAGE_TYPE_UNSPECIFIED,)))


def check_topic(topic: str) -> None:
    """ILLEGAL_TOPIC for a name no topic may have, or a system topic clients may not use."""
    problem = topic_name_error(topic)
    if problem is not None:
        raise Refusal(v2.ILLEGAL_TOPIC, f"topic {topic!r}: {problem}")
    if topic in SEND_FORBIDDEN_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX):
        raise Refusal(v2.ILLEGAL_TOPIC, f"topic {topic!r} is a system topic clients may not use")


# Java's Character.isISOControl, which RocketMQ's proxy checks names and values with.
_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f]")


def _has_control_character(text: str) -> bool:
    return _CONTROL_CHARACTER.search(text) is not None


@dataclass(slots=True)
class OutgoingMessage:
    """A v2.Message as a remoting send carries it."""

    message_id: str  # its UNIQ_KEY, the client's message id
    properties: dict[str, str]
    body: bytes
    sys_flag: int
    born_timestamp_ms: int
    message_type: int  # the v2.MessageType its properties make, whatever type the client declared
    message_group: str


def outgoing_message(message: v2.Message, producer_group: str, peer_host: str) -> OutgoingMessage:
    """The send of *message* by a producer of *producer_group* (RocketMQ's proxy uses the topic's name)
    connected from *peer_host*; :class:`Refusal` for what RocketMQ's proxy refuses."""
    system = message.system_properties
    body = _plain_body(message.body, system.body_encoding)
    if not body:
        raise Refusal(v2.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if len(body) > MAX_BODY_SIZE:
        raise Refusal(
            v2.MESSAGE_BODY_TOO_LARGE, f"message body is {len(body)} bytes, over the max {MAX_BODY_SIZE}"
        )
    properties = _user_properties(message.user_properties)
    user_bytes = sum(len(key.encode()) + len(value.encode()) for key, value in properties.items())
    if not system.message_id.strip():
        raise Refusal(v2.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    if _has_control_character(system.message_id):
        raise Refusal(v2.ILLEGAL_MESSAGE_ID, "message id cannot contain a control character")
    properties[UNIQ_KEY] = system.message_id
    if system.HasField("tag"):
        _check_tag(system.tag)
        properties[TAGS] = system.tag
        user_bytes += len(system.tag.encode())
    if system.keys:
        for key in system.keys:
            if not key.strip():
                raise Refusal(v2.ILLEGAL_MESSAGE_KEY, "key cannot be blank")
            if _has_control_character(key) or " " in key:
                raise Refusal(
                    v2.ILLEGAL_MESSAGE_KEY, f"key {key!r} cannot contain a space or control character"
                )
            user_bytes += len(key.encode())
        properties[KEYS] = " ".join(system.keys)
    if user_bytes > MAX_USER_PROPERTY_BYTES:
        raise Refusal(
            v2.MESSAGE_PROPERTIES_TOO_LARGE,
            f"user properties, tag and keys take {user_bytes} bytes, over the max {MAX_USER_PROPERTY_BYTES}",
        )
    sys_flag = 0
    if system.message_type == v2.TRANSACTION:
        properties[TRANSACTION_PREPARED] = "true"
        sys_flag = TransactionType.PREPARED
        if system.HasField("orphaned_transaction_recovery_duration"):
            seconds = system.orphaned_transaction_recovery_duration.seconds
            if seconds > MAX_TRANSACTION_RECOVERY_S:
                raise Refusal(
                    v2.BAD_REQUEST,
                    f"the orphaned transaction recovery duration is {seconds} s, over the max "
                    f"{MAX_TRANSACTION_RECOVERY_S} s",
                )
            properties[CHECK_IMMUNITY_TIME_IN_SECONDS] = str(max(seconds, 0))
    if system.HasField("delivery_timestamp"):
        deliver_ms = _millis(system.delivery_timestamp)
        if deliver_ms <= 0:
            raise Refusal(v2.ILLEGAL_DELIVERY_TIME, f"delivery timestamp {deliver_ms} ms is before 1970")
        properties[TIMER_DELIVER_MS] = str(deliver_ms)
    group = system.message_group if system.HasField("message_group") else ""
    if group:
        _check_message_group(group)
        properties[SHARDING_KEY] = group
    if system.HasField("trace_context") and system.trace_context:
        if _has_control_character(system.trace_context):
            raise Refusal(v2.BAD_REQUEST, "the trace context cannot contain a control character")
        properties[TRACE_CONTEXT] = system.trace_context
    properties[PRODUCER_GROUP] = producer_group
    born_host = system.born_host.strip() or peer_host
    if _has_control_character(born_host):
        raise Refusal(v2.BAD_REQUEST, "the born host cannot contain a control character")
    if born_host:
        properties[BORN_HOST] = born_host
    born_ms = _millis(system.born_timestamp) if system.HasField("born_timestamp") else 0
    if born_ms > 0:
        properties[BORN_TIMESTAMP] = str(born_ms)
    # RocketMQ's proxy checks a send against its topic's type by the type the properties make
    # (parseFromMessageProperty), not by the one the client declares.
    message_type = message_type_of(properties)
    return OutgoingMessage(system.message_id, properties, body, sys_flag, born_ms, message_type, group)


def _millis(stamp: Timestamp) -> int:
    """A timestamp in ms since the epoch. One whose seconds lie past the protobuf range (year 9999) holds
    milliseconds: the official Python client 5.1.2 writes a delivery time given in ms into ``seconds``."""
    if stamp.seconds > MAX_TIMESTAMP_SECONDS:
        return int(stamp.seconds)
    return int(stamp.seconds) * 1000 + int(stamp.nanos) // 1_000_000


def _plain_body(body: bytes, encoding: int) -> bytes:
    """The body as stored: a GZIP-encoded one is unpacked (4.x consumers inflate only zlib streams, so the
    proxy stores bodies plain), never to more than MAX_BODY_SIZE + 1 bytes: a small body may inflate to
    gigabytes."""
    if encoding != v2.GZIP:
        return body
    plain = bytearray()
    packed = body
    try:
        while packed and len(plain) <= MAX_BODY_SIZE:  # gzip members one after the other, as gunzip reads
            member = zlib.decompressobj(wbits=31)
            plain += member.decompress(packed, MAX_BODY_SIZE + 1 - len(plain))
            if not member.eof and not member.unconsumed_tail:
                raise Refusal(v2.MESSAGE_CORRUPTED, "the body is marked GZIP but its gzip data is cut short")
            packed = member.unused_data
    except zlib.error:
        raise Refusal(v2.MESSAGE_CORRUPTED, "the body is marked GZIP but is no gzip data") from None
    if len(plain) > MAX_BODY_SIZE:
        raise Refusal(
            v2.MESSAGE_BODY_TOO_LARGE, f"the GZIP body inflates to over the max {MAX_BODY_SIZE} bytes"
        )
    return bytes(plain)


def _user_properties(given: object) -> dict[str, str]:
    items = dict(given)  # type: ignore[call-overload]
    if len(items) > MAX_USER_PROPERTIES:
        raise Refusal(
            v2.MESSAGE_PROPERTIES_TOO_LARGE,
            f"{len(items)} user properties, over the max {MAX_USER_PROPERTIES}",
        )
    properties: dict[str, str] = {}
    for key, value in items.items():
        if key in SYSTEM_PROPERTIES:
            raise Refusal(v2.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {key!r} is used by the system")
        if not key.strip() or _has_control_character(key):
            raise Refusal(
                v2.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property name {key!r} is blank or has a control character"
            )
        if _has_control_character(value):
            raise Refusal(
                v2.ILLEGAL_MESSAGE_PROPERTY_KEY, f"the value of property {key!r} has a control character"
            )
        properties[key] = value
    return properties


def _check_tag(tag: str) -> None:
    if not tag.strip():
        raise Refusal(v2.ILLEGAL_MESSAGE_TAG, "tag cannot be blank")
    if "|" in tag:
        raise Refusal(v2.ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
    if _has_control_character(tag):
        raise Refusal(v2.ILLEGAL_MESSAGE_TAG, "tag cannot contain a control character")


def _check_message_group(group: str) -> None:
    if not group.strip():
        raise Refusal(v2.ILLEGAL_MESSAGE_GROUP, "message group cannot be blank")
    if len(group.encode()) >= MAX_MESSAGE_GROUP_BYTES:
        raise Refusal(
            v2.ILLEGAL_MESSAGE_GROUP, f"message group must be shorter than {MAX_MESSAGE_GROUP_BYTES} bytes"
        )
    if _has_control_character(group):
        raise Refusal(v2.ILLEGAL_MESSAGE_GROUP, "message group cannot contain a control character")


def check_message_type(topic: str, topic_type: str | None, message_type: int) -> None:
    """MESSAGE_PROPERTY_CONFLICT_WITH_TYPE when a topic of ``message.type`` *topic_type* does not take a
    message of *message_type* (RocketMQ proxy's DefaultTopicMessageTypeValidator); a topic whose type the
    proxy could not read (None) takes any."""
    if topic_type is None or topic_type == "MIXED":
        return
    sent = _TYPE_NAME.get(message_type, "UNSPECIFIED")  # type: ignore[call-overload]
    if sent != topic_type:
        raise Refusal(
            v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"topic {topic} takes {topic_type} messages (its message.type), not {sent} ones",
        )


def message_type_of(properties: dict[str, str]) -> int:
    """A stored message's v2 type from its properties (TopicMessageType.parseFromMessageProperty)."""
    if properties.get(TRANSACTION_PREPARED) == "true":
        return v2.TRANSACTION
    if any(name in properties for name in (DELAY, TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS)):
        return v2.DELAY
    if SHARDING_KEY in properties:
        return v2.FIFO
    return v2.NORMAL


def timestamp_of_ms(ms: int) -> Timestamp:
    stamp = Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


def duration_of_ms(ms: int) -> Duration:
    duration = Duration()
    duration.FromMilliseconds(ms)
    return duration


def incoming_message(received: ReceivedMessage) -> v2.Message:
    """A stored message as the 5.x clients receive it: user properties apart, the system properties
    from the record (RocketMQ proxy's GrpcConverter.buildMessage). The delivery attempt is the record's
    reconsume times + 1 (an order pop's broker writes its count of deliveries there); a popped
    message's receipt handle is its POP_CK property, a space and its commit-log offset, as RocketMQ's
    proxy hands it out (ConsumerProcessor.createHandle): the offset is what a forward to the dead-letter
    queue names the message by."""
    properties = received.properties
    system = v2.SystemProperties(
        message_id=properties.get(UNIQ_KEY) or received.offset_msg_id,
        body_digest=v2.Digest(type=v2.MD5, checksum=hashlib.md5(received.body).hexdigest().upper()),
        body_encoding=v2.IDENTITY,  # ReceivedMessage inflates a compressed body
        message_type=message_type_of(properties),  # type: ignore[arg-type]
        born_timestamp=timestamp_of_ms(received.born_timestamp),
        born_host=properties.get(BORN_HOST) or received.born_host,
        store_timestamp=timestamp_of_ms(received.store_timestamp),
        store_host=received.store_host,
        queue_id=received.queue_id,
        queue_offset=received.queue_offset,
        delivery_attempt=received.reconsume_times + 1,
    )
    if TAGS in properties:
        system.tag = properties[TAGS]
    keys = received.keys
    if keys:
        system.keys.extend(keys)
    if TIMER_DELAY_SEC in properties and properties[TIMER_DELAY_SEC].isdigit():
        system.delivery_timestamp.CopyFrom(
            timestamp_of_ms(received.store_timestamp + int(properties[TIMER_DELAY_SEC]) * 1000)
        )
    elif properties.get(TIMER_DELIVER_MS, "").isdigit():
        system.delivery_timestamp.CopyFrom(timestamp_of_ms(int(properties[TIMER_DELIVER_MS])))
    if SHARDING_KEY in properties:
        system.message_group = properties[SHARDING_KEY]
    if POP_CK in properties:
        system.receipt_handle = f"{properties[POP_CK]} {received.commitlog_offset}"
    if TRACE_CONTEXT in properties:
        system.trace_context = properties[TRACE_CONTEXT]
    if DLQ_ORIGIN_TOPIC in properties and DLQ_ORIGIN_MESSAGE_ID in properties:
        system.dead_letter_queue.CopyFrom(
            v2.DeadLetterQueue(
                topic=properties[DLQ_ORIGIN_TOPIC], message_id=properties[DLQ_ORIGIN_MESSAGE_ID]
            )
        )
    user = {name: value for name, value in properties.items() if name not in SYSTEM_PROPERTIES}
    return v2.Message(
        topic=v2.Resource(name=received.topic),
        user_properties=user,
        system_properties=system,
        body=received.body,
    )
