"""QUERY_MESSAGE (12) against a real broker: by key, by unique key, not found, bad headers."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from _support import broker_and_client, create_topic, send, send_request

from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.protocol.record import DecodedRecord, decode_records

FOREVER = 2**62


def query_request(
    topic: str, key: str, max_num: int = 32, begin: int = 0, end: int = FOREVER, unique: bool = False
) -> RemotingCommand:
    fields = {
        "topic": topic,
        "key": key,
        "maxNum": str(max_num),
        "beginTimestamp": str(begin),
        "endTimestamp": str(end),
    }
    if unique:
        fields["_UNIQUE_KEY_QUERY"] = "true"
    return RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields=fields)


def records(response: RemotingCommand) -> list[DecodedRecord]:
    assert response.code == ResponseCode.SUCCESS, response.remark
    return decode_records(response.body, check_crc=True)


def test_query_by_key_and_by_unique_key(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            assert (await create_topic(client, addr, "Orders")).code == 0
            await send(client, addr, "Orders", b"first", KEYS="order-7 customer-1", UNIQ_KEY="AA01")
            await send(client, addr, "Orders", b"other", KEYS="order-8 customer-1", UNIQ_KEY="AA02")
            last, _ = await send(client, addr, "Orders", b"second", KEYS="order-7", UNIQ_KEY="AA03", TAGS="t")

            response = await client.invoke(addr, query_request("Orders", "order-7"))
            got = records(response)
            assert [r.body for r in got] == [b"second", b"first"]  # newest first
            assert got[0].commitlog_offset == last
            assert decode_properties(got[0].properties)["KEYS"] == "order-7"
            assert response.ext_fields["indexLastUpdatePhyoffset"] == str(last)
            assert response.ext_fields["indexLastUpdateTimestamp"] == str(got[0].store_timestamp)

            by_uniq = records(await client.invoke(addr, query_request("Orders", "AA02", unique=True)))
            assert [r.body for r in by_uniq] == [b"other"]
            # Without the flag the unique key is no key of the message.
            plain = await client.invoke(addr, query_request("Orders", "AA02"))
            assert plain.code == ResponseCode.QUERY_NOT_FOUND

            two = records(await client.invoke(addr, query_request("Orders", "customer-1", max_num=1)))
            assert [r.body for r in two] == [b"other"]

    asyncio.run(scenario())


def test_not_found_is_22_with_a_remark(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, "Orders")
            sent_at = int(time.time() * 1000)
            offset, _ = await send(client, addr, "Orders", b"x", KEYS="k1", UNIQ_KEY="U1")

            missing = await client.invoke(addr, query_request("Orders", "nope"))
            assert missing.code == ResponseCode.QUERY_NOT_FOUND == 22
            assert missing.remark is not None and "can not find message" in missing.remark
            assert "'nope'" in missing.remark
            assert missing.ext_fields["indexLastUpdatePhyoffset"] == str(offset)

            other_topic = await client.invoke(addr, query_request("Elsewhere", "k1"))
            assert other_topic.code == ResponseCode.QUERY_NOT_FOUND
            too_early = await client.invoke(addr, query_request("Orders", "k1", end=sent_at - 60_000))
            assert too_early.code == ResponseCode.QUERY_NOT_FOUND

    asyncio.run(scenario())


def test_unique_key_query_gets_rocketmq_default_max_num(tmp_path: Path) -> None:
    """RocketMQ answers a unique-key query with up to defaultQueryMaxNum (32), whatever maxNum says."""

    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, "Orders")
            for i in range(3):  # a producer retrying a send stores the same UNIQ_KEY again
                await send(client, addr, "Orders", b"copy %d" % i, UNIQ_KEY="SAME")
            got = records(await client.invoke(addr, query_request("Orders", "SAME", max_num=1, unique=True)))
            assert [r.body for r in got] == [b"copy 2", b"copy 1", b"copy 0"]

    asyncio.run(scenario())


def test_batch_messages_are_indexed_and_survive_a_restart(tmp_path: Path) -> None:
    async def scenario() -> None:
        entries = [
            BatchEntry(0, b"m%d" % i, encode_properties({"UNIQ_KEY": f"B{i}", "KEYS": f"batch k{i}"}))
            for i in range(3)
        ]
        request = send_request("Batch", encode_batch_body(entries), 0, v2=True, m="true")
        request.code = RequestCode.SEND_BATCH_MESSAGE
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, "Batch", 1)
            assert (await client.invoke(addr, request)).code == ResponseCode.SUCCESS
            got = records(await client.invoke(addr, query_request("Batch", "batch")))
            assert [r.body for r in got] == [b"m2", b"m1", b"m0"]
        async with broker_and_client(tmp_path) as (_, addr, client):
            got = records(await client.invoke(addr, query_request("Batch", "B1", unique=True)))
            assert [r.body for r in got] == [b"m1"]

    asyncio.run(scenario())


def test_bad_headers_get_a_readable_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            request = query_request("Orders", "k")
            del request.ext_fields["maxNum"]
            missing = await client.invoke(addr, request)
            assert missing.code == ResponseCode.SYSTEM_ERROR
            assert missing.remark == "the request header field maxNum is missing"
            request = query_request("Orders", "k")
            request.ext_fields["beginTimestamp"] = "yesterday"
            bad = await client.invoke(addr, request)
            assert bad.code == ResponseCode.SYSTEM_ERROR
            assert bad.remark is not None and "beginTimestamp='yesterday' is not a Java long" in bad.remark

    asyncio.run(scenario())


def test_index_switched_off(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, messageIndexEnable="false") as (_, addr, client):
            await create_topic(client, addr, "Orders")
            await send(client, addr, "Orders", b"x", KEYS="k1")
            response = await client.invoke(addr, query_request("Orders", "k1"))
            assert response.code == ResponseCode.QUERY_NOT_FOUND
            assert response.remark is not None and "messageIndexEnable" in response.remark
            assert not (tmp_path / "index").exists()

    asyncio.run(scenario())
