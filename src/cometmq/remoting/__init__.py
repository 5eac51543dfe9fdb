"""The asyncio transport around the protocol's codec: server, client, dispatch and busy polling."""

from cometmq.remoting.busypoll import BusyPoller
from cometmq.remoting.transport import (
    Connection,
    Dispatcher,
    RemotingClient,
    RemotingServer,
    RequestHandler,
)

__all__ = [
    "BusyPoller",
    "Connection",
    "Dispatcher",
    "RemotingClient",
    "RemotingServer",
    "RequestHandler",
]
