"""etcd itself failing under a failover group of three brokers, each in its own process: one member of
a three-member etcd cluster killed changes nothing for clients; etcd entirely down leaves the group
serving with the master it has, no election, and the brokers' logs saying so."""

from __future__ import annotations

import re
import time
from pathlib import Path

from _group import TEST_LEASE_TTL_S, FailoverGroup, RecordingProducer, acknowledged_missing, run

from etcd_server import EtcdServer
from waiting import wait_until

# The one WARNING a broker logs when etcd stops answering, and the one INFO when it is back.
ETCD_UNREACHABLE = re.compile(
    r"WARNING.*etcd.*(unreachable|not reachable|cannot reach|does not answer)", re.IGNORECASE
)
ETCD_BACK = re.compile(r"INFO.*etcd.*(reachable again|back|answers again)", re.I)


async def acknowledged_after(producer: RecordingProducer, moment: float) -> None:
    """Until *producer* has a send acknowledged after *moment* (monotonic)."""
    await wait_until(
        lambda: producer.log.acknowledged_at and producer.log.acknowledged_at[-1] > moment,
        message=f"a send acknowledged later than the lease ({dict(producer.log.outcomes)})",
        timeout=60,
    )


async def epoch_of(group: FailoverGroup, broker_id: int) -> int:
    status = await group.ha_status(group.broker(broker_id))
    assert status is not None
    return status.epoch


def test_one_member_of_a_three_member_etcd_killed_changes_nothing_for_clients(tmp_path: Path) -> None:
    etcd = EtcdServer(tmp_path / "etcd", members=3)
    etcd.start()

    async def scenario() -> None:
        group = FailoverGroup(tmp_path / "group", etcd.endpoints).start()
        try:
            master = await group.create_topic()
            await group.wait_in_sync(master, 3)
            epoch = await epoch_of(group, master.broker_id)
            producer = await RecordingProducer(group, 0).start()
            await producer.wait_acknowledged(20)
            killed_at = time.monotonic()
            etcd.kill_member(0)  # the first endpoint every broker tries
            # Sends acknowledged after the lease the master held at the kill would have lapsed: it
            # renewed it through another member.
            await acknowledged_after(producer, killed_at + TEST_LEASE_TTL_S)
            assert await group.master() is master
            assert await epoch_of(group, master.broker_id) == epoch
            log = await producer.stop()
            assert set(log.outcomes) == {"SEND_OK"}, log.outcomes
            assert acknowledged_missing(log.acknowledged, await group.stored(master)) == []
        finally:
            await group.aclose()

    try:
        run(scenario())
    finally:
        etcd.stop()


def test_with_etcd_entirely_down_the_master_keeps_serving_no_election_happens_and_the_logs_say_so(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    async def scenario() -> None:
        group = FailoverGroup(tmp_path / "group", etcd.endpoints).start()
        try:
            master = await group.create_topic()
            await group.wait_in_sync(master, 3)
            epoch = await epoch_of(group, master.broker_id)
            producer = await RecordingProducer(group, 0).start()
            await producer.wait_acknowledged(20)

            stopped_at = time.monotonic()
            etcd.stop()
            await wait_until(
                lambda: all(ETCD_UNREACHABLE.search(b.log()) for b in group.brokers),
                message="every broker to log that etcd is unreachable",
                timeout=60,
            )
            # The master serves past its lease: every other in-sync member acknowledges each send.
            await acknowledged_after(producer, stopped_at + TEST_LEASE_TTL_S)
            assert await group.master() is master
            assert await epoch_of(group, master.broker_id) == epoch
            for broker in group.brokers:
                assert len(ETCD_UNREACHABLE.findall(broker.log())) == 1, broker.log()  # once, not per retry

            etcd.start()
            await wait_until(
                lambda: all(ETCD_BACK.search(b.log()) for b in group.brokers),
                message="every broker to log that etcd is back",
                timeout=60,
            )
            await producer.wait_acknowledged(20)
            assert await group.master() is master
            log = await producer.stop()
            assert acknowledged_missing(log.acknowledged, await group.stored(master)) == []
        finally:
            await group.aclose()

    run(scenario())
