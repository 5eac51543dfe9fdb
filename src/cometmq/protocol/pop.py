"""POP consumption on the wire (RocketMQ 5): the request and response headers of POP_MESSAGE,
ACK_MESSAGE, BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, PEEK_MESSAGE, NOTIFICATION and
POLLING_INFO, the receipt handle (RocketMQ's ExtraInfoUtil string, carried by the ``POP_CK`` property
of every popped message), the BATCH_ACK_MESSAGE body, and the POP retry topic's name.

Field names, Java types and defaults are RocketMQ 5.3.3's (``remoting/protocol/header``); the
broker checks the limits RocketMQ's broker checks (at most 32 messages a pop) itself, to answer with
RocketMQ's codes. docs/protocol.md, "POP consumption", describes the exchange.

A receipt handle is eight fields separated by single spaces::

    ckQueueOffset popTime invisibleTime reviveQid retry brokerName queueId queueOffset

``ckQueueOffset`` is the first queue offset the pop took from that queue, ``popTime`` when the pop
happened (epoch ms) and ``invisibleTime`` for how long (ms) the message stays invisible; ``reviveQid``
is 999 for an order pop (RocketMQ's POP_ORDER_REVIVE_QUEUE) and a revive queue otherwise; ``retry`` is
``0`` for the topic itself, ``1`` for its POP retry topic ``%RETRY%<group>_<topic>`` and ``2`` for
RocketMQ's v2 retry topic ``%RETRY%<group>+<topic>``; then the broker's name, the queue and the
message's queue offset. RocketMQ's proxy appends a ninth, the message's commit-log offset (its
ReceiptHandle), and hands that text to its clients and to the broker alike; both forms are read.
As Java's ``String.split`` does, trailing separators are dropped before the fields are counted.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
from typing import Any, Final

from cometmq.errors import RequestRefused
from cometmq.protocol import fastjson
from cometmq.protocol.codes import ResponseCode
from cometmq.protocol.command import RemotingCommand
from cometmq.protocol.headers import Header, JavaBool, JavaInt, JavaLong, JavaString, header, wire
from cometmq.protocol.jsonbody import (
    BodyError,
    as_object,
    java_int,
    java_list,
    java_long,
    java_string,
    json_object,
)
from cometmq.protocol.naming import RETRY_GROUP_TOPIC_PREFIX, group_name_error, stored_topic_name_error

__all__ = [
    "FIRST_POP_TIME",
    "MAX_BATCH_ACKS",
    "MAX_BATCH_ACK_OFFSETS",
    "MAX_BITSET_BYTES",
    "MAX_POP_MESSAGES",
    "POP_CK",
    "POP_ORDER_REVIVE_QUEUE",
    "TIMEOUT_TOO_MUCH",
    "AckMessageRequestHeader",
    "BatchAck",
    "ChangeInvisibleTimeRequestHeader",
    "ChangeInvisibleTimeResponseHeader",
    "ConsumeInitMode",
    "ExtraInfo",
    "NotificationRequestHeader",
    "NotificationResponseHeader",
    "PeekMessageRequestHeader",
    "PollingInfoRequestHeader",
    "PollingInfoResponseHeader",
    "PopMessageRequestHeader",
    "PopMessageResponseHeader",
    "RetryMark",
    "batch_ack_request_body",
    "decode_batch_ack_body",
    "encode_batch_ack_body",
    "pop_retry_topic",
    "real_topic",
    "retry_mark",
]

# RocketMQ's broker refuses a pop asking for more than 32 messages (INVALID_PARAMETER).
MAX_POP_MESSAGES: Final = 32
# The revive queue id a receipt handle of an order pop names (RocketMQ's KeyBuilder.POP_ORDER_REVIVE_QUEUE).
POP_ORDER_REVIVE_QUEUE: Final = 999
# The most acks one BATCH_ACK_MESSAGE body may list (RocketMQ sets none; a client batches one pop's).
MAX_BATCH_ACKS: Final = 1024

# The words of the remark RocketMQ's broker answers (with POLLING_TIMEOUT, the code of a pop that found
# nothing) to a pop that arrived more than 500 ms after its bornTime + pollTime (isTimeoutTooMuch).
TIMEOUT_TOO_MUCH: Final = "pop message is timeout too much"

# Message properties (RocketMQ's MessageConst): the receipt handle, and when the message was first popped.
POP_CK: Final = "POP_CK"
FIRST_POP_TIME: Final = "1ST_POP_TIME"

_SEPARATOR: Final = " "  # MessageConst.KEY_SEPARATOR


class ConsumeInitMode(enum.IntEnum):
    """Where a group's first pop of a queue starts (PopMessageRequestHeader.initMode)."""

    MIN = 0  # the queue's first message
    MAX = 1  # the queue's last message (RocketMQ: max offset - 1)


