"""The broker requests consumers make: pull, and the per-queue offset queries; and the send header.

Shared by the push consumer, the lite pull consumer and the admin client. Each function takes the
:class:`ClientInstance` (connections and routes) and a :class:`MessageQueue`. :func:`send_header` is
the one send header of every send: the producer's, a consumer's retry, a resent dead letter; it goes
out under its compact names (SEND_MESSAGE_V2, SEND_BATCH_MESSAGE).
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass

from cometmq.client._instance import ClientInstance, decode_answer
from cometmq.client.message import MessageQueue, ReceivedMessage, decode_pulled
from cometmq.errors import BrokerError, ProtocolError, QueueNotRoutedError, RecordError
from cometmq.protocol import RequestCode, ResponseCode, fastjson
from cometmq.protocol.broker_headers import (
    ConsumerGroupRequestHeader,
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from cometmq.protocol.naming import DEFAULT_TOPIC
from cometmq.protocol.route import MASTER_ID
from cometmq.protocol.subscription import EXPRESSION_TAG, SubscriptionData

# PullSysFlag (docs/protocol.md#pull-sysflag).
PULL_COMMIT_OFFSET = 0x1
PULL_SUSPEND = 0x2
PULL_SUBSCRIPTION = 0x4
PULL_LITE = 0x10

# Long polling (RocketMQ's BROKER_SUSPEND_MAX_TIME_MILLIS and CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND): the
# broker holds a pull at most this long, and the client waits longer than that for the answer.
LONG_POLL_SUSPEND_MS = 15_000
LONG_POLL_TIMEOUT_S = 30.0

# RocketMQ's producer group of the sends a client makes on its own behalf (retries, resent dead letters).
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"  # nothing at or after the offset (yet)
    NO_MATCHED_MSG = "NO_MATCHED_MSG"  # messages were there, none matched the filter: pull again at once
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"  # the offset is outside [min, max]: continue at next_begin_offset


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[ReceivedMessage]
    body: bytes | memoryview = b""  # the stored records as sent, kept only by pull(..., decode=False)


_STATUS_BY_CODE: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


def send_header(
    group: str,
    topic: str,
    properties: str,
    sys_flag: int = 0,
    flag: int = 0,
    batch: bool = False,
    queue_id: int = -1,
    reconsume_times: int = 0,
    max_reconsume_times: int | None = None,
) -> SendMessageRequestHeader:
    """The send header, ``properties`` encoded, born now. A producer sets ``queue_id`` per attempt."""
    return SendMessageRequestHeader(
        producer_group=group,
        topic=topic,
        default_topic=DEFAULT_TOPIC,
        default_topic_queue_nums=4,  # queues a topic auto-created by this send gets
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=int(time.time() * 1000),
        flag=flag,
        properties=properties,
        reconsume_times=reconsume_times,
        max_reconsume_times=max_reconsume_times,
        batch=batch,
    )


def broker_addr_of(instance: ClientInstance, queue: MessageQueue) -> str:
    """The master of ``queue``'s broker group: where sends, send-backs and queue locks go."""
    addr = instance.broker_addr(queue.broker_name)
    if addr is None:
        raise QueueNotRoutedError(f"no master address is known for broker {queue.broker_name!r}")
    return addr


def read_addr_of(
    instance: ClientInstance, queue: MessageQueue, broker_id: int = MASTER_ID
) -> tuple[str, bool]:
    """Where to read ``queue`` (``ClientInstance.read_addr``: the broker ``broker_id`` if registered,
    else the group's lowest id) and whether that broker is a slave."""
    found = instance.read_addr(queue.broker_name, broker_id)
    if found is None:
        raise QueueNotRoutedError(f"no address is known for broker {queue.broker_name!r}")
    return found


async def pull(
    instance: ClientInstance,
    queue: MessageQueue,
    group: str,
    subscription: SubscriptionData,
    offset: int,
    max_nums: int,
    *,
    sys_flag: int = PULL_SUBSCRIPTION,
    commit_offset: int = 0,
    suspend_ms: int = 0,
    timeout: float | None = None,
    decode: bool = True,
    pull_from: dict[MessageQueue, int] | None = None,
) -> PullResult:
    """One PULL_MESSAGE. With ``PULL_SUSPEND`` and ``suspend_ms`` the broker holds the request until
    messages arrive or the time is up (long polling); ``timeout`` must then exceed the hold. With
    ``decode=False`` the result keeps the records undecoded in ``body`` (and applies no tag check).

    ``pull_from`` is a consumer's table of the broker id each queue's last answer suggested
    (``suggestWhichBrokerId``, RocketMQ's pullFromWhichNodeTable): the pull goes there (or to the
    group's lowest id when that broker is not registered) and records the new suggestion. Without
    it the pull goes to the master, else the lowest id. A pull from a slave never commits an offset
    (the commit flag is cleared, as RocketMQ's clients do)."""
    broker_id = MASTER_ID if pull_from is None else pull_from.get(queue, MASTER_ID)
    addr, from_slave = read_addr_of(instance, queue, broker_id)
    if from_slave:
        sys_flag &= ~PULL_COMMIT_OFFSET
    fields = PullMessageRequestHeader(
        consumer_group=group,
        topic=queue.topic,
        queue_id=queue.queue_id,
        queue_offset=offset,
        max_msg_nums=max_nums,
        sys_flag=sys_flag,
        commit_offset=commit_offset,
        suspend_timeout_millis=suspend_ms,
        subscription=subscription.sub_string,
        sub_version=subscription.sub_version,
        expression_type=subscription.expression_type,
    ).encode()
    response = await instance.invoke(addr, RequestCode.PULL_MESSAGE, fields, timeout=timeout)
    status = _STATUS_BY_CODE.get(response.code)
    if status is None:
        raise BrokerError(response.code, response.remark)
    header = decode_answer(PullMessageResponseHeader, response)
    # Written only when it changes: one dictionary lookup per pull in the steady state.
    if pull_from is not None and header.suggest_which_broker_id != broker_id:
        pull_from[queue] = header.suggest_which_broker_id
    messages: list[ReceivedMessage] = []
    body: bytes | memoryview = b""
    if status is PullStatus.FOUND and not decode:
        body = response.body_buffer  # a view of the received frame: no copy
    elif status is PullStatus.FOUND:
        try:
            messages = decode_pulled(response.body, queue.broker_name, offset)
        except RecordError as exc:
            raise ProtocolError(f"undecodable pull body from {queue}: {exc}") from exc
        if subscription.expression_type == EXPRESSION_TAG and subscription.tags:
            # The broker filters by tag hash only; two tags can share a hash (docs/protocol.md#tag-hash).
            tags = subscription.tags
            messages = [m for m in messages if m.tags in tags]
    return PullResult(status, header.next_begin_offset, header.min_offset, header.max_offset, messages, body)


