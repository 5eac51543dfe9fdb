"""Message properties codec (docs/protocol.md#properties).

Properties travel and are stored as one string: ``name\\x01value\\x02name\\x01value``. Java writes no
trailing ``\\x02``; the C++ and JS clients write one after every pair, so decoding accepts both.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = [
    "KEY_SEPARATOR",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "decode_properties",
    "encode_properties",
    "property_finder",
]

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "  # between the keys of the KEYS property (RocketMQ's MessageConst.KEY_SEPARATOR)


def encode_properties(props: dict[str, str]) -> str:
    """Encode *props* the way Java does (no trailing separator).

    Raises ``ValueError`` when a name or value contains a separator: such text cannot be decoded
    back and would silently corrupt the neighbouring properties for every client.
    """
    parts = []
    for name, value in props.items():
        if value is None:  # Java skips null values; tolerate them from untyped callers
            continue
        if "\x01" in name or "\x02" in name or "\x01" in value or "\x02" in value:
            raise ValueError(f"property {name!r} contains a \\x01 or \\x02 separator")
        parts.append(f"{name}\x01{value}")
    return "\x02".join(parts)


def decode_properties(text: str) -> dict[str, str]:
    """Decode a properties string; segments without a ``\\x01`` (e.g. after a trailing ``\\x02``) are
    skipped. A repeated name keeps its last value, as Java's HashMap does."""
    result: dict[str, str] = {}
    if not text:
        return result
    for segment in text.split("\x02"):
        name, sep, value = segment.partition("\x01")
        if sep:
            result[name] = value
    return result


def property_finder(*names: str) -> Callable[[bytes], list[tuple[bytes, bytes]]]:
    """A function that lists ``(name, value)`` for each pair of encoded properties named in *names*, in
    order, without decoding the others: one regex scan in C (the broker reads TAGS, KEYS and UNIQ_KEY
    of every message of a batch this way). A name given twice is listed twice; its last value is the
    one decoding keeps."""
    separator = re.escape(PROPERTY_SEPARATOR.encode())
    alternatives = b"|".join(re.escape(name.encode()) for name in names)
    pattern = b"(?:^|%s)(%s)%s([^%s]*)" % (
        separator,
        alternatives,
        re.escape(NAME_VALUE_SEPARATOR.encode()),
        separator,
    )
    return re.compile(pattern).findall
