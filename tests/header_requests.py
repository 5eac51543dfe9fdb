"""Requests built with their typed headers (cometmq.protocol's declarations), as a client would send
them, for the tests of what the access control makes of them (tests/auth, tests/acl, tests/tls)."""

from __future__ import annotations

import json
import time

from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.protocol.broker_headers import (
    CreateTopicRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
)
from cometmq.protocol.headers import Header


def command(
    code: int, header: Header | dict[str, str] | None = None, body: object = None, *, compact: bool = False
) -> RemotingCommand:
    """A request of *code*: *header* encoded (or ext fields as they are), *body* as bytes or as JSON."""
    if isinstance(header, dict):
        fields = header
    else:
        fields = header.encode(compact=compact) if header is not None else {}
    raw = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
    return RemotingCommand(code=code, ext_fields=fields, body=raw)


def send_header(topic: str, producer_group: str = "pg", properties: str = "") -> SendMessageRequestHeader:
    return SendMessageRequestHeader(
        producer_group=producer_group,
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=properties,
        reconsume_times=0,
    )


def send_request(
    topic: str,
    producer_group: str = "pg",
    body: bytes = b"body",
    *,
    code: RequestCode = RequestCode.SEND_MESSAGE,
    properties: str = "",
) -> RemotingCommand:
    """A message for queue 0 of *topic*; SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE with the V2 header's
    one-letter names."""
    header = send_header(topic, producer_group, properties)
    return command(code, header, body, compact=code is not RequestCode.SEND_MESSAGE)


def pull_header(topic: str, consumer_group: str = "cg") -> PullMessageRequestHeader:
    return PullMessageRequestHeader(
        consumer_group=consumer_group,
        topic=topic,
        queue_id=0,
        queue_offset=0,
        max_msg_nums=32,
        sys_flag=0,
        commit_offset=0,
        suspend_timeout_millis=0,
        subscription="*",
        sub_version=0,
    )


def pull_request(topic: str, consumer_group: str = "cg") -> RemotingCommand:
    """A pull from offset 0 of queue 0 of *topic*, not held."""
    return command(RequestCode.PULL_MESSAGE, pull_header(topic, consumer_group))


def create_topic_header(topic: str, queues: int = 1) -> CreateTopicRequestHeader:
    return CreateTopicRequestHeader(
        topic=topic,
        default_topic="TBW102",
        read_queue_nums=queues,
        write_queue_nums=queues,
        perm=6,
        topic_filter_type="SINGLE_TAG",
        order=False,
    )


def create_topic_request(topic: str, queues: int = 1) -> RemotingCommand:
    return command(RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic_header(topic, queues))
