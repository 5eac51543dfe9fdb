"""The broker's one-line load summary in its log, every ``loadSummaryInterval`` seconds (0: none).

A line is written when messages came in or went out since the last look, and otherwise once every
ten minutes, so that an idle broker's log is not filled with lines of zeros. Everything in it is read
from what the broker keeps anyway (BrokerStats's totals, the commit log's offsets, the connection
set): nothing is counted for it on the send or pull paths.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker

log = logging.getLogger("cometmq.broker")

IDLE_LINE_INTERVAL_S = 600.0


@dataclass(frozen=True, slots=True)
class _Totals:
    at: float
    in_messages: int
    in_bytes: int
    out_messages: int
    out_bytes: int


class LoadSummary:
    """The broker's totals at the last look, and the line they make with the totals now."""

    def __init__(self, broker: Broker, clock: Callable[[], float] = time.monotonic) -> None:
        self._broker = broker
        self._clock = clock
        self._last = self._totals()
        self._last_line_at = self._last.at

    def _totals(self) -> _Totals:
        stats = self._broker.stats
        # Summed per line, not kept per request: the send and pull paths add to one counter each.
        return _Totals(
            self._clock(),
            stats.put_messages,
            sum(totals[1] for totals in stats.put_by_topic.values()),
            stats.got_messages,
            sum(totals[1] for totals in stats.got_by_group_topic.values()),
        )

    def next_line(self) -> str | None:
        """The line for the time since the last look; None while idle, but for one line every ten
        minutes."""
        now, last = self._totals(), self._last
        self._last = now
        elapsed = now.at - last.at
        busy = now.in_messages != last.in_messages or now.out_messages != last.out_messages
        if elapsed <= 0 or (not busy and now.at - self._last_line_at < IDLE_LINE_INTERVAL_S):
            return None
        self._last_line_at = now.at
        store = self._broker.store
        ratio = store.disk_usage_ratio()
        # A deleted topic's counters are dropped, so a byte total can fall: no negative rate.
        in_bytes = max(0, now.in_bytes - last.in_bytes)
        out_bytes = max(0, now.out_bytes - last.out_bytes)
        return (
            f"load ({elapsed:.0f} s): "
            f"in {(now.in_messages - last.in_messages) / elapsed:.1f} msg/s "
            f"({format_bytes(in_bytes / elapsed)}/s), "
            f"out {(now.out_messages - last.out_messages) / elapsed:.1f} msg/s "
            f"({format_bytes(out_bytes / elapsed)}/s), "
            f"connections {self._broker.connection_count}, "
            f"commit log {format_bytes(store.commitlog_max_offset - store.commitlog_min_offset)}, "
            f"disk {f'{ratio * 100:.0f} %' if ratio >= 0 else 'unknown'}, "
            f"flush behind {format_bytes(store.flush_behind_bytes)}"
        )


def format_bytes(count: float) -> str:
    """``812 B``, ``3.1 KiB``, ``1.2 GiB``."""
    if count < 1024:
        return f"{count:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        count /= 1024
        if count < 1024 or unit == "TiB":
            break
    return f"{count:.1f} {unit}"


async def log_load_summaries(broker: Broker, interval_s: float) -> None:
    """Log the load summary every *interval_s* seconds, for ever (a broker task)."""
    summary = LoadSummary(broker)
    while True:
        await asyncio.sleep(interval_s)
        try:
            line = summary.next_line()
        except Exception:  # a failed look (the disk cannot be measured) must not end the summaries
            log.exception("the load summary failed")
            continue
        if line is not None:
            log.info("%s", line)
