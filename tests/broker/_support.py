"""Helpers for broker tests: a real Broker on a free port in a temp dir, and raw protocol calls."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

from cometmq.broker import Broker, BrokerConfig
from cometmq.client import AdminClient
from cometmq.errors import BrokerError
from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import DecodedRecord, decode_offset_msg_id, decode_records
from cometmq.remoting import RemotingClient


def held_pulls(broker: Broker) -> int:
    """Pulls the broker holds right now (long polling), over all queues; filed per connection too."""
    holds = broker.pull_holds
    count = sum(len(waiting) for waiting in holds._held.values())
    assert count == sum(len(of_conn) for of_conn in holds._by_conn.values()), "held pulls filed apart"
    return count


def broker_config(data_dir: Path, **settings: Any) -> BrokerConfig:
    """A test broker's config: *data_dir*, a port the OS picks, small store files, and *settings*
    (broker.conf keys)."""
    config = BrokerConfig()
    config.update(
        {
            "storePathRootDir": str(data_dir),
            "listenPort": 0,
            "listenHost": "127.0.0.1",
            "mappedFileSizeCommitLog": 1 << 20,
            "mappedFileSizeConsumeQueue": 20 * 1000,
            **settings,
        }
    )
    return config


@contextlib.asynccontextmanager
async def running_broker(
    data_dir: Path,
    disk_usage_probe: Callable[[Path], float] | None = None,
    *,
    slave_sync_period_s: float = 10.0,
    **settings: Any,
) -> AsyncIterator[Broker]:
    """*settings* are broker.conf keys; *disk_usage_probe* is injected into the store instead of
    measuring the real filesystem; a slave copies its master's metadata every *slave_sync_period_s*."""
    config = broker_config(data_dir, **settings)
    broker = Broker(config, disk_usage_probe=disk_usage_probe, slave_sync_period_s=slave_sync_period_s)
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


@contextlib.asynccontextmanager
async def broker_and_client(
    data_dir: Path, disk_usage_probe: Callable[[Path], float] | None = None, **settings: Any
) -> AsyncIterator[tuple[Broker, str, RemotingClient]]:
    """``running_broker`` with a client and the broker's address; the client is closed after."""
    async with running_broker(data_dir, disk_usage_probe, **settings) as broker:
        client = RemotingClient()
        try:
            yield broker, address(broker), client
        finally:
            await client.close()


@contextlib.asynccontextmanager
async def name_server() -> AsyncIterator[tuple[NameServer, str]]:
    """A NameServer on a port the OS picks, and its address."""
    namesrv = NameServer("127.0.0.1", 0)
    await namesrv.start()
    try:
        yield namesrv, f"127.0.0.1:{namesrv.port}"
    finally:
        await namesrv.stop()


def broker_entries(namesrv: NameServer, broker_name: str = "broker-a") -> dict[int, str]:
    """A broker group's entries at *namesrv*: broker id → address."""
    data = namesrv.routes.broker_addr_table.get(broker_name)
    return dict(data.broker_addrs) if data is not None else {}


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def address(broker: Broker) -> str:
    return f"127.0.0.1:{broker.port}"


def send_request(
    topic: str,
    body: bytes,
    queue_id: int = 0,
    properties: dict[str, str] | None = None,
    v2: bool = True,
    **fields: str,
) -> RemotingCommand:
    header = {
        "producerGroup": "PG",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": str(queue_id),
        "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": encode_properties(properties or {}),
        "reconsumeTimes": "0",
        **fields,
    }
    if v2:
        short = dict(
            zip(
                "abcdefghij",
                [
                    "producerGroup",
                    "topic",
                    "defaultTopic",
                    "defaultTopicQueueNums",
                    "queueId",
                    "sysFlag",
                    "bornTimestamp",
                    "flag",
                    "properties",
                    "reconsumeTimes",
                ],
                strict=True,
            )
        )
        by_long = {v: k for k, v in short.items()}
        header = {by_long.get(k, k): v for k, v in header.items()}
        return RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=header, body=body)
    return RemotingCommand(code=RequestCode.SEND_MESSAGE, ext_fields=header, body=body)


