"""A server with access control on, reachable from other machines, warns once at start unless TLS is
enforced: a signed request seen on the way can be sent again."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import pytest

from cometmq.auth.serving import ServerAccess
from cometmq.namesrv import NameServer
from cometmq.namesrv.config import NamesrvConfig
from tls_support import Certificates, make_certificates

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "acl"))
from acl_support import acl_broker

from secured_servers import INIT_USER

WARNING = "signed requests can be captured and replayed without TLS"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def tls_keys(certs: Certificates, mode: str) -> dict[str, str]:
    return certs.server_properties(mode) if mode != "disabled" else {}


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and WARNING in r.getMessage()
    ]


@pytest.mark.parametrize(
    ("host", "mode", "warned"),
    [
        ("0.0.0.0", "disabled", True),
        ("0.0.0.0", "permissive", True),
        ("0.0.0.0", "enforcing", False),
        ("127.0.0.1", "disabled", False),
    ],
)
def test_a_name_server_with_acl_warns_unless_tls_is_enforced_or_it_is_local(
    tmp_path: Path, certs: Certificates, caplog: pytest.LogCaptureFixture, host: str, mode: str, warned: bool
) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.auth")
    config = NamesrvConfig()
    config.update(
        {"authConfigPath": str(tmp_path), "aclEnable": "true", "initAuthenticationUser": INIT_USER}
        | tls_keys(certs, mode)
    )

    async def scenario() -> None:
        namesrv = NameServer(host, 0, access=ServerAccess(config.acl_settings(), None), tls=config.tls)
        await namesrv.start()
        await namesrv.stop()

    asyncio.run(scenario())
    lines = warnings_of(caplog)
    if warned:
        assert len(lines) == 1 and f"tls.server.mode={mode}" in lines[0] and "name server" in lines[0], lines
    else:
        assert lines == []


@pytest.mark.parametrize(("mode", "warned"), [("disabled", True), ("enforcing", False)])
def test_a_broker_with_acl_warns_unless_tls_is_enforced(
    tmp_path: Path, certs: Certificates, caplog: pytest.LogCaptureFixture, mode: str, warned: bool
) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.auth")

    async def scenario() -> None:
        async with acl_broker(tmp_path, listenHost="0.0.0.0", **tls_keys(certs, mode)):
            pass

    asyncio.run(scenario())
    lines = warnings_of(caplog)
    assert len(lines) == (1 if warned else 0), lines
    assert all("the broker listens on 0.0.0.0" in line for line in lines)
