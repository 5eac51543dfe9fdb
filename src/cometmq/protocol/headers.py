"""Typed request and response headers: each declared once, decoded by one end and encoded by the other.

A header is a class of fields, each naming its wire field (the extFields key), its Java type and its
limits::

    @header
    class PullMessageRequestHeader(Header):
        consumer_group: JavaString = wire("consumerGroup")
        queue_id: JavaInt = wire("queueId", minimum=0)
        max_msg_nums: JavaInt = wire("maxMsgNums", default=32)

``PullMessageRequestHeader.decode(request.ext_fields)`` checks every field once — present unless it has a
default, of its Java type, within the Java ``int``/``long`` range and the declared limits — and raises
:class:`~cometmq.errors.HeaderError` naming the field otherwise; the transport answers that with its
code (SYSTEM_ERROR, as a Java server answers a header it cannot decode) and remark. ``encode()`` gives
the ``dict[str, str]`` a request or response carries.

A field may have a second, *compact* wire name: SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE send the send
header with one letter per field (``SendMessageRequestHeaderV2``); ``decode(fields, compact=True)`` and
``encode(compact=True)`` use those names.

Java types map to Python ones: ``JavaString`` is ``str``, ``JavaInt`` and ``JavaLong`` are ``int``
(checked against 32 and 64 bits), ``JavaBool`` is ``bool`` (Java's ``Boolean.parseBoolean``, and the
C++ client's ``"1"``). A field whose Java type is a boxed ``Integer``/``Long`` that may be null is
declared ``JavaInt | None`` with ``default=None``: absent on the wire, ``None`` here.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Final, Self, TypeVar, dataclass_transform

from cometmq.errors import HeaderError
from cometmq.protocol.codes import ResponseCode

__all__ = [
    "Header",
    "JavaBool",
    "JavaInt",
    "JavaLong",
    "JavaString",
    "header",
    "wire",
]


class _JavaType:
    """What an ``Annotated`` Java type carries: its name in remarks, and its range for numbers."""

    def __init__(self, name: str, low: int | None = None, high: int | None = None) -> None:
        self.name = name
        self.low = low
        self.high = high


_INT: Final = _JavaType("int", -(2**31), 2**31 - 1)
_LONG: Final = _JavaType("long", -(2**63), 2**63 - 1)
_STRING: Final = _JavaType("String")
_BOOLEAN: Final = _JavaType("boolean")

JavaInt = Annotated[int, _INT]
JavaLong = Annotated[int, _LONG]
JavaString = Annotated[str, _STRING]
JavaBool = Annotated[bool, _BOOLEAN]

_NO_DEFAULT: Final = object()
_SPEC_KEY: Final = "cometmq.wire"


@dataclasses.dataclass(frozen=True, slots=True)
class _WireName:
    name: str
    compact: str | None
    minimum: int | None
    maximum: int | None
    max_length: int | None


def wire(
    name: str,
    *,
    compact: str | None = None,
    default: Any = _NO_DEFAULT,
    minimum: int | None = None,
    maximum: int | None = None,
    max_length: int | None = None,
) -> Any:
    """Declare a header field: its wire *name* (and *compact* one-letter name, for the V2 send header),
    its *default* when absent (no default: the field is required), and its limits: *minimum* and
    *maximum* for numbers, *max_length* (in characters) for strings."""
    metadata = {_SPEC_KEY: _WireName(name, compact, minimum, maximum, max_length)}
    if default is _NO_DEFAULT:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    attr: str
    name: str
    compact: str
    java: _JavaType
    parse: Callable[[_Field, str], Any]
    required: bool
    default: Any
    low: int | None
    high: int | None
    max_length: int | None


def _parse_string(spec: _Field, text: str) -> str:
    if spec.max_length is not None and len(text) > spec.max_length:
        raise HeaderError(
            ResponseCode.SYSTEM_ERROR,
            f"the request header field {spec.name} is longer than {spec.max_length} characters",
        )
    return text


def _parse_number(spec: _Field, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise HeaderError(
            ResponseCode.SYSTEM_ERROR,
            f"the request header field {spec.name}={text[:64]!r} is not a Java {spec.java.name}",
        ) from None
    if spec.low is not None and value < spec.low:
        limit = "the Java range" if spec.low == spec.java.low else str(spec.low)
        raise HeaderError(
            ResponseCode.SYSTEM_ERROR, f"the request header field {spec.name}={value} is below {limit}"
        )
    if spec.high is not None and value > spec.high:
        limit = "the Java range" if spec.high == spec.java.high else str(spec.high)
        raise HeaderError(
            ResponseCode.SYSTEM_ERROR, f"the request header field {spec.name}={value} is above {limit}"
        )
    return value


def _parse_bool(spec: _Field, text: str) -> bool:
    # Java's Boolean.parseBoolean: anything but "true" (any case) is false; the C++ client writes 1/0.
    return text.strip().lower() in ("true", "1")


def _java_type(hint: Any) -> tuple[_JavaType, bool]:
    """The Java type of a field's annotation, and whether it may be None."""
    nullable = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        nullable = len(args) < len(typing.get_args(hint))
        if len(args) != 1:
            raise TypeError(f"a header field is one Java type, or one and None: {hint!r}")
        hint = args[0]
    for extra in getattr(hint, "__metadata__", ()):
        if isinstance(extra, _JavaType):
            return extra, nullable
    raise TypeError(f"a header field's type is JavaString, JavaInt, JavaLong or JavaBool, not {hint!r}")


