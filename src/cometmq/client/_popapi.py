"""The requests of POP consumption (RocketMQ 5): a pop, an ack and a change of invisible time.

Shared by the SimpleConsumer and the proxy (through :mod:`cometmq.client.instance`): each builds the
same headers and reads a pop's answer the same way; where the request goes and how a refusal is
reported stays with the caller.
"""

from __future__ import annotations

import dataclasses
import time

from cometmq.client.message import ReceivedMessage, decode_pulled
from cometmq.errors import BrokerError, ProtocolError, RecordError
from cometmq.protocol import RemotingCommand, ResponseCode
from cometmq.protocol.pop import (
    TIMEOUT_TOO_MUCH,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    ConsumeInitMode,
    ExtraInfo,
    PopMessageRequestHeader,
)
from cometmq.protocol.subscription import SubscriptionData

# Answers of a pop that found nothing (POLLING_FULL: the broker holds too many pops already).
_NOTHING = frozenset({ResponseCode.POLLING_TIMEOUT, ResponseCode.POLLING_FULL, ResponseCode.PULL_NOT_FOUND})


def pop_header(
    group: str,
    subscription: SubscriptionData,
    max_messages: int,
    invisible_ms: int,
    poll_ms: int,
    *,
    init_mode: ConsumeInitMode = ConsumeInitMode.MAX,
    order: bool = False,
    attempt_id: str | None = None,
) -> PopMessageRequestHeader:
    """A POP_MESSAGE of every queue of the subscription's topic on one broker (queue -1, as RocketMQ's
    proxy pops), born now; ``order`` for a FIFO group."""
    return PopMessageRequestHeader(
        consumer_group=group,
        topic=subscription.topic,
        queue_id=-1,
        max_msg_nums=max_messages,
        invisible_time=invisible_ms,
        poll_time=poll_ms,
        born_time=int(time.time() * 1000),
        init_mode=init_mode,
        exp_type=subscription.expression_type,
        exp=subscription.sub_string,
        order=order,
        attempt_id=attempt_id,
    )


def popped(response: RemotingCommand, broker_name: str) -> list[ReceivedMessage]:
    """The messages of a pop's answer from *broker_name*: none when it found nothing,
    :class:`BrokerError` when it was refused (also when it came too late to be held: RocketMQ answers
    that as "nothing", which would hide a clock or a stall), :class:`ProtocolError` when its body is not
    records."""
    if response.code in _NOTHING and TIMEOUT_TOO_MUCH not in (response.remark or ""):
        return []
    if response.code != ResponseCode.SUCCESS:
        raise BrokerError(response.code, response.remark)
    try:
        return decode_pulled(response.body, broker_name)
    except RecordError as exc:
        raise ProtocolError(f"undecodable pop answer from {broker_name}: {exc}") from exc


def ack_header(group: str, topic: str, handle: ExtraInfo) -> AckMessageRequestHeader:
    """The ACK_MESSAGE of the message *handle* names, *topic* being the topic subscribed to."""
    return AckMessageRequestHeader(
        consumer_group=group,
        topic=handle.real_topic(topic, group),
        queue_id=handle.queue_id,
        extra_info=str(handle),
        offset=handle.queue_offset,
    )


def change_invisible_header(
    group: str, topic: str, handle: ExtraInfo, invisible_ms: int
) -> ChangeInvisibleTimeRequestHeader:
    """The CHANGE_MESSAGE_INVISIBLETIME keeping the message *handle* names invisible *invisible_ms*
    from now."""
    return ChangeInvisibleTimeRequestHeader(
        consumer_group=group,
        topic=handle.real_topic(topic, group),
        queue_id=handle.queue_id,
        extra_info=str(handle),
        offset=handle.queue_offset,
        invisible_time=invisible_ms,
    )


def changed_handle(handle: ExtraInfo, answer: ChangeInvisibleTimeResponseHeader) -> ExtraInfo:
    """The message's receipt handle after a change of its invisible time answered *answer*."""
    # It names the message alone, its offset the checkpoint's start, as RocketMQ's client builds it
    # from the answer (MQClientAPIImpl.changeInvisibleTimeAsync).
    return dataclasses.replace(
        handle,
        ck_queue_offset=handle.queue_offset,
        pop_time=answer.pop_time,
        invisible_time=answer.invisible_time,
        revive_qid=answer.revive_qid,
    )
