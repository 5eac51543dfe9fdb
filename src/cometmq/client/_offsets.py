"""Where a consumer keeps its offsets: on the brokers (clustering) or in a local file (broadcasting),
and where it starts on a queue its group never committed an offset for (``consume_from``).

Both stores keep the offsets in memory, where consuming updates them, and persist them every few
seconds and on close; an offset is the next message to consume, as in RocketMQ.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Literal

from cometmq.atomic_file import read_with_backup, write_atomic
from cometmq.client import _brokerapi
from cometmq.client._instance import ClientInstance
from cometmq.client.message import MessageQueue
from cometmq.errors import CometMQError
from cometmq.protocol.naming import RETRY_GROUP_TOPIC_PREFIX

log = logging.getLogger("cometmq.client")

# RocketMQ's persistConsumerOffsetInterval.
PERSIST_INTERVAL_S = 5.0

ConsumeFrom = Literal["last", "first", "timestamp"]
# ConsumeFromWhere as heartbeats and running info name it.
CONSUME_FROM_WHERE: dict[str, str] = {
    "last": "CONSUME_FROM_LAST_OFFSET",
    "first": "CONSUME_FROM_FIRST_OFFSET",
    "timestamp": "CONSUME_FROM_TIMESTAMP",
}
# consume_from="timestamp" without a timestamp: half an hour before the consumer was made
# (RocketMQ's consumeTimestamp default).
DEFAULT_TIMESTAMP_LOOKBACK_MS = 30 * 60 * 1000


def default_consume_timestamp() -> int:
    return int(time.time() * 1000) - DEFAULT_TIMESTAMP_LOOKBACK_MS


async def start_offset(
    instance: ClientInstance, queue: MessageQueue, group: str, consume_from: ConsumeFrom, timestamp_ms: int
) -> int:
    """Where a group that never committed an offset for ``queue`` starts reading it (RocketMQ's
    computePullFromWhere): the queue's end, its oldest message, or the first message stored at or
    after ``timestamp_ms``. A retry topic always starts at 0: retried messages are never skipped,
    whatever ``consume_from`` says."""
    if queue.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return 0
    if consume_from == "last":
        return await _brokerapi.max_offset(instance, queue)
    if consume_from == "first":
        return await _brokerapi.min_offset(instance, queue)
    return await _brokerapi.first_offset_at(instance, queue, timestamp_ms, group)


class _MemoryTable:
    """The in-memory offsets both stores share. Each store adds ``read(queue)``, the stored offset of a
    queue (memory first, then the broker or file; None if none), and ``persist(queues=None)``, which
    writes the in-memory offsets of ``queues`` (default: all) where they are kept."""

    def __init__(self) -> None:
        self.offsets: dict[MessageQueue, int] = {}
        self._persisted: dict[MessageQueue, int] = {}

    def update(self, queue: MessageQueue, offset: int, increase_only: bool = False) -> None:
        if increase_only and self.offsets.get(queue, -1) >= offset:
            return
        self.offsets[queue] = offset

    def forget(self, queue: MessageQueue) -> None:
        """Stop tracking a queue (it went to another member of the group)."""
        self.offsets.pop(queue, None)
        self._persisted.pop(queue, None)

    def changed(self, queues: list[MessageQueue] | None) -> dict[MessageQueue, int]:
        selected = (
            self.offsets if queues is None else {q: self.offsets[q] for q in queues if q in self.offsets}
        )
        return {q: o for q, o in selected.items() if self._persisted.get(q) != o}

    def mark_persisted(self, offsets: dict[MessageQueue, int]) -> None:
        self._persisted.update(offsets)


class RemoteOffsetStore(_MemoryTable):
    """Offsets kept by the brokers per consumer group (clustering consumption)."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self._instance = instance
        self._group = group

    async def read(self, queue: MessageQueue) -> int | None:
        offset = self.offsets.get(queue)
        if offset is not None:
            return offset
        offset = await _brokerapi.query_offset(self._instance, queue, self._group)
        if offset is not None:
            self.offsets[queue] = offset
            self._persisted[queue] = offset
        return offset

    async def persist(self, queues: list[MessageQueue] | None = None) -> None:
        for queue, offset in self.changed(queues).items():
            try:
                on_master = await _brokerapi.commit_offset(self._instance, queue, self._group, offset)
            except CometMQError as exc:
                log.warning("cannot commit offset %d of %s for %s: %s", offset, queue, self._group, exc)
                continue
            if on_master:  # one a slave holds is committed again, until the master has it
                self.mark_persisted({queue: offset})


def local_offsets_path(client_id: str, group: str, base: Path | None = None) -> Path:
    """``~/.cometmq/offsets/<client id>/<group>/offsets.json`` (RocketMQ: ~/.rocketmq_offsets/…)."""
    root = base if base is not None else Path.home() / ".cometmq" / "offsets"
    return root / client_id.replace(":", "_").replace("/", "_") / group / "offsets.json"


class LocalOffsetStore(_MemoryTable):
    """Offsets kept in a local file (broadcasting: every instance consumes everything)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._loaded = False

    def _load(self) -> None:
        self._loaded = True
        for candidate, data in read_with_backup(self.path):
            try:
                table = json.loads(data)["offsetTable"]
                for item in table:
                    queue = MessageQueue(item["topic"], item["brokerName"], int(item["queueId"]))
                    self.offsets.setdefault(queue, int(item["offset"]))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable offsets file %s: %s", candidate, exc)
                continue
            self._persisted.update(self.offsets)
            return

    async def read(self, queue: MessageQueue) -> int | None:
        if not self._loaded:
            await asyncio.to_thread(self._load)
        return self.offsets.get(queue)

    async def persist(self, queues: list[MessageQueue] | None = None) -> None:
        if not self._loaded:
            await asyncio.to_thread(self._load)
        if not self.changed(None):
            return
        snapshot = dict(self.offsets)  # consuming goes on while the file is written
        table = [
            {"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id, "offset": o}
            for q, o in sorted(snapshot.items())
        ]
        data = json.dumps({"offsetTable": table}, indent=1).encode()
        # Two fsyncs: not on the event loop, where heartbeats and pulls would wait for them.
        await asyncio.to_thread(write_atomic, self.path, data)
        self.mark_persisted(snapshot)
