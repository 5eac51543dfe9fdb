"""QueryRoute: a topic's queues with the proxy as the broker's endpoint and the message types it takes."""

from __future__ import annotations

import pytest
from proxy_support import ProxiedStandalone, Stub

from cometmq.proxy import definition_pb2 as v2
from cometmq.proxy import service_pb2 as pb


def query(stub: Stub, topic: str, host: str = "127.0.0.1", port: int = 8081) -> pb.QueryRouteResponse:
    endpoints = v2.Endpoints(scheme=v2.IPv4, addresses=[v2.Address(host=host, port=port)])
    response: pb.QueryRouteResponse = stub.QueryRoute(
        pb.QueryRouteRequest(topic=v2.Resource(name=topic), endpoints=endpoints)
    )
    return response


def test_route_lists_every_queue_with_the_asked_endpoints_as_broker(
    proxied: ProxiedStandalone, stub: Stub
) -> None:
    topic = proxied.new_topic(queues=3)
    response = query(stub, topic, "proxy.example", 9000)
    assert response.status.code == v2.OK
    assert sorted(queue.id for queue in response.message_queues) == [0, 1, 2]
    for queue in response.message_queues:
        assert queue.topic.name == topic
        assert queue.permission == v2.READ_WRITE
        assert queue.broker.name == "broker-a" and queue.broker.id == 0
        assert [(a.host, a.port) for a in queue.broker.endpoints.addresses] == [("proxy.example", 9000)]


def test_topic_without_message_type_accepts_normal_messages(proxied: ProxiedStandalone, stub: Stub) -> None:
    response = query(stub, proxied.new_topic())
    assert {tuple(queue.accept_message_types) for queue in response.message_queues} == {(v2.NORMAL,)}


@pytest.mark.parametrize(
    ("attribute", "accepted"),
    [
        ("FIFO", (v2.FIFO,)),
        ("DELAY", (v2.DELAY,)),
        ("TRANSACTION", (v2.TRANSACTION,)),
        ("MIXED", (v2.NORMAL, v2.FIFO, v2.DELAY, v2.TRANSACTION)),
    ],
)
def test_route_carries_the_topic_message_type(
    proxied: ProxiedStandalone, stub: Stub, attribute: str, accepted: tuple[int, ...]
) -> None:
    response = query(stub, proxied.new_topic(f"+message.type={attribute}"))
    assert {tuple(queue.accept_message_types) for queue in response.message_queues} == {accepted}


def test_missing_topic_is_topic_not_found(stub: Stub) -> None:
    response = query(stub, "proxy-no-such-topic")
    assert response.status.code == v2.TOPIC_NOT_FOUND
    assert "proxy-no-such-topic" in response.status.message
    assert not response.message_queues


@pytest.mark.parametrize("topic", ["", "bad topic", "rmq_sys_wheel_timer"])
def test_illegal_topic_is_refused(stub: Stub, topic: str) -> None:
    assert query(stub, topic).status.code == v2.ILLEGAL_TOPIC
