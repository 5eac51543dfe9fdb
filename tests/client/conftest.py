"""Fixtures shared by the tests of cometmq.client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from processes import StandaloneServer


@pytest.fixture
def quick_retries(tmp_path: Path) -> Iterator[StandaloneServer]:
    """A standalone server whose delay levels (and so retry delays) are all 1 s."""
    conf = tmp_path / "broker.conf"
    conf.write_text("messageDelayLevel=" + " ".join(["1s"] * 18) + "\n")
    server = StandaloneServer(tmp_path / "data", "-c", str(conf))
    server.start()
    try:
        yield server
    finally:
        server.stop()
