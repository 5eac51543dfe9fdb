"""VIEW_BROKER_STATS_DATA: RocketMQ's statistics names and keys, and the BrokerStatsData body.

A broker keeps, for each stats name and key, a counter and how many requests added to it. The answer
gives three windows of it: about the last minute, hour and day (RocketMQ's StatsItem samples every
10 s, 10 min and 1 h). In each, ``sum`` is what was added, ``tps`` that per second, and ``avgpt`` that
per request (messages or bytes per send, or per pull).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from cometmq.protocol import fastjson
from cometmq.protocol.jsonbody import as_object, json_object


class StatsName(enum.StrEnum):
    """RocketMQ's ``Stats`` names a broker answers for: messages and bytes stored per topic (key: the
    topic), messages and bytes pulled per consumer group (key: ``topic@group``)."""

    TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
    TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
    GROUP_GET_NUMS = "GROUP_GET_NUMS"
    GROUP_GET_SIZE = "GROUP_GET_SIZE"


def group_stats_key(topic: str, group: str) -> str:
    """The key of a consumer group's counters on a topic (RocketMQ's buildStatsKey)."""
    return f"{topic}@{group}"


@dataclass(slots=True, frozen=True)
class StatsWindow:
    """One window of a counter (RocketMQ's BrokerStatsItem)."""

    sum: int
    tps: float
    avgpt: float

    def to_json(self) -> dict[str, Any]:
        return {"avgpt": self.avgpt, "sum": self.sum, "tps": self.tps}

    @classmethod
    def from_json(cls, raw: Any) -> StatsWindow:
        item = as_object(raw, "BrokerStatsItem")
        return cls(int(item.get("sum") or 0), float(item.get("tps") or 0), float(item.get("avgpt") or 0))


@dataclass(slots=True, frozen=True)
class BrokerStatsData:
    """VIEW_BROKER_STATS_DATA's body: a counter over about the last minute, hour and day."""

    minute: StatsWindow
    hour: StatsWindow
    day: StatsWindow

    def encode(self) -> bytes:
        return fastjson.dumps(
            {
                "statsDay": self.day.to_json(),
                "statsHour": self.hour.to_json(),
                "statsMinute": self.minute.to_json(),
            }
        )

    @classmethod
    def decode(cls, body: bytes) -> BrokerStatsData:
        data = json_object(body, "BrokerStatsData")
        return cls(
            StatsWindow.from_json(data.get("statsMinute") or {}),
            StatsWindow.from_json(data.get("statsHour") or {}),
            StatsWindow.from_json(data.get("statsDay") or {}),
        )

    @property
    def today(self) -> int:
        """The day's sum, or the widest window that counted anything (RocketMQ's compute24HourSum, what
        ``statsAll`` prints as the last 24 hours)."""
        for window in (self.day, self.hour, self.minute):
            if window.sum:
                return window.sum
        return 0
