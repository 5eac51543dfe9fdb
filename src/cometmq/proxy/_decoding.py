"""Requests that are not valid protobuf: answered INVALID_ARGUMENT naming the request type, with one log
line, rather than by grpc's UNKNOWN with a traceback per request.

gRPC decodes a request before the servicer sees it and gives a failing decoder no way to answer; so the
server's :class:`TolerantDecoding` interceptor gives each call a decoder that hands on what it could not
decode as :class:`Malformed`, and a handler that refuses it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError

from cometmq.proxy._status import Context

log = logging.getLogger("cometmq.proxy")


@dataclass(frozen=True, slots=True)
class Malformed:
    type_name: str
    problem: str


def _tolerant(decode: Callable[[bytes], Any], type_name: str) -> Callable[[bytes], Any]:
    def decode_or_malformed(data: bytes) -> Any:
        try:
            return decode(data)
        except DecodeError as exc:
            return Malformed(type_name, str(exc))

    return decode_or_malformed


async def _refuse(context: Context, malformed: Malformed) -> NoReturn:
    log.info(
        "a %s that is not valid protobuf from %s: %s", malformed.type_name, context.peer(), malformed.problem
    )
    await context.abort(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"the request is not a valid {malformed.type_name}: {malformed.problem}",
    )
    raise AssertionError("ServicerContext.abort raises")


async def _checked_stream(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
    async for request in requests:
        if isinstance(request, Malformed):
            await _refuse(context, request)
        yield request


async def _checked(request: Any, context: Context, request_streaming: bool) -> Any:
    """*request* once known to be decoded: a Malformed one refused, a stream's checked as it is read."""
    if request_streaming:
        return _checked_stream(request, context)
    if isinstance(request, Malformed):
        await _refuse(context, request)
    return request


def _checking(behavior: Callable[..., Any], request_streaming: bool) -> Callable[..., Any]:
    """*behavior* refusing what could not be decoded."""
    if inspect.isasyncgenfunction(behavior):

        async def streaming(request: Any, context: Context) -> AsyncIterator[Any]:
            async for response in behavior(await _checked(request, context, request_streaming), context):
                yield response

        return streaming

    async def unary(request: Any, context: Context) -> Any:
        return await behavior(await _checked(request, context, request_streaming), context)

    return unary


class TolerantDecoding(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Serves each call with its handler's decoder made :func:`_tolerant` and its behavior refusing what
    that decoder could not decode (each method's handler wrapped once)."""

    def __init__(self) -> None:
        self._handlers: dict[str, Any] = {}

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        method = handler_call_details.method
        handler = self._handlers.get(method)
        if handler is None:
            handler = await continuation(handler_call_details)
            if handler is None or handler.request_deserializer is None:
                return handler  # a method not served: grpc answers UNIMPLEMENTED
            handler = self._handlers[method] = _tolerant_handler(handler)
        return handler


def _tolerant_handler(handler: Any) -> Any:
    kind = (
        ("stream" if handler.request_streaming else "unary")
        + "_"
        + ("stream" if handler.response_streaming else "unary")
    )
    type_name = handler.request_deserializer.__self__.DESCRIPTOR.name
    return handler._replace(
        request_deserializer=_tolerant(handler.request_deserializer, type_name),
        **{kind: _checking(getattr(handler, kind), handler.request_streaming)},
    )
