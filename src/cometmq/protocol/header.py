"""Typed fields of a request's extFields.

A missing or unparsable field raises RequestRefused(SYSTEM_ERROR) with a readable remark, which the
transport turns into the response: what a Java server ends up answering for such a request.
"""

from __future__ import annotations

from cometmq.errors import RequestRefused
from cometmq.protocol.codes import ResponseCode
from cometmq.protocol.command import RemotingCommand


def str_field(request: RemotingCommand, name: str) -> str:
    value = request.ext_fields.get(name)
    if value is None:
        raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"the request header field {name} is missing")
    return value


def int_field(request: RemotingCommand, name: str, default: int | None = None) -> int:
    value = request.ext_fields.get(name)
    if value is None and default is not None:
        return default
    text = str_field(request, name)
    try:
        return int(text)
    except ValueError:
        raise RequestRefused(
            ResponseCode.SYSTEM_ERROR, f"the request header field {name}={text!r} is not a number"
        ) from None


def bool_field(request: RemotingCommand, name: str) -> bool:
    """Java's parseBoolean, except that C++'s ``"1"`` also counts as true (C++ writes booleans as 0/1)."""
    value = request.ext_fields.get(name)
    return value is not None and value.strip().lower() in ("true", "1")
