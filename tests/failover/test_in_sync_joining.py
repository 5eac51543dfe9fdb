"""The in-sync set through a real etcd with a real HA server: the election proposes what the master's
HA server offers, and every slave that caught up ends up in the set, however close together they
caught up and however steadily the master's end moves on."""

from __future__ import annotations

import asyncio
import itertools
import sys
import uuid
from contextlib import AsyncExitStack
from pathlib import Path

from cometmq.failover import Failover, LeaderInfo
from cometmq.replication import HAServer
from cometmq.store import MessageStore
from etcd_server import EtcdServer
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replication"))
from _nodes import LEASE_TTL_S
from _stores import following, put, replication_config, serving, stores


class MasterNode:
    """A ReplicaNode that is a master store with its HA server, and is never told to follow."""

    def __init__(self, store: MessageStore, server: HAServer) -> None:
        self.store = store
        self.server = server
        self.in_sync: frozenset[int] = frozenset()
        self.offered: list[frozenset[int]] = []  # each answer to the election's asking

    @property
    def broker_id(self) -> int:
        return 1

    def replica_end(self) -> int:
        return self.store.replica_end()

    def last_epoch(self) -> int:
        epochs = self.store.epochs()
        return epochs[-1].epoch if epochs else 0

    def addresses(self) -> tuple[str, str]:
        return "127.0.0.1:1", f"127.0.0.1:{self.server.port}"

    async def become_master(self, epoch: int) -> None:
        self.store.begin_epoch(epoch)

    async def become_slave(self, leader: LeaderInfo) -> None:
        raise AssertionError(f"the only broker of the group was told to follow {leader}")

    async def stop_following(self) -> None:
        pass

    def in_sync_candidates(self) -> frozenset[int]:
        self.offered.append(self.server.in_sync_candidates())
        return self.offered[-1]

    def set_in_sync(self, members: frozenset[int]) -> None:
        self.in_sync = members
        self.server.set_in_sync(members)


async def send_steadily(store: MessageStore) -> None:
    """Store a message, let the others run, and again: the master's end moves on all the time, and no
    send waits for a slave."""
    for n in itertools.count():
        put(store, f"message {n}")
        await asyncio.sleep(0)


def test_two_slaves_catching_up_close_together_both_join_the_in_sync_set(
    tmp_path: Path, module_etcd: EtcdServer
) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "m", "s2", "s3") as (master, s2, s3):
            async with AsyncExitStack() as stack:
                server = await stack.enter_async_context(serving(master, replication_config(1)))
                node = MasterNode(master, server)
                election = Failover(
                    node, module_etcd.endpoints, f"/test-{uuid.uuid4().hex[:8]}", "C", "b", 1, LEASE_TTL_S
                )
                server.on_candidates_changed = election.in_sync_changed
                await election.start()
                stack.push_async_callback(election.stop)
                await wait_until(lambda: node.in_sync == {1}, message="broker 1 master of its group")
                stack.callback(asyncio.create_task(send_steadily(master)).cancel)
                await stack.enter_async_context(following(s2, server, replication_config(2)))
                # Slave 3 catches up while the election is proposing slave 2.
                await wait_until(lambda: frozenset({2}) in node.offered, message="slave 2 offered")
                await stack.enter_async_context(following(s3, server, replication_config(3)))
                await wait_until(
                    lambda: node.in_sync == {1, 2, 3}, message="both slaves in the in-sync set", timeout=30
                )

    asyncio.run(scenario())
