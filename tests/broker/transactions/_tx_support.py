"""Raw transactional requests for the broker's transaction tests: half-message sends,
END_TRANSACTION, and a producer connection that heartbeats its group and keeps the broker's
CHECK_TRANSACTION_STATE requests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from cometmq.protocol.record import DecodedRecord, decode_offset_msg_id
from cometmq.protocol.transaction import PRODUCER_GROUP, TRANSACTION_PREPARED, TransactionType
from cometmq.remoting import Connection, RemotingClient

# The broker tests' raw protocol helpers are the one way the tests build sends and pulls.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _support import (
    address,
    broker_and_client,
    create_topic,
    name_server,
    pull,
    run,
    running_broker,
    send,
    send_request,
)

GROUP = "PG_TX"
COMMIT = TransactionType.COMMIT
ROLLBACK = TransactionType.ROLLBACK
UNKNOWN = TransactionType.NOT_TYPE
# Checks come quickly: every half message is due at once, a round every 50 ms.
FAST_CHECKS = {"transactionTimeOut": "1", "transactionCheckInterval": "50"}

__all__ = [
    "COMMIT",
    "FAST_CHECKS",
    "GROUP",
    "ROLLBACK",
    "UNKNOWN",
    "Check",
    "Half",
    "RawProducer",
    # from the broker tests' helpers
    "address",
    "broker_and_client",
    "create_topic",
    "end_request",
    "half_request",
    "joined_producer",
    "name_server",
    "pull",
    "records_of",
    "run",
    "running_broker",
    "send",
    "send_half",
    "send_request",
]


@dataclass(frozen=True, slots=True)
class Half:
    """What the broker's answer to a half message's send names (what END_TRANSACTION names)."""

    queue_id: int
    queue_offset: int
    msg_id: str
    commitlog_offset: int
    uniq_key: str


def half_request(
    topic: str, body: bytes, *, group: str = GROUP, queue_id: int = 0, uniq_key: str = "", **properties: str
) -> RemotingCommand:
    """A Java producer's half message: TRAN_MSG=true, PGROUP, sys flag PREPARED."""
    props = {
        TRANSACTION_PREPARED: "true",
        PRODUCER_GROUP: group,
        "UNIQ_KEY": uniq_key or uuid.uuid4().hex.upper(),
        **properties,
    }
    return send_request(
        topic, body, queue_id, props, sysFlag=str(int(TransactionType.PREPARED)), producerGroup=group
    )


async def send_half(
    client: RemotingClient,
    addr: str,
    topic: str,
    body: bytes,
    *,
    group: str = GROUP,
    queue_id: int = 0,
    uniq_key: str = "",
    **properties: str,
) -> Half:
    """Send a half message and assert it was stored: what its answer names."""
    uniq_key = uniq_key or uuid.uuid4().hex.upper()
    request = half_request(topic, body, group=group, queue_id=queue_id, uniq_key=uniq_key, **properties)
    response = await client.invoke(addr, request, timeout=10)
    assert response.code == ResponseCode.SUCCESS, response.remark
    fields = response.ext_fields
    msg_id = fields["msgId"]
    return Half(
        int(fields["queueId"]), int(fields["queueOffset"]), msg_id, decode_offset_msg_id(msg_id)[2], uniq_key
    )


async def records_of(client: RemotingClient, addr: str, topic: str, queue_id: int = 0) -> list[DecodedRecord]:
    """Every record of one queue of *topic*, from its first."""
    response, records = await pull(client, addr, topic, queue_id, 0)
    assert response.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND), response.remark
    return records


def end_request(
    half: Half,
    kind: int,
    *,
    group: str = GROUP,
    from_check: bool = False,
    topic: str | None = None,
    queue_offset: int | None = None,
    commitlog_offset: int | None = None,
) -> RemotingCommand:
    header = EndTransactionRequestHeader(
        producer_group=group,
        tran_state_table_offset=half.queue_offset if queue_offset is None else queue_offset,
        commit_log_offset=half.commitlog_offset if commitlog_offset is None else commitlog_offset,
        commit_or_rollback=kind,
        from_transaction_check=from_check,
        msg_id=half.uniq_key,
        transaction_id=half.uniq_key,
        topic=topic,
    )
    return RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields=header.encode())


@dataclass(frozen=True, slots=True)
class Check:
    """A CHECK_TRANSACTION_STATE the broker sent, and the connection it came over."""

    conn: Connection
    header: CheckTransactionStateRequestHeader
    body: bytes


class RawProducer:
    """A producer of *group* over raw requests: it heartbeats its group to a broker and keeps every
    CHECK_TRANSACTION_STATE the broker sends it in ``checks``."""

    def __init__(self, group: str = GROUP, client_id: str = "") -> None:
        self.group = group
        self.client_id = client_id or f"raw-producer-{uuid.uuid4().hex[:8]}"
        self.checks: asyncio.Queue[Check] = asyncio.Queue()
        self.client = RemotingClient(handler=self._on_request)

    def _on_request(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        if request.code == RequestCode.CHECK_TRANSACTION_STATE:
            header = CheckTransactionStateRequestHeader.decode(request.ext_fields)
            self.checks.put_nowait(Check(conn, header, request.body))
        return None

    async def join(self, addr: str) -> None:
        body = {
            "clientID": self.client_id,
            "consumerDataSet": [],
            "producerDataSet": [{"groupName": self.group}],
        }
        request = RemotingCommand(
            code=RequestCode.HEART_BEAT, body=json.dumps(body).encode(), language="JAVA"
        )
        response = await self.client.invoke(addr, request, timeout=10)
        assert response.code == ResponseCode.SUCCESS, response.remark

    async def next_check(self, timeout: float = 30.0) -> Check:
        async with asyncio.timeout(timeout):
            return await self.checks.get()

    async def close(self) -> None:
        await self.client.close()


@contextlib.asynccontextmanager
async def joined_producer(
    addr: str, *, group: str = GROUP, client_id: str = ""
) -> AsyncIterator[RawProducer]:
    """A :class:`RawProducer` of *group* that has heartbeated to the broker at *addr*, closed on exit."""
    producer = RawProducer(group, client_id)
    try:
        await producer.join(addr)
        yield producer
    finally:
        await producer.close()
