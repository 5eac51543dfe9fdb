"""The election through a real etcd, with in-process nodes recording the roles they are given: the
first master, re-election when a master's lease expires or is revoked, who may be elected (in-sync
members only, the longest log first), who founds the group and at which epoch, a broker that fails
to become master, the in-sync set swapped by revision, the fence, loops that survive unexpected
errors, and etcd partly or entirely down."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from _nodes import Group, RecordingNode, run_group

from cometmq.failover import Compare, Failover, Put, WatchEvent, lease_trusted_until
from etcd_server import EtcdServer
from waiting import wait_until


async def in_sync(group: Group, master: int, members: set[int]) -> None:
    """Makes *members* the master's caught-up slaves and waits until etcd and the master hold the set."""
    group.nodes[master].candidates = members - {master}
    group.failovers[master].in_sync_changed()
    expected = sorted(members)
    await wait_until(
        lambda: group.nodes[master].in_sync == frozenset(members), message=f"the master to commit {expected}"
    )
    assert (await group.state())["inSync"] == expected


def test_brokers_starting_together_elect_one_master_of_epoch_1(module_etcd: EtcdServer) -> None:
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
        await wait_until(group.failovers[master].lease_trusted, message="the master's lease trusted")
        assert not any(group.failovers[other].lease_trusted() for other in others)

    run_group(module_etcd.endpoints, body)


def test_the_in_sync_set_follows_the_caught_up_slaves_by_compare_and_swap(module_etcd: EtcdServer) -> None:
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

    run_group(module_etcd.endpoints, body)


def test_a_crashed_masters_lease_expires_and_an_in_sync_slave_takes_over(module_etcd: EtcdServer) -> None:
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

    run_group(module_etcd.endpoints, body)


