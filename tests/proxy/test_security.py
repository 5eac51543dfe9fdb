"""The proxy of a standalone with TLS enforced and access control on: it serves TLS with the broker's
certificate, reaches its broker over TLS, and checks each call's signature against the users and ACLs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from proxy_support import (
    ProxiedStandalone,
    Stub,
    message,
    producer_settings,
    signed,
    start_proxied,
)

from cometmq.auth import Credentials
from cometmq.client import blocking
from cometmq.proxy import definition_pb2 as v2
from cometmq.proxy import service_pb2 as pb
from secured_servers import ACL_TOPIC, ADMIN, READER, WRITER, secured_conf
from tls_support import Certificates


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory, certificates: Certificates
) -> Iterator[ProxiedStandalone]:
    directory = tmp_path_factory.mktemp("secured")
    server = start_proxied(directory / "data", secured_conf(directory / "conf", certificates))
    try:
        with blocking.AdminClient(
            server.namesrv, credentials=ADMIN, tls=certificates.client_context()
        ) as admin:
            admin.create_topic(ACL_TOPIC, 2)
        yield server
    finally:
        server.process.terminate()


@pytest.fixture
def stub(secured: ProxiedStandalone, certificates: Certificates) -> Iterator[Stub]:
    credentials = grpc.ssl_channel_credentials(root_certificates=Path(certificates.ca).read_bytes())
    with grpc.secure_channel(secured.proxy, credentials) as channel:
        yield Stub(channel)  # type: ignore[no-untyped-call]


def send(stub: Stub, metadata: list[tuple[str, str]]) -> pb.SendMessageResponse:
    response: pb.SendMessageResponse = stub.SendMessage(
        pb.SendMessageRequest(messages=[message(ACL_TOPIC)]), metadata=metadata
    )
    return response


def test_plaintext_client_is_not_served(secured: ProxiedStandalone) -> None:
    with grpc.insecure_channel(secured.proxy) as channel, pytest.raises(grpc.RpcError) as raised:
        Stub(channel).QueryRoute(pb.QueryRouteRequest(topic=v2.Resource(name=ACL_TOPIC)), timeout=10)  # type: ignore[no-untyped-call]
    assert raised.value.code() is grpc.StatusCode.UNAVAILABLE


def test_user_allowed_to_publish_sends(stub: Stub) -> None:
    response = send(stub, signed(WRITER))
    assert response.status.code == v2.OK, response.status


def test_user_not_allowed_to_publish_is_refused(stub: Stub) -> None:
    response = send(stub, signed(READER))
    assert response.status.code == v2.UNAUTHORIZED
    assert "reader" in response.status.message and "Pub" in response.status.message


def test_user_allowed_to_subscribe_queries_the_route(stub: Stub) -> None:
    request = pb.QueryRouteRequest(topic=v2.Resource(name=ACL_TOPIC))
    response = stub.QueryRoute(request, metadata=signed(READER))
    assert response.status.code == v2.OK, response.status
    assert response.message_queues


@pytest.mark.parametrize(
    "metadata",
    [
        lambda: signed(None),
        lambda: signed(WRITER, secret="not-the-secret"),
        lambda: signed(Credentials("nobody", "x")),
    ],
    ids=["unsigned", "wrong secret", "unknown user"],
)
def test_call_not_signed_by_a_known_user_is_unauthorized(stub: Stub, metadata: object) -> None:
    response = send(stub, metadata())  # type: ignore[operator]
    assert response.status.code == v2.UNAUTHORIZED
    assert response.status.message


def test_settings_of_a_producer_not_allowed_to_publish_end_the_stream(stub: Stub) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        list(stub.Telemetry(iter([producer_settings(ACL_TOPIC)]), metadata=signed(READER)))
    assert raised.value.code() is grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.parametrize("call", ["ReceiveMessage", "PullMessage"])
def test_a_streaming_consuming_call_on_a_topic_not_granted_answers_one_refusal(stub: Stub, call: str) -> None:
    queue = v2.MessageQueue(topic=v2.Resource(name="not-granted"), id=0, broker=v2.Broker(name="broker-a"))
    group = v2.Resource(name="reader-group")
    request: object
    if call == "ReceiveMessage":
        request = pb.ReceiveMessageRequest(group=group, message_queue=queue, batch_size=1)
    else:
        request = pb.PullMessageRequest(group=group, message_queue=queue, batch_size=1)
    responses = list(getattr(stub, call)(request, metadata=signed(READER)))
    assert [r.WhichOneof("content") for r in responses] == ["status"]
    assert responses[0].status.code == v2.UNAUTHORIZED
    assert "not-granted" in responses[0].status.message
