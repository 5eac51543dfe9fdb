"""CometMQ's clients and CLI over TLS, against a standalone that accepts only TLS
(tls.server.mode=enforcing) and has aclEnable: the asyncio and blocking clients send and read with
an SSL context trusting the test CA (the blocking send over its own TLS socket), the CLI with
--tls-ca; a client without TLS, or one that does not trust the server's certificate, fails clearly."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from client_support import run

from cometmq.client import LitePullConsumer, Message, Producer, blocking
from cometmq.errors import BrokerError, ConnectionClosedError
from processes import StandaloneServer, cometmq
from secured_servers import ACL_TOPIC, ADMIN, READER, WRITER, secured_standalone
from tls_support import Certificates, make_certificates


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, tls: Certificates) -> Iterator[StandaloneServer]:
    with secured_standalone(tmp_path_factory.mktemp("secured"), tls) as server:
        yield server


def test_the_asyncio_clients_send_and_read_over_tls(secured: StandaloneServer, tls: Certificates) -> None:
    async def main() -> list[bytes]:
        context = tls.client_context()
        async with Producer("PID_tls", secured.namesrv, credentials=WRITER, tls=context) as producer:
            await producer.send(Message(ACL_TOPIC, b"over tls", tags="async"))
        async with LitePullConsumer(
            "GID_tls", secured.namesrv, consume_from="first", credentials=READER, tls=context
        ) as consumer:
            consumer.subscribe(ACL_TOPIC, "async")
            received: list[bytes] = []
            while not received:
                received += [message.body for message in await consumer.poll(timeout=1.0)]
            return received

    assert run(main()) == [b"over tls"]


def test_the_blocking_producer_sends_over_its_own_tls_socket(
    secured: StandaloneServer, tls: Certificates
) -> None:
    with blocking.Producer(
        "PID_tls_blocking", secured.namesrv, credentials=WRITER, tls=tls.client_context()
    ) as producer:
        results = [producer.send(Message(ACL_TOPIC, b"blocking %d" % i)) for i in range(3)]
        assert producer.aio._lane._connections  # the later sends went over the lane
    assert [result.status.name for result in results] == ["SEND_OK"] * 3


def test_a_client_without_tls_is_told_the_server_wants_it(secured: StandaloneServer) -> None:
    async def main() -> None:
        async with Producer("PID_plain", secured.namesrv, credentials=WRITER) as producer:
            await producer.send(Message(ACL_TOPIC, b"plain"))

    with pytest.raises((BrokerError, ConnectionClosedError), match="accepts only TLS"):
        run(main())


def test_a_client_that_does_not_trust_the_certificate_fails_the_handshake(secured: StandaloneServer) -> None:
    async def main() -> None:
        async with Producer("PID_untrusting", secured.namesrv, credentials=WRITER, tls=True) as producer:
            await producer.send(Message(ACL_TOPIC, b"untrusted"))

    with pytest.raises(ConnectionClosedError, match=r"TLS handshake with .* failed"):
        run(main())


def test_the_cli_talks_tls_with_a_ca_file(secured: StandaloneServer, tls: Certificates) -> None:
    env = {"COMETMQ_ACCESS_KEY": ADMIN.access_key, "COMETMQ_SECRET_KEY": ADMIN.secret_key}
    listed = cometmq("topic", "list", "--json", "--tls-ca", str(tls.ca), "-n", secured.namesrv, env=env)
    assert listed.returncode == 0, listed.stderr
    assert ACL_TOPIC in json.dumps(json.loads(listed.stdout))
    plain = cometmq("topic", "list", "-n", secured.namesrv, env=env)
    assert plain.returncode == 1
    assert "accepts only TLS" in plain.stderr
