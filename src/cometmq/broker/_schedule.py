"""Delayed messages: parked in SCHEDULE_TOPIC_XXXX, delivered to their real topic when due.

RocketMQ's ScheduleMessageService (docs/protocol.md#delay-levels). A message with ``DELAY=L`` (L > 0,
capped at the number of levels of ``messageDelayLevel``) is stored in ``SCHEDULE_TOPIC_XXXX`` queue L - 1 with
its real topic and queue in ``REAL_TOPIC`` / ``REAL_QID``; the store makes that unit's tags code its
delivery time (store time + the level's delay). Each queue is in delivery-time order (one delay per
queue, store times never decrease), so delivery reads every queue from its delivery offset and stops
at the first unit not yet due.

Progress is ``config/delayOffset.json``, RocketMQ's ``{"offsetTable": {level: next queue offset}}``.
It is written after each round that delivered something, once the delivered copies are flushed, and
at a clean stop: after a crash the messages delivered since the last write (normally none, at most
those of the round in flight) are delivered again — at least once, as RocketMQ.

A slave delivers nothing (its master does, and the copies reach it with the rest of the commit log):
it only keeps its master's delayOffset.json (``adopt``), ready for the day it is made a master.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import functools
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cometmq.broker._json_config import MetadataFile, load_json_table, read_entries
from cometmq.errors import RecordError, RequestRefused
from cometmq.protocol import ResponseCode
from cometmq.protocol.naming import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.protocol.record import (
    INNER_BASE_PROPERTY,
    INNER_BATCH_FLAG,
    INNER_NUM_PROPERTY,
    NEED_UNWRAP_FLAG,
    DecodedRecord,
    decode_record_at,
)
from cometmq.protocol.taghash import java_string_hash
from cometmq.protocol.transaction import REAL_QUEUE_ID, REAL_TOPIC, TransactionType, transaction_type
from cometmq.store import MessageToStore, PutStatus, parse_delay_levels

if TYPE_CHECKING:
    from cometmq.broker.broker import Broker

__all__ = [
    "DeliveryProgress",
    "Outcome",
    "ScheduleMessageService",
    "copy_of_record",
    "delay_level_of",
    "deliver_parked",
    "from_schedule",
    "is_delayable",
    "parked",
    "real_queue",
    "to_schedule",
]

log = logging.getLogger("cometmq.broker")

_INNER_BATCH_FLAGS = INNER_BATCH_FLAG | NEED_UNWRAP_FLAG
_INNER_BATCH_PROPERTIES = frozenset((INNER_NUM_PROPERTY, INNER_BASE_PROPERTY))

# Units delivered per level before the event loop gets a turn (a backlog after a long stop).
_ROUND_MAX = 256
# The longest sleep without looking: the due times are wall-clock ms, the sleep is monotonic, so a
# wall clock stepping forward is noticed within this.
_MAX_SLEEP_S = 1.0
# Least time between two writes of delayOffset.json while deliveries go on.
_PERSIST_MIN_INTERVAL_S = 0.1
# After a put the store refused for now (disk full, shutting down), the level waits this long.
_RETRY_S = 1.0


def to_schedule(msg: MessageToStore, level: int, max_level: int) -> MessageToStore:
    """*msg* parked for delay level *level* (1-based, capped at *max_level*, as RocketMQ caps it):
    topic ``SCHEDULE_TOPIC_XXXX``, queue level - 1, the real topic and queue in ``REAL_TOPIC`` /
    ``REAL_QID``, the level in ``DELAY``. Raises ValueError for a level below 1."""
    if level < 1 or max_level < 1:
        raise ValueError(f"delay level {level} is not in 1..{max_level}")
    level = min(level, max_level)
    return parked(msg, SCHEDULE_TOPIC, level - 1, {"DELAY": str(level)})


def parked(msg: MessageToStore, topic: str, queue_id: int, extra: dict[str, str]) -> MessageToStore:
    """*msg* stored in *topic* / *queue_id* instead of its own, which ``REAL_TOPIC`` / ``REAL_QID``
    keep, with the *extra* properties (a delay level, a delivery time) added."""
    properties = decode_properties(msg.properties)
    properties.update(extra)
    properties[REAL_TOPIC] = msg.topic
    properties[REAL_QUEUE_ID] = str(msg.queue_id)
    return dataclasses.replace(msg, topic=topic, queue_id=queue_id, properties=encode_properties(properties))


def delay_level_of(properties: dict[str, str]) -> int:
    """The DELAY property as a level; 0 (or below) means no delay, as in RocketMQ. A send and the
    commit of a half message both read it here, so a committed message is delayed as a plain send of
    it would be. RequestRefused (MESSAGE_ILLEGAL) if it is not a number."""
    text = properties.get("DELAY", "")
    try:
        return int(text) if text else 0
    except ValueError:
        raise RequestRefused(
            ResponseCode.MESSAGE_ILLEGAL, f"the DELAY property {text!r} is not a delay level"
        ) from None


def real_queue(properties: dict[str, str]) -> tuple[str, int]:
    """The real topic and queue a parked (delayed or half) message names in ``REAL_TOPIC`` /
    ``REAL_QID``. ValueError when they name no usable topic or queue."""
    topic = properties.get(REAL_TOPIC, "")
    try:
        queue_id = int(properties.get(REAL_QUEUE_ID, ""))
    except ValueError:
        raise ValueError(f"REAL_QID {properties.get(REAL_QUEUE_ID)!r} is not a queue id") from None
    if not topic or queue_id < 0:
        raise ValueError(f"no real topic/queue (REAL_TOPIC={topic!r}, REAL_QID={queue_id})")
    return topic, queue_id


def from_schedule(rec: DecodedRecord, store_host: bytes) -> MessageToStore:
    """The parked record *rec* rebuilt for its real topic and queue (RocketMQ's messageTimeup):
    body, flag, sys flag, born time and host, reconsume times and every property kept, ``DELAY``
    removed, ``REAL_TOPIC`` / ``REAL_QID`` left in place, tags code from ``TAGS``. Raises ValueError
    when the record names no usable real topic or queue."""
    properties = decode_properties(rec.properties)
    topic, queue_id = real_queue(properties)
    # RocketMQ 4.x builds the stored properties string before it clears DELAY, so its delivered copy
    # still says DELAY=L; we drop it as intended (docs/protocol.md#delay-levels), so a consumer that
    # re-sends the message does not delay it again by accident.
    properties.pop("DELAY", None)
    properties.pop("WAIT", None)
    return copy_of_record(rec, properties, topic, queue_id, store_host, rec.reconsume_times)


def copy_of_record(
    rec: DecodedRecord,
    properties: dict[str, str],
    topic: str,
    queue_id: int,
    store_host: bytes,
    reconsume_times: int,
    *,
    sys_flag: int | None = None,
    prepared_transaction_offset: int = 0,
) -> MessageToStore:
    """A new message for *topic* / *queue_id* from the stored record *rec* (a delivered delayed
    message, a consumer's send-back, a committed or discarded half message): its body as stored (a
    compressed body stays compressed, its sys flag says so), flag, sys flag (unless *sys_flag* is
    given), born time and host, with *properties*, whose TAGS, KEYS and UNIQ_KEY give the tags code
    and the index keys. A copy is never an inner batch: a copied inner-batch record (a 4.x consumer's
    send-back of the batch it got as one message) is stored as one ordinary message holding the batch
    body, without its inner-batch flags and properties, in whatever topic it goes to."""
    tags = properties.get("TAGS")
    if INNER_NUM_PROPERTY in properties or INNER_BASE_PROPERTY in properties:
        properties = {k: v for k, v in properties.items() if k not in _INNER_BATCH_PROPERTIES}
    return MessageToStore(
        topic=topic,
        queue_id=queue_id,
        flag=rec.flag,
        body=rec.body,
        properties=encode_properties(properties),
        sys_flag=(rec.sys_flag if sys_flag is None else sys_flag) & ~_INNER_BATCH_FLAGS,
        born_timestamp=rec.born_timestamp,
        born_host=rec.born_host,
        store_host=store_host,
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
        tags_code=java_string_hash(tags) if tags else 0,
        keys=properties.get("KEYS", ""),
        uniq_key=properties.get("UNIQ_KEY", ""),
    )


def is_delayable(sys_flag: int) -> bool:
    """RocketMQ delays plain and committed messages only, never prepared or rolled-back ones."""
    return transaction_type(sys_flag) in (TransactionType.NOT_TYPE, TransactionType.COMMIT)


class Outcome(enum.Enum):
    """What became of one parked message's delivery."""

    DONE = 0  # delivered, or skipped for good: delivery moves on
    RETRY = 1  # the store refused for now: delivery waits and tries the same message again


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _no_plan(due_ms: float) -> None:
    pass


async def deliver_in_rounds(
    deliver_due: Callable[[], tuple[float, bool]],
    wake: asyncio.Event,
    what: str,
    planned: Callable[[float], None] = _no_plan,
) -> None:
    """Call *deliver_due* (a round: the next due time in wall-clock ms or inf, and whether it stopped at
    its round limit with more to do) until cancelled: again after one turn of the loop while busy, else
    when *wake* is set or the next due time comes. *planned* hears when the next look is planned (inf
    while a round runs), so that an arrival due sooner knows to set *wake*."""
    while True:
        wake.clear()
        planned(math.inf)
        try:
            next_due, busy = deliver_due()
        except Exception:  # a bug must not end delivery for good; look again shortly
            log.exception("delivering %s failed", what)
            next_due, busy = float(_now_ms() + int(_RETRY_S * 1000)), False
        if busy:
            await asyncio.sleep(0)
            continue
        planned(next_due)
        timeout = _MAX_SLEEP_S if next_due == math.inf else (next_due - _now_ms()) / 1000
        if timeout > 0:
            # Not asyncio.wait_for: on Python 3.11 it swallows a cancellation that comes as the event
            # is set, and stop() (a master demoted) would wait for this task for ever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(timeout, _MAX_SLEEP_S)):
                    await wake.wait()


def deliver_parked(
    broker: Broker,
    commitlog_offset: int,
    rebuild: Callable[[DecodedRecord], MessageToStore],
    queue: str,
    offset: int,
) -> tuple[Outcome, int]:
    """Put a copy of the parked record at *commitlog_offset*, made by *rebuild*, for its real topic: the
    re-put path of delayed and timer messages (*queue* and *offset* name the unit in log lines, built
    into text only when a line is logged: this runs once per delivered message). (DONE, the
    copy's commit-log end) when delivered; (DONE, the commit log's end) when skipped for good — the
    record gone, not rebuildable, its real topic missing, the copy refused as illegal —, so that a
    progress claiming the unit settled waits for the unit's own record to be flushed; (RETRY, 0)
    while the store refuses writes."""
    store = broker.store
    view = store.message_at(commitlog_offset)
    if view is None:  # retention took it, as RocketMQ skips a message it cannot look up
        log.warning("%s offset %d: record %d is gone; skipped", queue, offset, commitlog_offset)
        return Outcome.DONE, store.commitlog_max_offset
    try:
        rec = decode_record_at(view, 0, len(view))
        msg = rebuild(rec)
    except (RecordError, ValueError) as exc:
        log.error("%s offset %d: cannot rebuild the message (%s); skipped", queue, offset, exc)
        return Outcome.DONE, store.commitlog_max_offset
    finally:
        del view  # a live slice would pin the segment's mapping
    if msg.topic == TRANS_HALF_TOPIC or broker.topics.get(msg.topic) is None:
        log.warning(
            "%s offset %d: real topic %s does not exist; message %s dropped",
            queue, offset, msg.topic, rec.offset_msg_id,
        )  # fmt: skip
        return Outcome.DONE, store.commitlog_max_offset
    result = store.put(msg)
    if result.status is PutStatus.PUT_OK:
        broker.stats.count_put(msg.topic, 1, result.wrote_bytes)
        return Outcome.DONE, result.commitlog_end_offset
    if result.status in (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED):
        log.error("%s offset %d: the store refuses message %s for %s (%s); skipped",
                  queue, offset, rec.offset_msg_id, msg.topic, result.status.name)  # fmt: skip
        return Outcome.DONE, store.commitlog_max_offset
    return Outcome.RETRY, 0


class DeliveryProgress:
    """A delivery-progress file (delayOffset.json, the timer's progress) that never claims a copy the
    disk may not hold: written by its own task, after each change (``want``) at most every
    ``_PERSIST_MIN_INTERVAL_S``, once the store has flushed every copy delivered before it
    (``delivered_end``); and at a stop. After a crash the copies delivered since the last write are
    delivered again: at least once, as RocketMQ."""

    def __init__(self, broker: Broker, path: Path, snapshot: Callable[[], Any]) -> None:
        self._broker = broker
        self.file = MetadataFile(path)
        self._snapshot = snapshot
        self._wanted = asyncio.Event()
        self.delivered_end = 0  # commit-log end of the last delivered copy
        self._writing: asyncio.Future[bool] | None = None

    def started(self, log_end: int) -> None:
        """Delivery starts with the commit log ending at *log_end*: the progress read from the file
        may count copies up to there (what a slave must hold before it adopts the progress)."""
        self.delivered_end = max(self.delivered_end, log_end)

    def want(self) -> None:
        """The progress changed: write it when the copies are on disk."""
        self._wanted.set()

    def save(self) -> None:
        """Write the file now; a failure is logged once (``MetadataFile``): ``file.pending``."""
        self.file.save(self._snapshot())

    async def finish(self) -> None:
        """The last write, at a stop (the task running ``run`` cancelled, the store still running)."""
        if self._writing is not None:  # a write cancelled while its thread still runs
            with contextlib.suppress(Exception):
                await self._writing
            self._writing = None
        if not await self._broker.store.wait_flushed(self.delivered_end):
            log.error("delivered messages are not flushed; writing %s anyway", self.file.path.name)
        self.save()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        path = self.file.path
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            snapshot = self._snapshot()
            # The progress may only claim copies that are on disk, or a power loss could lose them.
            if not await self._broker.store.wait_flushed(self.delivered_end):
                log.error("delivered messages are not flushed; %s not written", path.name)
                self._wanted.set()
                await asyncio.sleep(_RETRY_S)
                continue
            # Shielded: a stop cancels this task, not the write, and waits for the write instead.
            self._writing = loop.run_in_executor(None, self.file.save, snapshot)
            try:
                written = await asyncio.shield(self._writing)
            except Exception:  # a bug, not the disk: keep the loop alive and try again
                log.exception("writing %s failed", path)
                written = False
            self._writing = None
            if not written:  # logged once by MetadataFile; the progress stays right in memory
                self._wanted.set()
                await asyncio.sleep(_RETRY_S)
            await asyncio.sleep(_PERSIST_MIN_INTERVAL_S)


class ScheduleMessageService:
    """Parks delayed messages and delivers them when due; one asyncio task on the broker's loop."""

    def __init__(self, broker: Broker, delay_level_spec: str, config_dir: Path) -> None:
        self._broker = broker
        self._path = config_dir / "delayOffset.json"
        self._progress = DeliveryProgress(broker, self._path, self._snapshot)
        self.delays_ms = parse_delay_levels(delay_level_spec)  # index level - 1
        self._labels = [f"delay level {level}" for level in range(1, len(self.delays_ms) + 1)]
        # Delay level → next SCHEDULE_TOPIC_XXXX queue offset to deliver (RocketMQ's offsetTable).
        self.offsets: dict[int, int] = {}
        self._wake = asyncio.Event()
        self._planned_wake_ms = math.inf  # when the delivery task means to look next
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._listening = False
        self._retry_logged: set[int] = set()

    @property
    def max_level(self) -> int:
        return len(self.delays_ms)

    def to_schedule(self, msg: MessageToStore, level: int) -> MessageToStore:
        """``to_schedule(msg, level, max_level)`` with this broker's number of delay levels."""
        return to_schedule(msg, level, self.max_level)

    # -- lifecycle -----------------------------------------------------------------------------

    def load(self) -> None:
        loaded = load_json_table(
            self._path, "offsetTable", "delay offset", lambda level, offset: (int(level), int(offset))
        )
        if loaded is not None:
            self.offsets.update(loaded[1].values())

    def start(self) -> None:
        """Start delivering (the store must be started). Also registers for arrivals. A slave does
        not deliver."""
        if self._broker.is_slave or self._started:
            return
        if not self._listening:  # once: a broker turned master again starts delivering again
            self._broker.store.add_arrival_listener(self._on_arrival)
            self._listening = True
        self._started = True
        self._progress.started(self._broker.store.commitlog_max_offset)
        self._tasks = [
            asyncio.ensure_future(self._deliver_loop()),
            asyncio.ensure_future(self._progress.run()),
        ]

    async def stop(self) -> None:
        """Stop delivering and write the offsets (the store must still be running)."""
        if not self._started:  # never started: the file on disk is still the truth
            return
        self._started = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self._progress.finish()

    def adopt(self, table: object, source: str) -> None:
        """A slave takes its master's offsets (GET_ALL_DELAY_OFFSET's, from *source*) and writes them
        (when they changed), as RocketMQ's SlaveSynchronize writes the master's delayOffset.json."""
        levels = read_entries(table, "delay offset", lambda level, offset: (int(level), int(offset)), source)
        offsets = dict(levels.values())
        if offsets != self.offsets or self.write_pending:
            self.offsets = offsets
            self.persist()

    def persist(self) -> None:
        """Write the offsets file; a failure is logged once (``MetadataFile``): ``write_pending``."""
        self._progress.save()

    @property
    def write_pending(self) -> bool:
        """Whether the file is older than the table (its last write failed)."""
        return self._progress.file.pending

    @property
    def delivered_end(self) -> int:
        """The commit-log end of the last copy delivered, or of the log when delivery started (0 on a
        broker that never delivered)."""
        return self._progress.delivered_end

    def _snapshot(self) -> dict[str, dict[str, int]]:
        return {"offsetTable": {str(level): offset for level, offset in sorted(self.offsets.items())}}

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        # A schedule unit's tags code is its delivery time: wake the task only if it is sooner.
        if topic == SCHEDULE_TOPIC and tags_code < self._planned_wake_ms:
            self._planned_wake_ms = float(tags_code)
            self._wake.set()

    # -- delivery ------------------------------------------------------------------------------

    async def _deliver_loop(self) -> None:
        def planned(due_ms: float) -> None:
            self._planned_wake_ms = due_ms

        await deliver_in_rounds(self.deliver_due, self._wake, "delayed messages", planned)

    def deliver_due(self, now_ms: int | None = None) -> tuple[float, bool]:
        """Deliver what is due in every level: (the earliest time something else falls due or a
        retry is wanted, or inf; whether a level stopped at its round limit with more due)."""
        now = _now_ms() if now_ms is None else now_ms
        next_due: float = math.inf
        busy = False
        rebuild = functools.partial(from_schedule, store_host=self._broker.store_host)
        for level in range(1, self.max_level + 1):
            due, more = self._deliver_level(level, now, rebuild)
            next_due = min(next_due, due)
            busy = busy or more
        return next_due, busy

    def _deliver_level(
        self, level: int, now: int, rebuild: Callable[[DecodedRecord], MessageToStore]
    ) -> tuple[float, bool]:
        store = self._broker.store
        queue_id = level - 1
        max_off = store.max_offset(SCHEDULE_TOPIC, queue_id)
        start = self.offsets.get(level, 0)
        offset = first = self._corrected(level, start, store.min_offset(SCHEDULE_TOPIC, queue_id), max_off)
        longest = now + self.delays_ms[queue_id]
        next_due: float = math.inf
        more = False
        try:
            while offset < max_off:
                if offset - first >= _ROUND_MAX:
                    more = True
                    break
                unit = store.queue_unit(SCHEDULE_TOPIC, queue_id, offset)
                if unit is not None:
                    commitlog_offset, _, due = unit
                    # RocketMQ's correctDeliverTimestamp: a due time beyond now + delay means the
                    # clock went back since the message was parked; deliver it now rather than wait.
                    if now < due <= longest:
                        next_due = float(due)
                        break
                    if self._deliver_one(level, offset, commitlog_offset, rebuild) is Outcome.RETRY:
                        next_due = now + _RETRY_S * 1000
                        break
                else:  # its consume-queue file is missing; nothing to deliver there
                    log.error("delay level %d: no consume-queue unit at offset %d; skipped", level, offset)
                offset += 1
        finally:
            # Also when a unit raised: what was delivered before it must not be delivered again.
            if offset != start:
                self.offsets[level] = offset
                self._progress.want()
        return next_due, more

    def _corrected(self, level: int, offset: int, min_off: int, max_off: int) -> int:
        """RocketMQ's correctDelayOffset: retention may have moved the queue's start past the
        offset, and a lost consume queue may end before it."""
        if offset < min_off:
            if offset or min_off:
                log.warning("delay level %d: offset %d is below the queue's start %d; moving on",
                            level, offset, min_off)  # fmt: skip
            return min_off
        if offset > max_off:
            log.error("delay level %d: offset %d is beyond the queue's end %d; moving back",
                      level, offset, max_off)  # fmt: skip
            return max_off
        return offset

    def _deliver_one(
        self,
        level: int,
        offset: int,
        commitlog_offset: int,
        rebuild: Callable[[DecodedRecord], MessageToStore],
    ) -> Outcome:
        broker = self._broker
        outcome, end = deliver_parked(broker, commitlog_offset, rebuild, self._labels[level - 1], offset)
        if outcome is Outcome.DONE:
            if end:
                self._progress.delivered_end = end
                self._retry_logged.discard(level)
        elif level not in self._retry_logged:  # disk full or shutting down: wait, lose nothing
            self._retry_logged.add(level)
            log.warning("delay level %d: delivery waits, the store refuses writes (%s)",
                        level, broker.store.write_refusal or "a put was refused")  # fmt: skip
        return outcome
