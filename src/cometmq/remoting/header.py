"""Typed fields of a request's extFields.

A missing or unparsable field raises BrokerError(SYSTEM_ERROR) with a readable remark, which the
transport turns into the response: what a Java server ends up answering for such a request.
"""

from __future__ import annotations

from cometmq.errors import BrokerError
from cometmq.remoting.codes import ResponseCode
from cometmq.remoting.command import RemotingCommand


def _missing(name: str) -> BrokerError:
    return BrokerError(ResponseCode.SYSTEM_ERROR, f"the request header field {name} is missing")


def str_field(request: RemotingCommand, name: str, alias: str | None = None) -> str:
    fields = request.ext_fields
    value = fields.get(name)
    if value is None and alias is not None:
        value = fields.get(alias)
    if value is None:
        raise _missing(name)
    return value


def int_field(
    request: RemotingCommand, name: str, alias: str | None = None, default: int | None = None
) -> int:
    fields = request.ext_fields
    value = fields.get(name)
    if value is None and alias is not None:
        value = fields.get(alias)
    if value is None:
        if default is None:
            raise _missing(name)
        return default
    try:
        return int(value)
    except ValueError:
        raise BrokerError(
            ResponseCode.SYSTEM_ERROR, f"the request header field {name}={value!r} is not a number"
        ) from None


def bool_field(request: RemotingCommand, name: str, alias: str | None = None) -> bool:
    """Java's parseBoolean, except that C++'s ``"1"`` also counts as true (C++ writes booleans as 0/1)."""
    fields = request.ext_fields
    value = fields.get(name)
    if value is None and alias is not None:
        value = fields.get(alias)
    return value is not None and value.strip().lower() in ("true", "1")
