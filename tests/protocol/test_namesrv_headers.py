"""The name server's header declarations: RocketMQ's defaults, the limits, and the route JSON rule."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cometmq.errors import HeaderError
from cometmq.protocol.headers import Header
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

REGISTER_FIELDS = {
    "brokerName": "broker-a",
    "brokerAddr": "10.0.0.1:10911",
    "clusterName": "DefaultCluster",
    "haServerAddr": "10.0.0.1:10912",
    "brokerId": "1",
}


def test_register_broker_defaults_to_an_uncompressed_body_with_no_crc_check() -> None:
    registration = RegisterBrokerRequestHeader.decode(REGISTER_FIELDS)
    assert (registration.broker_id, registration.compressed, registration.body_crc32) == (1, False, 0)
    assert RegisterBrokerRequestHeader.decode(registration.encode()) == registration


@pytest.mark.parametrize("name", ["brokerName", "brokerAddr", "clusterName", "haServerAddr", "brokerId"])
def test_register_broker_needs_every_identity_field(name: str) -> None:
    fields = {key: value for key, value in REGISTER_FIELDS.items() if key != name}
    with pytest.raises(HeaderError, match=f"{name} is missing"):
        RegisterBrokerRequestHeader.decode(fields)


@pytest.mark.parametrize("header_class", [RegisterBrokerRequestHeader, BrokerRequestHeader])
def test_a_negative_broker_id_is_refused(header_class: type[Header]) -> None:
    with pytest.raises(HeaderError, match="brokerId=-1 is below 0"):
        header_class.decode({**REGISTER_FIELDS, "brokerId": "-1"})


@pytest.mark.parametrize(
    ("version", "fields", "standard"),
    [
        (63, {}, False),
        (400, {}, False),
        (401, {}, True),
        (409, {}, True),
        (63, {"acceptStandardJsonOnly": "true"}, True),
        (63, {"acceptStandardJsonOnly": "false"}, False),
    ],
)
def test_which_route_json_a_client_gets(version: int, fields: dict[str, str], standard: bool) -> None:
    query = GetRouteInfoRequestHeader.decode({"topic": "T", **fields})
    assert query.wants_standard_json(version) is standard


def test_absent_optional_fields_are_none_and_stay_off_the_wire() -> None:
    assert DeleteTopicFromNamesrvRequestHeader.decode({"topic": "T"}).cluster_name is None
    assert RegisterBrokerResponseHeader().encode() == {}
    assert GetRouteInfoRequestHeader(topic="T").encode() == {"topic": "T"}


def test_answers_encode_as_a_java_name_server_writes_them() -> None:
    assert QueryDataVersionResponseHeader(changed=False).encode() == {"changed": "false"}
    assert WipeWritePermOfBrokerResponseHeader(wipe_topic_count=2).encode() == {"wipeTopicCount": "2"}
    assert AddWritePermOfBrokerResponseHeader(add_topic_count=3).encode() == {"addTopicCount": "3"}
    slave = RegisterBrokerResponseHeader(master_addr="10.0.0.1:10911", ha_server_addr="10.0.0.1:10912")
    assert slave.encode() == {"masterAddr": "10.0.0.1:10911", "haServerAddr": "10.0.0.1:10912"}


ALL_HEADERS = [
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    BrokerRequestHeader,
    QueryDataVersionResponseHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    BrokerNameRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
    AddWritePermOfBrokerResponseHeader,
    PutKVConfigRequestHeader,
    KVConfigKeyRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
]
WIRE_NAMES = sorted(
    {*REGISTER_FIELDS, "compressed", "bodyCrc32", "masterAddr", "changed", "topic", "cluster"}
    | {"acceptStandardJsonOnly", "wipeTopicCount", "addTopicCount", "namespace", "key", "value"}
)
wire_text = st.one_of(
    st.text(max_size=20),
    st.integers(-(2**64), 2**64).map(str),
    st.sampled_from(["true", "false", "1", "0", ""]),
)


@pytest.mark.parametrize("header_class", ALL_HEADERS)
@given(fields=st.dictionaries(st.sampled_from(WIRE_NAMES), wire_text))
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # a loaded machine is slow to start
def test_any_fields_decode_and_round_trip_or_raise_one_header_error(
    header_class: type[Header], fields: dict[str, str]
) -> None:
    try:
        decoded = header_class.decode(fields)
    except HeaderError:
        return
    assert header_class.decode(decoded.encode()) == decoded
