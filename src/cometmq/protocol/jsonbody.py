"""Reading the fields of a JSON request body (a heartbeat, a lock batch, a subscription group config,
a topic table) as their Java types, with the limits a header field declares in :mod:`headers`.

fastjson is lenient and so are these readers: a number may come as a JSON string (the C++ client
sends ``subVersion`` so), a boolean as ``"true"``/``"false"``, and ``null`` counts as absent. What a
Java server could not bind — a number that is not an integer, one outside its Java type or its
limits, a string that is an object, a required field that is absent or null — fails with one
:class:`BodyError` whose remark names the body, the field and what is wrong; the transport answers it
as any refusal.
"""

from __future__ import annotations

import re
from typing import Any, Final

from cometmq.errors import RequestRefused
from cometmq.protocol import fastjson
from cometmq.protocol.codes import ResponseCode
from cometmq.protocol.naming import NameRule, name_remark

__all__ = [
    "MAX_HEARTBEAT_GROUPS",
    "MAX_HEARTBEAT_SUBSCRIPTIONS",
    "MAX_LOCK_BATCH",
    "BodyError",
    "as_object",
    "java_bool",
    "java_int",
    "java_list",
    "java_long",
    "java_string",
    "json_object",
]

JAVA_INT_MIN: Final = -(2**31)
JAVA_INT_MAX: Final = 2**31 - 1
JAVA_LONG_MIN: Final = -(2**63)
JAVA_LONG_MAX: Final = 2**63 - 1

# The most items a request body may list, the same for the broker's handlers and the access check
# (RocketMQ sets none): consumer or producer groups of one heartbeat (a client is in a handful),
# subscriptions of one consumer group, and queues of one LOCK_BATCH_MQ or UNLOCK_BATCH_MQ (an orderly
# consumer names the queues of one broker it is assigned).
MAX_HEARTBEAT_GROUPS: Final = 256
MAX_HEARTBEAT_SUBSCRIPTIONS: Final = 1024
MAX_LOCK_BATCH: Final = 8192

_REQUIRED: Final = object()
# What Java's Integer.parseInt / Long.parseLong read (the length only keeps int() of a huge text cheap).
_DECIMAL: Final = re.compile(r"\s*[+-]?[0-9]{1,40}\s*").fullmatch


class BodyError(RequestRefused, ValueError):
    """A request body, or a field of one, that is not what its Java class declares: refused with
    SYSTEM_ERROR, as a Java server answers a body it cannot decode, and this text as the remark. A
    ValueError too, so that readers of stored metadata that skip a ValueError skip it."""

    def __init__(self, remark: str) -> None:
        super().__init__(ResponseCode.SYSTEM_ERROR, remark)

    def __str__(self) -> str:
        return self.remark


def json_object(body: bytes, what: str) -> dict[str, Any]:
    """The JSON object of a request *body* (*what* names it in the error)."""
    try:
        obj = fastjson.loads(body)
    except fastjson.NestingTooDeep as exc:
        raise BodyError(f"the {what} body is {exc}") from None
    except (ValueError, UnicodeDecodeError):
        raise BodyError(f"the {what} body is not JSON") from None
    return as_object(obj, what)


def as_object(value: Any, what: str) -> dict[str, Any]:
    """*value*, a JSON object in a body (*what* names it in the error)."""
    if not isinstance(value, dict):
        raise BodyError(f"the {what} is not a JSON object")
    return value


def _present(obj: dict[str, Any], key: str, what: str, default: Any) -> Any:
    value = obj.get(key)
    if value is None and default is _REQUIRED:
        raise BodyError(f"the {what} field {key} is missing")
    return value


def _number(obj: dict[str, Any], key: str, what: str, java: str, low: int, high: int, default: Any) -> int:
    value = _present(obj, key, what, default)
    if value is None:
        return int(default)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise BodyError(f"the {what} field {key} is not a Java {java}")
    if isinstance(value, str):
        if _DECIMAL(value) is None:
            raise BodyError(f"the {what} field {key}={value[:64]!r} is not a Java {java}")
        value = int(value)
    if value < low:
        raise BodyError(f"the {what} field {key}={value} is below {low}")
    if value > high:
        raise BodyError(f"the {what} field {key}={value} is above {high}")
    return value


def java_int(
    obj: dict[str, Any],
    key: str,
    what: str,
    *,
    default: Any = _REQUIRED,
    minimum: int = JAVA_INT_MIN,
    maximum: int = JAVA_INT_MAX,
) -> int:
    """The Java ``int`` field *key* of the body *what*, within *minimum*..*maximum*."""
    return _number(obj, key, what, "int", max(minimum, JAVA_INT_MIN), min(maximum, JAVA_INT_MAX), default)


def java_long(
    obj: dict[str, Any],
    key: str,
    what: str,
    *,
    default: Any = _REQUIRED,
    minimum: int = JAVA_LONG_MIN,
    maximum: int = JAVA_LONG_MAX,
) -> int:
    """The Java ``long`` field *key* of the body *what*, within *minimum*..*maximum*."""
    low, high = max(minimum, JAVA_LONG_MIN), min(maximum, JAVA_LONG_MAX)
    return _number(obj, key, what, "long", low, high, default)


def java_bool(obj: dict[str, Any], key: str, what: str, *, default: bool) -> bool:
    """The Java ``boolean`` field *key*: a JSON boolean, or the text ``true``/``false`` (any case)."""
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise BodyError(f"the {what} field {key} is not a Java boolean")


def java_string(
    obj: dict[str, Any], key: str, what: str, *, default: Any = _REQUIRED, name_rule: NameRule | None = None
) -> str:
    """The Java ``String`` field *key*; a number or boolean is read as its text (as fastjson does),
    an object or array is refused, and so is a name *name_rule* refuses."""
    value = _present(obj, key, what, default)
    if value is None:
        return str(default)  # the caller's default text
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, int):
        value = str(value)
    elif not isinstance(value, str):
        raise BodyError(f"the {what} field {key} is not a Java String")
    if name_rule is not None and (problem := name_rule(value)) is not None:
        raise BodyError(name_remark(f"{what}.{key}", value, problem))
    return value


def java_list(obj: dict[str, Any], key: str, what: str, *, max_items: int) -> list[Any]:
    """The JSON array (a Java ``Set`` or ``List``) *key*, absent or null meaning empty, of at most
    *max_items* items."""
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BodyError(f"the {what} field {key} is not a JSON array")
    if len(value) > max_items:
        raise BodyError(f"the {what} field {key} holds {len(value)} items, above {max_items}")
    return value
