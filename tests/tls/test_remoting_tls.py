"""TLS on the remoting transport: a real RemotingServer in each tls.server.mode, real clients."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import uvloop

from cometmq.errors import ConfigError, ConnectionClosedError, ProtocolError
from cometmq.protocol import FrameDecoder, RemotingCommand, ResponseCode
from cometmq.remoting import Connection, RemotingClient, RemotingServer
from cometmq.remoting.tls import ClientAuth, TlsMode, TlsSettings
from cometmq.remoting.transport import TLS_ONLY_REMARK
from tls_support import Certificates, make_certificates
from waiting import wait_until


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def echo(conn: Connection, request: RemotingCommand) -> RemotingCommand:
    return request.response(remark=f"tls={conn._transport.get_extra_info('sslcontext') is not None}")  # type: ignore[union-attr]


LoopFactory = Callable[[], asyncio.AbstractEventLoop]


@pytest.fixture(params=["asyncio", "uvloop"])
def loop_factory(request: pytest.FixtureRequest) -> LoopFactory:
    """Both event loops: servers run on uvloop, clients on either."""
    return uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop


def run_with_server(
    loop_factory: LoopFactory,
    settings: TlsSettings | None,
    scenario: Callable[[RemotingServer, str], Awaitable[None]],
) -> None:
    async def main() -> None:
        server = RemotingServer(echo, "127.0.0.1", 0, tls=settings)
        await server.start()
        try:
            await asyncio.wait_for(scenario(server, f"127.0.0.1:{server.port}"), 20)
        finally:
            await server.stop()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())


async def ask(address: str, context: ssl.SSLContext | None) -> RemotingCommand:
    client = RemotingClient(ssl_context=context)
    try:
        return await client.invoke(address, RemotingCommand(code=7), timeout=5)
    finally:
        await client.close()


def test_permissive_serves_tls_and_plaintext_clients_on_one_port(
    loop_factory: LoopFactory, certs: Certificates
) -> None:
    settings = TlsSettings.from_properties(certs.server_properties("permissive"))

    async def scenario(server: RemotingServer, address: str) -> None:
        over_tls = await ask(address, certs.client_context())
        plaintext = await ask(address, None)
        assert (over_tls.code, over_tls.remark) == (ResponseCode.SUCCESS, "tls=True")
        assert (plaintext.code, plaintext.remark) == (ResponseCode.SUCCESS, "tls=False")

    run_with_server(loop_factory, settings, scenario)


def test_enforcing_answers_a_plaintext_client_no_permission_and_closes(
    loop_factory: LoopFactory, certs: Certificates
) -> None:
    settings = TlsSettings.from_properties(certs.server_properties("enforcing"))

    async def scenario(server: RemotingServer, address: str) -> None:
        over_tls = await ask(address, certs.client_context())
        assert over_tls.remark == "tls=True"
        client = RemotingClient()
        try:
            refused = await client.invoke(address, RemotingCommand(code=7), timeout=5)
            assert (refused.code, refused.remark) == (ResponseCode.NO_PERMISSION, TLS_ONLY_REMARK)
            await wait_until(lambda: client.open_connection(address) is None, message="the connection closed")
        finally:
            await client.close()
        await wait_until(lambda: not server.connections, message="the server forgot the connection")

    run_with_server(loop_factory, settings, scenario)


def test_required_client_certificate_refuses_a_client_without_one(
    loop_factory: LoopFactory, certs: Certificates, caplog: pytest.LogCaptureFixture
) -> None:
    settings = TlsSettings.from_properties(certs.server_properties("enforcing", "require"))
    assert settings.need_client_auth is ClientAuth.REQUIRE

    async def scenario(server: RemotingServer, address: str) -> None:
        with_cert = await ask(address, certs.client_context(with_certificate=True))
        assert with_cert.remark == "tls=True"
        # TLS 1.3 finishes the client's side of the handshake before the server checks the
        # certificate: the refusal arrives as the connection closing under the first request.
        with pytest.raises(ConnectionClosedError):
            await ask(address, certs.client_context())
        await wait_until(lambda: "TLS handshake failed" in caplog.text, message="the server's log line")
        # Neither connection is held on to: the refused one was forgotten like the closed one.
        await wait_until(lambda: not server.connections, message="the server to forget both connections")

    with caplog.at_level(logging.WARNING, logger="cometmq.remoting"):
        run_with_server(loop_factory, settings, scenario)


def test_a_tls_client_of_a_server_with_tls_off_gets_a_clear_error_and_the_server_logs_one_line(
    loop_factory: LoopFactory, certs: Certificates, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(server: RemotingServer, address: str) -> None:
        for _ in range(3):
            with pytest.raises(
                ConnectionClosedError, match=r"TLS handshake with .* failed: .*is TLS on at the server\?"
            ):
                await ask(address, certs.client_context())
        await wait_until(lambda: "TLS handshake" in caplog.text, message="the server's log line")

    with caplog.at_level(logging.WARNING, logger="cometmq.remoting"):
        run_with_server(loop_factory, None, scenario)
    lines = [r.getMessage() for r in caplog.records if "TLS handshake" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "tls.server.mode=disabled" in lines[0]


def test_a_client_that_does_not_trust_the_server_certificate_fails_the_handshake(
    loop_factory: LoopFactory, certs: Certificates, tmp_path: Path
) -> None:
    settings = TlsSettings.from_properties(certs.server_properties("permissive"))
    stranger = make_certificates(tmp_path / "other")

    async def scenario(server: RemotingServer, address: str) -> None:
        with pytest.raises(
            ConnectionClosedError, match=r"TLS handshake with .* failed: CERTIFICATE_VERIFY_FAILED"
        ):
            await ask(address, stranger.client_context())
        assert (await ask(address, certs.client_context())).remark == "tls=True"

    run_with_server(loop_factory, settings, scenario)


def test_a_connection_that_sends_nothing_is_not_served_and_does_not_block_others(
    loop_factory: LoopFactory, certs: Certificates
) -> None:
    settings = TlsSettings.from_properties(certs.server_properties("permissive"))

    async def scenario(server: RemotingServer, address: str) -> None:
        silent = socket.create_connection(("127.0.0.1", server.port))
        try:
            assert (await ask(address, certs.client_context())).remark == "tls=True"
            assert (await ask(address, None)).remark == "tls=False"
        finally:
            silent.close()

    run_with_server(loop_factory, settings, scenario)


def test_settings_from_properties() -> None:
    assert TlsSettings.from_properties({}) == TlsSettings()
    assert TlsSettings().mode is TlsMode.DISABLED and TlsSettings().client_auth_server
    with pytest.raises(
        ConfigError, match=r"tls\.server\.mode='strict' is not one of disabled, permissive, enforcing"
    ):
        TlsSettings.from_properties({"tls.server.mode": "strict"})
    with pytest.raises(ConfigError, match=r"tls\.server\.mode=enforcing needs tls.server.certPath"):
        TlsSettings.from_properties({"tls.server.mode": "enforcing"})
    with pytest.raises(ConfigError, match=r"needs tls\.server\.trustCertPath"):
        TlsSettings.from_properties(
            {
                "tls.server.mode": "ENFORCING",
                "tls.server.certPath": "c",
                "tls.server.keyPath": "k",
                "tls.server.need.client.auth": "require",
            }
        )
    with pytest.raises(ConfigError, match=r"cannot read tls\.config\.file=/nonexistent"):
        TlsSettings.from_properties({"tls.config.file": "/nonexistent"})


def test_a_tls_config_file_gives_the_keys_it_holds(certs: Certificates, tmp_path: Path) -> None:
    config_file = tmp_path / "tls.properties"
    config_file.write_text(
        f"tls.server.mode=permissive\ntls.server.certPath={certs.server_cert}\n"
        f"tls.server.keyPath={certs.server_key}\ntls.server.keyPassword=s3cret\n"
    )
    settings = TlsSettings.from_properties(
        {"tls.config.file": str(config_file), "tls.server.mode": "enforcing"}
    )
    assert settings.mode is TlsMode.PERMISSIVE  # the file's value wins, as in RocketMQ
    assert settings.server_cert_path == str(certs.server_cert)
    assert "s3cret" not in repr(settings)


def test_a_certificate_that_cannot_be_loaded_is_a_config_error(certs: Certificates, tmp_path: Path) -> None:
    settings = TlsSettings.from_properties(
        {**certs.server_properties("permissive"), "tls.server.keyPath": str(tmp_path / "missing.key")}
    )
    with pytest.raises(ConfigError, match=r"cannot load the TLS certificate tls\.server\.certPath="):
        settings.server_context()


def test_the_decoder_names_a_tls_handshake_where_a_frame_was_expected() -> None:
    client_hello_start = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
    with pytest.raises(ProtocolError, match="a TLS handshake where a remoting frame was expected"):
        FrameDecoder().feed(client_hello_start)
    with pytest.raises(ProtocolError, match="frame length"):  # any other impossible length says so
        FrameDecoder().feed(b"\x17\x03\x01\x02")
