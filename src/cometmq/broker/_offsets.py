"""Committed consumer offsets per (topic, group, queue), persisted in consumerOffset.json."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path

from cometmq.broker._json_config import load_json_config, save_json_config

log = logging.getLogger("cometmq.broker")


class ConsumerOffsetManager:
    def __init__(self, config_dir: Path) -> None:
        self._path = config_dir / "consumerOffset.json"
        # RocketMQ's key "topic@group" → queue id → offset.
        self.offsets: dict[str, dict[int, int]] = {}
        self._dirty = False

    def load(self) -> None:
        obj = load_json_config(self._path)
        if obj is None:
            return
        for key, table in (obj.get("offsetTable") or {}).items():
            try:
                self.offsets[key] = {int(qid): int(offset) for qid, offset in table.items()}
            except (AttributeError, TypeError, ValueError) as exc:
                log.error("skipping unreadable offsets %r in %s: %s", key, self._path, exc)

    def persist(self, force: bool = False) -> None:
        write = self.persist_later(force)
        if write is not None:
            write()

    def persist_later(self, force: bool = False) -> Callable[[], None] | None:
        """A snapshot of the table now, and the (blocking) write of it to run anywhere; None if clean."""
        if not (self._dirty or force):
            return None
        table = {key: {str(qid): off for qid, off in queues.items()} for key, queues in self.offsets.items()}
        self._dirty = False
        return functools.partial(save_json_config, self._path, {"offsetTable": table})

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        # Stored as given, -1 included: the JS client commits -1 for queues it has not consumed.
        self.offsets.setdefault(f"{topic}@{group}", {})[queue_id] = offset
        self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when there is none."""
        return self.offsets.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def delete_topic(self, topic: str) -> None:
        for key in [k for k in self.offsets if k.partition("@")[0] == topic]:
            del self.offsets[key]
            self._dirty = True
