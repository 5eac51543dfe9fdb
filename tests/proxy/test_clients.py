"""Telemetry's settings exchange, Heartbeat and NotifyClientTermination, as the 5.x clients expect them."""

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


def exchange(stub: Stub, client_id: str, command: pb.TelemetryCommand) -> pb.TelemetryCommand:
    """Send *command* on a Telemetry stream and close it; the one command the proxy answers."""
    answers: list[pb.TelemetryCommand] = list(
        stub.Telemetry(iter([command]), metadata=client_metadata(client_id))
    )
    [answer] = answers
    return answer


def test_producer_is_told_the_retry_policy_and_body_limit(proxied: ProxiedStandalone, stub: Stub) -> None:
    topic = proxied.new_topic()
    answer = exchange(stub, new_client_id(), producer_settings(topic))
    assert answer.status.code == v2.OK
    settings = answer.settings
    assert [resource.name for resource in settings.publishing.topics] == [topic]
    assert settings.publishing.max_body_size == 4 * 1024 * 1024
    assert settings.publishing.validate_message_type
    assert settings.backoff_policy.max_attempts == 3
    backoff = settings.backoff_policy.exponential_backoff
    assert (backoff.initial.ToMilliseconds(), backoff.max.ToMilliseconds(), backoff.multiplier) == (
        10,
        1000,
        2,
    )


def test_consumer_is_told_its_group_attempts_and_backoff(proxied: ProxiedStandalone, stub: Stub) -> None:
    topic = proxied.new_topic()
    answer = exchange(stub, new_client_id(), consumer_settings("proxy-settings-group", topic))
    assert answer.status.code == v2.OK
    settings = answer.settings
    assert settings.subscription.group.name == "proxy-settings-group"
    assert not settings.subscription.fifo
    assert settings.subscription.receive_batch_size == 32
    assert settings.subscription.long_polling_timeout.ToMilliseconds() == 20_000
    assert settings.backoff_policy.max_attempts == 17  # a group's retryMaxTimes (16) + 1
    delays = [delay.ToMilliseconds() for delay in settings.backoff_policy.customized_backoff.next]
    assert delays[:4] == [1_000, 5_000, 10_000, 30_000]


def test_settings_without_publishing_or_subscription_are_refused(stub: Stub) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        exchange(stub, new_client_id(), pb.TelemetryCommand(settings=v2.Settings(client_type=v2.PRODUCER)))
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "publishing or subscription" in raised.value.details()


def test_settings_naming_an_illegal_topic_are_refused(stub: Stub) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        exchange(stub, new_client_id(), producer_settings("bad topic"))
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_telemetry_without_client_id_is_refused(stub: Stub) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        list(stub.Telemetry(iter([producer_settings("anything")])))
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "client id" in raised.value.details()


def test_heartbeat_of_a_client_whose_settings_are_known(proxied: ProxiedStandalone, stub: Stub) -> None:
    client_id = new_client_id()
    group = v2.Resource(name="proxy-heartbeat-group")
    before = stub.Heartbeat(pb.HeartbeatRequest(group=group), metadata=client_metadata(client_id))
    assert before.status.code == v2.UNRECOGNIZED_CLIENT_TYPE
    exchange(stub, client_id, consumer_settings(group.name, proxied.new_topic()))
    after = stub.Heartbeat(
        pb.HeartbeatRequest(group=group, client_type=v2.SIMPLE_CONSUMER), metadata=client_metadata(client_id)
    )
    assert after.status.code == v2.OK


def test_heartbeat_without_client_id_is_client_id_required(stub: Stub) -> None:
    assert stub.Heartbeat(pb.HeartbeatRequest()).status.code == v2.CLIENT_ID_REQUIRED


def test_termination_forgets_the_client(proxied: ProxiedStandalone, stub: Stub) -> None:
    client_id = new_client_id()
    exchange(stub, client_id, producer_settings(proxied.new_topic()))
    metadata = client_metadata(client_id)
    assert (
        stub.NotifyClientTermination(pb.NotifyClientTerminationRequest(), metadata=metadata).status.code
        == v2.OK
    )
    assert stub.Heartbeat(pb.HeartbeatRequest(), metadata=metadata).status.code == v2.UNRECOGNIZED_CLIENT_TYPE
    again = stub.NotifyClientTermination(pb.NotifyClientTerminationRequest(), metadata=metadata)
    assert again.status.code == v2.UNRECOGNIZED_CLIENT_TYPE


def test_consumer_group_of_a_client_is_registered_with_the_brokers(
    proxied: ProxiedStandalone, stub: Stub
) -> None:
    topic = proxied.new_topic()
    group = "proxy-registered-group"
    exchange(stub, new_client_id(), consumer_settings(group, topic))

    def registered() -> ConsumerConnections | None:
        with blocking.AdminClient(proxied.namesrv) as admin:
            try:
                return admin.consumer_connections(group)
            except BrokerError:
                return None  # CONSUMER_NOT_ONLINE until the proxy's heartbeat arrived

    connections = wait_until_blocking(registered, message="the proxy's consumer registered")
    assert connections is not None
    assert connections.consume_type == "CONSUME_ACTIVELY"  # a simple consumer
    assert connections.subscriptions == {topic: "*"}
