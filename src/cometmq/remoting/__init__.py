"""The RocketMQ 4.x remoting protocol: a pure frame codec and the asyncio transports around it."""

from cometmq.remoting.busypoll import BusyPoller
from cometmq.remoting.codec import MAX_FRAME_SIZE, FrameDecoder, decode_frame, encode, encode_bytes
from cometmq.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from cometmq.remoting.command import RemotingCommand
from cometmq.remoting.transport import (
    Connection,
    Dispatcher,
    Processor,
    RemotingClient,
    RemotingServer,
    RequestHandler,
)

__all__ = [
    "MAX_FRAME_SIZE",
    "BusyPoller",
    "Connection",
    "Dispatcher",
    "FrameDecoder",
    "LanguageCode",
    "Processor",
    "RemotingClient",
    "RemotingCommand",
    "RemotingServer",
    "RequestCode",
    "RequestHandler",
    "ResponseCode",
    "SerializeType",
    "decode_frame",
    "encode",
    "encode_bytes",
]
