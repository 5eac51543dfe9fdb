"""Fixtures of the cometmq.client tests that need a server for a whole module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from processes import StandaloneServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    """One standalone server for the module; every test uses its own topic and group."""
    standalone = StandaloneServer(tmp_path_factory.mktemp("client") / "data")
    standalone.start()
    try:
        yield standalone
    finally:
        standalone.stop()
