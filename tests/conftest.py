"""Fixtures shared by the suites that need a real server process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from cometmq.remoting import transport
from etcd_server import EtcdServer
from processes import StandaloneServer
from tls_support import Certificates, make_certificates

# Hypothesis fails an example that runs longer than 200 ms by default: a check of speed, which a loaded
# machine fails at random. The suite's property tests check what is computed, never how fast.
settings.register_profile("cometmq", deadline=None)
settings.load_profile("cometmq")


@pytest.fixture(autouse=True)
def fresh_bad_input_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with no peer's bad input logged yet: the server's rate-limited warning (one line
    per host a minute) must not hide a line one test expects because an earlier test drew one."""
    monkeypatch.setattr(transport, "_refusals", transport._RefusalLog(transport.REFUSAL_LOG_INTERVAL_S))


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[StandaloneServer]:
    """`cometmq standalone` in a child process on free ports and a fresh data directory."""
    server = StandaloneServer(tmp_path / "data")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    """One standalone server for a whole module; every test uses its own topics and groups."""
    standalone = StandaloneServer(tmp_path_factory.mktemp("server") / "data")
    standalone.start()
    try:
        yield standalone
    finally:
        standalone.stop()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """One etcd member in a child process on free loopback ports, with its own data directory."""
    server = EtcdServer(tmp_path / "etcd")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def module_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One etcd member for a whole module: its tests keep to keys (prefixes) of their own."""
    server = EtcdServer(tmp_path_factory.mktemp("etcd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """A test CA and the certificates it issued (tls_support), for a module's TLS servers and clients."""
    return make_certificates(tmp_path_factory.mktemp("certificates"))