class RetryMark(enum.Enum):
    """The ``retry`` field of a receipt handle: which topic the message was popped from."""

    TOPIC = "0"
    RETRY_V1 = "1"  # %RETRY%<group>_<topic>
    RETRY_V2 = "2"  # %RETRY%<group>+<topic>


_RETRY_MARKS: Final = {mark.value: mark for mark in RetryMark}


def pop_retry_topic(topic: str, group: str) -> str:
    """The POP retry topic of *group* on *topic* (RocketMQ's KeyBuilder.buildPopRetryTopicV1)."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}"


def _pop_retry_topic_v2(topic: str, group: str) -> str:
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}+{topic}"


@dataclasses.dataclass(frozen=True, slots=True)
class ExtraInfo:
    """A receipt handle (see the module docstring). ``str(info)`` is its wire text."""

    ck_queue_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry: RetryMark
    broker_name: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int | None = None  # the ninth field of RocketMQ's proxy, when present

    @classmethod
    def parse(cls, text: str) -> ExtraInfo:
        """The receipt handle *text*; ValueError says what is wrong with it."""
        # Parsed once per ack: split and int(), no per-field loop (bench/pop.py).
        parts = text.rstrip(_SEPARATOR).split(_SEPARATOR)
        if len(parts) == 9:
            commitlog_text: str | None = parts.pop()
        elif len(parts) == 8:
            commitlog_text = None
        else:
            raise ValueError(f"a receipt handle has 8 or 9 fields separated by spaces, not {len(parts)}")
        ck, pop_time, invisible, revive, retry_text, broker_name, queue_id, queue_offset = parts
        retry = _RETRY_MARKS.get(retry_text)
        if retry is None:
            raise ValueError(f"the receipt handle's retry field {retry_text[:16]!r} is not 0, 1 or 2")
        if not broker_name:
            raise ValueError("the receipt handle names no broker")
        try:
            return cls(
                int(ck),
                int(pop_time),
                int(invisible),
                int(revive),
                retry,
                broker_name,
                int(queue_id),
                int(queue_offset),
                None if commitlog_text is None else int(commitlog_text),
            )
        except ValueError:
            raise ValueError(
                f"the receipt handle {text[:120]!r} has a number field that is not a number"
            ) from None

    def __str__(self) -> str:
        text = _SEPARATOR.join(
            (
                str(self.ck_queue_offset),
                str(self.pop_time),
                str(self.invisible_time),
                str(self.revive_qid),
                self.retry.value,
                self.broker_name,
                str(self.queue_id),
                str(self.queue_offset),
            )
        )
        if self.commitlog_offset is None:
            return text
        return f"{text}{_SEPARATOR}{self.commitlog_offset}"

    @property
    def is_order(self) -> bool:
        return self.revive_qid == POP_ORDER_REVIVE_QUEUE

    @property
    def visible_at(self) -> int:
        """When (epoch ms) the message becomes visible again unless acked."""
        return self.pop_time + self.invisible_time

    def real_topic(self, topic: str, group: str) -> str:
        """The topic the message was popped from, *topic* being the one the consumer subscribed to
        (RocketMQ's ExtraInfoUtil.getRealTopic)."""
        return real_topic(topic, group, self.retry)


def real_topic(topic: str, group: str, retry: RetryMark) -> str:
    if retry is RetryMark.RETRY_V1:
        return pop_retry_topic(topic, group)
    if retry is RetryMark.RETRY_V2:
        return _pop_retry_topic_v2(topic, group)
    return topic


def retry_mark(topic: str) -> RetryMark:
    """The retry mark of a topic a message is popped from (RocketMQ's ExtraInfoUtil.getRetry)."""
    if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return RetryMark.TOPIC
    return RetryMark.RETRY_V2 if "+" in topic else RetryMark.RETRY_V1


# requests -----------------------------------------------------------------------------------------


@header
class PopMessageRequestHeader(Header):
    """POP_MESSAGE: up to ``max_msg_nums`` messages of ``topic`` (queue ``queue_id``, or -1 for every
    queue on the broker) for ``consumer_group``, invisible to others for ``invisible_time`` ms; held up
    to ``poll_time`` ms when there are none. ``exp_type``/``exp`` filter as a pull's subscription
    does; ``order`` asks for an order pop (FIFO groups); ``init_mode`` (ConsumeInitMode) says where the
    group's first pop of a queue starts."""

    consumer_group: JavaString = wire("consumerGroup", name_rule=group_name_error)
    topic: JavaString = wire("topic", name_rule=stored_topic_name_error)
    queue_id: JavaInt = wire("queueId", minimum=-1)
    max_msg_nums: JavaInt = wire("maxMsgNums", minimum=1)
    invisible_time: JavaLong = wire("invisibleTime")
    poll_time: JavaLong = wire("pollTime", minimum=0)
    born_time: JavaLong = wire("bornTime")
    init_mode: JavaInt = wire("initMode")
    exp_type: JavaString | None = wire("expType", default=None)
    exp: JavaString | None = wire("exp", default=None)
    order: JavaBool = wire("order", default=False)
    attempt_id: JavaString | None = wire("attemptId", default=None)


@header
class PopMessageResponseHeader(Header):
    """The answer to a pop. ``start_offset_info``, ``msg_offset_info`` and ``order_count_info`` are
    RocketMQ's per-queue summaries (``retry queueId offset`` items joined by ``;``) from which a Java
    client rebuilds receipt handles when a message carries no ``POP_CK``."""

    pop_time: JavaLong = wire("popTime")
    invisible_time: JavaLong = wire("invisibleTime")
    revive_qid: JavaInt = wire("reviveQid")
    rest_num: JavaLong = wire("restNum")
    start_offset_info: JavaString | None = wire("startOffsetInfo", default=None)
    msg_offset_info: JavaString | None = wire("msgOffsetInfo", default=None)
    order_count_info: JavaString | None = wire("orderCountInfo", default=None)


@header
class AckMessageRequestHeader(Header):
    """ACK_MESSAGE: the message at ``offset`` of queue ``queue_id`` of ``topic`` (the topic it was
    popped from: its POP retry topic for a retried message) is consumed; ``extra_info`` is its
    receipt handle."""

    consumer_group: JavaString = wire("consumerGroup", name_rule=group_name_error)
    topic: JavaString = wire("topic", name_rule=stored_topic_name_error)
    queue_id: JavaInt = wire("queueId")
    extra_info: JavaString = wire("extraInfo")
    offset: JavaLong = wire("offset")


@header
class ChangeInvisibleTimeRequestHeader(Header):
    """CHANGE_MESSAGE_INVISIBLETIME: the message named as in ACK_MESSAGE stays invisible for
    ``invisible_time`` ms from now; the answer gives the new receipt handle's popTime."""

    consumer_group: JavaString = wire("consumerGroup", name_rule=group_name_error)
    topic: JavaString = wire("topic", name_rule=stored_topic_name_error)
    queue_id: JavaInt = wire("queueId")
    extra_info: JavaString = wire("extraInfo")
    offset: JavaLong = wire("offset")
    invisible_time: JavaLong = wire("invisibleTime")


@header
class ChangeInvisibleTimeResponseHeader(Header):
    pop_time: JavaLong = wire("popTime")
    invisible_time: JavaLong = wire("invisibleTime")
    revive_qid: JavaInt = wire("reviveQid")


@header
class PeekMessageRequestHeader(Header):
    """PEEK_MESSAGE: up to ``max_msg_nums`` messages from the group's position in one queue, without
    popping them (the answer is a pop answer's body and header)."""

    topic: JavaString = wire("topic", name_rule=stored_topic_name_error)
    queue_id: JavaInt = wire("queueId", minimum=-1)
    max_msg_nums: JavaInt = wire("maxMsgNums", minimum=1)
    consumer_group: JavaString = wire("consumerGroup", name_rule=group_name_error)


@header
class NotificationRequestHeader(Header):
    """NOTIFICATION: whether ``topic`` has messages ``consumer_group`` could pop, held up to
    ``poll_time`` ms until it has."""

    consumer_group: JavaString = wire("consumerGroup", name_rule=group_name_error)
    topic: JavaString = wire("topic", name_rule=stored_topic_name_error)
    queue_id: JavaInt = wire("queueId", minimum=-1)
    poll_time: JavaLong = wire("pollTime", minimum=0)
    born_time: JavaLong = wire("bornTime")
    order: JavaBool = wire("order", default=False)
    attempt_id: JavaString | None = wire("attemptId", default=None)


@header
class NotificationResponseHeader(Header):
    has_msg: JavaBool = wire("hasMsg")
    polling_full: JavaBool = wire("pollingFull", default=False)


@header
class PollingInfoRequestHeader(Header):
    """POLLING_INFO: how many pops of ``consumer_group`` are held on ``topic``'s queue."""

    consumer_group: JavaString = wire("consumerGroup", name_rule=group_name_error)
    topic: JavaString = wire("topic", name_rule=stored_topic_name_error)
    queue_id: JavaInt = wire("queueId", minimum=-1)


@header
class PollingInfoResponseHeader(Header):
    polling_num: JavaInt = wire("pollingNum")


# BATCH_ACK_MESSAGE's body -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class BatchAck:
    """One item of a BATCH_ACK_MESSAGE body (RocketMQ's BatchAck): the messages of one pop of one
    queue at ``start_offset + i`` for every ``i`` in ``offsets_from_start`` are consumed. On the wire
    the offsets are a Java BitSet (``toByteArray``, base64) under ``b``."""

    consumer_group: str
    topic: str  # the topic subscribed to; ``retry`` says whether the messages came from its retry topic
    retry: RetryMark
    start_offset: int
    queue_id: int
    revive_queue_id: int
    pop_time: int
    invisible_time: int
    offsets_from_start: tuple[int, ...]


def _bitset_bytes(indexes: tuple[int, ...]) -> bytes:
    if not indexes:
        return b""
    data = bytearray(max(indexes) // 8 + 1)
    for index in indexes:
        data[index // 8] |= 1 << (index % 8)
    return bytes(data)


# A bit set wider than this names offsets no pop can have taken (32 messages a pop, a filter skipping
# some between them).
MAX_BITSET_BYTES: Final = 512
# The most offsets one body may ack: every ack a whole pop's.
MAX_BATCH_ACK_OFFSETS: Final = MAX_BATCH_ACKS * MAX_POP_MESSAGES


def _bitset_indexes(data: bytes, most: int) -> tuple[int, ...]:
    """The set bits of *data*, lowest first: counted first (refused past *most*), then only they are
    enumerated, so that a bit set costs its set bits, not its width."""
    bits = int.from_bytes(data, "little")  # BitSet.toByteArray: bit i is bit i % 8 of byte i // 8
    if bits.bit_count() > most:
        raise RequestRefused(
            ResponseCode.INVALID_PARAMETER,
            f"the BatchAckMessageRequestBody acks more than {MAX_BATCH_ACK_OFFSETS} offsets",
        )
    indexes = []
    while bits:
        lowest = bits & -bits
        indexes.append(lowest.bit_length() - 1)
        bits ^= lowest
    return tuple(indexes)


def _field(obj: dict[str, Any], short: str, long: str) -> str:
    """The key of a BatchAck field: its short JSON name, or the long alternate fastjson also reads."""
    return short if short in obj or long not in obj else long


def _decode_batch_ack(value: Any, most_offsets: int) -> BatchAck:
    what = "BatchAck"
    obj = as_object(value, what)
    retry_text = java_string(obj, _field(obj, "r", "retry"), what, default=RetryMark.TOPIC.value)
    try:
        retry = RetryMark(retry_text)
    except ValueError:
        raise BodyError(f"the {what} field r={retry_text[:16]!r} is not 0, 1 or 2") from None
    bits = java_string(obj, _field(obj, "b", "bitSet"), what, default="")
    try:
        raw = base64.b64decode(bits, validate=True)
    except ValueError:
        raise BodyError(f"the {what} field b is not base64") from None
    if len(raw) > MAX_BITSET_BYTES:
        raise RequestRefused(
            ResponseCode.INVALID_PARAMETER,
            f"the {what} bit set b holds {len(raw)} bytes, above {MAX_BITSET_BYTES}: "
            f"it names offsets no pop of at most {MAX_POP_MESSAGES} messages took",
        )
    return BatchAck(
        consumer_group=java_string(obj, _field(obj, "c", "consumerGroup"), what, name_rule=group_name_error),
        topic=java_string(obj, _field(obj, "t", "topic"), what, name_rule=stored_topic_name_error),
        retry=retry,
        start_offset=java_long(obj, _field(obj, "so", "startOffset"), what, minimum=0),
        queue_id=java_int(obj, _field(obj, "q", "queueId"), what, minimum=0),
        revive_queue_id=java_int(obj, _field(obj, "rq", "reviveQueueId"), what, default=0),
        pop_time=java_long(obj, _field(obj, "pt", "popTime"), what),
        invisible_time=java_long(obj, _field(obj, "it", "invisibleTime"), what),
        offsets_from_start=_bitset_indexes(raw, most_offsets),
    )


def decode_batch_ack_body(body: bytes) -> tuple[str | None, list[BatchAck]]:
    """The broker name and the acks of a BATCH_ACK_MESSAGE body (RocketMQ's
    BatchAckMessageRequestBody); :class:`BodyError` says what is wrong with it."""
    obj = json_object(body, "BatchAckMessageRequestBody")
    broker_name = obj.get("brokerName")
    if broker_name is not None and not isinstance(broker_name, str):
        raise BodyError("the BatchAckMessageRequestBody field brokerName is not a Java String")
    acks = []
    left = MAX_BATCH_ACK_OFFSETS
    for item in java_list(obj, "acks", "BatchAckMessageRequestBody", max_items=MAX_BATCH_ACKS):
        ack = _decode_batch_ack(item, left)
        left -= len(ack.offsets_from_start)
        acks.append(ack)
    return broker_name, acks


def batch_ack_request_body(request: RemotingCommand) -> tuple[str | None, list[BatchAck]]:
    """:func:`decode_batch_ack_body` of a BATCH_ACK_MESSAGE *request*, decoded once for the access
    check and the handler, which see the request one after the other in the same step."""
    global _last_batch_ack
    last = _last_batch_ack
    if last is not None and last[0] is request:
        return last[1]
    _last_batch_ack = None
    decoded = decode_batch_ack_body(request.body)
    _last_batch_ack = (request, decoded)
    return decoded


_last_batch_ack: tuple[RemotingCommand, tuple[str | None, list[BatchAck]]] | None = None


def encode_batch_ack_body(broker_name: str | None, acks: list[BatchAck]) -> bytes:
    """The BATCH_ACK_MESSAGE body of *acks*, with the short field names RocketMQ writes."""
    items = [
        {
            "c": ack.consumer_group,
            "t": ack.topic,
            "r": ack.retry.value,
            "so": ack.start_offset,
            "q": ack.queue_id,
            "rq": ack.revive_queue_id,
            "pt": ack.pop_time,
            "it": ack.invisible_time,
            "b": base64.b64encode(_bitset_bytes(ack.offsets_from_start)).decode("ascii"),
        }
        for ack in acks
    ]
    body: dict[str, Any] = {"acks": items}
    if broker_name is not None:
        body["brokerName"] = broker_name
    return fastjson.dumps(body)
