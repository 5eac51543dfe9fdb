"""Inner batches against a real broker: only the broker's inner-batch path sets the flags (INNER_BATCH
0x80, NEED_UNWRAP 0x40); a client's are cleared, a copy (send-back, delayed delivery) never carries
them, a BatchCQ topic takes no transactional message, and no batch a reader could not split is stored
(one that was is delivered whole)."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest
from _support import address, broker_and_client, create_topic, pull, running_broker, send_request

from cometmq.client.message import decode_pulled
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.batch import ENTRY_HEAD, BatchEntry, encode_batch_body
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import INNER_BATCH_FLAG, NEED_UNWRAP_FLAG, DecodedRecord, decode_offset_msg_id
from cometmq.remoting import RemotingClient
from cometmq.store import MessageToStore, PutStatus
from waiting import wait_until

INNER_FLAGS = INNER_BATCH_FLAG | NEED_UNWRAP_FLAG


def test_a_clients_inner_batch_flags_are_cleared_so_an_ordinary_topic_stays_ordinary(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            request = send_request("Plain", b"not a batch", 0, {"INNER_NUM": "abc"}, sysFlag=str(INNER_FLAGS))
            response = await client.invoke(addr, request)
            assert response.code == ResponseCode.SUCCESS, response.remark
            response, (record,) = await pull(client, addr, "Plain", 0, 0)
            assert record.sys_flag & INNER_FLAGS == 0
            (message,) = decode_pulled(response.body, "b", 0)
            assert message.body == b"not a batch" and not message.is_inner_batch
            assert not broker.store.is_batch_topic("Plain")

    asyncio.run(scenario())


def test_a_sent_back_inner_batch_is_copied_as_one_ordinary_message(tmp_path: Path) -> None:
    """A 4.x consumer gets an inner batch as one message and may send it back whole: the retry copy is
    an ordinary message holding the batch body, and the schedule topic stays ordinary."""

    async def scenario() -> None:
        async with running_broker(tmp_path, messageDelayLevel="1s 1s 1s 1s 1s 1s") as broker:
            client = RemotingClient()
            addr = address(broker)
            assert (
                await create_topic(client, addr, "Batched", 1, attributes="+queue.type=BatchCQ")
            ).code == 0
            body = encode_batch_body([BatchEntry(0, b"m%d" % i, "") for i in range(3)])
            request = send_request("Batched", body, 0, {"UNIQ_KEY": "BATCH01"}, m="true")
            request.code = RequestCode.SEND_BATCH_MESSAGE
            response = await client.invoke(addr, request)
            assert response.code == ResponseCode.SUCCESS, response.remark
            offset = decode_offset_msg_id(response.ext_fields["msgId"])[2]
            _, (original,) = await pull(client, addr, "Batched", 0, 0)
            assert original.sys_flag & INNER_FLAGS == INNER_FLAGS
            back = {"offset": str(offset), "group": "CG", "delayLevel": "0"}
            response = await client.invoke(
                addr, RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=back)
            )
            assert response.code == ResponseCode.SUCCESS, response.remark

            async def retried() -> list[DecodedRecord]:
                _, records = await pull(client, addr, "%RETRY%CG", 0, 0)
                return records

            (copy,) = await wait_until(retried, message="the copy delivered to the retry topic")
            assert copy.sys_flag & INNER_FLAGS == 0
            assert copy.body == body
            properties = decode_properties(copy.properties)
            assert "INNER_NUM" not in properties and "INNER_BASE" not in properties
            assert not broker.store.is_batch_topic("SCHEDULE_TOPIC_XXXX")
            assert not broker.store.is_batch_topic("%RETRY%CG")
            await client.close()

    asyncio.run(scenario())


def test_a_transactional_send_to_a_batchcq_topic_is_refused_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            assert (await create_topic(client, addr, "Txn", 1, attributes="+queue.type=BatchCQ")).code == 0
            request = send_request("Txn", b"payload", 0, {"TRAN_MSG": "true", "PGROUP": "PG"}, sysFlag="4")
            response = await client.invoke(addr, request)
            assert response.code == ResponseCode.MESSAGE_ILLEGAL
            assert "BatchCQ" in (response.remark or "") and "transactional" in (response.remark or "")
            assert broker.store.max_offset("RMQ_SYS_TRANS_HALF_TOPIC", 0) == 0

    asyncio.run(scenario())


def entry_with(body: bytes, properties: bytes) -> bytes:
    total = ENTRY_HEAD.size + len(body) + 2 + len(properties)
    return ENTRY_HEAD.pack(total, 0, 0, 0, len(body)) + body + struct.pack(">H", len(properties)) + properties


def malformed_entry() -> bytes:
    """A batch entry whose PROPERTIESLENGTH reads negative as the int16 it is (40 002 bytes)."""
    return entry_with(b"hello", b"a\x01" + b"x" * 40_000)


@pytest.mark.parametrize(
    ("entry", "remark"),
    [
        (malformed_entry(), "inconsistent lengths"),
        (encode_batch_body([BatchEntry(0, b"ok", "")]) + entry_with(b"ok", b"\xff\xfe"), "UTF-8"),
    ],
    ids=["properties length", "properties not UTF-8"],
)
def test_an_inner_batch_no_reader_could_split_is_refused(tmp_path: Path, entry: bytes, remark: str) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            assert (
                await create_topic(client, addr, "Batched", 1, attributes="+queue.type=BatchCQ")
            ).code == 0
            request = send_request("Batched", entry, 0, {"UNIQ_KEY": "BATCH01"}, m="true")
            request.code = RequestCode.SEND_BATCH_MESSAGE
            response = await client.invoke(addr, request)
            assert response.code == ResponseCode.MESSAGE_ILLEGAL
            assert "the batch body is malformed" in (response.remark or "") and remark in (
                response.remark or ""
            )
            assert broker.store.max_offset("Batched", 0) == 0

    asyncio.run(scenario())


def test_a_stored_inner_batch_that_cannot_be_split_is_delivered_whole(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            assert (
                await create_topic(client, addr, "Batched", 1, attributes="+queue.type=BatchCQ")
            ).code == 0
            good = encode_batch_body([BatchEntry(0, b"m%d" % i, "") for i in range(2)])
            for body in (malformed_entry(), good):
                count = 2 if body == good else 1
                message = MessageToStore(
                    topic="Batched",
                    queue_id=0,
                    flag=0,
                    body=body,
                    properties=f"INNER_NUM\x01{count}",
                    sys_flag=INNER_FLAGS,
                    born_timestamp=1_700_000_000_000,
                    born_host=broker.store_host,
                    store_host=broker.store_host,
                )
                assert broker.store.put_inner_batch(message, count).status is PutStatus.PUT_OK
            response, _ = await pull(client, addr, "Batched", 0, 0)
            messages = decode_pulled(response.body, "b", 0)
            assert [(m.queue_offset, m.body, m.is_inner_batch) for m in messages] == [
                (0, malformed_entry(), True),
                (1, b"m0", True),
                (2, b"m1", True),
            ]

    asyncio.run(scenario())


@pytest.mark.parametrize("properties", [{"UNIQ_KEY": "BATCH01"}, {}], ids=["inner batch", "one record each"])
def test_a_batch_to_a_batchcq_topic_over_the_size_limit_is_refused(
    tmp_path: Path, properties: dict[str, str]
) -> None:
    """The size limit is on the whole batch body, with or without a UNIQ_KEY, as for an ordinary topic."""

    async def scenario() -> None:
        async with broker_and_client(tmp_path, maxMessageSize=1024) as (broker, addr, client):
            assert (
                await create_topic(client, addr, "Batched", 1, attributes="+queue.type=BatchCQ")
            ).code == 0
            body = encode_batch_body([BatchEntry(0, b"x" * 600, "") for _ in range(2)])
            request = send_request("Batched", body, 0, properties, m="true")
            request.code = RequestCode.SEND_BATCH_MESSAGE
            response = await client.invoke(addr, request)
            assert response.code == ResponseCode.MESSAGE_ILLEGAL
            assert "over the max value 1024" in (response.remark or "")
            assert broker.store.max_offset("Batched", 0) == 0

    asyncio.run(scenario())
