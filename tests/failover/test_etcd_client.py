"""EtcdClient against a real etcd: leases, compare-and-swap transactions, prefixes, watches, and moving
on to another member when one does not answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from cometmq.failover import Compare, Delete, EtcdClient, EtcdUnavailable, EventType, Put, WatchEvent
from etcd_server import EtcdServer
from processes import free_port
from waiting import wait_until


def with_client(endpoints: list[str], body: Callable[[EtcdClient], Awaitable[None]]) -> None:
    async def run() -> None:
        client = EtcdClient(endpoints, timeout_s=2)
        try:
            await body(client)
        finally:
            await client.close()

    asyncio.run(run())


def test_a_lease_holds_its_keys_until_revoked(module_etcd: EtcdServer) -> None:
    async def body(client: EtcdClient) -> None:
        lease = await client.grant(10)
        assert await client.keepalive(lease) == 10
        await client.put("/t/leased", b"v", lease=lease)
        stored = await client.get("/t/leased")
        assert stored is not None and stored.value == b"v" and stored.lease == lease

        await client.revoke(lease)
        assert await client.get("/t/leased") is None
        assert await client.keepalive(lease) == 0, "a revoked lease renews to nothing"
        await client.revoke(lease)  # revoking twice is no error

    with_client(module_etcd.endpoints, body)


def test_a_transaction_runs_one_branch_by_its_comparisons(module_etcd: EtcdServer) -> None:
    async def body(client: EtcdClient) -> None:
        assert await client.txn([Compare.absent("/t/k")], [Put("/t/k", b"first")], [])
        assert not await client.txn(
            [Compare.absent("/t/k")], [Put("/t/k", b"second")], [Put("/t/lost", b"1")]
        )
        first = await client.get("/t/k")
        assert first is not None and first.value == b"first"
        assert await client.get("/t/lost") is not None, "the failure branch ran"

        stale = first.mod_revision
        assert await client.txn([Compare.mod_revision("/t/k", stale)], [Put("/t/k", b"swapped")], [])
        assert not await client.txn([Compare.mod_revision("/t/k", stale)], [Put("/t/k", b"late")], [])
        swapped = await client.get("/t/k")
        assert swapped is not None and swapped.value == b"swapped"
        assert swapped.create_revision == first.create_revision

        assert await client.txn([], [Delete("/t/k")], [])
        assert await client.get("/t/k") is None

    with_client(module_etcd.endpoints, body)


def test_a_prefix_reads_only_its_keys_in_order(module_etcd: EtcdServer) -> None:
    async def body(client: EtcdClient) -> None:
        for key in ("/t/g/b", "/t/g/a", "/t/g0", "/t/h"):
            await client.put(key, key.encode())
        kvs, revision = await client.get_prefix("/t/g/")
        assert [kv.key for kv in kvs] == ["/t/g/a", "/t/g/b"]
        assert revision >= max(kv.mod_revision for kv in kvs)

    with_client(module_etcd.endpoints, body)


def test_a_watch_reports_puts_and_deletes_under_its_prefix(module_etcd: EtcdServer) -> None:
    async def body(client: EtcdClient) -> None:
        events: list[WatchEvent] = []

        async def watch() -> None:
            async for event in client.watch("/t/w/", prefix=True):
                events.append(event)

        def not_probes() -> list[WatchEvent]:
            # Probes may still arrive after the first is seen (a slow watch sees several).
            return [e for e in events if e.kv.key != "/t/w/probe"]

        async def probe() -> bool:
            await client.put("/t/w/probe", b"")
            return bool(events)

        task = asyncio.create_task(watch())
        try:
            # The watch has started once a put made after it shows up.
            await wait_until(probe, message="the watch to see a probe", interval=0.1)
            await client.put("/t/other", b"x")
            await client.put("/t/w/a", b"1")
            await client.txn([], [Delete("/t/w/a")], [])
            await wait_until(lambda: len(not_probes()) >= 2, message="a put and a delete")
        finally:
            task.cancel()
        seen = not_probes()
        assert [(e.type, e.kv.key) for e in seen] == [
            (EventType.PUT, "/t/w/a"),
            (EventType.DELETE, "/t/w/a"),
        ]
        assert seen[0].kv.value == b"1"

    with_client(module_etcd.endpoints, body)


def test_no_endpoint_answering_is_etcd_unavailable() -> None:
    async def body(client: EtcdClient) -> None:
        with pytest.raises(EtcdUnavailable):
            await client.get("/t/k")

    with_client([f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"], body)


def test_the_client_moves_on_to_a_member_that_answers_and_a_cluster_without_quorum_is_unavailable(
    tmp_path: Path,
) -> None:
    cluster = EtcdServer(tmp_path / "etcd", members=3)
    cluster.start()

    async def body(client: EtcdClient) -> None:
        await client.put("/t/k", b"v")
        lease = await client.grant(30)
        cluster.kill_member(0)

        async def read_from_a_member_left() -> bool:
            # While the members left elect a leader of their own (if the killed one led), each answers
            # "leader changed" or "no leader": unavailable for that moment, not a wrong answer.
            try:
                stored = await client.get("/t/k")
            except EtcdUnavailable:
                return False
            assert stored is not None and stored.value == b"v"
            return True

        await wait_until(read_from_a_member_left, message="a member left to answer")
        await client.put("/t/k2", b"w")
        assert await client.keepalive(lease) > 0

        cluster.kill_member(1)  # the one member left has no quorum

        async def renewal_refused() -> bool:
            # A leader renews leases by itself: it answers until it notices it lost its quorum and steps
            # down (within etcd's election timeout).
            try:
                await client.keepalive(lease)
            except EtcdUnavailable:
                return True
            return False

        await wait_until(renewal_refused, message="the member without quorum refuses a renewal")
        with pytest.raises(EtcdUnavailable):
            await client.get("/t/k")

    try:
        with_client(cluster.endpoints, body)
    finally:
        cluster.stop()
