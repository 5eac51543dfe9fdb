"""Synchronous access to a CometMQ cluster for the connector's driver and executor code.

Spark calls data sources from plain threads, so each :class:`Cluster` owns a private event loop and
runs CometMQ's asyncio client on it, one ``run_until_complete`` per call (no extra thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from cometmq.client import AdminClient, MessageQueue
from cometmq.client.blocking import new_event_loop
from cometmq.errors import ConnectionClosedError, QueueNotRoutedError, RemotingTimeoutError
from cometmq.protocol.naming import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, is_system_topic
from cometmq.spark._options import ConnectOptions

__all__ = ["Cluster"]

T = TypeVar("T")

log = logging.getLogger("cometmq.spark")

# Queue offsets read by the connector are planned on the driver, so a pull never needs to wait:
# a short request timeout makes a dead broker fail the task quickly (Spark retries it).
REQUEST_TIMEOUT_S = 10.0
# What a retried question may meet while a broker restarts or re-registers with the name server.
PASSING_ERRORS = (ConnectionClosedError, RemotingTimeoutError, QueueNotRoutedError)
# The group name pulls and offset queries carry; a read joins no group and commits nothing.
READER_GROUP = "cometmq-spark-reader"


class Cluster:
    """The cluster behind NameServer(s) ``namesrv``, driven from synchronous code."""

    def __init__(
        self,
        namesrv: str,
        connect: ConnectOptions | None = None,
        *,
        timeout_s: float = REQUEST_TIMEOUT_S,
        retries: int = 0,
        retry_interval_s: float = 1.0,
    ) -> None:
        self._loop = new_event_loop()
        security = (connect or ConnectOptions()).client_options()
        self.admin = AdminClient(namesrv, timeout=timeout_s, **security)
        self.retries = retries
        self.retry_interval_s = retry_interval_s
        self.run(self.admin.start())

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    def run_retrying(self, ask: Callable[[], Coroutine[Any, Any, T]], what: str) -> T:
        """``run(retrying(ask, what))``."""
        return self.run(self.retrying(ask, what))

    async def retrying(self, ask: Callable[[], Coroutine[Any, Any, T]], what: str) -> T:
        """``await ask()``, asked again up to ``retries`` times, ``retry_interval_s`` apart, when it
        fails in a way that passes (no answer in time, a connection lost, a broker not routed)."""
        retried = 0
        while True:
            try:
                return await ask()
            except PASSING_ERRORS as exc:
                if retried == self.retries:
                    raise
                retried += 1
                log.warning("%s failed (%s); retry %d of %d", what, exc, retried, self.retries)
            await asyncio.sleep(self.retry_interval_s)

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
        by_topic = await self.queues_by_topic(topics, pattern)
        return sorted(queue for queues in by_topic.values() for queue in queues)

    async def queues_by_topic(
        self, topics: Iterable[str], pattern: re.Pattern[str] | None = None
    ) -> dict[str, list[MessageQueue]]:
        """:meth:`queues`, per topic: a topic of ``topics`` that no broker serves maps to []."""
        names = set(topics)
        if pattern is not None:
            names.update(
                t
                for t in await self.admin.topic_list()
                if pattern.fullmatch(t)
                and not is_system_topic(t)
                and not t.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))
            )
        ordered = sorted(names)
        found = await asyncio.gather(*(self.admin.readable_queues(t) for t in ordered))
        return {topic: sorted(queues) for topic, queues in zip(ordered, found, strict=True)}

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
