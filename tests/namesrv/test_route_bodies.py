"""Route bodies (cometmq.protocol.route) and the route table's bookkeeping without sockets."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cometmq.errors import ProtocolError
from cometmq.namesrv.route_info import RouteInfoManager
from cometmq.protocol import fastjson
from cometmq.protocol.route import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    RegisterBrokerBody,
    TopicList,
    TopicRouteData,
)
from cometmq.protocol.topic_config import TopicConfig

names = st.from_regex(r"[A-Za-z0-9_-]{1,20}", fullmatch=True)
addrs = st.builds(lambda a, p: f"10.0.0.{a}:{p}", st.integers(0, 255), st.integers(1, 65535))
routes = st.builds(
    TopicRouteData,
    queue_datas=st.lists(
        st.builds(
            QueueData, names, st.integers(0, 64), st.integers(0, 64), st.integers(0, 15), st.integers(0, 3)
        )
    ),
    broker_datas=st.lists(st.builds(BrokerData, names, names, st.dictionaries(st.integers(0, 3), addrs))),
    filter_server_table=st.dictionaries(addrs, st.lists(addrs, max_size=2), max_size=2),
    order_topic_conf=st.none() | names,
)


@given(routes)
def test_route_round_trips_in_both_forms(route: TopicRouteData) -> None:
    assert TopicRouteData.decode(route.encode(standard_json=True)) == route
    assert TopicRouteData.decode(route.encode(standard_json=False)) == route
    json.loads(route.encode(standard_json=True))  # standard JSON really is


def test_legacy_form_matches_fastjson() -> None:
    route = TopicRouteData(
        [QueueData("broker-a", 4, 4, 6)], [BrokerData("DefaultCluster", "broker-a", {1: "b:2", 0: "a:1"})]
    )
    assert route.encode(standard_json=False) == (
        b'{"brokerDatas":[{"brokerAddrs":{0:"a:1",1:"b:2"},"brokerName":"broker-a","cluster":"DefaultCluster"}],'
        b'"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,'
        b'"topicSysFlag":0,"writeQueueNums":4}]}'
    )


def test_old_queue_data_flag_spelling() -> None:
    queue = QueueData.from_json(
        {"brokerName": "b", "perm": 6, "readQueueNums": 1, "writeQueueNums": 1, "topicSynFlag": 2}
    )
    assert queue.topic_sys_flag == 2


def test_cluster_info_and_topic_list_round_trip() -> None:
    info = ClusterInfo({"b": BrokerData("C", "b", {0: "h:1"})}, {"C": ["b"]})
    assert ClusterInfo.decode(info.encode()) == info
    assert ClusterInfo.decode(fastjson.dumps(info.to_json(), numeric_keys_unquoted=True)) == info
    topics = TopicList(["a", "b"], "h:1")
    assert TopicList.decode(topics.encode()) == topics


@given(
    st.dictionaries(
        names, st.builds(TopicConfig, names, st.integers(1, 64), st.integers(1, 64), st.integers(0, 7))
    ),
    st.lists(addrs, max_size=3),
    st.booleans(),
)
def test_register_body_round_trips(
    configs: dict[str, TopicConfig], filters: list[str], compressed: bool
) -> None:
    configs = {tc.topic_name: tc for tc in configs.values()}
    body = RegisterBrokerBody(DataVersion(123, 4), configs, filters)
    assert RegisterBrokerBody.decode(body.encode(compressed=compressed), compressed=compressed) == body


def test_register_body_garbage_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match=r"RegisterBrokerBody is not valid: .*does not inflate"):
        RegisterBrokerBody.decode(b"not zlib", compressed=True)
    with pytest.raises(ProtocolError, match=r"RegisterBrokerBody is not valid: .*not a JSON object"):
        RegisterBrokerBody.decode(b"[1,2]")


def test_a_missing_field_of_an_answer_is_named() -> None:
    with pytest.raises(ProtocolError, match="the TopicRouteData has no field brokerName"):
        TopicRouteData.decode(b'{"queueDatas":[{"perm":6}]}')
    with pytest.raises(ProtocolError, match=r"the ClusterInfo is not valid: .*brokerAddrTable"):
        ClusterInfo.decode(b'{"brokerAddrTable":[1]}')


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
answer_keys = st.sampled_from(
    [
        *("queueDatas", "brokerDatas", "brokerName", "brokerAddrs", "brokerAddrTable", "clusterAddrTable"),
        *("topicList", "brokerAddr", "filterServerTable", "perm", "readQueueNums", "timestamp", "counter"),
    ]
)
answer_bodies = st.binary(max_size=40) | st.dictionaries(answer_keys, json_values, max_size=4).map(
    lambda obj: json.dumps(obj).encode()
)


@given(answer_bodies)
@example(b'{"queueDatas":[{"brokerName":"b","perm":1e999}]}')
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # a loaded machine is slow to start
def test_any_answer_body_decodes_or_raises_one_protocol_error(body: bytes) -> None:
    for decode in (TopicRouteData.decode, ClusterInfo.decode, TopicList.decode, DataVersion.decode):
        with contextlib.suppress(ProtocolError):
            decode(body)


def _body(*topics: str, counter: int = 1) -> RegisterBrokerBody:
    return RegisterBrokerBody(DataVersion(1, counter), {t: TopicConfig(t, 4, 4) for t in topics})


def test_expiry_and_connection_loss_without_sockets() -> None:
    routes = RouteInfoManager(broker_expiry_s=10.0)
    conn_a, conn_b = object(), object()
    common = {"cluster": "C", "broker_id": 0, "ha_server_addr": ""}
    routes.register_broker(
        broker_addr="a:1", broker_name="a", body=_body("T"), connection=conn_a, now=0.0, **common
    )
    routes.register_broker(
        broker_addr="b:1", broker_name="b", body=_body("T"), connection=conn_b, now=5.0, **common
    )
    assert routes.scan_not_active(now=9.0) == []
    assert routes.scan_not_active(now=12.0) == [conn_a]
    route = routes.pickup_topic_route("T")
    assert route is not None and [b.broker_name for b in route.broker_datas] == ["b"]
    routes.connection_closed(conn_b)
    assert routes.pickup_topic_route("T") is None
    assert routes.cluster_info() == ClusterInfo()


def test_incremental_registration_keeps_other_topics() -> None:
    routes = RouteInfoManager()
    common = {"cluster": "C", "broker_id": 0, "ha_server_addr": "", "connection": None, "broker_addr": "a:1"}
    routes.register_broker(broker_name="a", body=_body("T1", "T2", counter=1), now=0.0, **common)
    routes.register_broker(broker_name="a", body=_body("T3", counter=2), now=1.0, **common)
    assert routes.all_topics().topics == ["T1", "T2", "T3"]
