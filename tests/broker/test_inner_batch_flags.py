"""The inner-batch flags (INNER_BATCH 0x80, NEED_UNWRAP 0x40) against a real broker: only the broker's
inner-batch path sets them; a client's are cleared, a copy (send-back, delayed delivery) never carries
them, and a BatchCQ topic takes no transactional message."""

from __future__ import annotations

import asyncio
from pathlib import Path

from _support import address, broker_and_client, create_topic, pull, running_broker, send_request

from cometmq.client.message import decode_pulled
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import INNER_BATCH_FLAG, NEED_UNWRAP_FLAG, DecodedRecord, decode_offset_msg_id
from cometmq.remoting import RemotingClient
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
            request = send_request("Batched", body, 0, {"UNIQ_KEY": "BATCH01"})
            request.code = RequestCode.SEND_BATCH_MESSAGE
            response = await client.invoke(addr, request)
            assert response.code == ResponseCode.SUCCESS, response.remark
            offset = decode_offset_msg_id(response.ext_fields["msgId"])[2]
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
