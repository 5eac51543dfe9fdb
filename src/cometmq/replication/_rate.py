"""Bytes per second over the last second or so, for the HA status."""

from __future__ import annotations

import time


class ByteRate:
    __slots__ = ("_at", "_rate", "_sampled", "total")

    def __init__(self) -> None:
        self.total = 0  # bytes so far; the link adds to it
        self._sampled = 0
        self._at = time.monotonic()
        self._rate = 0

    def per_second(self) -> int:
        now = time.monotonic()
        elapsed = now - self._at
        if elapsed >= 1.0:
            self._rate = int((self.total - self._sampled) / elapsed)
            self._sampled = self.total
            self._at = now
        return self._rate
