"""Synchronous access to a CometMQ cluster for the connector's driver and executor code.

Spark calls data sources from plain threads, so each :class:`Cluster` owns a private event loop and
runs CometMQ's asyncio client on it, one ``run_until_complete`` per call (no extra thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from cometmq.client import AdminClient, MessageQueue
from cometmq.client.blocking import new_event_loop
from cometmq.protocol.naming import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, is_system_topic
from cometmq.spark._options import ConnectOptions

__all__ = ["Cluster"]

T = TypeVar("T")

# Queue offsets read by the connector are planned on the driver, so a pull never needs to wait:
# a short request timeout makes a dead broker fail the task quickly (Spark retries it).
REQUEST_TIMEOUT_S = 10.0
# The group name pulls and offset queries carry; a read joins no group and commits nothing.
READER_GROUP = "cometmq-spark-reader"


class Cluster:
    """The cluster behind NameServer(s) ``namesrv``, driven from synchronous code."""

    def __init__(self, namesrv: str, connect: ConnectOptions | None = None) -> None:
        self._loop = new_event_loop()
        security = (connect or ConnectOptions()).client_options()
        self.admin = AdminClient(namesrv, timeout=REQUEST_TIMEOUT_S, **security)
        self.run(self.admin.start())

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        with contextlib.suppress(Exception):
            self._loop.run_until_complete(self.admin.close())
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    # driver-side questions (coroutines, for run()) -----------------------------------------------

    async def queues(
        self, topics: Iterable[str], pattern: re.Pattern[str] | None = None
    ) -> list[MessageQueue]:
        """The readable queues of ``topics`` and of every user topic ``pattern`` matches in full,
        as the name server routes them now."""
        names = set(topics)
        if pattern is not None:
            names.update(
                t
                for t in await self.admin.topic_list()
                if pattern.fullmatch(t)
                and not is_system_topic(t)
                and not t.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))
            )
        found = await asyncio.gather(*(self.admin.readable_queues(t) for t in sorted(names)))
        return sorted(queue for queues in found for queue in queues)

    async def bounds(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, tuple[int, int]]:
        """(min offset, max offset) of each queue: the oldest message held, and the next to be written."""
        queues = list(queues)
        found = await asyncio.gather(*(self.admin.offset_bounds(q) for q in queues))
        return dict(zip(queues, found, strict=True))

    async def offsets_at(
        self, bounds: Mapping[MessageQueue, tuple[int, int]], timestamp_ms: int
    ) -> dict[MessageQueue, int]:
        """Per queue of ``bounds`` (what ``bounds()`` gave), the offset of the first message stored at
        or after ``timestamp_ms`` (the queue's end if there is none)."""
        queues = list(bounds)
        found = await asyncio.gather(
            *(
                self.admin.first_offset_at(q, timestamp_ms, group=READER_GROUP, bounds=bounds[q])
                for q in queues
            )
        )
        return dict(zip(queues, found, strict=True))
