"""Fixtures of the Spark connector tests: one local SparkSession for all of them (the module-scoped
``server`` comes from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spark_support import make_session


@pytest.fixture(scope="package")  # one SparkSession for every test of this directory
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real local[2] SparkSession with CometMQ's source registered (light settings for tests)."""
    spark_session = make_session(tmp_path_factory.mktemp("spark"))
    try:
        yield spark_session
    finally:
        spark_session.stop()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
