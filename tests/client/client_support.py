"""Helpers shared by the tests of cometmq.client (no pytest-asyncio: coroutines run under asyncio.run).

Append-only: several test modules of tests/client use these.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from cometmq.remoting import RemotingClient
from processes import StandaloneServer, broker_address

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from _support import send_request, wait_until  # noqa: F401 - wait_until: tests/client take it from here

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
    """Run one test coroutine on a fresh event loop, failing (not hanging) after ``timeout`` s."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def send_to_queue(server: StandaloneServer, topic: str, queue_id: int, bodies: list[bytes]) -> None:
    """Send ``bodies`` to one queue of the server's broker with raw SEND_MESSAGE requests (so a test
    depends on the consumer alone), one after the other: their queue offsets follow this order."""
    assert server.process is not None
    addr = broker_address(server.process)
    client = RemotingClient()
    try:
        for body in bodies:
            response = await client.invoke(addr, send_request(topic, body, queue_id), timeout=10)
            assert response.code == 0, response.remark
    finally:
        await client.close()
