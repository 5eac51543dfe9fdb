"""A name server refuses a name that is not text UTF-8 can hold (a lone UTF-16 surrogate from a JSON
escape) where it decodes it, keeps nothing of the request, and keeps serving."""

from __future__ import annotations

import json

import pytest

from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.namesrv_headers import (
    KVConfigKeyRequestHeader,
    PutKVConfigRequestHeader,
    RegisterBrokerRequestHeader,
)
from cometmq.protocol.route import DataVersion, RegisterBrokerBody
from cometmq.protocol.topic_config import TopicConfig
from cometmq.remoting import RemotingClient

from .broker_sim import addr_of, ask, ask_route, register
from .conftest import Run

LONE_SURROGATE = "\ud800"


def _assert_refused(reply: RemotingCommand, field: str) -> None:
    assert reply.code == ResponseCode.SYSTEM_ERROR
    remark = reply.remark or ""
    assert remark.startswith(f"{field}["), remark
    assert "\\ud800" in remark and "not valid text" in remark
    remark.encode()  # readable: holds no surrogate itself


@pytest.mark.parametrize(
    ("registration", "field"),
    [
        ({"broker_name": "broker-" + LONE_SURROGATE}, "brokerName"),
        ({"cluster": LONE_SURROGATE}, "clusterName"),
    ],
)
def test_a_registration_with_a_name_that_is_not_text_is_refused_and_nothing_is_routed(
    run: Run[None], namesrv: NameServer, client: RemotingClient, registration: dict[str, str], field: str
) -> None:
    async def scenario() -> None:
        addr = addr_of(namesrv)
        _assert_refused(await register(client, addr, **registration), field)
        assert (await ask_route(client, addr, "TopicTest")).code == ResponseCode.TOPIC_NOT_EXIST
        assert (await register(client, addr)).code == ResponseCode.SUCCESS
        assert (await ask_route(client, addr, "TopicTest")).code == ResponseCode.SUCCESS

    run(scenario())


def test_a_registration_whose_topic_table_names_a_topic_that_is_not_text_is_refused(
    run: Run[None], namesrv: NameServer, client: RemotingClient
) -> None:
    good = RegisterBrokerBody(DataVersion(1, 1), {"TopicTest": TopicConfig("TopicTest", 4, 4)})
    table = json.loads(good.encode())
    table["topicConfigSerializeWrapper"]["topicConfigTable"]["Topic" + LONE_SURROGATE] = TopicConfig(
        "Topic" + LONE_SURROGATE
    ).to_json()
    header = RegisterBrokerRequestHeader(
        broker_name="broker-a",
        broker_addr="127.0.0.1:10911",
        cluster_name="C",
        ha_server_addr="127.0.0.1:10912",
        broker_id=0,
    )
    # json.dumps escapes the surrogate ("\ud800"): the body a peer that does not check would send.
    request = RemotingCommand(
        code=RequestCode.REGISTER_BROKER, ext_fields=header.encode(), body=json.dumps(table).encode()
    )

    async def scenario() -> None:
        addr = addr_of(namesrv)
        _assert_refused(await client.invoke(addr, request), "the RegisterBrokerBody is not valid: topic")
        assert (await ask_route(client, addr, "TopicTest")).code == ResponseCode.TOPIC_NOT_EXIST
        assert (await register(client, addr)).code == ResponseCode.SUCCESS
        assert (await ask_route(client, addr, "TopicTest")).code == ResponseCode.SUCCESS

    run(scenario())


def test_a_kv_entry_whose_key_is_not_text_is_refused_and_not_kept(
    run: Run[None], namesrv: NameServer, client: RemotingClient
) -> None:
    async def scenario() -> None:
        addr = addr_of(namesrv)
        put = PutKVConfigRequestHeader(namespace="NS", key=LONE_SURROGATE, value="v")
        _assert_refused(await ask(client, addr, RequestCode.PUT_KV_CONFIG, put), "key")
        get = KVConfigKeyRequestHeader(namespace="NS", key="k")
        assert (await ask(client, addr, RequestCode.GET_KV_CONFIG, get)).code == ResponseCode.QUERY_NOT_FOUND
        put = PutKVConfigRequestHeader(namespace="NS", key="k", value="v")
        assert (await ask(client, addr, RequestCode.PUT_KV_CONFIG, put)).code == ResponseCode.SUCCESS
        assert (await ask(client, addr, RequestCode.GET_KV_CONFIG, get)).code == ResponseCode.SUCCESS

    run(scenario())
