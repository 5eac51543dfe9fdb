"""Java-compatible tag hash (docs/protocol.md#tag-hash).

RocketMQ stores ``String.hashCode()`` of a message's tag as the consume-queue *tags code*, and
subscriptions carry the same ints in their ``codeSet``; we must produce bit-identical values.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable

__all__ = ["java_string_hash"]


@functools.lru_cache(maxsize=4096)
def java_string_hash(tag: str) -> int:
    """``java.lang.String.hashCode`` of *tag*: signed 32-bit, 0 for the empty string.

    Java hashes UTF-16 code units, so a character outside the BMP contributes its two surrogates.
    Tags repeat endlessly on the send path, hence the cache.
    """
    units: Iterable[int]
    if tag.isascii():
        units = tag.encode("ascii")  # ASCII code points are their own UTF-16 code units
    else:
        # "surrogatepass" keeps lone surrogates (legal in a Java String) hashable too.
        data = tag.encode("utf-16-be", "surrogatepass")
        units = struct.unpack(f">{len(data) // 2}H", data)
    h = 0
    for c in units:
        h = (31 * h + c) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h
