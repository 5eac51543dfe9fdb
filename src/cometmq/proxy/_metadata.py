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
        self._topics = _Expiring(self._fetch_topics)
        self._groups = _Expiring(self._fetch_groups)

    async def _table(self, addr: str, code: int, key: str) -> dict[str, Any]:
        response = await self._brokers.invoke_ok(addr, code)
        try:
            return as_object(json_object(response.body, key).get(key) or {}, key)
        except BodyError as exc:
            raise CometMQError(f"unreadable {key} from {addr}: {exc.remark}") from None

    async def _fetch_topics(self, addr: str) -> dict[str, str]:
        table = await self._table(addr, RequestCode.GET_ALL_TOPIC_CONFIG, "topicConfigTable")
        types: dict[str, str] = {}
        for name, raw in table.items():
            if isinstance(raw, dict):
                with contextlib.suppress(BodyError):
                    attributes = TopicConfig.from_json(raw).attributes
                    types[str(name)] = attributes.get(MESSAGE_TYPE_ATTRIBUTE, DEFAULT_MESSAGE_TYPE)
        return types

    async def _fetch_groups(self, addr: str) -> dict[str, GroupSettings]:
        table = await self._table(
            addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "subscriptionGroupTable"
        )
        groups: dict[str, GroupSettings] = {}
        for name, raw in table.items():
            if isinstance(raw, dict):
                try:
                    config = SubscriptionGroupConfig.from_json(raw)
                    fifo = java_bool(raw, CONSUME_MESSAGE_ORDERLY, "SubscriptionGroupConfig", default=False)
                except BodyError:
                    continue
                groups[str(name)] = GroupSettings(config.retry_max_times, fifo)
        return groups

    async def topic_message_type(self, topic: str, master_addrs: list[str]) -> str | None:
        """The ``message.type`` of *topic* (NORMAL when it has no such attribute) on the first of its
        masters that answers; None when none knows it (the type is then not checked)."""
        for addr in master_addrs:
            try:
                found = (await self._topics.get(addr)).get(topic)
                if found is None:  # a topic created since the table was read: the route has it already
                    found = (await self._topics.get(addr, fresh=True)).get(topic)
            except CometMQError as exc:
                log.info("cannot read the topic configs of %s: %s", addr, exc)
                continue
            if found is not None:
                return found
        return None

    async def group_settings(self, group: str, master_addrs: list[str]) -> GroupSettings:
        """*group*'s settings on the first of *master_addrs* that answers; RocketMQ's defaults when it is
        on none (a group the broker creates on first use has them)."""
        for addr in master_addrs:
            try:
                found = (await self._groups.get(addr)).get(group)
                if found is None:  # perhaps created since the table was read
                    found = (await self._groups.get(addr, fresh=True)).get(group)
            except CometMQError as exc:
                log.info("cannot read the subscription groups of %s: %s", addr, exc)
                continue
            if found is not None:
                return found
        return GroupSettings()
