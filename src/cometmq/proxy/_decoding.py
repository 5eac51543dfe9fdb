"""Requests that are not valid protobuf: answered INVALID_ARGUMENT naming the request type, with one log
line, rather than by grpc's UNKNOWN with a traceback per request.

gRPC decodes a request before the servicer sees it and gives a failing decoder no way to answer; so
:func:`add_service` registers each call with a decoder that hands on what it could not decode as
:class:`Malformed`, and a handler that refuses it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError

from cometmq.proxy._pb import service_pb2_grpc
from cometmq.proxy._status import Context

log = logging.getLogger("cometmq.proxy")

SERVICE = "apache.rocketmq.v2.MessagingService"


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


def _checking(behavior: Callable[..., Any], request_streaming: bool) -> Callable[..., Any]:
    """*behavior* refusing what could not be decoded."""
    if inspect.isasyncgenfunction(behavior):

        async def streaming(request: Any, context: Context) -> AsyncIterator[Any]:
            if request_streaming:
                request = _checked_stream(request, context)
            elif isinstance(request, Malformed):
                await _refuse(context, request)
            async for response in behavior(request, context):
                yield response

        return streaming

    async def unary(request: Any, context: Context) -> Any:
        if request_streaming:
            request = _checked_stream(request, context)
        elif isinstance(request, Malformed):
            await _refuse(context, request)
        return await behavior(request, context)

    return unary


class _Collector:
    """Takes the method handlers the generated code registers, for :func:`add_service` to wrap."""

    handlers: dict[str, Any]

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.handlers = handlers


def add_service(servicer: service_pb2_grpc.MessagingServiceServicer, server: grpc.aio.Server) -> None:
    """Serve *servicer* on *server* as the generated code registers it, each method's decoder made
    :func:`_tolerant` and its behavior refusing what that decoder could not decode (wrapped here, once,
    so that a call costs no more than a wrapper's frame)."""
    collector = _Collector()
    service_pb2_grpc.add_MessagingServiceServicer_to_server(servicer, collector)  # type: ignore[no-untyped-call]
    handlers = {method: _tolerant_handler(handler) for method, handler in collector.handlers.items()}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)


def _tolerant_handler(handler: Any) -> Any:
    request_kind = "stream" if handler.request_streaming else "unary"
    kind = f"{request_kind}_{'stream' if handler.response_streaming else 'unary'}"
    type_name = handler.request_deserializer.__self__.DESCRIPTOR.name
    return handler._replace(
        request_deserializer=_tolerant(handler.request_deserializer, type_name),
        **{kind: _checking(getattr(handler, kind), handler.request_streaming)},
    )
