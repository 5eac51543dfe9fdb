"""A group of three brokers (SYNC_MASTER, failover through a real etcd), each in its own process, loses
its master: killed with SIGKILL, paused with SIGSTOP past its lease, or over and over while producers
and a consumer group run. No acknowledged message may be lost; none may be acknowledged by a master
that was deposed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from _group import (
    Broker,
    ConsumerGroup,
    FailoverGroup,
    RecordingProducer,
    acknowledged_missing,
    duplicates,
    out_of_order,
    run,
    send_to_queue_0,
)

from cometmq.protocol import ResponseCode
from cometmq.remoting import RemotingClient
from etcd_server import EtcdServer
from waiting import wait_until

# bench/failover.py runs 20 failovers in a row; the suite runs a few (COMETMQ_FAILOVER_ROUNDS for more).
ROUNDS = int(os.environ.get("COMETMQ_FAILOVER_ROUNDS", "2"))


async def same_messages(group: FailoverGroup, replica: Broker, master: Broker) -> bool:
    return await group.stored(replica) == await group.stored(master)


def test_kill_9_the_master_elects_a_slave_that_holds_every_acknowledged_message_and_the_old_master_rejoins(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    async def scenario() -> None:
        group = FailoverGroup(tmp_path / "group", etcd.endpoints).start()
        try:
            old = await group.create_topic()
            await group.wait_in_sync(old, 3)
            producers = [await RecordingProducer(group, n).start() for n in range(2)]
            for producer in producers:
                await producer.wait_acknowledged(30)
            old.kill9()
            new = await group.master(other_than=old)
            for producer in producers:
                await producer.wait_acknowledged(30)  # through the new master
            logs = [await producer.stop() for producer in producers]
            acknowledged = [body for log in logs for body in log.acknowledged]

            stored = await group.stored(new)
            assert acknowledged_missing(acknowledged, stored) == [], group.logs()
            assert out_of_order(stored) == []
            print(
                f"duplicates stored: {duplicates(stored)}; outcomes: {[dict(log.outcomes) for log in logs]}"
            )

            # The old master comes back as a slave of the new one, its tail that no one acknowledged cut.
            old.start()
            await group.wait_in_sync(new, 3)
            status = await group.ha_status(old)
            assert status is not None and not status.master
            await wait_until(
                lambda: same_messages(group, old, new),
                message="the old master to hold the new one's messages",
            )
        finally:
            await group.aclose()

    run(scenario())


def test_a_master_paused_past_its_lease_is_replaced_and_acknowledges_nothing_when_it_resumes(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    async def scenario() -> None:
        group = FailoverGroup(tmp_path / "group", etcd.endpoints).start()
        kept = RemotingClient()  # a client that keeps its connection to the paused master
        try:
            paused = await group.create_topic()
            await group.wait_in_sync(paused, 3)
            first = await kept.invoke(paused.addr, send_to_queue_0(b"before the pause"), timeout=30)
            assert first.code == ResponseCode.SUCCESS, first.remark

            paused.pause()
            # Written while the process is stopped: the broker reads it when it resumes.
            pending = asyncio.ensure_future(
                kept.invoke(paused.addr, send_to_queue_0(b"during the pause"), timeout=120)
            )
            new = await group.master(other_than=paused)
            producer = await RecordingProducer(group, 0).start()
            await producer.wait_acknowledged(20)

            paused.resume()
            answered = await pending
            assert answered.code != ResponseCode.SUCCESS, "a deposed master acknowledged a send"
            after = await kept.invoke(paused.addr, send_to_queue_0(b"after the pause"), timeout=60)
            assert after.code != ResponseCode.SUCCESS, "a deposed master acknowledged a send"

            log = await producer.stop()
            stored = await group.stored(new)
            assert acknowledged_missing(log.acknowledged, stored) == [], group.logs()
            assert b"before the pause" in [body for bodies in stored.values() for body in bodies]

            async def follows() -> bool:
                status = await group.ha_status(paused)
                return status is not None and not status.master

            await wait_until(follows, message="the deposed master to follow the new one", timeout=60)
        finally:
            await kept.close()
            await group.aclose()

    run(scenario())


def test_failovers_in_a_row_with_producers_and_a_consumer_group_lose_no_acknowledged_message(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    async def scenario() -> None:
        group = FailoverGroup(tmp_path / "group", etcd.endpoints).start()
        consumer = ConsumerGroup(group)
        try:
            master = await group.create_topic()
            await group.wait_in_sync(master, 3)
            await consumer.start()
            producers = [await RecordingProducer(group, n).start() for n in range(2)]
            for _ in range(ROUNDS):
                for producer in producers:
                    await producer.wait_acknowledged(20)
                master.kill9()
                dead, master = master, await group.master(other_than=master)
                for producer in producers:
                    await producer.wait_acknowledged(20)
                dead.start()  # back as a slave; in sync again before the next round
                await group.wait_in_sync(master, 3)
            logs = [await producer.stop() for producer in producers]
            acknowledged = [body for log in logs for body in log.acknowledged]

            stored = await group.stored(master)
            assert acknowledged_missing(acknowledged, stored) == [], group.logs()
            assert out_of_order(stored) == []
            await consumer.wait_received(acknowledged)
            print(
                f"{ROUNDS} failovers, {len(acknowledged)} messages acknowledged; duplicates stored: "
                f"{duplicates(stored)}, delivered twice or more: {consumer.duplicates()}"
            )
        finally:
            await consumer.close()
            await group.aclose()

    run(scenario())
