"""Text output shared by the command line, the dashboard and the Spark pipeline demo: a one-line
progress bar, aligned tables and counted nouns. Depends on nothing else in CometMQ, so any layer
may use it."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TextIO

_BAR_WIDTH = 30
_REDRAW_EVERY_S = 0.1


class Progress:
    """``label [#####.....]  42 % 84 000/200 000  61 000/s`` on stderr while it runs.

    Only drawn when the stream is a terminal, so logs and pipes get the final report alone.
    """

    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.label = label
        self.total = max(total, 1)
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self._live = self._stream.isatty()
        self._start = time.perf_counter()
        self._drawn_at = 0.0

    def advance(self, count: int) -> None:
        self.done += count
        if not self._live:
            return
        now = time.perf_counter()
        if now - self._drawn_at >= _REDRAW_EVERY_S or self.done >= self.total:
            self._drawn_at = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        fraction = min(self.done / self.total, 1.0)
        filled = int(fraction * _BAR_WIDTH)
        rate = self.done / max(now - self._start, 1e-9)
        bar = "#" * filled + "." * (_BAR_WIDTH - filled)
        self._stream.write(
            f"\r{self.label} [{bar}] {fraction:4.0%} {self.done:,}/{self.total:,}  {rate:,.0f}/s\x1b[K"
        )
        self._stream.flush()

    def close(self) -> None:
        """Clear the bar's line (the command prints its own result)."""
        if self._live:
            self._stream.write("\r\x1b[K")
            self._stream.flush()


def plural(noun: str, count: int) -> str:
    """*noun* as said of *count* things: ``message`` for one, ``messages`` for any other count."""
    return noun if count == 1 else f"{noun}s"


def counted(count: int, noun: str) -> str:
    """``1 message``, ``2 messages``."""
    return f"{count} {plural(noun, count)}"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns two spaces apart, headers first; no trailing blanks."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]
    return "\n".join(lines)