def _field_specs(cls: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    specs = []
    for field in dataclasses.fields(cls):
        wire_name = field.metadata.get(_SPEC_KEY)
        if not isinstance(wire_name, _WireName):
            raise TypeError(f"{cls.__name__}.{field.name} is not declared with wire()")
        java, nullable = _java_type(hints[field.name])
        parse: Callable[[_Field, str], Any]
        if java is _STRING:
            parse = _parse_string
        elif java is _BOOLEAN:
            parse = _parse_bool
        else:
            parse = _parse_number
        required = field.default is dataclasses.MISSING
        if field.default is None and not nullable:
            raise TypeError(f"{cls.__name__}.{field.name} defaults to None but its type is not optional")
        low, high = java.low, java.high
        if wire_name.minimum is not None:
            low = wire_name.minimum if low is None else max(low, wire_name.minimum)
        if wire_name.maximum is not None:
            high = wire_name.maximum if high is None else min(high, wire_name.maximum)
        specs.append(
            _Field(
                field.name,
                wire_name.name,
                wire_name.compact or wire_name.name,
                java,
                parse,
                required,
                None if required else field.default,
                low,
                high,
                wire_name.max_length,
            )
        )
    return tuple(specs)


class Header:
    """Base of every declared header; see the module docstring."""

    _specs: ClassVar[tuple[_Field, ...]] = ()

    @classmethod
    def decode(cls, fields: Mapping[str, str], *, compact: bool = False) -> Self:
        """The header in *fields* (a command's extFields); :class:`HeaderError` names the first field
        that is missing, not of its type, or out of range."""
        values: dict[str, Any] = {}
        for spec in cls._specs:
            text = fields.get(spec.compact if compact else spec.name)
            if text is None:
                if spec.required:
                    raise HeaderError(
                        ResponseCode.SYSTEM_ERROR, f"the request header field {spec.name} is missing"
                    )
                values[spec.attr] = spec.default
            else:
                values[spec.attr] = spec.parse(spec, text)
        return cls(**values)

    def encode(self, *, compact: bool = False) -> dict[str, str]:
        """The wire fields of this header (a field that is None is left out)."""
        fields: dict[str, str] = {}
        for spec in self._specs:
            value = getattr(self, spec.attr)
            if value is None:
                continue
            # bool before int: True is an int too, and Java writes it as "true"
            fields[spec.compact if compact else spec.name] = (
                ("true" if value else "false") if isinstance(value, bool) else str(value)
            )
        return fields


_H = TypeVar("_H", bound=Header)


@dataclass_transform(kw_only_default=True, field_specifiers=(wire,))
def header(cls: type[_H]) -> type[_H]:
    """Make *cls* a header: a keyword-only dataclass with slots whose fields are declared with
    :func:`wire`."""
    made = dataclasses.dataclass(slots=True, kw_only=True)(cls)
    made._specs = _field_specs(made)
    return made
