"""Answers in RocketMQ 5's terms: a v2.Status (its code and message) inside a response, or a gRPC status
for what the protocol has no answer for (a call not served)."""

from __future__ import annotations

from typing import Any, NoReturn

import grpc

from cometmq.proxy._pb import definition_pb2 as v2

Context = Any  # grpc.aio.ServicerContext: grpcio ships no type information
Code = v2.Code


def status(code: int, message: str = "OK") -> v2.Status:
    return v2.Status(code=code, message=message)  # type: ignore[arg-type]


def ok() -> v2.Status:
    return status(v2.Code.OK)


async def unimplemented(context: Context, call: str) -> NoReturn:
    """End the call with gRPC's UNIMPLEMENTED, naming it (what RocketMQ's clients show the user)."""
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{call} is not served by this CometMQ proxy")
    raise AssertionError("ServicerContext.abort raises")
