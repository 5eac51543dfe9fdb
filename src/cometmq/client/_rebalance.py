"""Queue allocation strategies: which queues of a topic one member of a consumer group reads.

Pure functions. Every member computes its own share from the same inputs (all queues and all client
ids of the group), so the strategies must be deterministic and agree between members, including
members written in Java, C++ or Go: the results here are RocketMQ's (docs/protocol.md#rebalance).
"""

from __future__ import annotations

import bisect
import hashlib
from collections import Counter
from collections.abc import Callable, Sequence

from cometmq.client.message import MessageQueue

__all__ = [
    "REBALANCE_INTERVAL_S",
    "STRATEGIES",
    "AllocateStrategy",
    "allocate_averagely",
    "allocate_consistent_hash",
]

AllocateStrategy = Callable[[Sequence[MessageQueue], Sequence[str], str], list[MessageQueue]]

# How often a group member recomputes its share without being told to (RocketMQ's RebalanceService).
REBALANCE_INTERVAL_S = 20.0
# RocketMQ's AllocateMessageQueueConsistentHash default.
VIRTUAL_NODES = 10


def allocate_averagely(
    queues: Sequence[MessageQueue], client_ids: Sequence[str], me: str
) -> list[MessageQueue]:
    """RocketMQ's AllocateMessageQueueAveragely: contiguous ranges of the sorted queues, the first
    ``len(queues) % len(client_ids)`` members taking one more. ``me`` not in the group → nothing."""
    all_queues = sorted(queues)
    members = sorted(client_ids)
    if me not in members or not all_queues:
        return []
    index = members.index(me)
    count, members_n = len(all_queues), len(members)
    mod = count % members_n
    if count <= members_n:
        size = 1
    elif mod > 0 and index < mod:
        size = count // members_n + 1
    else:
        size = count // members_n
    start = index * size if mod > 0 and index < mod else index * size + mod
    take = min(size, count - start)
    return all_queues[start : start + take] if take > 0 else []


def _md5_hash(key: str) -> int:
    # RocketMQ's ConsistentHashRouter.MD5Hash: the first 4 digest bytes as an unsigned big-endian int.
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def _java_queue_text(queue: MessageQueue) -> str:
    # The ring is probed with Java's MessageQueue.toString(), so the same queue lands on the same
    # member in every client language.
    return f"MessageQueue [topic={queue.topic}, brokerName={queue.broker_name}, queueId={queue.queue_id}]"


def allocate_consistent_hash(
    queues: Sequence[MessageQueue],
    client_ids: Sequence[str],
    me: str,
    virtual_nodes: int = VIRTUAL_NODES,
) -> list[MessageQueue]:
    """RocketMQ's AllocateMessageQueueConsistentHash: each member gets ``virtual_nodes`` points
    ``<client id>-<n>`` on an MD5 ring; a queue belongs to the first point at or after its own hash
    (wrapping around). Members joining or leaving move few queues, at the price of uneven shares."""
    members = sorted(client_ids)
    if me not in members or not queues or virtual_nodes <= 0:
        return []
    ring: dict[int, str] = {}
    placed: Counter[str] = Counter()
    for member in members:
        # A member listed twice (a client with two connections to the broker) gets its next points,
        # "-10" to "-19", and so twice the share, as Java's ConsistentHashRouter.addNode does.
        first = placed[member]
        placed[member] += virtual_nodes
        for replica in range(first, first + virtual_nodes):
            # A later point with the same hash replaces an earlier one, as in Java's TreeMap.put.
            ring[_md5_hash(f"{member}-{replica}")] = member
    points = sorted(ring)
    mine: list[MessageQueue] = []
    for queue in sorted(queues):
        at = bisect.bisect_left(points, _md5_hash(_java_queue_text(queue)))
        owner = ring[points[at if at < len(points) else 0]]
        if owner == me:
            mine.append(queue)
    return mine


STRATEGIES: dict[str, AllocateStrategy] = {
    "averagely": allocate_averagely,
    "consistent_hash": allocate_consistent_hash,
}
