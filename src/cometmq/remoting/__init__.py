"""The asyncio transport around the protocol's codec: server, client, dispatch and busy polling."""

from cometmq.remoting.busypoll import BusyPoller
from cometmq.remoting.transport import (
    DEFAULT_MAX_PARTIAL_FRAME_BYTES,
    RESULT_ONEWAY,
    RESULT_SUCCESS,
    RESULT_WRITE_CHANNEL_FAILED,
    Connection,
    Dispatcher,
    PeerLogLimit,
    RemotingClient,
    RemotingServer,
    RequestGate,
    RequestHandler,
    RequestObserver,
    RequestSigner,
    ServerLimits,
    default_max_connections,
)

__all__ = [
    "DEFAULT_MAX_PARTIAL_FRAME_BYTES",
    "RESULT_ONEWAY",
    "RESULT_SUCCESS",
    "RESULT_WRITE_CHANNEL_FAILED",
    "BusyPoller",
    "Connection",
    "Dispatcher",
    "PeerLogLimit",
    "RemotingClient",
    "RemotingServer",
    "RequestGate",
    "RequestHandler",
    "RequestObserver",
    "RequestSigner",
    "ServerLimits",
    "default_max_connections",
]
