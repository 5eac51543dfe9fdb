"""The HA link with TLS and the master's challenge: in-process stores, an HAServer and an HAClient over
real loopback sockets."""

from __future__ import annotations

import asyncio
import hmac
import logging
import ssl
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from cometmq.auth import Credentials
from cometmq.protocol.ha import AUTH_CHALLENGE_SIZE, AUTH_MAGIC, HELLO_MAGIC, encode_auth, encode_hello
from cometmq.remoting.tls import TlsSettings
from cometmq.replication import HAClient, HAServer
from cometmq.store import MessageStore
from tls_support import Certificates, make_certificates
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replication"))
from _stores import put, replication_config, stores, texts

SECRETS = {"replicator": "right secret", "reader": "reader secret"}


def verify(addr: str, access_key: str, content: bytes, signature: bytes) -> str | None:
    """A master's check of a slave's AUTH: users as SECRETS; only "replicator" may replicate."""
    secret = SECRETS.get(access_key)
    if secret is None:
        return f"user {access_key} is not known here"
    if not hmac.compare_digest(Credentials(access_key, secret).digest(content), signature):
        return f"the signature of user {access_key} does not match"
    if access_key != "replicator":
        return f"user {access_key} may not Update on Cluster:DefaultCluster"
    return None


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@asynccontextmanager
async def pair(
    master: MessageStore,
    slave: MessageStore,
    *,
    tls: TlsSettings | None = None,
    ssl_context: ssl.SSLContext | None = None,
    credentials: Credentials | None = None,
) -> AsyncIterator[tuple[HAServer, HAClient]]:
    """*slave* (brokerId 1) following *master* whose HA server checks slaves with ``verify``."""
    server = HAServer(master, replication_config(0), verify_slave=verify, tls=tls)
    await server.start("127.0.0.1", 0)
    client = HAClient(
        slave,
        replication_config(1),
        lambda: f"127.0.0.1:{server.port}",
        broker_id=1,
        credentials=credentials,
        ssl_context=ssl_context,
    )
    client.start()
    try:
        yield server, client
    finally:
        await client.stop()
        await server.stop()


def test_a_slave_with_the_right_credentials_replicates_over_tls(tmp_path: Path, certs: Certificates) -> None:
    tls = TlsSettings.from_properties(certs.server_properties("enforcing"))

    async def scenario() -> None:
        with stores(tmp_path, "master", "slave") as (master, slave):
            master.begin_epoch(1)
            end = put(master, "one", "two")
            async with pair(
                master,
                slave,
                tls=tls,
                ssl_context=certs.client_context(),
                credentials=Credentials("replicator", "right secret"),
            ):
                await wait_until(lambda: slave.replica_end() == end, message="the slave to copy the master")
                end = put(master, "three")
                await wait_until(lambda: slave.replica_end() == end, message="the slave to copy the next one")
            assert texts(slave) == ["one", "two", "three"]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("credentials", "master_says", "slave_says"),
    [
        (
            Credentials("replicator", "wrong"),
            "the signature of user replicator does not match",
            "refused this slave's AUTH as user replicator",
        ),
        (
            Credentials("nobody", "x"),
            "user nobody is not known here",
            "refused this slave's AUTH as user nobody",
        ),
        (
            Credentials("reader", "reader secret"),
            "user reader may not Update",
            "refused this slave's AUTH as user reader",
        ),
        (None, None, "set innerClientAuthenticationCredentials"),
    ],
)
def test_a_slave_the_master_does_not_accept_copies_nothing_and_both_say_why(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    credentials: Credentials | None,
    master_says: str | None,
    slave_says: str,
) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.replication")

    async def scenario() -> None:
        with stores(tmp_path, "master", "slave") as (master, slave):
            master.begin_epoch(1)
            put(master, "secret data")
            async with pair(master, slave, credentials=credentials):
                await wait_until(lambda: slave_says in caplog.text, message="the slave's log line")
                if master_says is not None:
                    await wait_until(lambda: master_says in caplog.text, message="the master's log line")
            assert slave.replica_end() == 0

    asyncio.run(scenario())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w for w in warnings if slave_says in w], warnings
    if master_says is not None:
        refusals = [w for w in warnings if w.startswith("refused the HA link of slave")]
        assert len(refusals) == 1 and master_says in refusals[0], warnings
    assert "right secret" not in caplog.text and "reader secret" not in caplog.text


