"""The NameServer over real sockets, spoken to with the real RemotingClient."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from cometmq.errors import ConnectionClosedError
from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from cometmq.protocol.namesrv_headers import (
    AddWritePermOfBrokerResponseHeader,
    BrokerNameRequestHeader,
    BrokerRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    KVConfigKeyRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from cometmq.protocol.record import body_crc
from cometmq.protocol.route import (
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    TopicList,
    TopicRouteData,
    parse_kv_table,
)
from cometmq.protocol.topic_config import TopicConfig
from cometmq.remoting import RemotingClient
from waiting import wait_until

from .broker_sim import addr_of, ask, ask_route, register

Run = Callable[..., Any]
# broker-a as broker_sim.register registers it, for the requests that name a broker.
BROKER_A = BrokerRequestHeader(
    broker_name="broker-a", broker_addr="127.0.0.1:10911", cluster_name="DefaultCluster", broker_id=0
)


def test_register_broker_then_route(run: Run, namesrv: NameServer, client: RemotingClient) -> None:
    async def scenario() -> None:
        reply = await register(client, addr_of(namesrv), topics={"TopicTest": 4, "Other": 2})
        assert reply.code == ResponseCode.SUCCESS
        assert reply.is_response
        route_reply = await ask_route(client, addr_of(namesrv), "TopicTest")
        assert route_reply.code == ResponseCode.SUCCESS
        route = TopicRouteData.decode(route_reply.body)
        assert [(b.broker_name, b.cluster, b.broker_addrs) for b in route.broker_datas] == [
            ("broker-a", "DefaultCluster", {0: "127.0.0.1:10911"})
        ]
        [queue] = route.queue_datas
        assert (queue.broker_name, queue.read_queue_nums, queue.write_queue_nums, queue.perm) == (
            "broker-a",
            4,
            4,
            6,
        )

    run(scenario())


def test_route_json_legacy_form_for_old_clients(
    run: Run, namesrv: NameServer, client: RemotingClient
) -> None:
    async def scenario() -> None:
        await register(client, addr_of(namesrv))
        old = await ask_route(client, addr_of(namesrv), "TopicTest", version=63)
        assert old.code == ResponseCode.SUCCESS
        assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in old.body
        with pytest.raises(ValueError):
            json.loads(old.body)
        assert fastjson.loads(old.body)["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}

        new = await ask_route(client, addr_of(namesrv), "TopicTest", version=409)
        assert json.loads(new.body)["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}

        # An old client that asks for standard JSON gets it.
        standard_only = GetRouteInfoRequestHeader(topic="TopicTest", accept_standard_json_only=True)
        asked = await ask(
            client, addr_of(namesrv), RequestCode.GET_ROUTEINFO_BY_TOPIC, standard_only, version=63
        )
        assert json.loads(asked.body) == json.loads(new.body)
        assert TopicRouteData.decode(old.body) == TopicRouteData.decode(new.body)

    run(scenario())


def test_unknown_topic_is_topic_not_exist(run: Run, namesrv: NameServer, client: RemotingClient) -> None:
    async def scenario() -> None:
        reply = await ask_route(client, addr_of(namesrv), "Nope")
        assert reply.code == ResponseCode.TOPIC_NOT_EXIST
        assert reply.remark == "No topic route info in name server for the topic: Nope"

    run(scenario())


def test_unknown_code_is_not_supported(run: Run, namesrv: NameServer, client: RemotingClient) -> None:
    async def scenario() -> None:
        reply = await ask(client, addr_of(namesrv), 9999)
        assert reply.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED

    run(scenario())


def test_a_malformed_header_field_is_refused_by_name_and_the_server_keeps_serving(
    run: Run, namesrv: NameServer, client: RemotingClient
) -> None:
    body = RegisterBrokerBody(DataVersion(1, 1), {"T": TopicConfig("T", 2, 2)}).encode()
    fields = {
        "brokerName": "broker-a",
        "brokerAddr": "127.0.0.1:10911",
        "clusterName": "C",
        "haServerAddr": "127.0.0.1:10912",
        "brokerId": "0",
    }

    async def send(code: int, ext_fields: dict[str, str]) -> RemotingCommand:
        request = RemotingCommand(code=code, ext_fields=ext_fields, body=body)
        return await client.invoke(addr_of(namesrv), request)

    async def scenario() -> None:
        for code, ext_fields, remark in [
            (
                RequestCode.REGISTER_BROKER,
                {**fields, "brokerId": "zero"},
                "brokerId='zero' is not a Java long",
            ),
            (
                RequestCode.REGISTER_BROKER,
                {**fields, "bodyCrc32": str(2**31)},
                "bodyCrc32=2147483648 is above",
            ),
            (RequestCode.UNREGISTER_BROKER, {**fields, "brokerId": "-1"}, "brokerId=-1 is below 0"),
            (RequestCode.GET_ROUTEINFO_BY_TOPIC, {}, "the request header field topic is missing"),
            (RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k"}, "value is missing"),
        ]:
            reply = await send(code, ext_fields)
            assert reply.code == ResponseCode.SYSTEM_ERROR
            assert remark in (reply.remark or "")
        # On the same connection, well-formed requests are still served.
        assert (await send(RequestCode.REGISTER_BROKER, fields)).code == ResponseCode.SUCCESS
        assert (await ask_route(client, addr_of(namesrv), "T")).code == ResponseCode.SUCCESS

    run(scenario())


def test_silent_broker_expires(
    run: Run, start_namesrv: Callable[..., NameServer], client: RemotingClient
) -> None:
    namesrv = start_namesrv(broker_expiry_s=0.3, scan_interval_s=0.05)

    async def scenario() -> None:
        await register(client, addr_of(namesrv))
        reply = await ask_route(client, addr_of(namesrv), "TopicTest")
        assert reply.code == ResponseCode.SUCCESS

        async def gone() -> bool:
            try:
                reply = await ask_route(client, addr_of(namesrv), "TopicTest")
            except ConnectionClosedError:
                # The expiry closes the broker's connection, which this test also asks on (as RocketMQ
                # does): a question in flight then gets no answer, and the next goes on a new one.
                return False
            return reply.code == ResponseCode.TOPIC_NOT_EXIST

        await wait_until(gone, message="the expired broker gone from the routes")
        info = ClusterInfo.decode(
            (await ask(client, addr_of(namesrv), RequestCode.GET_BROKER_CLUSTER_INFO)).body
        )
        assert info.broker_addr_table == {}
        assert info.cluster_addr_table == {}

    run(scenario())


def test_registering_again_keeps_broker_alive(
    run: Run, start_namesrv: Callable[..., NameServer], make_client: Callable[[], RemotingClient]
) -> None:
    namesrv = start_namesrv(broker_expiry_s=1.0, scan_interval_s=0.05)
    broker, tool = make_client(), make_client()

    async def scenario() -> None:
        for _ in range(15):  # 1.5 s, past the expiry of a broker that registered once
            await register(broker, addr_of(namesrv))
            await asyncio.sleep(0.1)
        reply = await ask_route(tool, addr_of(namesrv), "TopicTest")
        assert reply.code == ResponseCode.SUCCESS

    run(scenario())


def test_closed_connection_drops_broker_at_once(
    run: Run, namesrv: NameServer, make_client: Callable[[], RemotingClient]
) -> None:
    broker, tool = make_client(), make_client()

    async def scenario() -> None:
        await register(broker, addr_of(namesrv))
        broker.close_connection(addr_of(namesrv))

        async def gone() -> bool:
            reply = await ask_route(tool, addr_of(namesrv), "TopicTest")
            return reply.code == ResponseCode.TOPIC_NOT_EXIST

        await wait_until(gone, message="the closed broker gone from the routes")

    run(scenario())


def test_two_brokers_both_in_route_and_cluster_info(
    run: Run, namesrv: NameServer, make_client: Callable[[], RemotingClient]
) -> None:
    a, b, tool = make_client(), make_client(), make_client()

    async def scenario() -> None:
        await register(a, addr_of(namesrv), broker_name="broker-a", broker_addr="127.0.0.1:10911")
        await register(b, addr_of(namesrv), broker_name="broker-b", broker_addr="127.0.0.1:10921")
        reply = await ask_route(tool, addr_of(namesrv), "TopicTest")
        route = TopicRouteData.decode(reply.body)
        assert sorted(b.broker_name for b in route.broker_datas) == ["broker-a", "broker-b"]
        assert sorted(q.broker_name for q in route.queue_datas) == ["broker-a", "broker-b"]

        info = ClusterInfo.decode(
            (await ask(tool, addr_of(namesrv), RequestCode.GET_BROKER_CLUSTER_INFO)).body
        )
        assert info.cluster_addr_table == {"DefaultCluster": ["broker-a", "broker-b"]}
        assert info.broker_addr_table["broker-b"].broker_addrs == {0: "127.0.0.1:10921"}

        # One broker leaving takes only its own queues away.
        a.close_connection(addr_of(namesrv))

        async def only_b() -> bool:
            reply = await ask_route(tool, addr_of(namesrv), "TopicTest")
            route = TopicRouteData.decode(reply.body)
            return [q.broker_name for q in route.queue_datas] == ["broker-b"]

        await wait_until(only_b, message="only broker-b in the route")

    run(scenario())


def test_slave_gets_master_address_and_adds_no_queue_data(
    run: Run, namesrv: NameServer, make_client: Callable[[], RemotingClient]
) -> None:
    master, slave, tool = make_client(), make_client(), make_client()

    async def scenario() -> None:
        await register(master, addr_of(namesrv), broker_addr="10.0.0.1:10911", topics={"T": 4})
        reply = await register(
            slave, addr_of(namesrv), broker_addr="10.0.0.2:10911", broker_id=1, topics={"T": 4, "S": 2}
        )
        assert RegisterBrokerResponseHeader.decode(reply.ext_fields) == RegisterBrokerResponseHeader(
            master_addr="10.0.0.1:10911", ha_server_addr="10.0.0.1:10912"
        )
        route_reply = await ask_route(tool, addr_of(namesrv), "T", version=63)
        assert b'{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}' in route_reply.body
        slave_only = await ask_route(tool, addr_of(namesrv), "S")
        assert slave_only.code == ResponseCode.TOPIC_NOT_EXIST

    run(scenario())


def test_compressed_registration_and_crc(run: Run, namesrv: NameServer, client: RemotingClient) -> None:
    async def scenario() -> None:
        reply = await register(client, addr_of(namesrv), topics={"Zipped": 3}, compressed=True)
        assert reply.code == ResponseCode.SUCCESS
        route = TopicRouteData.decode((await ask_route(client, addr_of(namesrv), "Zipped")).body)
        assert route.queue_datas[0].write_queue_nums == 3

        bad = await register(client, addr_of(namesrv), body_crc32=12345)
        assert (bad.code, bad.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")

    run(scenario())


def test_registration_with_matching_crc(run: Run, namesrv: NameServer, client: RemotingClient) -> None:
    async def scenario() -> None:
        body = RegisterBrokerBody(DataVersion(1, 1), {"T": TopicConfig("T", 2, 2)}).encode()
        request = RemotingCommand(
            code=RequestCode.REGISTER_BROKER,
            ext_fields=RegisterBrokerRequestHeader(
                broker_name="broker-a",
                broker_addr="127.0.0.1:10911",
                cluster_name="C",
                ha_server_addr="127.0.0.1:10912",
                broker_id=0,
                body_crc32=body_crc(body),
            ).encode(),
            body=body,
        )
        assert (await client.invoke(addr_of(namesrv), request)).code == ResponseCode.SUCCESS

    run(scenario())


def test_topic_lists(run: Run, namesrv: NameServer, make_client: Callable[[], RemotingClient]) -> None:
    a, b, tool = make_client(), make_client(), make_client()

    async def scenario() -> None:
        await register(a, addr_of(namesrv), broker_name="broker-a", cluster="C1", topics={"T1": 1, "Both": 1})
        await register(
            b,
            addr_of(namesrv),
            broker_name="broker-b",
            broker_addr="127.0.0.1:10921",
            cluster="C2",
            topics={"T2": 1, "Both": 1},
        )
        all_topics = TopicList.decode(
            (await ask(tool, addr_of(namesrv), RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body
        )
        assert all_topics.topics == ["Both", "T1", "T2"]
        of_c2 = GetTopicsByClusterRequestHeader(cluster="C2")
        c2 = TopicList.decode(
            (await ask(tool, addr_of(namesrv), RequestCode.GET_TOPICS_BY_CLUSTER, of_c2)).body
        )
        assert c2.topics == ["Both", "T2"]
        system = TopicList.decode(
            (await ask(tool, addr_of(namesrv), RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)).body
        )
        assert system.topics == ["C1", "C2", "broker-a", "broker-b"]
        assert system.broker_addr in ("127.0.0.1:10911", "127.0.0.1:10921")

    run(scenario())


def test_delete_topic(run: Run, namesrv: NameServer, client: RemotingClient) -> None:
    async def scenario() -> None:
        await register(client, addr_of(namesrv), topics={"Gone": 2, "Kept": 2})
        gone_topic = DeleteTopicFromNamesrvRequestHeader(topic="Gone")
        reply = await ask(client, addr_of(namesrv), RequestCode.DELETE_TOPIC_IN_NAMESRV, gone_topic)
        assert reply.code == ResponseCode.SUCCESS
        gone = await ask_route(client, addr_of(namesrv), "Gone")
        assert gone.code == ResponseCode.TOPIC_NOT_EXIST
        topics = TopicList.decode(
            (await ask(client, addr_of(namesrv), RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body
        )
        assert topics.topics == ["Kept"]
        # The same registration again (unchanged data version) does not bring it back.
        await register(client, addr_of(namesrv), topics={"Gone": 2, "Kept": 2})
        gone = await ask_route(client, addr_of(namesrv), "Gone")
        assert gone.code == ResponseCode.TOPIC_NOT_EXIST

    run(scenario())


def test_wipe_and_add_write_perm(run: Run, namesrv: NameServer, client: RemotingClient) -> None:
    async def perm() -> int:
        reply = await ask_route(client, addr_of(namesrv), "T")
        return TopicRouteData.decode(reply.body).queue_datas[0].perm

    async def scenario() -> None:
        await register(client, addr_of(namesrv), topics={"T": 2, "U": 2})
        broker_a = BrokerNameRequestHeader(broker_name="broker-a")
        wiped = await ask(client, addr_of(namesrv), RequestCode.WIPE_WRITE_PERM_OF_BROKER, broker_a)
        assert wiped.code == ResponseCode.SUCCESS
        assert WipeWritePermOfBrokerResponseHeader.decode(wiped.ext_fields).wipe_topic_count == 2
        assert await perm() == 4
        added = await ask(client, addr_of(namesrv), RequestCode.ADD_WRITE_PERM_OF_BROKER, broker_a)
        assert AddWritePermOfBrokerResponseHeader.decode(added.ext_fields).add_topic_count == 2
        assert await perm() == 6

    run(scenario())


def test_unregister_broker(run: Run, namesrv: NameServer, client: RemotingClient) -> None:
    async def scenario() -> None:
        await register(client, addr_of(namesrv))
        reply = await ask(client, addr_of(namesrv), RequestCode.UNREGISTER_BROKER, BROKER_A)
        assert reply.code == ResponseCode.SUCCESS
        route = await ask_route(client, addr_of(namesrv), "TopicTest")
        assert route.code == ResponseCode.TOPIC_NOT_EXIST

    run(scenario())


def test_query_data_version(run: Run, namesrv: NameServer, client: RemotingClient) -> None:
    async def query(counter: int) -> RemotingCommand:
        request = RemotingCommand(
            code=RequestCode.QUERY_DATA_VERSION,
            ext_fields=BROKER_A.encode(),
            body=fastjson.dumps(DataVersion(1_700_000_000_000, counter).to_json()),
        )
        return await client.invoke(addr_of(namesrv), request)

    async def scenario() -> None:
        await register(client, addr_of(namesrv), counter=5)
        same = await query(5)
        assert QueryDataVersionResponseHeader.decode(same.ext_fields).changed is False
        assert DataVersion.from_json(json.loads(same.body)) == DataVersion(1_700_000_000_000, 5)
        assert QueryDataVersionResponseHeader.decode((await query(6)).ext_fields).changed is True

    run(scenario())


def test_kv_config(run: Run, namesrv: NameServer, client: RemotingClient) -> None:
    async def scenario() -> None:
        entry = KVConfigKeyRequestHeader(namespace="NS", key="k")
        namespace = GetKVListByNamespaceRequestHeader(namespace="NS")
        put = await ask(
            client,
            addr_of(namesrv),
            RequestCode.PUT_KV_CONFIG,
            PutKVConfigRequestHeader(namespace="NS", key="k", value="v"),
        )
        assert put.code == ResponseCode.SUCCESS
        got = await ask(client, addr_of(namesrv), RequestCode.GET_KV_CONFIG, entry)
        assert GetKVConfigResponseHeader.decode(got.ext_fields).value == "v"
        listed = await ask(client, addr_of(namesrv), RequestCode.GET_KVLIST_BY_NAMESPACE, namespace)
        assert parse_kv_table(listed.body) == {"k": "v"}
        await ask(client, addr_of(namesrv), RequestCode.DELETE_KV_CONFIG, entry)
        missing = await ask(client, addr_of(namesrv), RequestCode.GET_KV_CONFIG, entry)
        assert (missing.code, missing.remark) == (
            ResponseCode.QUERY_NOT_FOUND,
            "No config item, Namespace: NS Key: k",
        )
        empty = await ask(client, addr_of(namesrv), RequestCode.GET_KVLIST_BY_NAMESPACE, namespace)
        assert empty.code == ResponseCode.QUERY_NOT_FOUND

    run(scenario())


def test_order_topic_conf_goes_to_brokers_and_routes(
    run: Run, start_namesrv: Callable[..., NameServer], client: RemotingClient
) -> None:
    namesrv = start_namesrv(order_message_enable=True)

    async def scenario() -> None:
        order_conf = PutKVConfigRequestHeader(namespace="ORDER_TOPIC_CONFIG", key="T", value="broker-a:4")
        await ask(client, addr_of(namesrv), RequestCode.PUT_KV_CONFIG, order_conf)
        reply = await register(client, addr_of(namesrv), topics={"T": 4})
        assert parse_kv_table(reply.body) == {"T": "broker-a:4"}
        route = await ask_route(client, addr_of(namesrv), "T")
        assert TopicRouteData.decode(route.body).order_topic_conf == "broker-a:4"

    run(scenario())


def test_port_zero_binds_a_free_port(namesrv: NameServer) -> None:
    assert namesrv.port > 0
