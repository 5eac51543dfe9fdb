"""Fixtures of the official 5.x client's tests: servers with the gRPC proxy in front."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from client5 import client5_missing
from proxied import ProxiedCluster, ProxiedStandalone

# A half message left open is checked after 2 s, every 0.5 s: the check-back test waits for one.
TRANSACTION_CONF = "transactionTimeOut=2000\ntransactionCheckInterval=500\n"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    missing = client5_missing()
    if missing is not None:
        skip = pytest.mark.skip(reason=missing)
        for item in items:
            if Path(str(item.fspath)).parent == Path(__file__).parent:
                item.add_marker(skip)


@pytest.fixture(scope="module")
def standalone5(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedStandalone]:
    """One standalone with its proxy for a module; every test uses topics and groups of its own."""
    workdir = tmp_path_factory.mktemp("standalone5")
    conf = workdir / "broker.conf"
    conf.write_text(TRANSACTION_CONF)
    server = ProxiedStandalone(workdir / "data", "-c", str(conf))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cluster5(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedCluster]:
    """A name server, two brokers and a proxy in front of them, for a module."""
    cluster = ProxiedCluster(tmp_path_factory.mktemp("cluster5"), TRANSACTION_CONF)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module", params=["standalone", "cluster"])
def proxied(request: pytest.FixtureRequest) -> ProxiedStandalone | ProxiedCluster:
    """Each test using it runs against a standalone's proxy, then against a proxy in front of two brokers."""
    name = "standalone5" if request.param == "standalone" else "cluster5"
    server: ProxiedStandalone | ProxiedCluster = request.getfixturevalue(name)
    return server
