"""JSON the way RocketMQ's Java side (Alibaba fastjson 1.x) writes and reads it.

fastjson writes ``Map<Integer/Long, …>`` keys unquoted (``{0:"127.0.0.1:10911"}``) and reads such
text back; standard JSON parsers reject it. :func:`loads` accepts it (numeric keys become ``str``
keys, as a standard parser would give for quoted ones) and :func:`dumps` can write it for peers that
expect the legacy form.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

import orjson

# The deepest nesting of objects and arrays accepted in wire JSON. RocketMQ's bodies nest a few levels;
# Python code handling a value recurses per level (the standard library's parser, repr, a writer) and
# fails with RecursionError near 1000, so deeper values are refused as they are read.
MAX_DEPTH = 64

# A JSON string (skipped untouched) or an unquoted numeric object key (quoted).
_UNQUOTED_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)')


def _quote_key(match: re.Match[str]) -> str:
    if match.group(1) is None:
        return match.group(0)
    return f'{match.group(1)}"{match.group(2)}"{match.group(3)}'


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse fastjson-flavoured JSON: standard JSON plus unquoted numeric object keys, plus maps keyed
    by beans (``{{"brokerName":"b","queueId":0,"topic":"t"}:42}``), whose keys become tuples of
    (property, value) pairs in their written order.

    Raises ``ValueError`` for text that is none of these, or nested deeper than :data:`MAX_DEPTH`.
    """
    raw = data if isinstance(data, bytes | str) else bytes(data)
    # Standard JSON, nearly every body: orjson parses without recursing (and refuses 1024 levels), and
    # the depth is checked on what it built only when the text has more brackets than MAX_DEPTH.
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    else:
        if _bracket_count(raw) > MAX_DEPTH and _nested_too_deep(obj):
            raise NestingTooDeep(f"JSON nested deeper than {MAX_DEPTH} levels")
        return obj
    # What orjson refuses: fastjson's own forms, lone surrogates, integers past 64 bits, bad text.
    text = raw if isinstance(raw, str) else raw.decode("utf-8")
    check_depth(text)
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return json.loads(_UNQUOTED_KEY.sub(_quote_key, text))
    except ValueError:
        return _parse_bean_keys(text)  # the rare body with Map<MessageQueue, …> (admin requests)


# What is not a bracket of the JSON structure: a string (its brackets are text) or a run of other
# characters. Left after removing it: brackets, and the quote of a string never closed.
_NOT_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[^\[\]{}"]+')
_DEPTH_STEP = {"{": 1, "[": 1, "}": -1, "]": -1, '"': 0}


class NestingTooDeep(ValueError):
    """JSON text nested deeper than :data:`MAX_DEPTH`."""


def _bracket_count(raw: bytes | str) -> int:
    if isinstance(raw, str):
        return raw.count("{") + raw.count("[")
    return raw.count(b"{") + raw.count(b"[")


def _nested_too_deep(obj: Any) -> bool:
    """Whether the parsed value *obj* nests objects and arrays deeper than :data:`MAX_DEPTH` (walked
    without recursion: Python's own limit is near 1000 levels)."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth >= MAX_DEPTH:
                    return True
                stack.append((child, depth + 1))
    return False


def check_depth(text: str) -> None:
    """Raise ``NestingTooDeep`` when *text* nests objects and arrays deeper than :data:`MAX_DEPTH`."""
    if _bracket_count(text) <= MAX_DEPTH:
        return
    brackets = _NOT_STRUCTURE.sub("", text)
    if max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0) > MAX_DEPTH:
        raise NestingTooDeep(f"JSON nested deeper than {MAX_DEPTH} levels")


def dumps(obj: Any, *, numeric_keys_unquoted: bool = False, bean_keys: bool = False) -> bytes:
    """Serialize ``obj`` compactly; with ``numeric_keys_unquoted``, int keys come out fastjson's way.

    With ``bean_keys``, a key given as a tuple of (property, value) pairs is written as a JSON object,
    fastjson's form of ``Map<MessageQueue, …>`` (ConsumeStats, ResetOffsetBody); int keys then come
    out unquoted too. Standard JSON parsers cannot read the result; :func:`loads` can.
    """
    if not (numeric_keys_unquoted or bean_keys):
        return _utf8(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
    return _utf8(_dumps_legacy(obj))


def _utf8(text: str) -> bytes:
    """JSON text as UTF-8. A string read from a ``\\ud800`` escape holds a lone UTF-16 surrogate, which
    UTF-8 cannot hold: it is written back as that escape (it can only stand inside a JSON string), which
    Java reads as the same string, rather than failing every answer and registration that includes it."""
    return text.encode("utf-8", "backslashreplace")


def _dumps_legacy(obj: Any) -> str:
    if isinstance(obj, dict):
        items = []
        for key, value in obj.items():
            if isinstance(key, tuple):
                key_text = _dumps_legacy(dict(key))
            else:
                key_text = str(key) if isinstance(key, int) else json.dumps(str(key), ensure_ascii=False)
            items.append(f"{key_text}:{_dumps_legacy(value)}")
        return "{" + ",".join(items) + "}"
    if isinstance(obj, list | tuple | set | frozenset):
        return "[" + ",".join(_dumps_legacy(item) for item in obj) + "]"
    return json.dumps(obj, ensure_ascii=False)


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_BARE_KEY = re.compile(r"-?[0-9A-Za-z_]+")
_SCALARS = json.JSONDecoder()


def _skip(text: str, pos: int) -> int:
    """The position after the blanks at ``pos``."""
    match = _WHITESPACE.match(text, pos)
    return pos if match is None else match.end()


def _parse_bean_keys(text: str) -> Any:
    try:
        value, end = _parse_value(text, _skip(text, 0))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if _skip(text, end) != len(text):
        raise ValueError(f"extra data after the JSON value at {end}")
    return value


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def _parse_value(text: str, pos: int) -> tuple[Any, int]:
    """One value at ``pos`` (no leading blanks); objects and arrays by hand, the rest by ``json``."""
    if text.startswith("{", pos):
        obj: dict[Any, Any] = {}
        pos = _skip(text, pos + 1)
        if text.startswith("}", pos):
            return obj, pos + 1
        while True:
            key: Any
            if text.startswith("{", pos):
                key, pos = _parse_value(text, pos)
                key = _hashable(key)
            elif text.startswith('"', pos):
                key, pos = _SCALARS.raw_decode(text, pos)
            else:
                bare = _BARE_KEY.match(text, pos)
                if bare is None:
                    raise ValueError(f"expected an object key at {pos}")
                key, pos = bare.group(), bare.end()
            pos = _skip(text, pos)
            if not text.startswith(":", pos):
                raise ValueError(f"expected ':' at {pos}")
            value, pos = _parse_value(text, _skip(text, pos + 1))
            obj[key] = value
            pos = _skip(text, pos)
            if text.startswith("}", pos):
                return obj, pos + 1
            if not text.startswith(",", pos):
                raise ValueError(f"expected ',' or '}}' at {pos}")
            pos = _skip(text, pos + 1)
    if text.startswith("[", pos):
        items: list[Any] = []
        pos = _skip(text, pos + 1)
        if text.startswith("]", pos):
            return items, pos + 1
        while True:
            item, pos = _parse_value(text, pos)
            items.append(item)
            pos = _skip(text, pos)
            if text.startswith("]", pos):
                return items, pos + 1
            if not text.startswith(",", pos):
                raise ValueError(f"expected ',' or ']' at {pos}")
            pos = _skip(text, pos + 1)
    try:
        return _SCALARS.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        raise ValueError(str(exc)) from None
