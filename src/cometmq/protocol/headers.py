"""Typed request and response headers: each declared once, decoded by one end and encoded by the other.

A header is a class of fields, each naming its wire field (the extFields key), its Java type and its
limits::

    @header
    class PullMessageRequestHeader(Header):
        consumer_group: JavaString = wire("consumerGroup")
        queue_id: JavaInt = wire("queueId", minimum=0)
        subscription: JavaString | None = wire("subscription", default=None)

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

A string field that names something (a topic, a group, a client) declares the rule its names follow,
``wire("consumerGroup", name_rule=group_name_error)``: a function giving why a name is refused, or None
(:mod:`cometmq.protocol.naming`). A name it refuses fails the decode with a HeaderError whose remark
names the field, shows the name and gives the rule's reason, as RocketMQ's broker words a bad topic:
``topic[a b]: The specified topic contains illegal characters, ...``.
"""

from __future__ import annotations

import dataclasses
import linecache
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Final, Self, TypeVar, dataclass_transform

from cometmq.errors import HeaderError
from cometmq.protocol.codes import ResponseCode
from cometmq.protocol.naming import NameRule, name_remark

__all__ = [
    "Header",
    "JavaBool",
    "JavaInt",
    "JavaLong",
    "JavaString",
    "WireField",
    "header",
    "wire",
    "wire_fields",
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
    name_rule: NameRule | None


def wire(
    name: str,
    *,
    compact: str | None = None,
    default: Any = _NO_DEFAULT,
    minimum: int | None = None,
    maximum: int | None = None,
    name_rule: NameRule | None = None,
) -> Any:
    """Declare a header field: its wire *name* (and *compact* one-letter name, for the V2 send header),
    its *default* when absent (no default: the field is required), and its limits: *minimum* and
    *maximum* for numbers, and *name_rule* for a string that names something: why a name is
    refused, or None."""
    metadata = {_SPEC_KEY: _WireName(name, compact, minimum, maximum, name_rule)}
    if default is _NO_DEFAULT:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    attr: str
    name: str
    compact: str
    java: _JavaType
    required: bool
    default: Any
    low: int | None
    high: int | None
    name_rule: NameRule | None


def _missing(spec: _Field) -> HeaderError:
    return HeaderError(ResponseCode.SYSTEM_ERROR, f"the request header field {spec.name} is missing")


def _bad_name(spec: _Field, text: str, problem: str) -> HeaderError:
    return HeaderError(ResponseCode.SYSTEM_ERROR, name_remark(spec.name, text, problem))


def _not_a_number(spec: _Field, text: str) -> HeaderError:
    return HeaderError(
        ResponseCode.SYSTEM_ERROR,
        f"the request header field {spec.name}={text[:64]!r} is not a Java {spec.java.name}",
    )


def _out_of_range(spec: _Field, value: int) -> HeaderError:
    if spec.low is not None and value < spec.low:
        limit = "the Java range" if spec.low == spec.java.low else str(spec.low)
        return HeaderError(
            ResponseCode.SYSTEM_ERROR, f"the request header field {spec.name}={value} is below {limit}"
        )
    limit = "the Java range" if spec.high == spec.java.high else str(spec.high)
    return HeaderError(
        ResponseCode.SYSTEM_ERROR, f"the request header field {spec.name}={value} is above {limit}"
    )


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
        if wire_name.name_rule is not None and java is not _STRING:
            raise TypeError(f"{cls.__name__}.{field.name} has a name rule but is not a JavaString")
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
                required,
                None if required else field.default,
                low,
                high,
                wire_name.name_rule,
            )
        )
    return tuple(specs)


# Every header is decoded and encoded by methods generated for its class: straight-line code with no
# loop over the fields and no call per field, one copy per naming (long, compact), the object made
# without calling __init__. The send and pull headers are decoded once per request: bench/broker_send.py
# (SEND_MESSAGE_V2) measures that path.


# Most numbers in headers are small (queue ids, flags, counts): a dict lookup reads them faster than
# int() does (bench/broker_send.py, SEND_MESSAGE_V2).
_SMALL_NUMBERS: Final = {str(number): number for number in range(-1, 1025)}