def test_a_plaintext_slave_of_an_enforcing_master_is_refused(
    tmp_path: Path, certs: Certificates, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.replication")
    tls = TlsSettings.from_properties(certs.server_properties("enforcing"))

    async def scenario() -> None:
        with stores(tmp_path, "master", "slave") as (master, slave):
            master.begin_epoch(1)
            put(master, "data")
            async with pair(master, slave, tls=tls, credentials=Credentials("replicator", "right secret")):
                await wait_until(
                    lambda: "accepts only TLS (tls.server.mode=enforcing)" in caplog.text,
                    message="the master's log line",
                )
            assert slave.replica_end() == 0

    asyncio.run(scenario())


def test_a_tls_slave_of_a_master_with_tls_off_says_the_handshake_failed(
    tmp_path: Path, certs: Certificates, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.replication")

    async def scenario() -> None:
        with stores(tmp_path, "master", "slave") as (master, slave):
            master.begin_epoch(1)
            put(master, "data")
            async with pair(
                master,
                slave,
                ssl_context=certs.client_context(),
                credentials=Credentials("replicator", "right secret"),
            ):
                await wait_until(
                    lambda: (
                        "TLS handshake failed" in caplog.text
                        and "is TLS on at the master's HA port?" in caplog.text
                    ),
                    message="the slave's log line",
                )
                await wait_until(
                    lambda: "the slave speaks TLS, this HA port does not" in caplog.text,
                    message="the master's log line",
                )
            assert slave.replica_end() == 0

    asyncio.run(scenario())


async def open_link(port: int, broker_id: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A raw connection to the HA port that sent a hello naming *broker_id*."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(encode_hello(broker_id, 0))
    return reader, writer


def test_slaves_refused_for_any_number_of_reasons_from_one_host_make_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.replication")

    async def scenario() -> None:
        with stores(tmp_path, "master") as (master,):
            server = HAServer(master, replication_config(0), verify_slave=verify)
            await server.start("127.0.0.1", 0)
            try:
                for attempt in range(20):  # each with an access key of its own: another reason each time
                    reader, writer = await open_link(server.port, 1)
                    challenge = await reader.readexactly(AUTH_CHALLENGE_SIZE)
                    assert challenge.startswith(AUTH_MAGIC)
                    writer.write(encode_auth(f"intruder-{attempt}", bytes(16), bytes(20)))
                    assert await reader.read() == b""  # refused: closed
                    writer.close()
                assert len(server.refused_slaves) == 1
                hosts = server.refused_slaves
                for n in range(hosts.MAX_HOSTS + 100):  # many hosts: each logged, not all remembered
                    assert hosts.due(f"10.{n >> 8}.{n & 255}.1:10912") is not None
                assert len(hosts) == hosts.MAX_HOSTS
            finally:
                await server.stop()

    asyncio.run(scenario())
    refusals = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused the HA link")]
    assert len(refusals) == 1 and "user intruder-0 is not known here" in refusals[0], refusals


@pytest.mark.parametrize("mode", ["disabled", "permissive"])
def test_connections_past_the_most_the_ha_port_holds_are_closed_at_once(
    tmp_path: Path, certs: Certificates, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.replication")
    tls = TlsSettings.from_properties(certs.server_properties(mode))

    async def scenario() -> None:
        with stores(tmp_path, "master") as (master,):
            master.begin_epoch(1)
            server = HAServer(master, replication_config(0), tls=tls, max_connections=2)
            await server.start("127.0.0.1", 0)
            links = []
            try:
                for broker_id in (1, 2):  # served: each is answered
                    reader, writer = await open_link(server.port, broker_id)
                    links.append(writer)
                    assert (await reader.readexactly(len(HELLO_MAGIC))) == HELLO_MAGIC
                reader, writer = await open_link(server.port, 3)
                links.append(writer)
                try:
                    answer = await reader.read()
                except ConnectionResetError:  # closed with the hello unread
                    answer = b""
                assert answer == b""  # closed without an answer
            finally:
                for writer in links:
                    writer.close()
                await server.stop()

    asyncio.run(scenario())
    assert "2 HA connections are open, the most this master holds: closing new ones" in caplog.text
