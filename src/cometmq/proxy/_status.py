"""Answers in RocketMQ 5's terms: a v2.Status (its code and message) inside a response, or a gRPC status
for what the protocol has no answer for (a call not served, a Telemetry stream refused)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, NoReturn, TypeVar

import grpc

from cometmq.errors import BrokerError, CometMQError, ConnectionClosedError, RemotingTimeoutError
from cometmq.protocol import ResponseCode
from cometmq.proxy._convert import Refusal
from cometmq.proxy._pb import definition_pb2 as v2

log = logging.getLogger("cometmq.proxy")

Context = Any  # grpc.aio.ServicerContext: grpcio ships no type information

# A broker's remoting response code as a v2 code; any other failure is INTERNAL_SERVER_ERROR, as in
# RocketMQ's proxy (ResponseBuilder), which maps fewer of them.
_CODE_OF_RESPONSE: dict[int, int] = {
    ResponseCode.SUCCESS: v2.OK,
    ResponseCode.SYSTEM_BUSY: v2.TOO_MANY_REQUESTS,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: v2.NOT_IMPLEMENTED,
    ResponseCode.FLUSH_DISK_TIMEOUT: v2.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: v2.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: v2.HA_NOT_AVAILABLE,
    ResponseCode.MESSAGE_ILLEGAL: v2.BAD_REQUEST,
    ResponseCode.INVALID_PARAMETER: v2.BAD_REQUEST,
    ResponseCode.NO_PERMISSION: v2.FORBIDDEN,
    ResponseCode.TOPIC_NOT_EXIST: v2.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: v2.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.VERSION_NOT_SUPPORTED: v2.VERSION_UNSUPPORTED,
}


def status(code: int, message: str = "OK") -> v2.Status:
    return v2.Status(code=code, message=message)  # type: ignore[arg-type]


def ok() -> v2.Status:
    return status(v2.OK, "OK")


def code_of_response(response_code: int) -> int:
    """The v2 code of a broker's remoting response code."""
    return _CODE_OF_RESPONSE.get(response_code, v2.INTERNAL_SERVER_ERROR)


def status_of_error(error: CometMQError) -> v2.Status:
    """The status a failure to reach or use a broker answers a client with."""
    if isinstance(error, BrokerError):
        return status(code_of_response(error.code), error.remark or f"the broker answered code {error.code}")
    if isinstance(error, RemotingTimeoutError):
        return status(v2.PROXY_TIMEOUT, f"the broker did not answer in time: {error}")
    if isinstance(error, ConnectionClosedError):
        return status(v2.INTERNAL_SERVER_ERROR, f"the broker cannot be reached: {error}")
    return status(v2.INTERNAL_SERVER_ERROR, str(error))


R = TypeVar("R")


async def respond(response_type: type[R], work: Awaitable[R]) -> R:
    """*work*'s response; a :class:`Refusal` or a broker's failure becomes a *response_type* carrying
    only its status (every unary response of MessagingService has a ``status`` field)."""
    try:
        return await work
    except Refusal as refusal:
        failed = status(refusal.code, refusal.message)
    except CometMQError as exc:
        failed = status_of_error(exc)
    except grpc.aio.AbortError:  # the call ended with a gRPC status already (ServicerContext.abort)
        raise
    except Exception as exc:  # a bug: the client still gets an answer, the log the details
        log.exception("a call of the proxy failed")
        failed = status(v2.INTERNAL_SERVER_ERROR, f"the proxy failed: {exc!r}")
    return response_type(status=failed)  # type: ignore[call-arg]


def peer_address(context: Context) -> str:
    """The client's ``host:port`` as gRPC names its peer (``ipv4:1.2.3.4:5678``, ``ipv6:[::1]:5678``)."""
    peer = str(context.peer() or "")
    scheme, _, rest = peer.partition(":")
    return rest if scheme in ("ipv4", "ipv6") else peer


async def unimplemented(context: Context, call: str) -> NoReturn:
    """End the call with gRPC's UNIMPLEMENTED, naming it (what RocketMQ's clients show the user)."""
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{call} is not served by this CometMQ proxy")
    raise AssertionError("ServicerContext.abort raises")
