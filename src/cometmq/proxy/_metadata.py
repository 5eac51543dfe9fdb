"""What the proxy reads of the brokers' metadata: a topic's ``message.type`` and a group's retry and FIFO
settings, as the master brokers hold them, cached for a few seconds (RocketMQ proxy's MetadataService).

The tables come whole (GET_ALL_TOPIC_CONFIG, GET_ALL_SUBSCRIPTIONGROUP_CONFIG) from one master at a time,
fetched at most once per master and expiry however many calls ask meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Generic, TypeVar

from cometmq.client.instance import ClientInstance
from cometmq.errors import CometMQError
from cometmq.protocol import RequestCode
from cometmq.protocol.jsonbody import BodyError, as_object, java_bool, json_object
from cometmq.protocol.subscription_group import SubscriptionGroupConfig
from cometmq.protocol.topic_config import TopicConfig
from cometmq.proxy._convert import MESSAGE_TYPE_ATTRIBUTE

log = logging.getLogger("cometmq.proxy")

# How long a master's tables are used before they are fetched again.
METADATA_TTL_S: Final = 5.0
# The most names remembered as missing (those older than METADATA_TTL_S are dropped when it is reached).
MAX_MISSES: Final = 4096
# The type of a topic without the ``message.type`` attribute (RocketMQ's TopicConfig.getTopicMessageType).
DEFAULT_MESSAGE_TYPE: Final = "NORMAL"
# RocketMQ 5's SubscriptionGroupConfig field marking a FIFO consumer group.
CONSUME_MESSAGE_ORDERLY: Final = "consumeMessageOrderly"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """What the 5.x clients learn of their consumer group: how often a message is delivered before it is
    dead-lettered, and whether the group consumes in order."""

    retry_max_times: int = 16  # SubscriptionGroupConfig's default
    fifo: bool = False


class _Expiring(Generic[T]):
    """A value per broker address, fetched again after METADATA_TTL_S; one fetch at a time per address."""

    def __init__(self, fetch: Callable[[str], Awaitable[T]]) -> None:
        self._fetch = fetch
        self._values: dict[str, tuple[float, asyncio.Future[T]]] = {}

    async def get(self, addr: str, *, fresh: bool = False) -> T:
        """The value of *addr*, fetched anew when older than METADATA_TTL_S (or *fresh* asks it)."""
        now = time.monotonic()
        held = self._values.get(addr)
        if held is not None and now - held[0] < METADATA_TTL_S and not (fresh and held[1].done()):
            future = held[1]
        else:
            future = asyncio.ensure_future(self._fetch(addr))
            self._values[addr] = (now, future)
        try:
            return await asyncio.shield(future)
        except CometMQError:
            if self._values.get(addr, (0.0, None))[1] is future:
                del self._values[addr]  # a failure is not cached
            raise


class Metadata:
    def __init__(self, brokers: ClientInstance) -> None:
        self._brokers = brokers
        # The tables as the masters answer them; an entry is read when a call asks for it.
        self._topics = _Expiring(partial(self._table, RequestCode.GET_ALL_TOPIC_CONFIG, "topicConfigTable"))
        self._groups = _Expiring(
            partial(self._table, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "subscriptionGroupTable")
        )
        # When a name was last missing from a master's table, fetched anew for it: a name that is on no
        # master (a group the brokers create on first use) costs one fetch per METADATA_TTL_S, not one a call.
        self._misses: dict[tuple[str, str, str], float] = {}

    async def _table(self, code: int, key: str, addr: str) -> dict[str, Any]:
        response = await self._brokers.invoke_ok(addr, code)
        try:
            return as_object(json_object(response.body, key).get(key) or {}, key)
        except BodyError as exc:
            raise CometMQError(f"unreadable {key} from {addr}: {exc.remark}") from None

    async def _entry(self, tables: _Expiring[dict[str, Any]], kind: str, addr: str, name: str) -> Any:
        """*name*'s entry in *addr*'s table, the table fetched anew when the entry is missing (a topic or
        group created since), unless it was missing from a fresh table within METADATA_TTL_S."""
        found = (await tables.get(addr)).get(name)
        if found is not None:
            return found
        now = time.monotonic()
        key = (kind, addr, name)
        if now - self._misses.get(key, -METADATA_TTL_S) < METADATA_TTL_S:
            return None
        found = (await tables.get(addr, fresh=True)).get(name)
        if found is None:
            if len(self._misses) >= MAX_MISSES:
                self._misses = {k: t for k, t in self._misses.items() if now - t < METADATA_TTL_S}
            self._misses[key] = now
        return found

    async def topic_message_type(self, topic: str, master_addrs: list[str]) -> str | None:
        """The ``message.type`` of *topic* (NORMAL when it has no such attribute) on the first of its
        masters that answers; None when none knows it (the type is then not checked)."""
        for addr in master_addrs:
            try:
                raw = await self._entry(self._topics, "topic", addr, topic)
            except CometMQError as exc:
                log.info("cannot read the topic configs of %s: %s", addr, exc)
                continue
            if isinstance(raw, dict):
                with contextlib.suppress(BodyError):
                    return TopicConfig.from_json(raw).attributes.get(
                        MESSAGE_TYPE_ATTRIBUTE, DEFAULT_MESSAGE_TYPE
                    )
        return None

    async def group_settings(self, group: str, master_addrs: list[str]) -> GroupSettings:
        """*group*'s settings on the first of *master_addrs* that answers; RocketMQ's defaults when it is
        on none (a group the broker creates on first use has them)."""
        for addr in master_addrs:
            try:
                raw = await self._entry(self._groups, "group", addr, group)
            except CometMQError as exc:
                log.info("cannot read the subscription groups of %s: %s", addr, exc)
                continue
            if isinstance(raw, dict):
                with contextlib.suppress(BodyError):
                    config = SubscriptionGroupConfig.from_json(raw)
                    fifo = java_bool(raw, CONSUME_MESSAGE_ORDERLY, "SubscriptionGroupConfig", default=False)
                    return GroupSettings(config.retry_max_times, fifo)
        return GroupSettings()
