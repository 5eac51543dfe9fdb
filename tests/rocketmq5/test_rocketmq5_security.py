"""The official RocketMQ 5.x Python client against a standalone with TLS enforced and access control on:
it connects over TLS (trusting the test CA), signs its calls with a user's access key, and is refused with
the status a 5.x client expects when the user may not do what it asks or its signature is wrong."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from client5 import Client5, Scenarios
from proxied import ProxiedStandalone

from cometmq.auth import Credentials
from cometmq.client.blocking import AdminClient
from secured_servers import ACL_TOPIC, ADMIN, READER, WRITER, secured_conf
from tls_support import Certificates


@pytest.fixture(scope="module")
def secured5(
    tmp_path_factory: pytest.TempPathFactory, certificates: Certificates
) -> Iterator[ProxiedStandalone]:
    directory = tmp_path_factory.mktemp("secured5")
    server = ProxiedStandalone(directory / "data", "-c", str(secured_conf(directory / "conf", certificates)))
    server.start()
    try:
        with AdminClient(server.namesrv, credentials=ADMIN, tls=certificates.client_context()) as admin:
            admin.create_topic(ACL_TOPIC, 2)
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(secured5: ProxiedStandalone, certificates: Certificates, tmp_path: Path) -> Scenarios:
    # grpcio's secure channel, which the client opens with default credentials, trusts these roots.
    roots = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(certificates.ca)}
    return Scenarios(secured5.endpoints, tmp_path, env=roots)


def signed_as(user: Credentials, secret: str | None = None) -> tuple[str, ...]:
    """The driver's options for a client over TLS signing as *user* (with *secret* for its secret key)."""
    return ("--tls", "--access-key", user.access_key, "--secret-key", secret or user.secret_key)


def refused(run: Client5) -> str:
    """The scenario's error (it must have ended without doing what it was asked), with what the client
    logged: it logs the status code and message of a refused call before reporting it vaguely."""
    done = run.finish()
    assert not done["ok"], f"{run.scenario} succeeded\n{run.diagnostics()}"
    assert run.named("error"), run.diagnostics()
    return f"{run.named('error')[-1]}\n{run.client_log()}"


# apache.rocketmq.v2.Code.UNAUTHORIZED
UNAUTHORIZED = "40100"


def test_a_user_granted_the_topic_sends_and_receives_over_tls(client: Scenarios) -> None:
    sent = client.produce(ACL_TOPIC, "--count", "3", "--body-prefix", "tls-", *signed_as(WRITER))
    assert len(sent.named("sent")) == 3
    consumed = client.simple_consume(ACL_TOPIC, "tls-readers", "--until-acked", "3", *signed_as(WRITER))
    assert len(consumed.named("acked")) == 3
    assert {e["body"] for e in consumed.named("received")} == {"tls-0", "tls-1", "tls-2"}


def test_a_user_not_granted_publishing_is_refused_unauthorized(client: Scenarios) -> None:
    with client.start("produce", ACL_TOPIC, *signed_as(READER)) as run:
        error = refused(run)
    assert f"{UNAUTHORIZED}, user reader may not Pub on Topic:{ACL_TOPIC}" in error, error


def test_a_wrong_secret_is_refused_unauthorized(client: Scenarios) -> None:
    with client.start("produce", ACL_TOPIC, *signed_as(WRITER, secret="not-the-secret")) as run:
        error = refused(run)
    assert f"{UNAUTHORIZED}, the signature of user writer does not match" in error, error


def test_a_client_without_tls_is_not_served(client: Scenarios) -> None:
    plaintext = tuple(arg for arg in signed_as(WRITER) if arg != "--tls")
    with client.start("produce", ACL_TOPIC, *plaintext, "--request-timeout", "3") as run:
        error = refused(run)
    assert "UNAVAILABLE" in error, error
