"""Raw POP requests for broker tests, built from the typed headers."""

from __future__ import annotations

from _support import address

from cometmq.broker import Broker
from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.protocol.pop import (
    POP_CK,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ExtraInfo,
    NotificationRequestHeader,
    PeekMessageRequestHeader,
    PollingInfoRequestHeader,
    PopMessageRequestHeader,
)
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import DecodedRecord, decode_records
from cometmq.remoting import RemotingClient


def pop_request(
    topic: str,
    group: str = "CG",
    *,
    queue_id: int = -1,
    max_nums: int = 32,
    invisible_ms: int = 60_000,
    poll_ms: int = 0,
    order: bool = False,
    exp: str | None = None,
    exp_type: str | None = None,
    init_mode: int = 0,
    attempt_id: str | None = None,
    born_time: int = 0,
) -> RemotingCommand:
    """A pop request; without a *born_time* (0) the broker skips its lateness check, which a loaded
    machine could fail (a request more than 500 ms on its way)."""
    header = PopMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        max_msg_nums=max_nums,
        invisible_time=invisible_ms,
        poll_time=poll_ms,
        born_time=born_time,
        init_mode=init_mode,
        exp_type=exp_type,
        exp=exp,
        order=order,
        attempt_id=attempt_id,
    )
    return RemotingCommand(code=RequestCode.POP_MESSAGE, ext_fields=header.encode())


def handle_of(record: DecodedRecord) -> ExtraInfo:
    return ExtraInfo.parse(decode_properties(record.properties)[POP_CK])


def real_topic(record: DecodedRecord, group: str = "CG") -> str:
    return handle_of(record).real_topic(record.topic, group)


def ack_request(record: DecodedRecord, group: str = "CG", handle: str | None = None) -> RemotingCommand:
    info = handle_of(record)
    header = AckMessageRequestHeader(
        consumer_group=group,
        topic=real_topic(record, group),
        queue_id=info.queue_id,
        extra_info=handle if handle is not None else str(info),
        offset=info.queue_offset,
    )
    return RemotingCommand(code=RequestCode.ACK_MESSAGE, ext_fields=header.encode())


def change_request(
    record: DecodedRecord, invisible_ms: int, group: str = "CG", handle: str | None = None
) -> RemotingCommand:
    info = handle_of(record)
    header = ChangeInvisibleTimeRequestHeader(
        consumer_group=group,
        topic=real_topic(record, group),
        queue_id=info.queue_id,
        extra_info=handle if handle is not None else str(info),
        offset=info.queue_offset,
        invisible_time=invisible_ms,
    )
    return RemotingCommand(code=RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ext_fields=header.encode())


def peek_request(topic: str, group: str = "CG", queue_id: int = -1, max_nums: int = 32) -> RemotingCommand:
    header = PeekMessageRequestHeader(
        topic=topic, queue_id=queue_id, max_msg_nums=max_nums, consumer_group=group
    )
    return RemotingCommand(code=RequestCode.PEEK_MESSAGE, ext_fields=header.encode())


def notification_request(
    topic: str, group: str = "CG", poll_ms: int = 0, order: bool = False
) -> RemotingCommand:
    header = NotificationRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=-1,
        poll_time=poll_ms,
        born_time=0,  # as pop_request's
        order=order,
    )
    return RemotingCommand(code=RequestCode.NOTIFICATION, ext_fields=header.encode())


def polling_info_request(topic: str, group: str = "CG", queue_id: int = -1) -> RemotingCommand:
    header = PollingInfoRequestHeader(consumer_group=group, topic=topic, queue_id=queue_id)
    return RemotingCommand(code=RequestCode.POLLING_INFO, ext_fields=header.encode())


async def pop(
    client: RemotingClient, broker: Broker, topic: str, **kwargs: object
) -> tuple[RemotingCommand, list[DecodedRecord]]:
    response = await client.invoke(address(broker), pop_request(topic, **kwargs), timeout=60)  # type: ignore[arg-type]
    records = decode_records(response.body) if response.code == 0 else []
    return response, records