async def send(
    client: RemotingClient, addr: str, topic: str, body: bytes, queue_id: int = 0, **props: str
) -> tuple[int, str]:
    """Send one message with *props* and assert it was stored: its commit-log offset and offset
    message id."""
    response = await client.invoke(addr, send_request(topic, body, queue_id, props))
    assert response.code == ResponseCode.SUCCESS, response.remark
    msg_id = response.ext_fields["msgId"]
    return decode_offset_msg_id(msg_id)[2], msg_id


def commit_request(group: str, topic: str, queue_id: int, offset: int) -> RemotingCommand:
    fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)}
    return RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=fields)


def query_offset_request(group: str, topic: str, queue_id: int) -> RemotingCommand:
    fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
    return RemotingCommand(code=RequestCode.QUERY_CONSUMER_OFFSET, ext_fields=fields)


def queue_table(table: dict[Any, Any]) -> dict[tuple[str, int], Any]:
    """A fastjson ``Map<MessageQueue, …>`` (read by ``fastjson.loads``) as (topic, queue id) → value."""
    out = {}
    for key, value in table.items():
        props = dict(key)
        out[(props["topic"], props["queueId"])] = value
    return out


def pull_request(
    topic: str,
    queue_id: int,
    offset: int,
    group: str = "CG",
    subscription: str = "*",
    suspend_ms: int = 0,
    max_nums: int = 32,
) -> RemotingCommand:
    sys_flag = 0x4 | (0x2 if suspend_ms else 0)
    return RemotingCommand(
        code=RequestCode.PULL_MESSAGE,
        ext_fields={
            "consumerGroup": group,
            "topic": topic,
            "queueId": str(queue_id),
            "queueOffset": str(offset),
            "maxMsgNums": str(max_nums),
            "sysFlag": str(sys_flag),
            "commitOffset": "0",
            "suspendTimeoutMillis": str(suspend_ms),
            "subscription": subscription,
            "subVersion": "0",
        },
    )


async def pull(
    client: RemotingClient, addr: str, topic: str, queue_id: int, offset: int, **kwargs: Any
) -> tuple[RemotingCommand, list[DecodedRecord]]:
    response = await client.invoke(addr, pull_request(topic, queue_id, offset, **kwargs), timeout=30)
    records = decode_records(response.body) if response.code == 0 else []
    return response, records


def heartbeat(
    client_id: str,
    group: str,
    topic: str,
    model: int = 1,
    language: str = "CPP",
    sub_version: str = "1",
) -> RemotingCommand:
    """A consumer's HEART_BEAT the C++ way: enums as ordinals, subVersion as a string."""
    body = {
        "clientID": client_id,
        "consumerDataSet": [
            {
                "consumeFromWhere": 0,
                "consumeType": 1,
                "groupName": group,
                "messageModel": model,  # 0 BROADCASTING, 1 CLUSTERING
                "subscriptionDataSet": [{"subString": "*", "subVersion": sub_version, "topic": topic}],
            }
        ],
    }
    return RemotingCommand(code=RequestCode.HEART_BEAT, body=json.dumps(body).encode(), language=language)


async def create_topic(
    client: RemotingClient, addr: str, topic: str, queues: int = 4, *, attributes: str | None = None
) -> RemotingCommand:
    """UPDATE_AND_CREATE_TOPIC for *topic*; *attributes* as the admin tool sends them (``+key=value``,
    ``-key``, comma-separated), none by default."""
    fields = {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": str(queues),
        "writeQueueNums": str(queues),
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "order": "false",
    }
    if attributes is not None:
        fields["attributes"] = attributes
    return await client.invoke(
        addr, RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=fields)
    )


async def is_routed(namesrv: str, topic: str) -> bool:
    """Whether the name server at *namesrv* has a route for *topic*."""
    async with AdminClient(namesrv) as admin:
        try:
            await admin.topic_route(topic)
        except BrokerError:
            return False
        return True
