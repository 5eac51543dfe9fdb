"""An HA server that stops serves nobody afterwards, not even a slave whose connection it accepted as it
stopped: a master replaces its HA server when it changes role, and a slave still served by the old one
would be invisible to the new one (never offered for the in-sync set, never waited for)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import uvloop
from _stores import put, replication_config, stores

from cometmq.protocol.ha import encode_report
from cometmq.replication import HAServer

# How many turns of the event loop pass between the connection and stop(): the window where the
# listener had accepted the connection but its task had not run yet lies somewhere in this range, at a
# turn that differs between event loops.
LOOP_TURNS = range(12)


async def served(sock: socket.socket) -> bool:
    """Whether a server still serves the slave at *sock*: asked for the commit log from offset 0, it
    sends some. Not served: closed (end of stream, reset), or silent for 5 s (Python 3.11's own event
    loop drops a connection accepted as its server closes without closing the socket)."""
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_sendall(sock, encode_report(0))
        return await asyncio.wait_for(loop.sock_recv(sock, 1), 5) != b""
    except (ConnectionError, TimeoutError):
        return False


@pytest.mark.parametrize(
    "new_loop", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)
def test_a_slave_connecting_as_the_server_stops_is_closed_not_served(
    tmp_path: Path, new_loop: Callable[[], asyncio.AbstractEventLoop]
) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "m") as (master,):
            put(master, "stored")
            for turns in LOOP_TURNS:
                server = HAServer(master, replication_config(1))
                await server.start("127.0.0.1", 0)
                # Connected at once (the kernel's backlog); the loop accepts it on a later turn.
                slave = socket.create_connection(("127.0.0.1", server.port))
                slave.setblocking(False)
                try:
                    for _ in range(turns):
                        await asyncio.sleep(0)
                    await server.stop()
                    assert not await served(slave), f"served after {turns} loop turns, then stop()"
                finally:
                    slave.close()

    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(scenario())