def test_a_master_restarted_before_its_lease_expired_waits_for_it_and_is_elected_again(
    module_etcd: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(group: Group) -> None:
        await group.start((1, 100))
        await group.wait_for_master(1, 1)
        await group.start((2, 100))
        await group.wait_for_master(1, 1, followers=(2,))
        await in_sync(group, 1, {1, 2})

        await group.crash(1)
        await group.start((1, 100))  # its leader key is still there, under the lease of its first run
        # Equal ends: the lowest id leads again, in a new epoch.
        await group.wait_for_master(1, 2, followers=(2,))
        assert group.nodes[1].calls == [("stop_following",), ("master", 2)]
        message = (
            "broker 1: the leader key is this broker's from an earlier run: waiting for its lease to expire"
        )
        assert message in caplog.messages

    with caplog.at_level(logging.INFO, logger="cometmq.failover"):
        run_group(module_etcd.endpoints, body)


def test_the_in_sync_member_with_the_longest_log_is_elected(module_etcd: EtcdServer) -> None:
    async def body(group: Group) -> None:
        await group.start((1, 500))
        await group.wait_for_master(1, 1)
        await group.start((2, 300), (3, 400))
        await group.wait_for_master(1, 1, followers=(2, 3))
        await in_sync(group, 1, {1, 2, 3})

        await group.failovers.pop(1).stop()  # a clean stop revokes the lease: no waiting for it
        await group.wait_for_master(3, 2, followers=(2,))
        assert ("master", 2) not in group.nodes[2].calls

    run_group(module_etcd.endpoints, body)


def test_only_in_sync_members_are_elected_and_a_silent_one_is_waited_for_one_ttl(
    module_etcd: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(group: Group) -> None:
        await group.start((1, 100))
        await group.wait_for_master(1, 1)
        await group.start((2, 100), (3, 900))
        await group.wait_for_master(1, 1, followers=(2,))
        # Broker 4 is in sync and alive (its member key is there) but never reports for an election.
        silent_lease = await group.etcd.grant(60)
        await group.etcd.put(
            group.key_prefix + "members/4",
            json.dumps({"addr": "127.0.0.1:1", "haAddr": "127.0.0.1:2", "end": 950, "epoch": 1}).encode(),
            lease=silent_lease,
        )
        await in_sync(group, 1, {1, 2, 4})

        await group.failovers.pop(1).stop()
        await group.wait_for_master(2, 2, followers=(3,))
        assert not any(call[0] == "master" for call in group.nodes[3].calls), "the longest log is not in sync"
        assert "broker 3: not in the in-sync set; waiting for a master" in caplog.messages
        assert "broker 2: waiting for in-sync members [4] to report their ends for epoch 2" in caplog.messages
        await group.etcd.revoke(silent_lease)

    with caplog.at_level(logging.INFO, logger="cometmq.failover"):
        run_group(module_etcd.endpoints, body)


def test_a_master_whose_lease_is_revoked_is_demoted_at_once(module_etcd: EtcdServer) -> None:
    async def body(group: Group) -> None:
        await group.start((1, 100))
        await group.wait_for_master(1, 1)
        await group.start((2, 200))
        await group.wait_for_master(1, 1, followers=(2,))
        await in_sync(group, 1, {1, 2})
        await wait_until(group.failovers[1].lease_trusted, message="the master's lease trusted")

        await group.etcd.revoke(await group.leader_lease())
        await wait_until(lambda: not group.failovers[1].lease_trusted(), message="the old master's fence")
        # The slave's log is longer: it leads, and the old master follows it.
        await group.wait_for_master(2, 2, followers=(1,))
        await wait_until(group.failovers[2].lease_trusted, message="the new master's lease trusted")

    run_group(module_etcd.endpoints, body)


def test_a_master_whose_keepalives_stall_stops_trusting_its_lease_before_another_is_elected(
    module_etcd: EtcdServer,
) -> None:
    async def body(group: Group) -> None:
        await group.start((1, 100))
        await group.wait_for_master(1, 1)
        await group.start((2, 100))
        await group.wait_for_master(1, 1, followers=(2,))
        await in_sync(group, 1, {1, 2})
        await wait_until(group.failovers[1].lease_trusted, message="the master's lease trusted")
        old_master = group.failovers[1]
        trusted_when_replaced: list[bool] = []
        group.nodes[2].on_become_master = lambda: trusted_when_replaced.append(old_master.lease_trusted())

        # The master's process stalls: no renewal, no step of the election. (Were only its renewals to
        # stall, it could stand again once its lease expired, and win: its log is as long as broker 2's.)
        stalled = old_master._tasks
        for task in stalled:
            task.cancel()
        await asyncio.gather(*stalled, return_exceptions=True)
        await group.wait_for_master(2, 2)
        assert trusted_when_replaced == [False]

        await old_master.start()  # the process resumes, finds its lease gone, and follows
        await group.wait_for_master(2, 2, followers=(1,))

    run_group(module_etcd.endpoints, body)


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


def test_a_broker_that_fails_to_become_master_gives_the_key_up_and_is_made_master_of_a_later_epoch(
    module_etcd: EtcdServer,
) -> None:
    async def body(group: Group) -> None:
        failed: list[int] = []

        def fail_once() -> None:
            if not failed:
                failed.append(1)
                raise ValueError("epoch 1 does not exceed this store's last epoch 3")

        node = RecordingNode(1)
        node.on_become_master = fail_once
        group.nodes[1] = node
        group.failovers[1] = Failover(
            node, group.endpoints, group.prefix, "DefaultCluster", "broker-a", 1, group.ttl_s
        )
        await group.failovers[1].start()

        await group.wait_for_master(1, 2)
        assert failed == [1] and [call for call in node.calls if call[0] == "master"] == [("master", 2)]
        assert (await group.state())["epoch"] == 2
        await wait_until(group.failovers[1].lease_trusted, message="the master's lease trusted")

    run_group(module_etcd.endpoints, body)


def test_the_group_is_founded_at_an_epoch_past_every_members_last(module_etcd: EtcdServer) -> None:
    async def body(group: Group) -> None:
        await put_member(group, 2, end=0, last_epoch=5)
        await group.start((1, 0), log_epochs={1: 3})
        await group.wait_for_master(1, 6)
        assert await group.state() == {"epoch": 6, "leaderId": 1, "inSync": [1]}

    run_group(module_etcd.endpoints, body)


def test_an_election_is_for_an_epoch_past_every_members_last(module_etcd: EtcdServer) -> None:
    async def body(group: Group) -> None:
        await group.start((1, 100))
        await group.wait_for_master(1, 1)
        await group.start((2, 100))
        await group.wait_for_master(1, 1, followers=(2,))
        await in_sync(group, 1, {1, 2})
        group.nodes[2].log_epoch = 4  # as if etcd had been restored from a snapshot older than the logs

        await group.crash(1)
        await group.wait_for_master(2, 5)

    run_group(module_etcd.endpoints, body)


def test_the_member_present_with_the_longest_log_founds_the_group(module_etcd: EtcdServer) -> None:
    async def body(group: Group) -> None:
        # Broker 2 is present (its member key) before broker 1 starts, with the longer log.
        await put_member(group, 2, end=500, last_epoch=0)
        await group.start((1, 100))
        await wait_until(
            lambda: (
                "broker 2 has the longest log (500): waiting for it to found the group"
                in group.failovers[1]._waiting_for
            ),
            message="broker 1 to wait for broker 2",
        )
        await group.start((2, 500))
        await group.wait_for_master(2, 1, followers=(1,))
        assert group.nodes[1].calls == [("slave", 2, 1)]

    run_group(module_etcd.endpoints, body)


def test_the_lease_is_renewed_and_the_group_watched_after_an_unexpected_failure(
    module_etcd: EtcdServer,
) -> None:
    async def body(group: Group) -> None:
        await group.start((1, 100))
        await group.wait_for_master(1, 1)
        failover = group.failovers[1]
        etcd = failover._etcd
        calls = {"keepalive": 0, "watch": 0}
        keepalive, watch = etcd.keepalive, etcd.watch

        async def failing_keepalive(lease: int) -> int:
            calls["keepalive"] += 1
            if calls["keepalive"] == 1:
                raise RuntimeError("a bug in the keepalive")
            return await keepalive(lease)

        def failing_watch(key: str, *, prefix: bool = False) -> AsyncIterator[WatchEvent]:
            calls["watch"] += 1
            if calls["watch"] == 1:
                raise RuntimeError("a bug in the watch")
            return watch(key, prefix=prefix)

        etcd.keepalive = failing_keepalive  # type: ignore[method-assign]
        etcd.watch = failing_watch  # type: ignore[method-assign]
        failover._tasks[2].cancel()  # the watch starts again, with the failing one
        failover._tasks[2] = asyncio.create_task(failover._watch())
        await wait_until(lambda: calls["keepalive"] >= 3, message="renewals going on after the failure")
        await wait_until(lambda: calls["watch"] >= 2, message="the watch started again after the failure")
        await wait_until(failover.lease_trusted, message="the lease trusted")

    run_group(module_etcd.endpoints, body)


async def put_member(group: Group, broker_id: int, *, end: int, last_epoch: int) -> None:
    """A member key for *broker_id*, as a broker that registered and is not yet running the election
    would have left it, under a lease of the test's."""
    lease = await group.etcd.grant(30)
    value = {"addr": "127.0.0.1:1", "haAddr": "127.0.0.1:2", "end": end, "epoch": 0, "lastEpoch": last_epoch}
    await group.etcd.put(f"{group.key_prefix}members/{broker_id}", json.dumps(value).encode(), lease=lease)
