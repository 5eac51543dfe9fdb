"""Topic routes as the 5.x clients see them, and the queue a send goes to.

A 5.x client never reaches a broker: QueryRoute answers every queue of the topic with the proxy itself as
the broker's endpoint (the endpoints the client asked with, RocketMQ proxy's cluster mode), keeping the
broker names and ids so later calls can name the broker they mean. A send names no queue: the proxy picks
one, by the message group's hash for FIFO messages (every message of a group on one queue, in order),
round robin otherwise.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from cometmq.client.instance import ClientInstance
from cometmq.errors import CometMQError
from cometmq.protocol.naming import PERM_READ, PERM_WRITE
from cometmq.protocol.route import QueueData, TopicRouteData
from cometmq.protocol.taghash import java_string_hash
from cometmq.proxy._convert import Refusal, accepted_message_types
from cometmq.proxy._metadata import Metadata
from cometmq.proxy._pb import definition_pb2 as v2


@dataclass(frozen=True, slots=True)
class WriteQueue:
    broker_name: str
    queue_id: int
    addr: str  # the master's remoting address


def permission_of(perm: int) -> int:
    """A v2.Permission from RocketMQ's perm bits."""
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if readable and writable:
        return v2.READ_WRITE
    if readable:
        return v2.READ
    if writable:
        return v2.WRITE
    return v2.NONE


def _queue_kinds(data: QueueData) -> list[tuple[int, int]]:
    """How many of a broker group's queues are read-only, write-only, read-write or inaccessible (a
    v2.Permission and a count each, in the order RocketMQ's proxy numbers them)."""
    reads, writes = data.read_queue_nums, data.write_queue_nums
    readable, writable = bool(data.perm & PERM_READ), bool(data.perm & PERM_WRITE)
    if readable and writable:
        both = min(reads, writes)
        return [(v2.READ, reads - both), (v2.WRITE, writes - both), (v2.READ_WRITE, both)]
    if writable:
        return [(v2.WRITE, writes)]
    if readable:
        return [(v2.READ, reads)]
    return [(v2.NONE, max(1, reads, writes))]


def consistent_hash(key: int, buckets: int) -> int:
    """Guava's Hashing.consistentHash, which RocketMQ's proxy places a message group with: a bucket in
    [0, buckets) for *key* (a Java long), moving few keys when buckets are added."""
    state = key & 0xFFFF_FFFF_FFFF_FFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFF_FFFF_FFFF_FFFF
        step = ((state >> 33) + 1) / 2.0**31
        following = int((candidate + 1) / step)
        if 0 <= following < buckets:
            candidate = following
        else:
            return candidate


class Routes:
    def __init__(self, brokers: ClientInstance, metadata: Metadata) -> None:
        self._brokers = brokers
        self._metadata = metadata
        self._round_robin = itertools.count()

    async def route(self, topic: str) -> TopicRouteData:
        """The topic's route (cached by the ClientInstance); TOPIC_NOT_FOUND when no broker holds it."""
        try:
            route = await self._brokers.route(topic)
        except CometMQError as exc:
            raise Refusal(
                v2.INTERNAL_SERVER_ERROR, f"cannot look up the route of topic {topic}: {exc}"
            ) from None
        if route is None or not route.queue_datas:
            raise Refusal(v2.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
        return route

    @staticmethod
    def master_addrs(route: TopicRouteData) -> list[str]:
        return sorted(b.master_addr for b in route.broker_datas if b.master_addr is not None)

    async def message_type(self, topic: str, route: TopicRouteData) -> str | None:
        return await self._metadata.topic_message_type(topic, self.master_addrs(route))

    async def queues(self, topic: v2.Resource, endpoints: v2.Endpoints) -> list[v2.MessageQueue]:
        """QueryRoute's queues: per broker group and broker id, its queues split into read-only,
        write-only, read-write and (a topic with no permission) inaccessible ones, as RocketMQ's proxy
        numbers them."""
        route = await self.route(topic.name)
        accepted = accepted_message_types(await self.message_type(topic.name, route))
        brokers = {broker.broker_name: broker for broker in route.broker_datas}
        queues: list[v2.MessageQueue] = []
        for data in sorted(route.queue_datas, key=lambda q: q.broker_name):
            broker_data = brokers.get(data.broker_name)
            if broker_data is None:
                continue
            kinds = _queue_kinds(data)
            for broker_id in sorted(broker_data.broker_addrs):
                broker = v2.Broker(name=data.broker_name, id=broker_id, endpoints=endpoints)
                queue_id = 0
                for permission, count in kinds:
                    for _ in range(count):
                        queues.append(
                            v2.MessageQueue(
                                topic=topic,
                                id=queue_id,
                                permission=permission,  # type: ignore[arg-type]
                                broker=broker,
                                accept_message_types=accepted,  # type: ignore[arg-type]
                            )
                        )
                        queue_id += 1
        return queues

    def write_queues(self, route: TopicRouteData) -> list[WriteQueue]:
        """The queues a send may go to: every writable queue of a broker group with a master."""
        masters = {b.broker_name: b.master_addr for b in route.broker_datas if b.master_addr is not None}
        return [
            WriteQueue(data.broker_name, queue_id, masters[data.broker_name])
            for data in sorted(route.queue_datas, key=lambda q: q.broker_name)
            if data.perm & PERM_WRITE and data.broker_name in masters
            for queue_id in range(data.write_queue_nums)
        ]

    def select(self, queues: list[WriteQueue], message_group: str) -> WriteQueue:
        """The queue of a send: by the message group's hash (Java's String.hashCode, Guava's consistent
        hash, as RocketMQ's proxy) when it has one, else the next in turn."""
        if message_group:
            return queues[consistent_hash(java_string_hash(message_group), len(queues))]
        return queues[next(self._round_robin) % len(queues)]
