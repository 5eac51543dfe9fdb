"""Timer messages (RocketMQ 5): parked in ``rmq_sys_wheel_timer``, delivered to their real topic when due.

A message whose properties carry ``TIMER_DELIVER_MS`` (epoch ms), ``TIMER_DELAY_SEC`` or ``TIMER_DELAY_MS``
(after its arrival; RocketMQ reads them in that order of precedence: seconds, ms, absolute) and no
``DELAY`` level (which wins, its timer properties removed, as RocketMQ's checkIfTimerMessage does) is
parked in queue 0 of ``rmq_sys_wheel_timer`` with its delivery time in ``TIMER_OUT_MS`` and its real
topic and queue in ``REAL_TOPIC`` / ``REAL_QID``, as RocketMQ's HookUtils.transformTimerMessage does. A
time not in the future is no timer: the message is stored at once. A time beyond ``timerMaxDelaySec``
is refused (MESSAGE_ILLEGAL). A record that already carries ``TIMER_OUT_MS`` is never parked again.

The timer queue is in arrival order, not in delivery order, so this service keeps every unit not yet
settled in a heap by delivery time and delivers from its top, through the re-put path of delayed
messages (``deliver_parked``): the copy loses ``REAL_TOPIC`` / ``REAL_QID`` and gains
``TIMER_ENQUEUE_MS`` (when it was parked) and ``TIMER_DEQUEUE_MS`` (when it was delivered); its other
properties stay, ``TIMER_DELIVER_MS`` and ``TIMER_OUT_MS`` among them, as RocketMQ keeps them.

Which units are settled (delivered, skipped for good, rolled) is a bitmap over queue offsets from the
first one not settled (``SettledHalves``, the structure half messages use). The bitmap is the progress,
written to ``config/timerProgress.json`` once the delivered copies are flushed (``DeliveryProgress``,
as delayOffset.json is written). A start rebuilds the heap from the store: every unit from the file's
base on that the bitmap does not settle is pushed again with its delivery time, which its consume-queue
unit carries as its tags code (a unit whose tags code is a tag's hash, from a store written before
units carried it, has its record read for ``TIMER_OUT_MS``). After a crash the
copies delivered since the last write are delivered again: at least once, as RocketMQ.

A waiting unit is *rolled* (put again at the queue's end, ``TIMER_ROLL_TIMES`` + 1, as RocketMQ rolls a
message beyond its wheel, and settled at its old place) for two reasons. Its stored copy grows old:
once older than half the commit log's retention (``fileReservedTime``), at most two days (RocketMQ's
timerRollWindowSlot), it is rolled, so retention never deletes the only copy of a message still to
come. And settled units pile up after it: once more than ``_ROLL_SLACK`` settled units, and twice as
many as there are waiting units, lie between the first unsettled unit and the end of the queue, the
oldest waiting units are rolled, which keeps the bitmap and the scan at start short while re-putting
at most one waiting unit per two units settled.

A slave delivers nothing: its master does, and the copies reach it with the rest of the commit log.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import heapq
import logging
import math
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

from cometmq.broker._json_config import load_json_config
from cometmq.broker._schedule import (
    DeliveryProgress,
    Outcome,
    copy_of_record,
    deliver_in_rounds,
    deliver_parked,
    parked,
    real_queue,
)
from cometmq.broker._transaction import SettledHalves
from cometmq.errors import RecordError, RequestRefused
from cometmq.protocol import ResponseCode
from cometmq.protocol.jsonbody import JAVA_LONG_MAX, JAVA_LONG_MIN
from cometmq.protocol.naming import TIMER_TOPIC
from cometmq.protocol.properties import decode_properties
from cometmq.protocol.record import DecodedRecord, decode_record_at
from cometmq.protocol.transaction import REAL_QUEUE_ID, REAL_TOPIC
from cometmq.store import MessageToStore

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker

__all__ = [
    "DELIVERED_END_KEY",
    "TIMER_DELAY_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELIVER_MS",
    "TIMER_OUT_MS",
    "TIMER_PROGRESS_KEY",
    "TIMER_REQUEST_PROPERTIES",
    "TimerMessageService",
    "drop_timer_properties",
    "timer_delivery_ms",
]

log = logging.getLogger("cometmq.broker")

# RocketMQ's MessageConst names.
TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
TIMER_OUT_MS: Final = "TIMER_OUT_MS"
TIMER_ENQUEUE_MS: Final = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS: Final = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES: Final = "TIMER_ROLL_TIMES"
# What a sender sets to ask for a delivery time, in RocketMQ's order of precedence.
_ASKING: Final = (TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS)
TIMER_REQUEST_PROPERTIES: Final = frozenset(_ASKING)

# The timer progress in a CometMQ master's GET_ALL_DELAY_OFFSET answer, beside RocketMQ's offsetTable,
# and the commit-log end of the last copy either delivered: a slave whose log ends before it keeps
# its own progress rather than claim copies it does not hold yet.
TIMER_PROGRESS_KEY: Final = "timerProgress"
DELIVERED_END_KEY: Final = "deliveredEnd"

_JAVA_LONG_TEXT: Final = re.compile(r"[+-]?[0-9]{1,19}")
# Queue offsets stay below this (2**48 units), so a heap key delivery time * _OFFSET_SPAN + offset
# orders by time, then offset.
_OFFSET_SPAN: Final = 1 << 48
# A unit's tags code above this is no tag's hash (a Java int) but a delivery time.
_JAVA_INT_MAX: Final = 2**31 - 1

# Units read, delivered or rolled before the event loop gets a turn (a backlog after a long stop).
_ROUND_MAX = 256
# After a put the store refused for now (disk full, shutting down), delivery waits this long.
_RETRY_S = 1.0
# Settled units allowed between the first unsettled unit and the queue's end before rolling (a bit
# each in the progress file), at least; twice the waiting units when they are more.
_ROLL_SLACK = 32_768
# The oldest a waiting unit's stored copy may grow before it is rolled: half the retention, at most
# RocketMQ's timerRollWindowSlot (two days).
_ROLL_AGE_MAX_MS = 2 * 86_400_000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def timer_delivery_ms(properties: dict[str, str], now_ms: int, max_delay_sec: int) -> int | None:
    """When a message with *properties* asks to be delivered (epoch ms), if it is a timer message
    whose time is still to come; None for a message to store at once. RequestRefused
    (MESSAGE_ILLEGAL) for a timer property that is not a whole number, or a time more than
    *max_delay_sec* away (RocketMQ's WHEEL_TIMER_MSG_ILLEGAL)."""
    if TIMER_OUT_MS in properties:  # parked once already (a re-sent copy of a delivered message)
        return None
    for name in _ASKING:
        text = properties.get(name)
        if text is not None:
            break
    else:
        return None
    # Java's Long.parseLong: an optional sign and digits, in a long's range (no blanks, no "1_000").
    value = int(text) if _JAVA_LONG_TEXT.fullmatch(text) else None
    if value is None or not JAVA_LONG_MIN <= value <= JAVA_LONG_MAX:
        raise RequestRefused(
            ResponseCode.MESSAGE_ILLEGAL, f"timer message illegal: {name} {text!r} is not a whole number"
        )
    if name == TIMER_DELAY_SEC:
        deliver_ms = now_ms + value * 1000
    elif name == TIMER_DELAY_MS:
        deliver_ms = now_ms + value
    else:
        deliver_ms = value
    if deliver_ms <= now_ms:
        return None
    if deliver_ms - now_ms > max_delay_sec * 1000:
        raise RequestRefused(
            ResponseCode.MESSAGE_ILLEGAL,
            f"timer message illegal: its delivery time is {deliver_ms - now_ms} ms away, beyond the "
            f"broker's timerMaxDelaySec of {max_delay_sec} s",
        )
    return deliver_ms


def drop_timer_properties(properties: dict[str, str]) -> None:
    """A message with a DELAY level is delayed by its level only (RocketMQ's checkIfTimerMessage)."""
    for name in _ASKING:
        properties.pop(name, None)


def from_timer(rec: DecodedRecord, store_host: bytes, now_ms: int) -> MessageToStore:
    """The parked record *rec* rebuilt for its real topic and queue (RocketMQ's convertMessage).
    ValueError when it names no usable real topic or queue."""
    properties = decode_properties(rec.properties)
    topic, queue_id = real_queue(properties)
    del properties[REAL_TOPIC], properties[REAL_QUEUE_ID]
    properties[TIMER_ENQUEUE_MS] = str(rec.store_timestamp)
    properties[TIMER_DEQUEUE_MS] = str(now_ms)
    return copy_of_record(rec, properties, topic, queue_id, store_host, rec.reconsume_times)


def _settled_of(progress: object) -> SettledHalves:
    """The settled units a progress object (``{"base": B, "settled": base64}``) names."""
    if not isinstance(progress, dict):
        raise TypeError("the timer progress is not a JSON object")
    return SettledHalves.restored(int(progress["base"]), base64.b64decode(progress["settled"], validate=True))


def rolled(rec: DecodedRecord, store_host: bytes) -> MessageToStore:
    """The parked record *rec* parked again at the end of the timer queue, its roll counted."""
    properties = decode_properties(rec.properties)
    properties[TIMER_ROLL_TIMES] = str(int(properties.get(TIMER_ROLL_TIMES, "0") or 0) + 1)
    copy = copy_of_record(rec, properties, TIMER_TOPIC, 0, store_host, rec.reconsume_times)
    copy.tags_code = int(properties.get(TIMER_OUT_MS, ""))
    return copy


class TimerMessageService:
    """Parks timer messages and delivers them when due; one asyncio task on the broker's loop."""

    def __init__(self, broker: Broker, config_dir: Path) -> None:
        self._broker = broker
        self._path = config_dir / "timerProgress.json"
        self._progress = DeliveryProgress(broker, self._path, self.progress_json)
        self.settled = SettledHalves()
        # A heap of delivery time * _OFFSET_SPAN + queue offset, of each unit read and not settled
        # when pushed (one int each, about a third of a tuple's memory); ``_stale`` of them were
        # settled since (rolled): dropped when they come to the top, or all at once when they
        # outnumber the live ones.
        self._waiting: list[int] = []
        self._stale = 0
        self._age_check_ms = 0  # no waiting unit's stored copy is too old before this time
        self._scanned = 0  # the next queue offset to read
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._progress_task: asyncio.Task[None] | None = None
        self._retry_logged = False
        self._listening = False

    # -- sends -----------------------------------------------------------------------------------

    def delivery_time(self, properties: dict[str, str], *, at_commit: bool = False) -> int | None:
        """``timer_delivery_ms`` with this broker's settings; RequestRefused (SYSTEM_ERROR) for any
        message with a timer property when timerWheelEnable is false, before its value is looked at,
        as RocketMQ's WHEEL_TIMER_NOT_ENABLE. At the commit of a half message (*at_commit*) neither
        is checked again: the half was checked when it was sent, and a setting changed since must
        not make its commit fail."""
        if TIMER_REQUEST_PROPERTIES.isdisjoint(properties):  # a plain send pays this test only
            return None
        config = self._broker.config
        if at_commit:
            return timer_delivery_ms(properties, _now_ms(), JAVA_LONG_MAX)
        if not config.timer_wheel_enable:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                "accurate timer message is not enabled on this broker (timerWheelEnable is false)",
            )
        return timer_delivery_ms(properties, _now_ms(), config.timer_max_delay_sec)

    @staticmethod
    def to_timer(msg: MessageToStore, deliver_ms: int) -> MessageToStore:
        """*msg* parked until *deliver_ms*: queue 0 of ``rmq_sys_wheel_timer``, its unit's tags code the
        delivery time (as a delay level's unit carries its own), so a start rebuilds from the units."""
        timed = parked(msg, TIMER_TOPIC, 0, {TIMER_OUT_MS: str(deliver_ms)})
        timed.tags_code = deliver_ms
        return timed

    # -- lifecycle -------------------------------------------------------------------------------

    def load(self) -> None:
        """Read the progress file (before the store starts)."""
        obj = load_json_config(self._path)
        if obj is None:
            return
        try:
            self.settled = _settled_of(obj)
        except (KeyError, TypeError, ValueError) as exc:
            log.error("%s is unreadable (%s); every timer message still in the queue is due again",
                      self._path, exc)  # fmt: skip
            return
        self._scanned = self.settled.snapshot()[0]

    def adopt(self, progress: object, source: str) -> None:
        """A slave takes its master's progress (from *source*) and writes it when it changed, ready for
        the day it is made a master. ValueError when it is not a progress object."""
        if self._task is not None:  # delivering: this broker's own progress is the truth
            return
        try:
            settled = _settled_of(progress)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"the timer progress from {source} is unreadable: {exc}") from None
        if settled.snapshot() != self.settled.snapshot() or self.write_pending:
            self.settled = settled
            self._scanned = settled.snapshot()[0]
            self._progress.save()

    def start(self) -> None:
        """Start delivering (the store must be started); a slave does not deliver."""
        broker = self._broker
        if broker.is_slave or self._task is not None:
            return
        store = broker.store
        first = store.min_offset(TIMER_TOPIC, 0)
        if self._scanned < first:  # retention took units the progress had not settled yet
            if self.settled.first_unsettled < first:
                log.warning("timer queue starts at %d, past the progress (%d); those units are gone",
                            first, self.settled.first_unsettled)  # fmt: skip
            self.settled.settle_below(first)
            self._scanned = first
        if not self._listening:  # once: a broker turned master again starts delivering again
            store.add_arrival_listener(self._on_arrival)
            self._listening = True
        self._progress.started(store.commitlog_max_offset)
        self._task = asyncio.ensure_future(self._deliver_loop())
        self._progress_task = asyncio.ensure_future(self._progress.run())

    async def stop(self) -> None:
        """Stop delivering and write the progress (the store must still be running)."""
        if self._task is None:
            return
        tasks = [t for t in (self._task, self._progress_task) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = self._progress_task = None
        await self._progress.finish()
        # A broker made master again rebuilds the heap from the store, as at a start.
        self._waiting = []
        self._stale = 0
        self._age_check_ms = 0
        self._scanned = self.settled.first_unsettled

    @property
    def write_pending(self) -> bool:
        """Whether the progress file is older than the progress (its last write failed)."""
        return self._progress.file.pending

    @property
    def delivered_end(self) -> int:
        """The commit-log end of the last copy delivered or rolled, or of the log when delivery
        started (0 on a broker that never delivered)."""
        return self._progress.delivered_end

    @property
    def waiting(self) -> int:
        """Timer messages read and not delivered yet."""
        return len(self._waiting) - self._stale

    def progress_json(self) -> dict[str, object]:
        """The progress as timerProgress.json holds it."""
        base, bits = self.settled.snapshot()
        return {"base": base, "settled": base64.b64encode(bits).decode()}

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        if topic == TIMER_TOPIC:
            self._wake.set()

    # -- delivery --------------------------------------------------------------------------------

    async def _deliver_loop(self) -> None:
        await deliver_in_rounds(self.deliver_due, self._wake, "timer messages")

    def deliver_due(self, now_ms: int | None = None) -> tuple[float, bool]:
        """One round: read what arrived, deliver what is due, roll what holds the progress back.
        (When the next unit falls due or a retry is wanted, or inf; whether a part stopped at its
        round limit with more to do.)"""
        now = _now_ms() if now_ms is None else now_ms
        changed = False
        more_to_read = self._read_arrivals()
        delivered, retry_at, more_due = self._deliver(now)
        changed = delivered
        rolled_any, more_to_roll = self._roll(now)
        changed = changed or rolled_any
        if changed:
            self.settled.advance()
            self._progress.want()
        waiting = self._waiting
        next_due = retry_at if retry_at is not None else (waiting[0] // _OFFSET_SPAN if waiting else math.inf)
        return float(next_due), more_to_read or more_due or more_to_roll

    def _read_arrivals(self) -> bool:
        """Push the units that arrived since the last round (at most ``_ROUND_MAX``); whether more wait."""
        store = self._broker.store
        end = store.max_offset(TIMER_TOPIC, 0)
        stop = min(end, self._scanned + _ROUND_MAX)
        for offset in self.settled.unsettled(self._scanned, stop):
            unit = store.queue_unit(TIMER_TOPIC, 0, offset)
            if unit is None:
                due = None
            elif unit[2] > _JAVA_INT_MAX:  # no tag's hash: the delivery time
                due = unit[2]
            else:  # a unit stored before units carried their time
                due = self._due_of(offset, unit[0])
            if unit is None or due is None:
                self.settled.add(offset)
                # The progress may claim it once its record (before the log's end) is flushed.
                self._progress.delivered_end = store.commitlog_max_offset
                continue
            heapq.heappush(self._waiting, due * _OFFSET_SPAN + offset)
        self._scanned = max(self._scanned, stop)
        return stop < end

    def _due_of(self, offset: int, commitlog_offset: int) -> int | None:
        """The TIMER_OUT_MS of the unit's record; None (logged) for a record gone or without one."""
        view = self._broker.store.message_at(commitlog_offset)
        if view is None:
            log.warning("timer offset %d: record %d is gone; skipped", offset, commitlog_offset)
            return None
        try:
            properties = decode_properties(decode_record_at(view, 0, len(view)).properties)
            return int(properties[TIMER_OUT_MS])
        except (RecordError, KeyError, ValueError) as exc:
            log.error(
                "timer offset %d: no delivery time in record %d (%r); skipped", offset, commitlog_offset, exc
            )
            return None
        finally:
            del view

    def _deliver(self, now: int) -> tuple[bool, int | None, bool]:
        """Deliver the due units (at most ``_ROUND_MAX``): (whether any was settled, when to retry if
        the store refused, whether more are due)."""
        broker = self._broker
        waiting = self._waiting
        rebuild = functools.partial(from_timer, store_host=broker.store_host, now_ms=now)
        settled_any = False
        count = 0
        due_below = (now + 1) * _OFFSET_SPAN  # the keys of the units due by now
        while waiting and waiting[0] < due_below:
            if count >= _ROUND_MAX:
                return settled_any, None, True
            offset = waiting[0] % _OFFSET_SPAN
            if offset in self.settled:
                heapq.heappop(waiting)
                self._stale -= 1
                continue
            unit = broker.store.queue_unit(TIMER_TOPIC, 0, offset)
            if unit is None:  # its consume-queue file is gone; nothing to deliver
                log.error("timer offset %d: no consume-queue unit; skipped", offset)
                outcome, end = Outcome.DONE, broker.store.commitlog_max_offset
            else:
                outcome, end = deliver_parked(broker, unit[0], rebuild, "timer", offset)
            if outcome is Outcome.RETRY:
                if not self._retry_logged:  # disk full or shutting down: wait, lose nothing
                    self._retry_logged = True
                    log.warning("timer messages: delivery waits, the store refuses writes (%s)",
                                broker.store.write_refusal or "a put was refused")  # fmt: skip
                return settled_any, now + int(_RETRY_S * 1000), False
            heapq.heappop(waiting)
            self._retry_logged = False
            self._progress.delivered_end = end
            self.settled.add(offset)
            settled_any = True
            count += 1
        return settled_any, None, False

    def _roll(self, now: int) -> tuple[bool, bool]:
        """Roll the oldest waiting units while too many settled units follow them or while their
        stored copy is too old (at most ``_ROUND_MAX``): (whether any was rolled, whether more should
        be)."""
        settled = self.settled
        first = settled.advance()
        live = self.waiting
        if self._stale > live:  # entries of rolled units outnumber the live ones: drop them
            self._waiting = [key for key in self._waiting if key % _OFFSET_SPAN not in settled]
            heapq.heapify(self._waiting)
            self._stale = 0
        # Every unit read and not settled is in the heap: the rest of [first, scanned) is settled.
        slack = (self._scanned - first) - live
        slack_max = max(_ROLL_SLACK, 2 * live)
        by_slack = slack > slack_max
        if not by_slack and now < self._age_check_ms:
            return False, False
        broker = self._broker
        roll = functools.partial(rolled, store_host=broker.store_host)
        age_max = min(_ROLL_AGE_MAX_MS, broker.config.file_reserved_time * 3_600_000 // 2)
        count = 0
        for offset in settled.unsettled(first, self._scanned):
            if count >= _ROUND_MAX:
                return True, True
            by_slack = by_slack and slack > slack_max // 2
            unit = broker.store.queue_unit(TIMER_TOPIC, 0, offset)
            if not by_slack and unit is not None:
                stored_ms = self._stored_ms(unit[0])
                if stored_ms is not None and stored_ms + age_max > now:
                    self._age_check_ms = stored_ms + age_max
                    break
            if unit is not None:
                outcome, end = deliver_parked(broker, unit[0], roll, "timer", offset)
                if outcome is Outcome.RETRY:
                    return count > 0, False
                self._progress.delivered_end = end
            settled.add(offset)
            self._stale += 1
            count += 1
            # The settled units between this one and the next unsettled one stop counting.
            new_first = settled.advance()
            slack -= new_first - first - 1
            first = new_first
        else:  # nothing old is left waiting: what arrives from now on is younger
            self._age_check_ms = now + age_max
        return count > 0, False

    def _stored_ms(self, commitlog_offset: int) -> int | None:
        """When the record at *commitlog_offset* was stored; None for a record gone or unreadable."""
        view = self._broker.store.message_at(commitlog_offset)
        if view is None:
            return None
        try:
            return decode_record_at(view, 0, len(view)).store_timestamp
        except RecordError:
            return None
        finally:
            del view
