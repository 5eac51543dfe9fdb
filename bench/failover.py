"""How long a producer goes without SEND_OK when a broker group's master dies, in failover mode.

    .venv/bin/python bench/failover.py [--failovers 20] [--lease-ttl 5] [--producers 2] [--dir PATH] [--quick]

One broker group of three brokers (brokerId 1, 2, 3, SYNC_MASTER, default settings but for small store
files and deduplication on, so a send retried after a slow first attempt is stored once; the lease TTL
is etcdLeaseTtl's default unless --lease-ttl says otherwise), each a `cometmq broker` process, a
`cometmq namesrv` and one etcd member, data in a temp dir under --dir. --producers
CometMQ producers send one message after the other the whole time, and a consumer group reads
everything. Each round kills the master with SIGKILL and measures, as the producers see it, the time
from the kill to the first SEND_OK after it (which only the new master can give); then the killed
broker starts again, rejoins as a slave, and the next round waits until all three are in the in-sync
set.

It prints each round, then the median and the maximum over the rounds, and the acknowledged messages:
how many, how many the final master does not hold exactly once (the bench fails unless 0), and how many
it holds twice (0 with deduplication on; a retried send stored again would show here); then
that the consumer group received every acknowledged message, and how many it was given more than once.
--quick runs 2 rounds.

What the time is made of: the lease expiring (up to etcdLeaseTtl after the death), the election (the
in-sync slaves report their ends; the best takes the leader key), the new master's registration with
the name server, and the producer's next failed attempt, which looks the route up at once.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "failover")]

from _group import (  # noqa: E402
    ConsumerGroup,
    FailoverGroup,
    RecordingProducer,
    acknowledged_missing,
    duplicates,
)

from etcd_server import EtcdServer  # noqa: E402

DEFAULT_LEASE_TTL_S = 5  # etcdLeaseTtl's default


async def bench(args: argparse.Namespace, root: Path, etcd: EtcdServer) -> int:
    group = FailoverGroup(root / "group", etcd.endpoints, lease_ttl_s=args.lease_ttl).start()
    consumer = ConsumerGroup(group)
    try:
        master = await group.create_topic()
        await group.wait_in_sync(master, 3)
        await consumer.start()
        producers = [await RecordingProducer(group, n).start() for n in range(args.producers)]
        for producer in producers:
            await producer.wait_acknowledged(10)
        times: list[float] = []
        print(
            f"failover: {args.failovers} failovers of a group of 3 SYNC_MASTER brokers, etcdLeaseTtl "
            f"{args.lease_ttl} s, {args.producers} producer(s) sending one message at a time",
            flush=True,
        )
        for round_number in range(1, args.failovers + 1):
            killed_at = time.monotonic()
            master.kill9()
            dead = master
            master = await group.master(other_than=dead)
            for producer in producers:
                # A send the old master answered just before the kill may be recorded after it: only
                # sends the new master stored count.
                await producer.wait_acknowledged_by(master.addr)
            firsts = [p.log.first_acknowledged_by(master.addr) for p in producers]
            times.append(min(at for at in firsts if at is not None) - killed_at)
            print(f"  round {round_number}: {times[-1]:.2f} s ({dead.label} killed, {master.label} elected)")
            dead.start()
            await group.wait_in_sync(master, 3)
        logs = [await producer.stop() for producer in producers]
        acknowledged = [body for log in logs for body in log.acknowledged]
        stored = await group.stored(master)
        missing = acknowledged_missing(acknowledged, stored)
        print(
            f"master death to first SEND_OK: median {statistics.median(times):.2f} s, "
            f"max {max(times):.2f} s ({len(times)} failovers)"
        )
        print(
            f"acknowledged: {len(acknowledged)} messages, {len(missing)} not stored exactly once, "
            f"{duplicates(stored)} stored twice (retried after a send stored but not acknowledged)"
        )
        if missing:
            print(f"LOST or duplicated acknowledged messages: {missing[:20]}", file=sys.stderr)
            return 1
        await consumer.wait_received(acknowledged)
        print(
            f"consumer group: every acknowledged message received, {consumer.duplicates()} deliveries "
            "of a message received before"
        )
        return 0
    finally:
        await consumer.close()
        await group.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--failovers", type=int, default=20, help="rounds (20)")
    parser.add_argument(
        "--lease-ttl", type=int, default=DEFAULT_LEASE_TTL_S, help=f"etcdLeaseTtl, s ({DEFAULT_LEASE_TTL_S})"
    )
    parser.add_argument("--producers", type=int, default=2, help="producers (2)")
    parser.add_argument("--dir", type=Path, default=None, help="where the data goes (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help="2 rounds")
    args = parser.parse_args()
    if args.quick:
        args.failovers = 2
    with tempfile.TemporaryDirectory(prefix="cometmq-failover-", dir=args.dir) as tmp:
        root = Path(tmp)
        etcd = EtcdServer(root / "etcd")
        etcd.start()
        try:
            status = asyncio.run(bench(args, root, etcd))
        finally:
            etcd.stop()
    sys.exit(status)


if __name__ == "__main__":
    main()
