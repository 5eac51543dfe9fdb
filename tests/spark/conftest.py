"""Fixtures of the Spark connector tests: one local SparkSession for the whole run (the module-scoped
``server`` comes from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spark_support import make_session


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real local[2] SparkSession with CometMQ's source registered (light settings for tests)."""
    session = make_session(tmp_path_factory.mktemp("spark"))
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
