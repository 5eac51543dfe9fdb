"""JSON the way RocketMQ's Java side (Alibaba fastjson 1.x) writes and reads it.

fastjson writes ``Map<Integer/Long, …>`` keys unquoted (``{0:"127.0.0.1:10911"}``) and reads such
text back; standard JSON parsers reject it. :func:`loads` accepts it (numeric keys become ``str``
keys, as a standard parser would give for quoted ones) and :func:`dumps` can write it for peers that
expect the legacy form.
"""

from __future__ import annotations

import json
import re
from typing import Any

# A JSON string (skipped untouched) or an unquoted numeric object key (quoted).
_UNQUOTED_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)')


def _quote_key(match: re.Match[str]) -> str:
    if match.group(1) is None:
        return match.group(0)
    return f'{match.group(1)}"{match.group(2)}"{match.group(3)}'


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse fastjson-flavoured JSON: standard JSON plus unquoted numeric object keys.

    Raises ``ValueError`` for text that is neither.
    """
    text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(_UNQUOTED_KEY.sub(_quote_key, text))


def dumps(obj: Any, *, numeric_keys_unquoted: bool = False) -> bytes:
    """Serialize ``obj`` compactly; with ``numeric_keys_unquoted``, int keys come out fastjson's way."""
    if not numeric_keys_unquoted:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    return _dumps_legacy(obj).encode()


def _dumps_legacy(obj: Any) -> str:
    if isinstance(obj, dict):
        items = []
        for key, value in obj.items():
            key_text = str(key) if isinstance(key, int) else json.dumps(str(key), ensure_ascii=False)
            items.append(f"{key_text}:{_dumps_legacy(value)}")
        return "{" + ",".join(items) + "}"
    if isinstance(obj, list | tuple | set | frozenset):
        return "[" + ",".join(_dumps_legacy(item) for item in obj) + "]"
    return json.dumps(obj, ensure_ascii=False)
