"""In-process replica nodes for the election tests: each records the roles its Failover gives it, with
a commit-log end and in-sync candidates the test sets. No broker, a real etcd."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable

from cometmq.failover import EtcdClient, Failover, LeaderInfo
from waiting import wait_until

# Short enough for quick tests, long enough that a loaded machine does not let a live lease lapse.
LEASE_TTL_S = 3


class RecordingNode:
    """A ReplicaNode that only records what it is told."""

    def __init__(self, broker_id: int, end: int = 0) -> None:
        self._broker_id = broker_id
        self.end = end
        self.candidates: set[int] = set()
        self.in_sync: frozenset[int] = frozenset()
        self.role = "none"
        self.epoch = 0
        # The last epoch of the node's log: the one it led or followed last, or what a test sets.
        self.log_epoch = 0
        self.leader: LeaderInfo | None = None
        self.calls: list[tuple[object, ...]] = []
        self.on_become_master: Callable[[], None] | None = None

    @property
    def broker_id(self) -> int:
        return self._broker_id

    def replica_end(self) -> int:
        return self.end

    def last_epoch(self) -> int:
        return self.log_epoch

    def addresses(self) -> tuple[str, str]:
        return f"127.0.0.1:{30000 + self._broker_id}", f"127.0.0.1:{40000 + self._broker_id}"

    async def become_master(self, epoch: int) -> None:
        if self.on_become_master is not None:
            self.on_become_master()
        self.role, self.epoch, self.leader, self.log_epoch = "master", epoch, None, epoch
        self.calls.append(("master", epoch))

    async def become_slave(self, leader: LeaderInfo) -> None:
        self.role, self.epoch, self.leader, self.log_epoch = "slave", leader.epoch, leader, leader.epoch
        self.calls.append(("slave", leader.broker_id, leader.epoch))

    async def stop_following(self) -> None:
        self.calls.append(("stop_following",))

    def in_sync_candidates(self) -> frozenset[int]:
        return frozenset(self.candidates)

    def set_in_sync(self, members: frozenset[int]) -> None:
        self.in_sync = members


class Group:
    """Brokers of one broker group, each a RecordingNode with its Failover, on a prefix of its own."""

    def __init__(self, endpoints: list[str], ttl_s: int = LEASE_TTL_S) -> None:
        self.endpoints = endpoints
        self.prefix = f"/test-{uuid.uuid4().hex[:8]}"
        self.ttl_s = ttl_s
        self.nodes: dict[int, RecordingNode] = {}
        self.failovers: dict[int, Failover] = {}
        self.etcd = EtcdClient(endpoints)

    @property
    def key_prefix(self) -> str:
        return f"{self.prefix}/DefaultCluster/broker-a/"

    async def start(self, *ends: tuple[int, int], log_epochs: dict[int, int] | None = None) -> None:
        """Starts a broker for each (brokerId, end), all at once, each with the last epoch of its log
        *log_epochs* gives (0 by default)."""
        for broker_id, end in ends:
            node = RecordingNode(broker_id, end)
            node.log_epoch = (log_epochs or {}).get(broker_id, 0)
            self.nodes[broker_id] = node
            self.failovers[broker_id] = Failover(
                node, self.endpoints, self.prefix, "DefaultCluster", "broker-a", broker_id, self.ttl_s
            )
        await asyncio.gather(*(self.failovers[broker_id].start() for broker_id, _ in ends))

    async def stop(self) -> None:
        for failover in self.failovers.values():
            await failover.stop()
        self.failovers.clear()
        await self.etcd.close()

    async def crash(self, broker_id: int) -> None:
        """Ends a broker's Failover as a kill would: no revoke, its lease is left to expire."""
        failover = self.failovers.pop(broker_id)
        tasks = failover._tasks
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await failover._etcd.close()

    def masters(self) -> list[int]:
        return [broker_id for broker_id, node in self.nodes.items() if node.role == "master"]

    async def state(self) -> dict[str, object]:
        kv = await self.etcd.get(self.key_prefix + "state")
        assert kv is not None
        state: dict[str, object] = json.loads(kv.value)
        return state

    async def leader_lease(self) -> int:
        kv = await self.etcd.get(self.key_prefix + "leader")
        assert kv is not None
        return kv.lease

    def follows(self, follower: int, broker_id: int, epoch: int) -> bool:
        node = self.nodes[follower]
        return (
            node.role == "slave"
            and node.leader is not None
            and (node.leader.broker_id, node.epoch)
            == (
                broker_id,
                epoch,
            )
        )

    async def wait_for_master(self, broker_id: int, epoch: int, followers: tuple[int, ...] = ()) -> None:
        """Until *broker_id* is master of *epoch* and each of *followers* follows it."""

        def settled() -> bool:
            master = self.nodes[broker_id]
            return (master.role, master.epoch) == ("master", epoch) and all(
                self.follows(f, broker_id, epoch) for f in followers
            )

        await wait_until(
            settled, message=f"broker {broker_id} master of epoch {epoch}, {list(followers)} following"
        )


def run_group(endpoints: list[str], body: Callable[[Group], Awaitable[None]]) -> None:
    async def run() -> None:
        group = Group(endpoints)
        try:
            await body(group)
        finally:
            await group.stop()

    asyncio.run(run())
