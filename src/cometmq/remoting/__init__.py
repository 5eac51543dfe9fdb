"""The asyncio transport around the protocol's codec: server, client, dispatch and busy polling."""

from cometmq.remoting.busypoll import BROKER_LIMIT_US, CLIENT_LIMIT_US, MAX_LIMIT_US, BusyPoller, PollWindow
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
    "BROKER_LIMIT_US",
    "CLIENT_LIMIT_US",
    "DEFAULT_MAX_PARTIAL_FRAME_BYTES",
    "MAX_LIMIT_US",
    "RESULT_ONEWAY",
    "RESULT_SUCCESS",
    "RESULT_WRITE_CHANNEL_FAILED",
    "BusyPoller",
    "Connection",
    "Dispatcher",
    "PeerLogLimit",
    "PollWindow",
    "RemotingClient",
    "RemotingServer",
    "RequestGate",
    "RequestHandler",
    "RequestObserver",
    "RequestSigner",
    "ServerLimits",
    "default_max_connections",
]