def _decoder_lines(specs: tuple[_Field, ...], compact: bool) -> list[str]:
    lines = []
    for i, spec in enumerate(specs):
        key = spec.compact if compact else spec.name
        if spec.required:
            lines += [
                "try:",
                f"    text = fields[{key!r}]",
                "except KeyError:",
                f"    raise _missing(specs[{i}]) from None",
            ]
            at = ""
        else:
            lines += [f"text = get({key!r})", "if text is None:", f"    v{i} = {spec.default!r}", "else:"]
            at = "    "
        if spec.java is _STRING:
            lines.append(f"{at}v{i} = text")
            if spec.name_rule is not None:
                lines += [
                    f"{at}problem = rule{i}(text)",
                    f"{at}if problem is not None:",
                    f"{at}    raise _bad_name(specs[{i}], text, problem)",
                ]
        elif spec.java is _BOOLEAN:
            # Java's Boolean.parseBoolean: anything but "true" (any case) is false; C++ writes 1/0.
            lines.append(f'{at}v{i} = text == "true" or (text != "false" and text.strip().lower() in _TRUE)')
        else:
            lines += [
                f"{at}v{i} = small(text)",
                f"{at}if v{i} is None:",
                f"{at}    try:",
                f"{at}        v{i} = int(text)",
                f"{at}    except ValueError:",
                f"{at}        raise _not_a_number(specs[{i}], text) from None",
                f"{at}if not {spec.low} <= v{i} <= {spec.high}:",
                f"{at}    raise _out_of_range(specs[{i}], v{i})",
            ]
    lines.append("header = new(cls)")
    lines += [f"header.{spec.attr} = v{i}" for i, spec in enumerate(specs)]
    lines.append("return header")
    return lines


def _encoder_lines(specs: tuple[_Field, ...], compact: bool) -> list[str]:
    lines = ["fields = {}"]
    for spec in specs:
        key = spec.compact if compact else spec.name
        if spec.java is _STRING:
            text = "value"
        elif spec.java is _BOOLEAN:
            text = '"true" if value else "false"'
        else:
            text = "str(value)"
        lines.append(f"value = self.{spec.attr}")
        if spec.required:
            lines.append(f"fields[{key!r}] = {text}")
        else:  # a field that is None is left out
            lines += ["if value is not None:", f"    fields[{key!r}] = {text}"]
    lines.append("return fields")
    return lines


def _method_source(signature: str, long: list[str], compact: list[str]) -> str:
    body = long if long == compact else ["if compact:", *_indented(compact), "else:", *_indented(long)]
    return "\n".join([signature, *_indented(body)])


def _indented(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


def _install_codec(cls: type, specs: tuple[_Field, ...]) -> None:
    namespace: dict[str, Any] = {
        "new": object.__new__,
        "small": _SMALL_NUMBERS.get,
        "specs": specs,
        "_TRUE": ("true", "1"),
        "_missing": _missing,
        "_not_a_number": _not_a_number,
        "_out_of_range": _out_of_range,
        "_bad_name": _bad_name,
    }
    namespace.update({f"rule{i}": spec.name_rule for i, spec in enumerate(specs) if spec.name_rule})
    decode = _method_source(
        "def decode(cls, fields, *, compact=False):",
        ["get = fields.get", *_decoder_lines(specs, False)],
        ["get = fields.get", *_decoder_lines(specs, True)],
    )
    encode = _method_source(
        "def encode(self, *, compact=False):", _encoder_lines(specs, False), _encoder_lines(specs, True)
    )
    source = f"{decode}\n\n{encode}\n"
    filename = f"<{cls.__qualname__} codec {len(linecache.cache)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)  # tracebacks
    exec(compile(source, filename, "exec"), namespace)
    # The generated methods take the place of Header's.
    for name, method in (("decode", classmethod(namespace["decode"])), ("encode", namespace["encode"])):
        setattr(cls, name, method)


@dataclasses.dataclass(frozen=True, slots=True)
class WireField:
    """One declared field of a header as the wire sees it: its names, Java type (``int``, ``long``,
    ``String``, ``boolean``), whether it is required, its range (numbers) and whether a name rule
    checks it (strings)."""

    name: str
    compact: str
    java: str
    required: bool
    minimum: int | None
    maximum: int | None
    named: bool


def wire_fields(cls: type[Header]) -> tuple[WireField, ...]:
    """The declared fields of the header class *cls*, in declaration order."""
    return tuple(
        WireField(
            spec.name, spec.compact, spec.java.name, spec.required, spec.low, spec.high, bool(spec.name_rule)
        )
        for spec in _field_specs(cls)
    )


class Header:
    """Base of every declared header; see the module docstring. :func:`header` gives each declared
    class its own ``decode`` and ``encode``."""

    @classmethod
    def decode(cls, fields: Mapping[str, str], *, compact: bool = False) -> Self:
        """The header in *fields* (a command's extFields); :class:`HeaderError` names the first field
        that is missing, not of its type, or out of range."""
        raise TypeError(f"{cls.__name__} is not declared with @header")

    def encode(self, *, compact: bool = False) -> dict[str, str]:
        """The wire fields of this header (a field that is None is left out)."""
        raise TypeError(f"{type(self).__name__} is not declared with @header")


_H = TypeVar("_H", bound=Header)


@dataclass_transform(kw_only_default=True, field_specifiers=(wire,))
def header(cls: type[_H]) -> type[_H]:
    """Make *cls* a header: a keyword-only dataclass with slots whose fields are declared with
    :func:`wire`."""
    made = dataclasses.dataclass(slots=True, kw_only=True)(cls)
    _install_codec(made, _field_specs(made))
    return made
