"""Who is connected: consumer groups (membership from heartbeats) and producer groups."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.protocol.broker_headers import ConsumerGroupRequestHeader
from cometmq.protocol.subscription import SubscriptionData
from cometmq.remoting import Connection

log = logging.getLogger("cometmq.broker")

# A client that has not heartbeated for this long is dropped (RocketMQ's CHANNEL_EXPIRED_TIMEOUT).
CHANNEL_EXPIRED_TIMEOUT_S = 120.0


@dataclass(slots=True)
class ClientChannel:
    client_id: str
    conn: Connection
    language: str
    version: int
    last_update: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[Connection, ClientChannel] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return [channel.client_id for channel in self.channels.values()]


class ConsumerManager:
    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}

    def register(
        self,
        group: str,
        channel: ClientChannel,
        consume_type: str,
        message_model: str,
        consume_from_where: str,
        subscriptions: Iterable[SubscriptionData],
    ) -> bool:
        """Record a heartbeat; True when membership or subscriptions changed (members must rebalance)."""
        info = self.groups.get(group)
        if info is None:
            info = self.groups[group] = ConsumerGroupInfo(group)
        info.consume_type, info.message_model, info.consume_from_where = (
            consume_type,
            message_model,
            consume_from_where,
        )
        changed = False
        known = info.channels.get(channel.conn)
        if known is None or known.client_id != channel.client_id:
            info.channels[channel.conn] = channel
            log.info(
                "consumer %s joined group %s from %s", channel.client_id, group, channel.conn.remote_address
            )
            changed = True
        else:
            known.last_update = time.monotonic()
        new_subs = {sub.topic: sub for sub in subscriptions}
        old_keys = {t: (s.sub_string, s.expression_type) for t, s in info.subscriptions.items()}
        new_keys = {t: (s.sub_string, s.expression_type) for t, s in new_subs.items()}
        if old_keys != new_keys:
            changed = changed or bool(info.subscriptions)
        for topic, sub in new_subs.items():
            old = info.subscriptions.get(topic)
            if old is None or old.sub_version <= sub.sub_version:
                info.subscriptions[topic] = sub
        for topic in set(info.subscriptions) - set(new_subs):
            del info.subscriptions[topic]
        return changed

    def unregister(self, group: str, client_id: str) -> bool:
        info = self.groups.get(group)
        if info is None:
            return False
        gone = [conn for conn, channel in info.channels.items() if channel.client_id == client_id]
        for conn in gone:
            del info.channels[conn]
            log.info("consumer %s left group %s", client_id, group)
        self._drop_if_empty(info)
        return bool(gone)

    def remove_connection(self, conn: Connection) -> list[str]:
        """Forget a closed connection; the groups it belonged to (their members must rebalance)."""
        affected = []
        for info in list(self.groups.values()):
            channel = info.channels.pop(conn, None)
            if channel is not None:
                log.info("consumer %s of group %s disconnected", channel.client_id, info.group)
                affected.append(info.group)
                self._drop_if_empty(info)
        return affected

    def expire(self, now: float, timeout: float = CHANNEL_EXPIRED_TIMEOUT_S) -> list[str]:
        affected = []
        for info in list(self.groups.values()):
            for conn, channel in list(info.channels.items()):
                if now - channel.last_update > timeout:
                    log.warning(
                        "consumer %s of group %s expired after %.0f s of silence",
                        channel.client_id,
                        info.group,
                        now - channel.last_update,
                    )
                    del info.channels[conn]
                    conn.close()
                    affected.append(info.group)
            self._drop_if_empty(info)
        return affected

    def _drop_if_empty(self, info: ConsumerGroupInfo) -> None:
        if not info.channels:
            self.groups.pop(info.group, None)

    def subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.groups.get(group)
        return None if info is None else info.subscriptions.get(topic)

    def notify_ids_changed(self, group: str) -> None:
        """Tell every member of ``group`` to rebalance now (NOTIFY_CONSUMER_IDS_CHANGED, oneway)."""
        info = self.groups.get(group)
        if info is None:
            return
        header = ConsumerGroupRequestHeader(consumer_group=group).encode()
        for conn in list(info.channels):
            conn.invoke_oneway(
                RemotingCommand(
                    code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields=header.copy(), language="JAVA"
                )
            )


class ProducerManager:
    def __init__(self) -> None:
        self.groups: dict[str, dict[Connection, ClientChannel]] = {}

    def register(self, group: str, channel: ClientChannel) -> None:
        channels = self.groups.setdefault(group, {})
        known = channels.get(channel.conn)
        if known is None:
            channels[channel.conn] = channel
        else:
            known.last_update = time.monotonic()

    def unregister(self, group: str, client_id: str) -> None:
        channels = self.groups.get(group, {})
        for conn in [c for c, ch in channels.items() if ch.client_id == client_id]:
            del channels[conn]
        if not channels:
            self.groups.pop(group, None)

    def remove_connection(self, conn: Connection) -> None:
        for group in list(self.groups):
            self.groups[group].pop(conn, None)
            if not self.groups[group]:
                del self.groups[group]

    def expire(self, now: float, timeout: float = CHANNEL_EXPIRED_TIMEOUT_S) -> None:
        for group, channels in list(self.groups.items()):
            for conn, channel in list(channels.items()):
                if now - channel.last_update > timeout:
                    del channels[conn]
            if not channels:
                del self.groups[group]
