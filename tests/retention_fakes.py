"""What the retention tests inject or pin: the disk usage the store sees, and the hour a pass runs."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

HOUR_MS = 3_600_000


class InjectedDiskUsage:
    """An injected disk-usage probe: reports ``ratio`` instead of measuring the filesystem."""

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio

    def __call__(self, path: Path) -> float:
        return self.ratio


def at_hour(hour: int) -> int:
    """Tomorrow at ``hour``:30 local time, in ms: later than every file written now, by < 48 h."""
    day = datetime.now() + timedelta(days=1)
    return int(day.replace(hour=hour, minute=30, second=0, microsecond=0).timestamp() * 1000)
