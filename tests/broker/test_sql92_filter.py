"""SQL92 property filters on a real broker over real sockets: pulls, heartbeats, CHECK_CLIENT_CONFIG."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from _support import (
    address,
    broker_and_client,
    create_topic,
    held_pulls,
    pull_request,
    run,
    running_broker,
    send,
)

from cometmq.broker import BrokerConfig
from cometmq.broker._filter import compiled_sql92, record_properties
from cometmq.errors import Sql92Error
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import DecodedRecord, decode_records, encode_record_into, record_size
from cometmq.remoting import RemotingClient
from processes import broker_address, start_standalone
from waiting import wait_until

DISABLED_REMARK = "The broker does not support consumer to filter message by SQL92"
ENABLED = {"enablePropertyFilter": "true"}


def sql_pull(topic: str, offset: int, expression: str, **kwargs: Any) -> RemotingCommand:
    request = pull_request(topic, 0, offset, subscription=expression, **kwargs)
    request.ext_fields["expressionType"] = "SQL92"
    return request


async def pulled(
    client: RemotingClient, addr: str, request: RemotingCommand
) -> tuple[RemotingCommand, list[DecodedRecord]]:
    response = await client.invoke(addr, request, timeout=30)
    return response, decode_records(response.body) if response.code == ResponseCode.SUCCESS else []


def check_client_config(group: str, topic: str, expression: str, kind: str = "SQL92") -> RemotingCommand:
    # The body the Java client's MQClientAPIImpl.checkClientInBroker sends.
    body = {
        "clientId": "127.0.0.1@1234#5678",
        "group": group,
        "subscriptionData": {
            "classFilterMode": False,
            "codeSet": [],
            "expressionType": kind,
            "subString": expression,
            "subVersion": 1700000000000,
            "tagsSet": [],
            "topic": topic,
        },
    }
    return RemotingCommand(code=RequestCode.CHECK_CLIENT_CONFIG, body=json.dumps(body).encode())


def sql_heartbeat(group: str, topic: str, expression: str) -> RemotingCommand:
    # Java style: enum names, expressionType SQL92.
    body = {
        "clientID": "127.0.0.1@1234#5678",
        "consumerDataSet": [
            {
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "consumeType": "CONSUME_PASSIVELY",
                "groupName": group,
                "messageModel": "CLUSTERING",
                "subscriptionDataSet": [
                    {"expressionType": "SQL92", "subString": expression, "subVersion": 1, "topic": topic}
                ],
                "unitMode": False,
            }
        ],
        "producerDataSet": [],
    }
    return RemotingCommand(code=RequestCode.HEART_BEAT, body=json.dumps(body).encode())


def test_sql92_pull_delivers_exactly_the_matching_messages(tmp_path: Path) -> None:
    messages: list[tuple[bytes, dict[str, str]]] = [
        (b"m0", {"TAGS": "TagA", "price": "150", "region": "eu"}),
        (b"m1", {"TAGS": "TagA", "price": "50", "region": "us"}),
        (b"m2", {"TAGS": "TagB", "price": "500", "region": "eu"}),
        (b"m3", {"TAGS": "TagB", "price": "500", "region": "us"}),
        (b"m4", {"price": "200", "region": "us"}),  # no tag
        (b"m5", {"TAGS": "TagA", "region": "eu"}),  # no price: null, so not > 100
        (b"m6", {"TAGS": "TagA", "price": "101", "region": "ap"}),
        (b"m7", {"TAGS": "TagC", "price": "1000"}),
        (b"m8", {"TAGS": "TagA", "price": "abc", "region": "us"}),  # not a number: no match
    ]
    expression = "(TAGS = 'TagA' AND price > 100) OR (region = 'eu' AND TAGS <> 'TagA')"
    expected = [b"m0", b"m2", b"m6"]

    async def scenario() -> None:
        async with broker_and_client(tmp_path, **ENABLED) as (_, addr, client):
            assert (await create_topic(client, addr, "Shop", queues=1)).code == 0
            for body, props in messages:
                await send(client, addr, "Shop", body, **props)
            response, records = await pulled(client, addr, sql_pull("Shop", 0, expression))
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert [record.body for record in records] == expected
            assert response.ext_fields["nextBeginOffset"] == str(len(messages))
            # A plain tag pull still sees everything: the filter belongs to the subscription only.
            response, records = await pulled(client, addr, pull_request("Shop", 0, 0))
            assert len(records) == len(messages)

    run(scenario())


def test_offsets_advance_past_filtered_messages(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **ENABLED) as (_, addr, client):
            assert (await create_topic(client, addr, "T", queues=1)).code == 0
            for i in range(5):
                await send(client, addr, "T", b"no%d" % i, color="blue")
            # Nothing matches: PULL_RETRY_IMMEDIATELY, but past the five scanned messages.
            response, records = await pulled(client, addr, sql_pull("T", 0, "color = 'red'"))
            assert response.code == ResponseCode.PULL_RETRY_IMMEDIATELY
            assert response.remark == "NO_MATCHED_MESSAGE"
            assert response.ext_fields["nextBeginOffset"] == "5"
            assert records == []
            # More non-matching messages than one batch, then a match: one pull finds it.
            for _ in range(40):
                await send(client, addr, "T", b"no", color="blue")
            await send(client, addr, "T", b"yes", color="red")
            response, records = await pulled(client, addr, sql_pull("T", 5, "color = 'red'"))
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert [record.body for record in records] == [b"yes"]
            assert records[0].queue_offset == 45
            assert response.ext_fields["nextBeginOffset"] == "46"
            # At the end of the queue: nothing new.
            response, _ = await pulled(client, addr, sql_pull("T", 46, "color = 'red'"))
            assert response.code == ResponseCode.PULL_NOT_FOUND
            assert response.ext_fields["nextBeginOffset"] == "46"

    run(scenario())


def test_sql92_pull_is_limited_to_max_messages_and_resumes_where_it_stopped(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **ENABLED) as (_, addr, client):
            assert (await create_topic(client, addr, "T", queues=1)).code == 0
            for i in range(10):
                await send(client, addr, "T", b"%d" % i, n=str(i))
            response, records = await pulled(client, addr, sql_pull("T", 0, "n > 2", max_nums=3))
            assert [record.body for record in records] == [b"3", b"4", b"5"]
            assert response.ext_fields["nextBeginOffset"] == "6"
            response, records = await pulled(client, addr, sql_pull("T", 6, "n > 2", max_nums=3))
            assert [record.body for record in records] == [b"6", b"7", b"8"]

    run(scenario())


def test_held_sql92_pull_waits_for_a_matching_message(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **ENABLED) as (broker, addr, client):
            assert (await create_topic(client, addr, "T", queues=1)).code == 0
            held = asyncio.ensure_future(
                pulled(client, addr, sql_pull("T", 0, "kind = 'a'", suspend_ms=3_600_000))
            )
            await wait_until(lambda: held_pulls(broker) == 1, message="the pull is held")
            # Same connection: an answer to the pull would be read before these sends' replies.
            await send(client, addr, "T", b"skip", kind="b")
            await send(client, addr, "T", b"skip too", kind="c")
            assert not held.done(), "a message that fails the filter must not answer a held pull"
            assert held_pulls(broker) == 1  # held on past the rejected messages
            await send(client, addr, "T", b"take", kind="a")
            response, records = await asyncio.wait_for(held, 30)  # only the arrival answers within this
            assert response.code == ResponseCode.SUCCESS
            assert [record.body for record in records] == [b"take"]
            assert response.ext_fields["nextBeginOffset"] == "3"
            await wait_until(lambda: held_pulls(broker) == 0, message="the answered pull is forgotten")

    run(scenario())


def test_bad_expression_is_refused_with_subscription_parse_failed(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **ENABLED) as (_, addr, client):
            assert (await create_topic(client, addr, "T", queues=1)).code == 0
            await send(client, addr, "T", b"x", a="1")
            response, _ = await pulled(client, addr, sql_pull("T", 0, "a = = 1"))
            assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            assert response.remark is not None
            group = sql_pull("T", 0, "").ext_fields["consumerGroup"]
            assert response.remark.startswith(
                f"parse the consumer's subscription failed: group {group}, topic T:"
            )
            assert "at position 4" in response.remark and "expected" in response.remark
            assert response.ext_fields["nextBeginOffset"] == "0"  # pull answers keep their four fields
            response, _ = await pulled(client, addr, sql_pull("T", 0, ""))
            assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            assert "empty" in (response.remark or "")
            response, _ = await pulled(client, addr, sql_pull("T", 0, "a > 'x'"))
            assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            assert "cannot be compared" in (response.remark or "")

    run(scenario())


def test_filter_disabled_gives_rocketmqs_system_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:  # enablePropertyFilter is off by default
            client = RemotingClient()
            addr = address(broker)
            assert (await create_topic(client, addr, "T", queues=1)).code == 0
            await send(client, addr, "T", b"x", a="1")
            response, _ = await pulled(client, addr, sql_pull("T", 0, "a = 1"))
            assert response.code == ResponseCode.SYSTEM_ERROR
            assert response.remark == DISABLED_REMARK
            response = await client.invoke(addr, check_client_config("G", "T", "a = 1"))
            assert response.code == ResponseCode.SYSTEM_ERROR
            assert response.remark == DISABLED_REMARK
            await client.close()

    run(scenario())


def test_check_client_config_accepts_good_and_refuses_bad_expressions(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **ENABLED) as (_, addr, client):
            good = await client.invoke(
                addr, check_client_config("G", "T", "a BETWEEN 1 AND 3 OR TAGS IS NULL")
            )
            assert good.code == ResponseCode.SUCCESS, good.remark
            bad = await client.invoke(addr, check_client_config("G", "T", "a BETWEEN 3 AND 1"))
            assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            assert "lower bound" in (bad.remark or "")
            tag = await client.invoke(addr, check_client_config("G", "T", "TagA || TagB", kind="TAG"))
            assert tag.code == ResponseCode.SUCCESS
            empty = await client.invoke(addr, RemotingCommand(code=RequestCode.CHECK_CLIENT_CONFIG))
            assert empty.code == ResponseCode.SUCCESS

    run(scenario())


def test_heartbeat_registered_sql92_subscription_filters_pulls_without_subscription_flag(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **ENABLED) as (_, addr, client):
            assert (await create_topic(client, addr, "T", queues=1)).code == 0
            for level in ("1", "5", "9"):
                await send(client, addr, "T", level.encode(), level=level)
            assert (await client.invoke(addr, sql_heartbeat("G", "T", "level >= 5"))).code == 0
            request = pull_request("T", 0, 0, group="G")
            request.ext_fields["sysFlag"] = "0"  # the Java push consumer's way: the broker's subscription
            response, records = await pulled(client, addr, request)
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert [record.body for record in records] == [b"5", b"9"]

    run(scenario())


def test_heartbeat_with_bad_sql92_subscription_is_refused_and_not_registered(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **ENABLED) as (_, addr, client):
            response = await client.invoke(addr, sql_heartbeat("G", "T", "level >="))
            assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            assert "group G, topic T" in (response.remark or "")
            assert "at position 8" in (response.remark or "")
            members = await client.invoke(
                addr,
                RemotingCommand(
                    code=RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext_fields={"consumerGroup": "G"}
                ),
            )
            assert members.code == ResponseCode.SYSTEM_ERROR  # no consumer for this group

    run(scenario())


def test_config_file_can_override_the_standalone_default(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("enablePropertyFilter=false\n")
    assert BrokerConfig().enable_property_filter is False
    assert BrokerConfig.from_file(conf, {"enablePropertyFilter": True}).enable_property_filter is False
    conf.write_text("brokerName=b\n")
    assert BrokerConfig.from_file(conf, {"enablePropertyFilter": True}).enable_property_filter is True


def test_standalone_has_sql92_filters_enabled(tmp_path: Path) -> None:
    server, _ = start_standalone(tmp_path / "data")
    try:

        async def scenario() -> None:
            client = RemotingClient()
            response = await client.invoke(broker_address(server), check_client_config("G", "T", "a = 1"))
            assert response.code == ResponseCode.SUCCESS, response.remark
            await client.close()

        run(scenario())
    finally:
        server.terminate()


def test_record_properties_reads_records_with_ipv6_hosts() -> None:
    props = encode_properties({"TAGS": "TagA", "price": "7"}).encode()
    body = b"body"
    v4 = bytearray(record_size(len(body), 1, len(props)))
    encode_record_into(v4, 0, 0, 0, 0, 0, 0, 0, bytes(8), 0, bytes(8), 0, 0, body, b"T", props)
    assert record_properties(memoryview(v4)) == {"TAGS": "TagA", "price": "7"}
    # Both hosts as IPv6 (16-byte address + port): 12 more bytes after each, and the SYSFLAG bits.
    v6 = v4[:56] + bytes(12) + v4[56:72] + bytes(12) + v4[72:]
    v6[0:4] = len(v6).to_bytes(4, "big")
    v6[36:40] = (0x30).to_bytes(4, "big")
    (decoded,) = decode_records(bytes(v6))
    assert decoded.properties == props.decode()
    assert record_properties(memoryview(v6)) == {"TAGS": "TagA", "price": "7"}


def test_an_expression_is_compiled_once_for_every_pull_and_a_bad_one_is_refused_each_time() -> None:
    assert compiled_sql92("region = 'eu'") is compiled_sql92("region = 'eu'")
    assert compiled_sql92("region = 'eu'").matches({"region": "eu"})
    for _ in range(2):
        with pytest.raises(Sql92Error):
            compiled_sql92("region = ")
