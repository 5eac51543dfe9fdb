"""The module's proxied standalone and a stub to it (the helpers are in proxy_support.py)."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from proxy_support import ProxiedStandalone, Stub, start_proxied


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedStandalone]:
    """One standalone serving its proxy for a whole module; every test uses its own topics and groups."""
    server = start_proxied(tmp_path_factory.mktemp("proxied") / "data")
    try:
        yield server
    finally:
        server.process.terminate()


@pytest.fixture
def stub(proxied: ProxiedStandalone) -> Iterator[Stub]:
    """A blocking MessagingService stub on a channel of its own to the module's proxy."""
    with grpc.insecure_channel(proxied.proxy) as channel:
        yield Stub(channel)  # type: ignore[no-untyped-call]
