"""The in-flight state of POP consumption and the journal that keeps it across a crash.

Per (group, topic, queue) the broker keeps a *cursor* (the next queue offset no pop has taken yet),
the messages *in flight* (popped, neither acked nor revived: their pop time and invisible time), and
for order pops the messages to deliver again before the cursor (*redeliver*) with how often each was
delivered again (*counts*). The group's committed consume offset of the queue is the lowest offset
not settled (``QueueState.low_water``).

Every change is a line appended to ``<storePathRootDir>/pop/inflight.journal`` before the request is
answered; the state at start is the journal replayed. docs/store.md, "POP in-flight journal", gives
the format. A line is ``<crc32 of the JSON, 8 hex digits> <JSON>\\n``; replay stops at the first line
that is torn or does not match its CRC and cuts the file there (only the last write can be torn). The
journal is compacted by writing the live state alone to a new file, fsync'd, then renamed over it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import heapq
import logging
import os
import threading
import zlib
from pathlib import Path
from typing import Any, Final

import orjson

from cometmq.errors import RequestRefused
from cometmq.protocol import ResponseCode

log = logging.getLogger("cometmq.broker")

JOURNAL_NAME: Final = "inflight.journal"
# Compacted once this many bytes were appended since the last compaction and the live state is less
# than a quarter of the file.
COMPACT_AFTER_BYTES: Final = 4 * 1024 * 1024

# A state line's typical size without its entries, and an in-flight entry's in it (an attemptId more).
_QUEUE_LINE_BYTES: Final = 100
_ENTRY_BYTES: Final = 60

QueueKey = tuple[str, str, int]  # (group, topic, queue id); the topic a message was popped from


@dataclasses.dataclass(slots=True)
class InFlight:
    pop_time: int
    invisible_time: int
    order: bool
    # Offset of the first message its pop took from this queue: the receipt handle's ckQueueOffset.
    ck_offset: int
    # An order pop's attemptId: the same attempt again (its answer was lost) gets the same messages.
    attempt_id: str | None = None
    # Its revived copy is being written (SYNC_FLUSH waits for the disk before settling it): no ack,
    # change or second revive meanwhile. Not journaled: after a crash it is revived again.
    reviving: bool = False

    @property
    def visible_at(self) -> int:
        return self.pop_time + self.invisible_time


@dataclasses.dataclass(slots=True)
class QueueState:
    cursor: int
    inflight: dict[int, InFlight] = dataclasses.field(default_factory=dict)
    redeliver: list[int] = dataclasses.field(default_factory=list)  # sorted; order pops only
    counts: dict[int, int] = dataclasses.field(default_factory=dict)  # order pops: redeliveries so far
    # The offsets put in flight, a heap whose entries no longer in flight are dropped as they reach
    # its top: the lowest in flight without a scan of them all at every pop and ack.
    _inflight_heap: list[int] = dataclasses.field(default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._inflight_heap = sorted(self.inflight)

    def put_in_flight(self, offset: int, entry: InFlight) -> None:
        if offset in self.redeliver:
            self.redeliver.remove(offset)
        self.inflight[offset] = entry
        heapq.heappush(self._inflight_heap, offset)

    def low_water(self) -> int:
        """The lowest queue offset not settled: the group's consume offset of the queue."""
        low = self.cursor
        heap = self._inflight_heap
        while heap and heap[0] not in self.inflight:
            heapq.heappop(heap)
        if heap:
            low = min(low, heap[0])
        if self.redeliver:
            low = min(low, self.redeliver[0])
        return low

    @property
    def blocked(self) -> bool:
        """An order pop of the queue waits while any message of it is in flight."""
        return bool(self.inflight)

    def settle(self, offset: int) -> None:
        self.inflight.pop(offset, None)
        self.counts.pop(offset, None)
        if offset in self.redeliver:
            self.redeliver.remove(offset)


def _in_flight(
    pop_time: Any, invisible_time: Any, order: Any, ck_offset: Any, attempt_id: Any = None
) -> InFlight:
    return InFlight(
        int(pop_time),
        int(invisible_time),
        bool(order),
        int(ck_offset),
        None if attempt_id is None else str(attempt_id),
    )


def _line(record: dict[str, Any]) -> bytes:
    # One line per ack: orjson, several times faster than json here (bench/pop.py).
    text = orjson.dumps(record)
    return b"%08x %s\n" % (zlib.crc32(text), text)


def _parse(line: bytes) -> dict[str, Any] | None:
    if len(line) < 10 or line[8:9] != b" ":
        return None
    text = line[9:]
    try:
        if int(line[:8], 16) != zlib.crc32(text):
            return None
        record = orjson.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


