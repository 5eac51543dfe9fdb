"""Fixtures of the Spark connector tests: one local SparkSession for the run, one server per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spark_support import make_session

from processes import StandaloneServer


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real local[2] SparkSession with CometMQ's source registered (light settings for tests)."""
    session = make_session(tmp_path_factory.mktemp("spark"))
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    """One standalone server for the module; every test uses its own topics."""
    standalone = StandaloneServer(tmp_path_factory.mktemp("spark-server") / "data")
    standalone.start()
    try:
        yield standalone
    finally:
        standalone.stop()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
