"""Fixtures shared by the suites that need a real server process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from processes import StandaloneServer

# Hypothesis fails an example that runs longer than 200 ms by default: a check of speed, which a loaded
# machine fails at random. The suite's property tests check what is computed, never how fast.
settings.register_profile("cometmq", deadline=None)
settings.load_profile("cometmq")


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
