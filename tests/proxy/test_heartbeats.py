"""The proxy's heartbeats to the brokers: whatever its clients ask, every consumer group of theirs is
registered, and settings the brokers would refuse are refused on the Telemetry stream."""

from __future__ import annotations

import grpc
import pytest
from proxy_support import (
    ProxiedStandalone,
    Stub,
    client_metadata,
    consumer_settings,
    new_client_id,
    producer_settings,
)

from cometmq.client import blocking
from cometmq.client.admin import ConsumerConnections
from cometmq.errors import BrokerError
from cometmq.proxy import definition_pb2 as v2
from cometmq.proxy import service_pb2 as pb
from waiting import wait_until_blocking


def exchange(stub: Stub, command: pb.TelemetryCommand, client_id: str | None = None) -> pb.TelemetryCommand:
    metadata = client_metadata(client_id or new_client_id())
    [answer] = list(stub.Telemetry(iter([command]), metadata=metadata))
    return answer


def sql_settings(group: str, topic: str, expression: str) -> pb.TelemetryCommand:
    command = consumer_settings(group, topic)
    command.settings.subscription.subscriptions[0].expression.CopyFrom(
        v2.FilterExpression(type=v2.SQL, expression=expression)
    )
    return command


def terminate(stub: Stub, client_id: str) -> None:
    request = pb.NotifyClientTerminationRequest()
    assert stub.NotifyClientTermination(request, metadata=client_metadata(client_id)).status.code == v2.OK


def check_back_members(namesrv: str, topic: str) -> int:
    """How many clients the brokers know in the producer group named after *topic*."""
    with blocking.AdminClient(namesrv) as admin:
        try:
            return len(admin.producer_connections(topic, topic))
        except BrokerError:
            return 0  # "the producer group[...] not exist"


def wait_registered(namesrv: str, group: str) -> ConsumerConnections:
    def registered() -> ConsumerConnections | None:
        with blocking.AdminClient(namesrv) as admin:
            try:
                return admin.consumer_connections(group)
            except BrokerError:
                return None  # CONSUMER_NOT_ONLINE until a heartbeat naming the group arrived

    connections = wait_until_blocking(registered, message=f"group {group} registered by the proxy")
    assert connections is not None
    return connections


def test_consumer_group_is_registered_beside_a_producer_of_many_topics(
    proxied: ProxiedStandalone, stub: Stub
) -> None:
    exchange(stub, producer_settings(*(f"proxy-published-{index}" for index in range(300))))
    group = "proxy-group-beside-many-topics"
    exchange(stub, consumer_settings(group, proxied.new_topic()))
    wait_registered(proxied.namesrv, group)


def test_unparsable_sql92_subscription_is_refused(proxied: ProxiedStandalone, stub: Stub) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        exchange(stub, sql_settings("proxy-bad-sql-group", proxied.new_topic(), "a >"))
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "SQL92" in raised.value.details()


def test_unknown_filter_type_is_refused(proxied: ProxiedStandalone, stub: Stub) -> None:
    command = consumer_settings("proxy-bad-filter-group", proxied.new_topic())
    command.settings.subscription.subscriptions[0].expression.type = 7  # type: ignore[assignment]
    with pytest.raises(grpc.RpcError) as raised:
        exchange(stub, command)
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_sql92_subscription_that_compiles_is_registered(proxied: ProxiedStandalone, stub: Stub) -> None:
    topic = proxied.new_topic()
    group = "proxy-good-sql-group"
    exchange(stub, sql_settings(group, topic, "a > 1"))
    assert wait_registered(proxied.namesrv, group).subscriptions == {topic: "a > 1"}


def test_settings_naming_too_many_topics_are_refused(stub: Stub) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        exchange(stub, producer_settings(*(f"proxy-too-many-{index}" for index in range(1025))))
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "1025 topics" in raised.value.details()


def test_a_group_subscribes_what_its_clients_subscribe_now(proxied: ProxiedStandalone, stub: Stub) -> None:
    first, second = proxied.new_topic(), proxied.new_topic()
    group = "proxy-resubscribing-group"
    client_id = new_client_id()
    stream = stub.Telemetry(
        iter([consumer_settings(group, first), consumer_settings(group, second)]),
        metadata=client_metadata(client_id),
    )
    assert [answer.status.code for answer in stream] == [v2.OK, v2.OK]
    other = "proxy-group-after-resubscription"
    exchange(stub, consumer_settings(other, first))  # its heartbeat carries the group's subscriptions too
    wait_registered(proxied.namesrv, other)
    assert wait_registered(proxied.namesrv, group).subscriptions == {second: "*"}


def test_more_groups_than_one_heartbeat_takes_are_all_registered(proxied: ProxiedStandalone) -> None:
    topic = proxied.new_topic()
    groups = [f"proxy-many-groups-{index}" for index in range(260)]
    with grpc.insecure_channel(proxied.proxy) as channel:
        stub = Stub(channel)  # type: ignore[no-untyped-call]
        for group in groups:
            exchange(stub, consumer_settings(group, topic))
    for group in (groups[0], groups[-1]):
        wait_registered(proxied.namesrv, group)


def test_only_published_topics_taking_transactions_are_check_back_groups(
    proxied: ProxiedStandalone, stub: Stub
) -> None:
    transactional, normal = proxied.new_topic("+message.type=TRANSACTION"), proxied.new_topic()
    client_id = new_client_id()
    exchange(stub, producer_settings(transactional, normal), client_id)
    wait_until_blocking(
        lambda: check_back_members(proxied.namesrv, transactional), message="the check-back group registered"
    )
    assert check_back_members(proxied.namesrv, normal) == 0  # decided in the same round
    terminate(stub, client_id)
    wait_until_blocking(
        lambda: check_back_members(proxied.namesrv, transactional) == 0,
        message="the check-back group left once nobody publishes the topic",
    )


def test_consumer_group_left_by_its_last_client_is_unregistered(
    proxied: ProxiedStandalone, stub: Stub
) -> None:
    group = "proxy-group-left"
    client_id = new_client_id()
    exchange(stub, consumer_settings(group, proxied.new_topic()), client_id)
    wait_registered(proxied.namesrv, group)
    terminate(stub, client_id)

    def unregistered() -> bool:
        with blocking.AdminClient(proxied.namesrv) as admin:
            try:
                admin.consumer_connections(group)
            except BrokerError:
                return True
            return False

    wait_until_blocking(unregistered, message="the group unregistered at the broker")
