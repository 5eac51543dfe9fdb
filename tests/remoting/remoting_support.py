"""A remoting server and a client connected to it, for the transport tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from cometmq.remoting import RemotingClient, RemotingServer, RequestObserver, ServerLimits
from cometmq.remoting.transport import RequestHandler


def with_server(
    handler: RequestHandler,
    scenario: Callable[[RemotingServer, RemotingClient, str], Awaitable[None]],
    loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
    limits: ServerLimits | None = None,
    observer: RequestObserver | None = None,
) -> None:
    """Run ``scenario(server, client, address)`` against a server on a free port (10 s at most), on
    an event loop from ``loop_factory``, with ``limits`` and ``observer``; both are closed afterwards."""

    async def main() -> None:
        server = RemotingServer(handler, "127.0.0.1", 0, limits=limits, observer=observer)
        await server.start()
        client = RemotingClient()
        try:
            await asyncio.wait_for(scenario(server, client, f"127.0.0.1:{server.port}"), 10)
        finally:
            await client.close()
            await server.stop()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())
