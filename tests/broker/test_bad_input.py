"""Bad input gets the RocketMQ response code and a readable remark, and loses nothing."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from _support import (
    address,
    broker_and_client,
    create_topic,
    pull,
    pull_request,
    run,
    running_broker,
    send_request,
)

from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.protocol.properties import encode_properties
from cometmq.remoting import RemotingClient


@pytest.mark.parametrize(
    ("topic", "remark"),
    [
        ("bad topic", "illegal characters"),
        ("a" * 128, "longer than topic max length"),
        ("tópico", "illegal characters"),
        ("trailing-newline\n", "illegal characters"),
    ],
)
def test_illegal_topic_names_are_refused(tmp_path: Path, topic: str, remark: str) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            client = RemotingClient()
            response = await client.invoke(address(broker), send_request(topic, b"x"))
            assert response.code == ResponseCode.SYSTEM_ERROR
            assert remark in (response.remark or "")
            assert broker.topics.get(topic) is None
            await client.close()

    run(scenario())


def test_every_bad_send_gets_its_code_and_good_messages_are_kept(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, autoCreateTopicEnable="false") as (_, addr, client):
            await create_topic(client, addr, "Good", 2)
            assert (await client.invoke(addr, send_request("Good", b"before"))).code == 0

            def batch(*entries: BatchEntry, **props: str) -> RemotingCommand:
                return send_request("Good", encode_batch_body(list(entries)), 0, props, v2=False, batch="1")

            good = BatchEntry(0, b"good", "")
            cases = [
                (send_request("SCHEDULE_TOPIC_XXXX", b"x"), ResponseCode.NO_PERMISSION, "forbidden"),
                (
                    send_request("Good", b"x" * (4 * 1024 * 1024 + 1)),
                    ResponseCode.MESSAGE_ILLEGAL,
                    "over the max value",
                ),
                (
                    send_request("Good", b"x", properties={"big": "v" * 33000}),
                    ResponseCode.MESSAGE_ILLEGAL,
                    "properties length",
                ),
                (send_request("Good", b"x", queue_id=2), ResponseCode.SYSTEM_ERROR, "queueId[2] is illegal"),
                (send_request("Missing", b"x"), ResponseCode.TOPIC_NOT_EXIST, "not exist"),
                (RemotingCommand(code=9999), ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "not supported"),
                (
                    RemotingCommand(
                        code=10,
                        ext_fields={
                            "producerGroup": "P",
                            "topic": "Good",
                            "defaultTopic": "TBW102",
                            "defaultTopicQueueNums": "4",
                        },
                    ),
                    ResponseCode.SYSTEM_ERROR,
                    "field queueId is missing",
                ),
                (
                    send_request("Good", b"junk-batch", v2=False, batch="1"),
                    ResponseCode.MESSAGE_ILLEGAL,
                    "batch body is malformed",
                ),
                (batch(), ResponseCode.MESSAGE_ILLEGAL, "the batch body holds no message"),
                # One bad message refuses the whole batch, on the fast path and on the general one.
                (
                    batch(good, BatchEntry(0, b"x" * (4 * 1024 * 1024 + 1), "")),
                    ResponseCode.MESSAGE_ILLEGAL,
                    "over the max value",
                ),
                (
                    batch(good, BatchEntry(0, b"x", encode_properties({"TRAN_MSG": "true"}))),
                    ResponseCode.MESSAGE_ILLEGAL,
                    "a message of the batch is a transaction message (TRAN_MSG)",
                ),
                (batch(good, DELAY="2"), ResponseCode.MESSAGE_ILLEGAL, "batches cannot be delayed"),
                # RocketMQ's limit is on the whole batch: many small messages count together.
                (
                    batch(*[BatchEntry(0, b"x" * 1000, "")] * 4200),
                    ResponseCode.MESSAGE_ILLEGAL,
                    "the batch body size 4292400 is over the max value 4194304 bytes",
                ),
                (
                    send_request("Good", b"x", properties={"DELAY": "soon"}),
                    ResponseCode.MESSAGE_ILLEGAL,
                    "the DELAY property 'soon' is not a delay level",
                ),
                (
                    send_request("Good", b"x", sysFlag="4"),
                    ResponseCode.MESSAGE_ILLEGAL,
                    "needs the property TRAN_MSG=true",
                ),
                (
                    send_request("Good", b"x", i="KEYS\x01a\x01b\x02"),  # a stray separator in a value
                    ResponseCode.MESSAGE_ILLEGAL,
                    "properties are malformed",
                ),
            ]
            for request, code, remark in cases:
                response = await client.invoke(addr, request, timeout=10)
                assert response.code == code, (request.code, response.remark)
                assert remark in (response.remark or ""), response.remark

            assert (await client.invoke(addr, send_request("Good", b"after"))).code == 0
            _, records = await pull(client, addr, "Good", 0, 0)
            assert [r.body for r in records] == [b"before", b"after"]

    run(scenario())


def test_garbage_bytes_close_only_that_connection(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            await create_topic(client, addr, "Steady", 1)
            loop = asyncio.get_running_loop()

            def vandal() -> bytes:
                with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
                    sock.sendall(b"\xff\xff\xff\xffGET / HTTP/1.1\r\n\r\n")
                    return sock.recv(100)  # b"" once the broker closes the connection

            assert await loop.run_in_executor(None, vandal) == b""
            assert (await client.invoke(addr, send_request("Steady", b"still here"))).code == 0
            _, records = await pull(client, addr, "Steady", 0, 0)
            assert [r.body for r in records] == [b"still here"]

    run(scenario())


def test_auto_create_stays_off_after_a_restart_that_turned_it_off(tmp_path: Path) -> None:
    async def life(auto_create: str, topic: str) -> int:
        async with running_broker(tmp_path, autoCreateTopicEnable=auto_create) as broker:
            client = RemotingClient()
            response = await client.invoke(address(broker), send_request(topic, b"x"))
            await client.close()
            return response.code

    assert asyncio.run(life("true", "MadeWhileOn")) == ResponseCode.SUCCESS
    assert asyncio.run(life("false", "MadeWhileOff")) == ResponseCode.TOPIC_NOT_EXIST


def test_admins_cannot_create_or_delete_system_topics(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (broker, addr, client):
            created = await create_topic(client, addr, "SCHEDULE_TOPIC_XXXX", 2)
            assert created.code == ResponseCode.SYSTEM_ERROR
            assert "conflict with system topic" in (created.remark or "")
            deleted = await client.invoke(
                addr, RemotingCommand(code=RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields={"topic": "TBW102"})
            )
            assert deleted.code == ResponseCode.SYSTEM_ERROR
            assert broker.topics.get("TBW102") is not None
            assert broker.topics.get("SCHEDULE_TOPIC_XXXX").write_queue_nums == 18  # type: ignore[union-attr]

    run(scenario())


def _fields(code: int, **fields: str) -> RemotingCommand:
    return RemotingCommand(code=code, ext_fields=fields)


@pytest.mark.parametrize(
    ("request_", "remark"),
    [
        (
            pull_request("Good", -1, 0),
            "the request header field queueId=-1 is below 0",
        ),
        (
            pull_request("Good", 0, 0, max_nums=5000),
            "the request header field maxMsgNums=5000 is above 1024",
        ),
        (
            _fields(RequestCode.PULL_MESSAGE, consumerGroup="CG", topic="Good", queueId="0"),
            "the request header field queueOffset is missing",
        ),
        (
            _fields(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="CG", topic="Good", queueId="one"),
            "the request header field queueId='one' is not a Java int",
        ),
        (
            _fields(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                consumerGroup="CG",
                topic="Good",
                queueId="0",
                commitOffset=str(2**63),
            ),
            f"the request header field commitOffset={2**63} is above the Java range",
        ),
        (
            _fields(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic="Good", queueId="0"),
            "the request header field timestamp is missing",
        ),
        (
            _fields(RequestCode.CONSUMER_SEND_MSG_BACK, group="CG", offset="-5", delayLevel="x"),
            "the request header field delayLevel='x' is not a Java int",
        ),
        (
            _fields(
                RequestCode.UPDATE_AND_CREATE_TOPIC, topic="Other", defaultTopic="TBW102", readQueueNums="0"
            ),
            "the request header field readQueueNums=0 is below 1",
        ),
        (
            _fields(
                RequestCode.QUERY_MESSAGE,
                topic="Good",
                key="k",
                maxNum="0",
                beginTimestamp="0",
                endTimestamp="1",
            ),
            "the request header field maxNum=0 is below 1",
        ),
        (
            _fields(RequestCode.GET_MAX_OFFSET, topic="Good"),
            "the request header field queueId is missing",
        ),
        (
            send_request("Good", b"x", e=str(2**31)),
            f"the request header field queueId={2**31} is above the Java range",
        ),
    ],
    ids=lambda value: str(value.code) if isinstance(value, RemotingCommand) else "",
)
def test_a_malformed_header_field_is_refused_by_name_and_the_broker_keeps_serving(
    tmp_path: Path, request_: RemotingCommand, remark: str
) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, "Good", 1)
            response = await client.invoke(addr, request_)
            assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, remark)
            assert (await client.invoke(addr, send_request("Good", b"after"))).code == ResponseCode.SUCCESS
            _, records = await pull(client, addr, "Good", 0, 0)
            assert [r.body for r in records] == [b"after"]

    run(scenario())


def test_host_flags_a_client_sets_do_not_change_how_its_message_is_stored(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):
            await create_topic(client, addr, "Good", 1)
            # BORNHOST_V6_FLAG | STOREHOST_V6_FLAG: the broker writes IPv4 hosts whatever a client says.
            sent = await client.invoke(addr, send_request("Good", b"v4 after all", sysFlag="48", v2=False))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            _, records = await pull(client, addr, "Good", 0, 0)
            assert [(r.body, r.sys_flag & 0x30) for r in records] == [(b"v4 after all", 0)]

    run(scenario())
