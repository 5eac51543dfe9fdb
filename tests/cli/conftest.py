"""Fixtures: a real ``cometmq standalone`` server shared by the tests of a module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from processes import TEST_BROKER_CONF, ServerProcess, start_standalone


@pytest.fixture(scope="module")
def broker_conf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("conf") / "broker.conf"
    path.write_text(TEST_BROKER_CONF)
    return path


@pytest.fixture(scope="module")
def standalone(
    tmp_path_factory: pytest.TempPathFactory, broker_conf: Path
) -> Iterator[tuple[ServerProcess, str]]:
    """A standalone server and its NameServer address; stopped (SIGTERM) after the module."""
    data_dir = tmp_path_factory.mktemp("standalone") / "data"
    server, namesrv = start_standalone(data_dir, broker_conf)
    yield server, namesrv
    server.terminate()


@pytest.fixture
def namesrv_addr(standalone: tuple[ServerProcess, str]) -> str:
    return standalone[1]
