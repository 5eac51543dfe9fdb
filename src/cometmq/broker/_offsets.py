"""Committed consumer offsets per (topic, group, queue), persisted in consumerOffset.json."""

from __future__ import annotations

import collections
import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cometmq.broker._json_config import MetadataFile, check_stored_name, load_json_table, read_entries
from cometmq.protocol.naming import group_name_error, stored_topic_name_error

# consumeTps in GET_CONSUME_STATS: committed progress over this window (RocketMQ: pulls per minute).
TPS_WINDOW_S = 60.0


def _read_offsets(key: str, queues: Any) -> dict[int, int]:
    """The queue offsets of a ``topic@group`` key; ValueError for a key that names no topic and group."""
    topic, at, group = key.partition("@")
    if not at:
        raise ValueError("the key is not topic@group")
    check_stored_name("topic", topic, stored_topic_name_error)
    check_stored_name("group", group, group_name_error)
    return {int(qid): int(offset) for qid, offset in queues.items()}


class ConsumerOffsetManager:
    def __init__(self, config_dir: Path) -> None:
        self._path = config_dir / "consumerOffset.json"
        self._file = MetadataFile(self._path)
        # RocketMQ's key "topic@group" → queue id → offset.
        self.offsets: dict[str, dict[int, int]] = {}
        # (group, topic, queue id) -> the offset after the last message pulled (RocketMQ's pull offset
        # table): what a group holds past its commit is its in-flight messages. Memory only.
        self.pulled: dict[tuple[str, str, int], int] = {}
        self._dirty = False
        # "topic@group" → [monotonic second, messages committed past the previous offsets in it],
        # for the last minute only.
        self._progress: dict[str, collections.deque[list[int]]] = {}
        # Snapshots are numbered as they are taken. Writes of them may run on other threads and
        # overlap (the periodic one and the last one at shutdown): one at a time, and never an older
        # one over a newer one, or committed offsets would go back.
        self._snapshots_taken = 0
        self._snapshot_written = 0
        self._write_lock = threading.Lock()

    def load(self) -> None:
        loaded = load_json_table(self._path, "offsetTable", "offsets", _read_offsets)
        if loaded is not None:
            self.offsets.update(loaded[1])

    def persist(self, force: bool = False) -> None:
        write = self.persist_later(force)
        if write is not None:
            write()

    @property
    def write_pending(self) -> bool:
        """Whether the file is older than the table (its last write failed)."""
        return self._file.pending

    def persist_later(self, force: bool = False) -> Callable[[], None] | None:
        """A snapshot of the table now, and the (blocking) write of it to run anywhere; None if clean."""
        if not (self._dirty or force):
            return None
        table = {key: {str(qid): off for qid, off in queues.items()} for key, queues in self.offsets.items()}
        self._dirty = False
        self._snapshots_taken += 1
        return functools.partial(self._write, self._snapshots_taken, {"offsetTable": table})

    def _write(self, snapshot: int, data: dict[str, object]) -> None:
        with self._write_lock:
            if snapshot < self._snapshot_written:
                return  # a newer snapshot is on disk already
            if not self._file.save(data):  # logged once by MetadataFile
                self._dirty = True  # the next round writes the table again
                return
            self._snapshot_written = snapshot

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        # Stored as given, -1 included: the JS client commits -1 for queues it has not consumed.
        # A commit rides on nearly every pull: the key is built once, the table looked up once.
        key = f"{topic}@{group}"
        queues = self.offsets.get(key)
        if queues is None:
            queues = self.offsets[key] = {}
        previous = queues.get(queue_id, -1)
        queues[queue_id] = offset
        self._dirty = True
        if previous >= 0 and offset > previous:
            # Counted per second, so a key keeps at most a minute's worth of entries however often
            # its consumers commit.
            second = int(time.monotonic())
            samples = self._progress.get(key)
            if samples is None:
                samples = self._progress[key] = collections.deque()
            if samples and samples[-1][0] == second:
                samples[-1][1] += offset - previous
            else:
                samples.append([second, offset - previous])
                self._forget_old(samples, second)

    def merge(self, table: Any, source: str) -> None:
        """A slave takes its master's offsets (GET_ALL_CONSUMER_OFFSET's, from *source*), as RocketMQ's
        SlaveSynchronize does: each ``topic@group`` the master has replaces this table's, the others
        stay (offsets committed to this slave while the master was away)."""
        for key, queues in read_entries(table, "consumer offsets", _read_offsets, source).items():
            if self.offsets.get(key) != queues:
                self.offsets[key] = queues
                self._dirty = True

    def reset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """An administrator's reset: stored like a commit, but it is no consumption."""
        self.offsets.setdefault(f"{topic}@{group}", {})[queue_id] = offset
        self._dirty = True

    @staticmethod
    def _forget_old(samples: collections.deque[list[int]], now: float) -> None:
        while samples and now - samples[0][0] >= TPS_WINDOW_S:
            samples.popleft()

    def consume_tps(self, group: str, topic: str) -> float:
        """Messages per second the group committed on ``topic`` over the last minute."""
        samples = self._progress.get(f"{topic}@{group}")
        if not samples:
            return 0.0
        self._forget_old(samples, time.monotonic())
        return sum(count for _, count in samples) / TPS_WINDOW_S

    def clone(self, source: str, dest: str, topic: str) -> bool:
        """Give *dest* the offsets *source* committed on *topic*, replacing its own there (RocketMQ's
        cloneOffset); False when *source* has none."""
        queues = self.offsets.get(f"{topic}@{source}")
        if queues is None:
            return False
        self.offsets[f"{topic}@{dest}"] = dict(queues)
        self._dirty = True
        return True

    def topics_of(self, group: str) -> list[str]:
        """The topics ``group`` has offsets for (RocketMQ's whichTopicByConsumer)."""
        return sorted(k.partition("@")[0] for k in self.offsets if k.partition("@")[2] == group)

    def topics_by_group(self) -> dict[str, list[str]]:
        """Every group with offsets and the topics it has offsets for, sorted: ``topics_of`` for all
        groups in one pass over the table."""
        found: dict[str, list[str]] = {}
        for key in self.offsets:
            topic, _, group = key.partition("@")
            found.setdefault(group, []).append(topic)
        for topics in found.values():
            topics.sort()
        return found

    def delete_group(self, group: str) -> None:
        for key in [k for k in self.offsets if k.partition("@")[2] == group]:
            del self.offsets[key]
            self._progress.pop(key, None)
            self._dirty = True
        for pulled in [key for key in self.pulled if key[0] == group]:
            del self.pulled[pulled]

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when there is none."""
        return self.offsets.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def delete_topic(self, topic: str) -> None:
        for key in [k for k in self.offsets if k.partition("@")[0] == topic]:
            del self.offsets[key]
            self._dirty = True
        for pulled in [key for key in self.pulled if key[1] == topic]:
            del self.pulled[pulled]