class PopJournal:
    """The states of every popped queue, and their journal (see the module docstring)."""

    def __init__(self, directory: Path, *, sync_flush: bool) -> None:
        self.path = directory / JOURNAL_NAME
        self.states: dict[QueueKey, QueueState] = {}
        self.sync_flush = sync_flush
        self._fd = -1
        self._size = 0
        self._size_at_compaction = 0
        # Bytes appended since open, and how many of them are on disk: a SYNC_FLUSH answer waits
        # for ``synced`` to reach the ``appended`` of its change.
        self.appended = 0
        self.synced = 0
        # The periodic sync runs on another thread: it must not meet a descriptor closed or replaced.
        self._fd_lock = threading.Lock()

    # -- start and stop -------------------------------------------------------------------------

    def open(self) -> None:
        """Replay the journal (cutting a torn tail) and open it for appending."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        good = 0
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        pos = 0
        while pos < len(data):
            end = data.find(b"\n", pos)
            if end < 0:
                break
            record = _parse(data[pos:end])
            if record is None:
                break
            try:
                self._apply(record)
            except (KeyError, TypeError, ValueError):
                log.warning("%s: skipping a record that does not apply: %.200r", self.path, record)
            pos = good = end + 1
        if good < len(data):
            log.warning("%s: cutting %d bytes of a torn or corrupt tail", self.path, len(data) - good)
        if data:
            os.truncate(self.path, good)
        self._size = good
        self._size_at_compaction = good
        # Rewritten at every start (and opened for appending): the file is then whole, live state
        # only, and its directory entry on disk (a new file's too).
        self.compact_if_due(force=True)

    def close(self) -> None:
        self.sync()
        with self._fd_lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    # -- writing --------------------------------------------------------------------------------

    def append(self, *records: dict[str, Any]) -> None:
        """Apply *records* to the states and append them to the journal, in one write, fsync'd by
        :meth:`sync`: with SYNC_FLUSH before the request is answered (one fsync for the requests
        that wrote meanwhile), otherwise every second (a killed process loses nothing written; a
        machine crash loses at most that second, as for the commit log)."""
        if self._fd >= 0:
            data = b"".join(_line(record) for record in records)
            try:
                if os.write(self._fd, data) != len(data):
                    raise OSError(errno.ENOSPC, "a short write")
            except OSError as exc:
                # Nothing of it may stay: a torn line amid later ones would end the replay there.
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, self._size)
                raise RequestRefused(
                    ResponseCode.SYSTEM_ERROR,
                    f"cannot write the POP journal {self.path}: {exc.strerror or exc}",
                ) from None
            self._size += len(data)
            self.appended += len(data)
        # Applied once written: a change the journal does not have is not made.
        for record in records:
            self._apply(record)
        self.compact_if_due()

    def sync(self) -> None:
        """fsync what was appended (blocking: the broker runs it off its loop)."""
        with self._fd_lock:
            appended = self.appended  # written whole before it was counted
            if self.synced < appended and self._fd >= 0:
                os.fsync(self._fd)
                self.synced = appended

    def compact_if_due(self, *, force: bool = False) -> None:
        grown = self._size - self._size_at_compaction
        if not force and grown < COMPACT_AFTER_BYTES:
            return
        if not force and self._live_bytes_estimate() * 4 > self._size:
            self._size_at_compaction = self._size  # mostly live: look again after as much growth
            return
        temporary = self.path.with_name(JOURNAL_NAME + ".compacting")
        try:
            self._compact(temporary)
        except OSError as exc:
            # The journal as it is stays whole and in use: compaction is tried again after as much
            # growth, and a broker starting on a full disk starts.
            log.error("cannot compact the POP journal %s, appending to it as it is: %s", self.path, exc)
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            self._size_at_compaction = self._size
            if self._fd < 0:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _compact(self, temporary: Path) -> None:
        lines = [_line(self._state_record(key, state)) for key, state in self.states.items()]
        data = b"".join(lines)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, "a short write")
            os.fsync(fd)
        finally:
            os.close(fd)
        with self._fd_lock:
            os.replace(temporary, self.path)
            # Appends go to the file now at the path, whatever happens next.
            if self._fd >= 0:
                os.close(self._fd)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            self._size = self._size_at_compaction = len(data)
            self.synced = self.appended
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def _live_bytes_estimate(self) -> int:
        """About the size of the live state's lines, counted rather than written out: the check
        runs every 4 MB appended, and the state may be large and mostly live."""
        entries = sum(
            len(state.inflight) + len(state.redeliver) + len(state.counts) for state in self.states.values()
        )
        return _QUEUE_LINE_BYTES * len(self.states) + _ENTRY_BYTES * entries

    # -- records --------------------------------------------------------------------------------
    # pop: {"op": "pop", "g", "t", "q", "c": cursor after, "o": [offsets], "pt", "it", "ord", "ck", "aid"?}
    # ack: {"op": "ack", "g", "t", "q", "o": offset}: settled (acked, revived or dead-lettered)
    # chg: {"op": "chg", "g", "t", "q", "o", "pt", "it"}: a new invisible time from pt on
    # exp: {"op": "exp", "g", "t", "q", "o", "n"}: an order pop's message to deliver again, n-th time
    # rst: {"op": "rst", "g", "t", "q", "c"}: an administrator's reset: cursor c, nothing in flight
    # state: {"op": "state", "g", "t", "q", "c", "f": [[o, pt, it, ord, ck, aid]], "rd": [o], "n": [[o, n]]}
    # drop: {"op": "drop", "g"} or {"op": "drop", "t"}: every state of a deleted group or topic forgotten;
    #       {"op": "drop"}: every state (the broker became a slave: its master's offsets are the truth)

    @staticmethod
    def pop_record(
        key: QueueKey,
        cursor: int,
        offsets: list[int],
        pop_time: int,
        invisible_time: int,
        order: bool,
        attempt_id: str | None = None,
    ) -> dict[str, Any]:
        group, topic, queue_id = key
        ck = offsets[0] if offsets else cursor
        record = {"op": "pop", "g": group, "t": topic, "q": queue_id, "c": cursor, "o": offsets}
        record.update(pt=pop_time, it=invisible_time, ord=order, ck=ck)
        if attempt_id:
            record["aid"] = attempt_id
        return record

    @staticmethod
    def ack_record(key: QueueKey, offset: int) -> dict[str, Any]:
        return {"op": "ack", "g": key[0], "t": key[1], "q": key[2], "o": offset}

    @staticmethod
    def change_record(key: QueueKey, offset: int, pop_time: int, invisible_time: int) -> dict[str, Any]:
        return {
            "op": "chg",
            "g": key[0],
            "t": key[1],
            "q": key[2],
            "o": offset,
            "pt": pop_time,
            "it": invisible_time,
        }

    @staticmethod
    def expired_record(key: QueueKey, offset: int, count: int) -> dict[str, Any]:
        return {"op": "exp", "g": key[0], "t": key[1], "q": key[2], "o": offset, "n": count}

    @staticmethod
    def reset_record(key: QueueKey, cursor: int) -> dict[str, Any]:
        return {"op": "rst", "g": key[0], "t": key[1], "q": key[2], "c": cursor}

    @staticmethod
    def drop_group_record(group: str) -> dict[str, Any]:
        return {"op": "drop", "g": group}

    @staticmethod
    def drop_topic_record(topic: str) -> dict[str, Any]:
        return {"op": "drop", "t": topic}

    @staticmethod
    def drop_all_record() -> dict[str, Any]:
        return {"op": "drop"}

    @staticmethod
    def _state_record(key: QueueKey, state: QueueState) -> dict[str, Any]:
        return {
            "op": "state",
            "g": key[0],
            "t": key[1],
            "q": key[2],
            "c": state.cursor,
            "f": [
                [o, e.pop_time, e.invisible_time, e.order, e.ck_offset, e.attempt_id]
                for o, e in state.inflight.items()
            ],
            "rd": state.redeliver,
            "n": [[o, n] for o, n in state.counts.items()],
        }

    def _apply(self, record: dict[str, Any]) -> None:
        op = record["op"]
        if op == "drop":
            if "g" not in record and "t" not in record:
                self.states.clear()
                return
            field, name = ("g", 0) if "g" in record else ("t", 1)
            gone = str(record[field])
            for dropped in [key for key in self.states if key[name] == gone]:
                del self.states[dropped]
            return
        key: QueueKey = (str(record["g"]), str(record["t"]), int(record["q"]))
        if op == "state":
            self.states[key] = QueueState(
                int(record["c"]),
                {int(f[0]): _in_flight(*f[1:]) for f in record["f"]},
                sorted(int(o) for o in record["rd"]),
                {int(o): int(n) for o, n in record["n"]},
            )
            return
        state = self.states.get(key)
        if op == "pop":
            if state is None:
                state = self.states[key] = QueueState(int(record["c"]))
            fields = (record["pt"], record["it"], record["ord"], record["ck"], record.get("aid"))
            for offset in record["o"]:
                state.put_in_flight(int(offset), _in_flight(*fields))
            state.cursor = max(state.cursor, int(record["c"]))
            return
        if state is None:
            return  # a change to a queue whose state was dropped
        if op == "rst":
            self.states[key] = QueueState(int(record["c"]))
            return
        offset = int(record["o"])
        if op == "ack":
            state.settle(offset)
        elif op == "chg":
            entry = state.inflight.get(offset)
            if entry is not None:
                entry.pop_time, entry.invisible_time = int(record["pt"]), int(record["it"])
        elif op == "exp":
            if state.inflight.pop(offset, None) is not None and offset not in state.redeliver:
                state.redeliver.append(offset)
                state.redeliver.sort()
            state.counts[offset] = int(record["n"])
        else:
            raise ValueError(f"unknown journal operation {op!r}")
