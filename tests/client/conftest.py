"""Fixtures shared by the tests of cometmq.client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from client_support import standalone_with_conf

from processes import StandaloneServer


@pytest.fixture
def quick_retries(tmp_path: Path) -> Iterator[StandaloneServer]:
    """A standalone server whose delay levels (and so retry delays) are all 1 s."""
    with standalone_with_conf(tmp_path, "messageDelayLevel=" + " ".join(["1s"] * 18) + "\n") as server:
        yield server
