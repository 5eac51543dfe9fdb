"""Java ``.properties`` files, the format of RocketMQ's ``broker.conf`` and ``namesrv.conf``, and the
conversion of their text values to the settings' types as RocketMQ converts them."""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from cometmq.errors import ConfigError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if current == "" and (not line or line[0] in "#!"):
            continue
        # A line continues when it ends in an odd number of backslashes.
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            current += line[:-1]
            continue
        lines.append(current + line)
        current = ""
    if current:
        lines.append(current)
    return lines


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and len(text) >= i + 6:
                try:
                    out.append(chr(int(text[i + 2 : i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Parse properties text: ``key=value``, ``key: value`` or ``key value``; ``#``/``!`` comments."""
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        i = 0
        while i < len(line):
            ch = line[i]
            if ch == "\\":
                i += 2
                continue
            if ch in "=: \t\f":
                break
            i += 1
        key = line[:i]
        # Java: the key ends at the first unescaped '=', ':' or blank; then blanks, one optional
        # '=' or ':', and blanks again precede the value.
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        result[_unescape(key)] = _unescape(rest).strip()
    return result


_WRITTEN_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}


def _escaped_char(ch: str) -> str:
    escape = _WRITTEN_ESCAPES.get(ch)
    if escape is not None:
        return escape
    # Characters a reader could take for a line break or a blank (Python's splitlines and strip take
    # more of them than Java), or that do not print.
    if ch != " " and ord(ch) <= 0xFFFF and (ch.isspace() or not ch.isprintable()):
        return f"\\u{ord(ch):04x}"
    return ch


def _escaped(text: str, *, key: bool) -> str:
    out = [_escaped_char(ch) for ch in text]
    if key:
        out = ["\\" + ch if ch in "=: #!" else ch for ch in out]
    elif out and out[0] == " ":
        out[0] = "\\ "  # a leading blank of a value would be read as the separator
    return "".join(out)


def format_properties(values: Mapping[str, str]) -> str:
    """Properties text that :func:`parse_properties` (and Java's ``Properties.load``) reads back as
    *values*: one ``key=value`` line each, in their order."""
    return "".join(
        f"{_escaped(key, key=True)}={_escaped(value, key=False)}\n" for key, value in values.items()
    )


def read_properties(path: str | Path) -> dict[str, str]:
    return parse_properties(Path(path).read_text(encoding="utf-8"))


# Words RocketMQ's key names spell in capitals (brokerIP1, enabledAppendPropCRC).
_CAPITALISED = {"ip1", "crc"}


def key_of(attribute: str) -> str:
    """The RocketMQ key of an attribute: ``listen_port`` → ``listenPort``."""
    first, *rest = attribute.split("_")
    return first + "".join(word.upper() if word in _CAPITALISED else word.capitalize() for word in rest)


def converted(key: str, value: Any, current: Any) -> Any:
    """*value* (text from a file or flag, or already of the type) as the type of *current*."""
    kind = type(current)
    if type(value) is kind:
        return value
    text = str(value).strip()
    if isinstance(current, enum.Enum):
        # Java's Enum.valueOf: the exact name.
        if text not in kind.__members__:
            raise ConfigError(f"{key}={text!r} is not one of {', '.join(kind.__members__)}")
        return kind[text]
    if isinstance(current, bool):
        return text.lower() == "true"  # Java's Boolean.parseBoolean: anything else is false
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(f"{key}={value!r} is not a valid {kind.__name__}") from None


def apply_properties(
    target: Any,
    values: Mapping[str, Any],
    key_of_attribute: Mapping[str, str],
    attribute_of_key: Mapping[str, str],
    convert: Callable[[str, Any, Any], Any] = converted,
    skip: Collection[str] = (),
) -> list[str]:
    """Set *target*'s attributes from *values*, each given by RocketMQ key or attribute name and
    converted to the attribute's type (a None value is skipped; keys in *skip* are left to the caller);
    returns the keys *target* has no attribute for, in their order, for the caller to report."""
    unknown = []
    for key, value in values.items():
        if key in skip:
            continue
        name = attribute_of_key.get(key, key)
        if name not in key_of_attribute:
            unknown.append(key)
        elif value is not None:
            setattr(target, name, convert(key_of_attribute[name], value, getattr(target, name)))
    return unknown
