"""Everything about the RocketMQ 4.x wire, with no I/O: the frame codec, RemotingCommand, the codes,
the request headers, and the bodies and record layout the broker and clients exchange."""

from cometmq.protocol.codec import MAX_FRAME_SIZE, FrameDecoder, decode_frame, encode, encode_bytes
from cometmq.protocol.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from cometmq.protocol.command import RemotingCommand

__all__ = [
    "MAX_FRAME_SIZE",
    "FrameDecoder",
    "LanguageCode",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "decode_frame",
    "encode",
    "encode_bytes",
]