async def query_offset(instance: ClientInstance, queue: MessageQueue, group: str) -> int | None:
    """The group's committed offset of a queue; None when the group never committed one there."""
    fields = QueryConsumerOffsetRequestHeader(
        consumer_group=group, topic=queue.topic, queue_id=queue.queue_id
    ).encode()
    response = await instance.invoke(
        read_addr_of(instance, queue)[0], RequestCode.QUERY_CONSUMER_OFFSET, fields
    )
    if response.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    if response.code != ResponseCode.SUCCESS:
        raise BrokerError(response.code, response.remark)
    return decode_answer(OffsetResponseHeader, response).offset


async def commit_offset(instance: ClientInstance, queue: MessageQueue, group: str, offset: int) -> bool:
    """Store the group's offset of a queue on its broker group's master, or on a slave while the
    master is away (and wait for the broker to say so); True when the master stored it. A caller
    keeps committing an offset only a slave holds, so that it reaches the master when it returns."""
    fields = UpdateConsumerOffsetRequestHeader(
        consumer_group=group, topic=queue.topic, queue_id=queue.queue_id, commit_offset=offset
    ).encode()
    addr, on_slave = read_addr_of(instance, queue)
    await instance.invoke_ok(addr, RequestCode.UPDATE_CONSUMER_OFFSET, fields)
    return not on_slave


async def _offset_request(
    instance: ClientInstance, queue: MessageQueue, code: int, fields: dict[str, str]
) -> int:
    response = await instance.invoke_ok(read_addr_of(instance, queue)[0], code, fields)
    return decode_answer(OffsetResponseHeader, response).offset


async def max_offset(instance: ClientInstance, queue: MessageQueue) -> int:
    """The offset the next message written to the queue will get."""
    fields = QueueRequestHeader(topic=queue.topic, queue_id=queue.queue_id).encode()
    return await _offset_request(instance, queue, RequestCode.GET_MAX_OFFSET, fields)


async def min_offset(instance: ClientInstance, queue: MessageQueue) -> int:
    """The offset of the oldest message the queue still holds."""
    fields = QueueRequestHeader(topic=queue.topic, queue_id=queue.queue_id).encode()
    return await _offset_request(instance, queue, RequestCode.GET_MIN_OFFSET, fields)


async def offset_for_timestamp(instance: ClientInstance, queue: MessageQueue, timestamp_ms: int) -> int:
    """RocketMQ's search by time: the offset of the message stored *nearest* ``timestamp_ms`` (which
    may be earlier); past the last message, the last message's offset."""
    fields = SearchOffsetRequestHeader(topic=queue.topic, queue_id=queue.queue_id, timestamp=timestamp_ms)
    return await _offset_request(instance, queue, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, fields.encode())


async def offset_bounds(instance: ClientInstance, queue: MessageQueue) -> tuple[int, int]:
    """(min offset, max offset) of the queue: the oldest message held, and the next to be written."""
    low, high = await asyncio.gather(min_offset(instance, queue), max_offset(instance, queue))
    return low, high


async def first_offset_at(
    instance: ClientInstance,
    queue: MessageQueue,
    timestamp_ms: int,
    group: str,
    bounds: tuple[int, int] | None = None,
) -> int:
    """The offset of the first message stored at or after ``timestamp_ms``; the queue's end if there
    is none. The broker's search answers the nearest message: a pull of that one message (as
    ``group``, committing nothing) tells whether it is earlier, and then the next one is it.
    ``bounds``: the queue's ``offset_bounds`` when the caller has them already."""
    low, high = bounds if bounds is not None else await offset_bounds(instance, queue)
    if high <= low:
        return high
    found = min(max(await offset_for_timestamp(instance, queue, timestamp_ms), low), high - 1)
    result = await pull(instance, queue, group, SubscriptionData(queue.topic), found, 1)
    if result.messages and result.messages[0].store_timestamp < timestamp_ms:
        return found + 1
    return found


async def consumer_ids(instance: ClientInstance, queue: MessageQueue, group: str) -> list[str]:
    """The client ids of the group's live members, as the queue's broker knows them."""
    response = await instance.invoke(
        read_addr_of(instance, queue)[0],
        RequestCode.GET_CONSUMER_LIST_BY_GROUP,
        ConsumerGroupRequestHeader(consumer_group=group).encode(),
    )
    if response.code != ResponseCode.SUCCESS:
        return []
    try:
        return [str(cid) for cid in fastjson.loads(response.body).get("consumerIdList", [])]
    except (ValueError, AttributeError) as exc:
        raise ProtocolError(f"unreadable consumer list from {queue.broker_name}: {exc}") from exc
