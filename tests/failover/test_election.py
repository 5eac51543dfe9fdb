"""The election through a real etcd, with in-process nodes recording the roles they are given: the
first master, re-election when a master's lease expires or is revoked, who may be elected (in-sync
members only, the longest log first), the in-sync set swapped by revision, the fence, and etcd
partly or entirely down."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from _nodes import Group, run_group

from cometmq.failover import Compare, Put, lease_trusted_until
from etcd_server import EtcdServer
from waiting import wait_until


@pytest.fixture(scope="module")
def shared_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One etcd for the tests that leave it running: each group has a key prefix of its own."""
    server = EtcdServer(tmp_path_factory.mktemp("etcd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def in_sync(group: Group, master: int, members: set[int]) -> None:
    """Makes *members* the master's caught-up slaves and waits until etcd and the master hold the set."""
    group.nodes[master].candidates = members - {master}
    group.failovers[master].in_sync_changed()
    expected = sorted(members)
    await wait_until(
        lambda: group.nodes[master].in_sync == frozenset(members), message=f"the master to commit {expected}"
    )
    assert (await group.state())["inSync"] == expected


def test_brokers_starting_together_elect_one_master_of_epoch_1(shared_etcd: EtcdServer) -> None:
    async def body(group: Group) -> None:
        await group.start((1, 0), (2, 0), (3, 0))
        await wait_until(lambda: len(group.masters()) == 1, message="one master")
        [master] = group.masters()
        others = tuple(b for b in (1, 2, 3) if b != master)
        await group.wait_for_master(master, 1, followers=others)

        assert group.nodes[master].calls == [("master", 1)]
        assert group.nodes[master].in_sync == {master}
        for other in others:
            assert group.nodes[other].calls == [("slave", master, 1)]
            leader = group.nodes[other].leader
            assert leader is not None and leader.ha_addr == group.nodes[master].addresses()[1]
        assert await group.state() == {"epoch": 1, "leaderId": master, "inSync": [master]}
        assert all(f.status().leader_id == master and f.status().epoch == 1 for f in group.failovers.values())
        assert group.failovers[master].lease_trusted()
        assert not any(group.failovers[other].lease_trusted() for other in others)

    run_group(shared_etcd.endpoints, body)


def test_the_in_sync_set_follows_the_caught_up_slaves_by_compare_and_swap(shared_etcd: EtcdServer) -> None:
    async def body(group: Group) -> None:
        await group.start((1, 0))
        await group.wait_for_master(1, 1)
        await group.start((2, 0), (3, 0))
        await group.wait_for_master(1, 1, followers=(2, 3))

        await in_sync(group, 1, {1, 2, 3})
        status = group.failovers[2].status()
        assert status.in_sync == {1, 2, 3}

        # Another writer keeps swapping the state for itself (same content, a new revision each time):
        # the master's swaps that read an older revision fail, and it tries again on what it reads.
        state_key = group.key_prefix + "state"
        stop = asyncio.Event()
        rewrites = 0

        async def interfere() -> None:
            nonlocal rewrites
            while not stop.is_set():
                kv = await group.etcd.get(state_key)
                assert kv is not None
                if await group.etcd.txn(
                    [Compare.mod_revision(state_key, kv.mod_revision)], [Put(state_key, kv.value)], []
                ):
                    rewrites += 1

        interfering = asyncio.create_task(interfere())
        try:
            await in_sync(group, 1, {1, 3})
        finally:
            stop.set()
            await interfering
        assert rewrites > 0
        assert (await group.state())["epoch"] == 1
        await in_sync(group, 1, {1})

    run_group(shared_etcd.endpoints, body)


def test_a_crashed_masters_lease_expires_and_an_in_sync_slave_takes_over(shared_etcd: EtcdServer) -> None:
    async def body(group: Group) -> None:
        await group.start((1, 100))
        await group.wait_for_master(1, 1)
        await group.start((2, 100), (3, 100))
        await group.wait_for_master(1, 1, followers=(2, 3))
        await in_sync(group, 1, {1, 2, 3})

        await group.crash(1)
        # Equal ends: the lowest id leads.
        await group.wait_for_master(2, 2, followers=(3,))
        assert group.nodes[2].calls[-2:] == [("stop_following",), ("master", 2)]
        assert ("stop_following",) in group.nodes[3].calls
        assert await group.state() == {"epoch": 2, "leaderId": 2, "inSync": [2]}

    run_group(shared_etcd.endpoints, body)


def test_the_in_sync_member_with_the_longest_log_is_elected(shared_etcd: EtcdServer) -> None:
    async def body(group: Group) -> None:
        await group.start((1, 500))
        await group.wait_for_master(1, 1)
        await group.start((2, 300), (3, 400))
        await group.wait_for_master(1, 1, followers=(2, 3))
        await in_sync(group, 1, {1, 2, 3})

        await group.failovers.pop(1).stop()  # a clean stop revokes the lease: no waiting for it
        await group.wait_for_master(3, 2, followers=(2,))
        assert ("master", 2) not in group.nodes[2].calls

    run_group(shared_etcd.endpoints, body)


def test_a_member_outside_the_in_sync_set_is_never_elected(
    shared_etcd: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(group: Group) -> None:
        await group.start((1, 100))
        await group.wait_for_master(1, 1)
        await group.start((2, 100), (3, 900))
        await group.wait_for_master(1, 1, followers=(2, 3))
        await in_sync(group, 1, {1, 2})

        await group.failovers.pop(1).stop()
        await group.wait_for_master(2, 2, followers=(3,))
        assert not any(call[0] == "master" for call in group.nodes[3].calls), "the longer log is not in sync"
        assert "broker 3: not in the in-sync set; waiting for a master" in caplog.messages

    with caplog.at_level(logging.INFO, logger="cometmq.failover"):
        run_group(shared_etcd.endpoints, body)


def test_a_master_whose_lease_is_revoked_is_demoted_at_once(shared_etcd: EtcdServer) -> None:
    async def body(group: Group) -> None:
        await group.start((1, 100))
        await group.wait_for_master(1, 1)
        await group.start((2, 200))
        await group.wait_for_master(1, 1, followers=(2,))
        await in_sync(group, 1, {1, 2})
        assert group.failovers[1].lease_trusted()

        await group.etcd.revoke(await group.leader_lease())
        await wait_until(lambda: not group.failovers[1].lease_trusted(), message="the old master's fence")
        # The slave's log is longer: it leads, and the old master follows it.
        await group.wait_for_master(2, 2, followers=(1,))
        assert group.failovers[2].lease_trusted()

    run_group(shared_etcd.endpoints, body)


def test_a_lease_is_trusted_for_its_ttl_less_a_margin_from_when_its_keepalive_was_sent() -> None:
    assert lease_trusted_until(100.0, 5) == 104.0
    assert lease_trusted_until(100.0, 2) == 101.0, "at least a second of margin"
    assert lease_trusted_until(100.0, 30) == 124.0, "a fifth of a long TTL"


def test_with_etcd_down_roles_stay_and_each_broker_logs_it_once(
    etcd: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(group: Group) -> None:
        await group.start((1, 100))
        await group.wait_for_master(1, 1)
        await group.start((2, 100))
        await group.wait_for_master(1, 1, followers=(2,))
        await in_sync(group, 1, {1, 2})
        calls = {broker_id: list(node.calls) for broker_id, node in group.nodes.items()}

        etcd.stop_member(0)
        await wait_until(
            lambda: not any(f.status().etcd_reachable for f in group.failovers.values()),
            message="both brokers to find etcd unreachable",
        )
        # The fence: a master that cannot renew its lease stops trusting it once the margin is reached,
        # which takes several failed keepalives.
        await wait_until(
            lambda: not group.failovers[1].lease_trusted(), message="the master's lease to lapse"
        )
        assert {broker_id: node.calls for broker_id, node in group.nodes.items()} == calls, "no role changed"

        etcd.start_member(0)
        await wait_until(
            lambda: all(f.status().etcd_reachable for f in group.failovers.values()),
            message="both brokers to reach etcd again",
        )
        await wait_until(group.failovers[1].lease_trusted, message="the master's lease trusted again")
        assert {broker_id: node.calls for broker_id, node in group.nodes.items()} == calls, "no role changed"
        assert (await group.state())["epoch"] == 1

    with caplog.at_level(logging.INFO, logger="cometmq.failover"):
        run_group(etcd.endpoints, body)
    for broker_id in (1, 2):
        down = [m for m in caplog.messages if m.startswith(f"broker {broker_id}: etcd is unreachable")]
        back = [
            m
            for m in caplog.messages
            if m == f"broker {broker_id}: etcd is reachable again, the election goes on"
        ]
        assert (len(down), len(back)) == (1, 1), caplog.messages


def test_with_one_of_three_etcd_members_killed_a_master_is_still_elected(tmp_path: Path) -> None:
    cluster = EtcdServer(tmp_path / "etcd", members=3)
    cluster.start()

    async def body(group: Group) -> None:
        await group.start((1, 100))
        await group.wait_for_master(1, 1)
        await group.start((2, 100))
        await group.wait_for_master(1, 1, followers=(2,))
        await in_sync(group, 1, {1, 2})

        cluster.kill_member(0)
        await group.crash(1)
        await group.wait_for_master(2, 2)
        assert await group.state() == {"epoch": 2, "leaderId": 2, "inSync": [2]}

    try:
        run_group(cluster.endpoints, body)
    finally:
        cluster.stop()
