"""Message properties codec (wire facts §6.4).

Properties travel and are stored as one string: ``name\\x01value\\x02name\\x01value``. Java writes no
trailing ``\\x02``; the C++ and JS clients write one after every pair, so decoding accepts both.
"""

from __future__ import annotations

__all__ = [
    "KEY_SEPARATOR",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "decode_properties",
    "encode_properties",
    "property_marker",
    "property_value",
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


def property_marker(name: str) -> bytes:
    """What precedes the value of property *name* in encoded properties (for ``property_value``)."""
    return f"{name}{NAME_VALUE_SEPARATOR}".encode()


def property_value(encoded: bytes, marker: bytes, start: int = 0, end: int | None = None) -> bytes:
    """The value of one property in the encoded properties at ``encoded[start:end]``, b"" when
    absent, without decoding the rest (the broker reads three names per message of a batch this
    way); *marker* is ``property_marker(name)``. A name given twice reads as its last value, as
    decoding does."""
    if end is None:
        end = len(encoded)
    at = encoded.rfind(marker, start, end)
    while at > start and encoded[at - 1] != 2:  # the end of a longer name ("XTAGS"): look further back
        at = encoded.rfind(marker, start, at)
    if at < 0:
        return b""
    at += len(marker)
    stop = encoded.find(2, at, end)
    return encoded[at : end if stop < 0 else stop]
