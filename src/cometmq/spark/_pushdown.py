"""Filters Spark pushes into a batch read, turned into bounds on the planned ranges (pure: no I/O).

A ``WHERE`` on the queue's identity (``topic``, ``broker``, ``queue_id``), on ``queue_offset`` or on
``store_timestamp`` narrows which queues are read and which offsets of each: the rest is never
pulled. The identity and offset comparisons are exact, so Spark need not check them again; the
store-time bounds become offsets through the brokers' time search, which assumes store times grow
with the offset, so Spark checks those rows again.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from cometmq.client.message import MessageQueue

__all__ = ["Pruning"]

_COMPARISONS = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(slots=True)
class Pruning:
    """What the pushed filters allow: queues by name, offsets ``[offset_from, offset_to)`` and store
    times ``[time_from_ms, time_to_ms)`` (None: no bound)."""

    topics: set[str] | None = None
    brokers: set[str] | None = None
    queue_ids: set[int] | None = None
    offset_from: int | None = None
    offset_to: int | None = None
    time_from_ms: int | None = None
    time_to_ms: int | None = None
    pushed: list[Filter] = field(default_factory=list)

    def take(self, filters: Iterable[Filter]) -> Iterator[Filter]:
        """Record what each filter allows; yield those Spark must still evaluate (the ones not
        understood, and the store-time ones)."""
        for pushed in filters:
            path: tuple[str, ...] = getattr(pushed, "attribute", ())  # every filter but Not has one
            column = path[0] if len(path) == 1 else ""
            if self._take(column, pushed):
                self.pushed.append(pushed)
                if column == "store_timestamp":
                    yield pushed
            else:
                yield pushed

    def _take(self, column: str, pushed: Filter) -> bool:
        if column in ("topic", "broker", "queue_id"):
            if isinstance(pushed, In):
                values = set(pushed.value)
            elif isinstance(pushed, EqualTo):
                values = {pushed.value}
            else:
                return False
            if column == "topic":
                self.topics = values if self.topics is None else self.topics & values
            elif column == "broker":
                self.brokers = values if self.brokers is None else self.brokers & values
            else:
                self.queue_ids = values if self.queue_ids is None else self.queue_ids & values
            return True
        if column == "queue_offset" and isinstance(pushed, _COMPARISONS) and isinstance(pushed.value, int):
            low, high = _interval(pushed, pushed.value, pushed.value)
            self.offset_from = _max(self.offset_from, low)
            self.offset_to = _min(self.offset_to, high)
            return True
        if (
            column == "store_timestamp"
            and isinstance(pushed, _COMPARISONS)
            and isinstance(pushed.value, datetime.datetime)
        ):
            # Store times are whole milliseconds; a time between two of them is below the later one.
            at, exact = _millis(pushed.value)
            low, high = _interval(pushed, at, at if exact else at + 1)
            self.time_from_ms = _max(self.time_from_ms, low)
            self.time_to_ms = _min(self.time_to_ms, high)
            return True
        return False

    def keeps(self, queue: MessageQueue) -> bool:
        return (
            (self.topics is None or queue.topic in self.topics)
            and (self.brokers is None or queue.broker_name in self.brokers)
            and (self.queue_ids is None or queue.queue_id in self.queue_ids)
        )


def _interval(pushed: Filter, at: int, below: int) -> tuple[int | None, int | None]:
    """The whole numbers ``[from, to)`` that ``pushed`` allows: ``at`` is its value rounded down,
    ``below`` the first whole number not below its value (``at`` itself when the value is whole)."""
    if isinstance(pushed, EqualTo):
        return at, at + 1
    if isinstance(pushed, GreaterThan):
        return at + 1, None
    if isinstance(pushed, GreaterThanOrEqual):
        return below, None
    if isinstance(pushed, LessThan):
        return None, below
    return None, at + 1  # LessThanOrEqual


def _millis(moment: datetime.datetime) -> tuple[int, bool]:
    """Milliseconds since the epoch rounded down, and whether that is exact; a naive time is UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    millis, rest = divmod(moment - _EPOCH, datetime.timedelta(milliseconds=1))
    return millis, not rest


def _max(current: int | None, bound: int | None) -> int | None:
    return bound if current is None else current if bound is None else max(current, bound)


def _min(current: int | None, bound: int | None) -> int | None:
    return bound if current is None else current if bound is None else min(current, bound)
