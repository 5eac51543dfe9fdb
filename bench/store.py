"""Append throughput of the store (`cometmq.store.MessageStore`) beside the disk's own limits.

    .venv/bin/python bench/store.py [--count 200000] [--size 1024] [--rounds 3] [--dir PATH]
                                    [--busy-poll-us 0] [--only-broker]

In one run, on one filesystem (a temp dir under --dir, default: the system temp dir):

- the disk: sequential write of 256 MiB with `dd ... conv=fdatasync`; 4 KiB append + fdatasync in a
  loop (what one synchronous write costs), the same into blocks written before (no allocation to
  commit), and 16 records written + fdatasync (one group commit of the 16 producers below) into
  blocks written before, as the commit log writes them under SYNC_FLUSH (it writes zeros ahead of
  itself), and into a new sparse file, as it would without that;
- the store, 1 KiB bodies with the properties a real client sends (UNIQ_KEY, KEYS, TAGS, ...):
  single `put`s, `put_batch`es of 32 and `put_together`s of 2 (a transaction's settlement) in a
  loop, under ASYNC_FLUSH; and 16 concurrent producers (asyncio tasks, each appending one message
  and awaiting its reply condition before the next) under ASYNC_FLUSH and SYNC_FLUSH (where the
  reply waits for the group-committed fdatasync);
- the same 16 producers through a real broker (`cometmq standalone` in its own process, each producer
  its own connection sending SEND_MESSAGE_V2 and waiting for the reply), under both flush modes: what
  a user switching flushDiskType sees.

It prints messages/s (appends returned; and with everything flushed to disk), MB/s of records
written, and the ratio to the raw disk, each the median of --rounds runs (3), each on a fresh store;
every run's flushed/s follows. A workload that stores fewer messages than it sent stops the bench.
The machine is noisy: compare the ratios of one run, not absolute figures across runs.

The last line gives the SYNC_FLUSH / ASYNC_FLUSH ratio of the 16 producers, and the most this disk
allows it to be: each producer waits for the fdatasync after its put, so a cycle is at least 16 puts
(at the ASYNC_FLUSH rate) plus one fdatasync of their 16 records.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from cometmq.protocol import ResponseCode
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import encode_host
from cometmq.remoting import RemotingClient
from cometmq.store import FlushDiskType, MessageBatch, MessageStore, MessageToStore, StoreConfig

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "broker")]

from _support import create_topic, send_request  # noqa: E402

from processes import broker_address, start_standalone  # noqa: E402

BATCH = 32
PRODUCERS = 16
BORN_HOST = encode_host("127.0.0.1", 50000)
STORE_HOST = encode_host("127.0.0.1", 10911)


def make_messages(count: int, size: int, queues: int = 8) -> list[MessageToStore]:
    body = os.urandom(size)
    msgs = []
    for i in range(count):
        uniq = f"7F00000100002A9F0000000000{i:06X}"
        props = encode_properties(
            {"UNIQ_KEY": uniq, "KEYS": f"order-{i}", "TAGS": "TagA", "CLUSTER": "DefaultCluster"}
        )
        msgs.append(
            MessageToStore(
                topic="BenchTopic",
                queue_id=i % queues,
                flag=0,
                body=body,
                properties=props,
                sys_flag=0,
                born_timestamp=1_700_000_000_000,  # one per batch on the wire; kept equal for all
                born_host=BORN_HOST,
                store_host=STORE_HOST,
                tags_code=2598919,  # java_string_hash("TagA")
                keys=f"order-{i}",
                uniq_key=uniq,
            )
        )
    return msgs


def record_bytes(msgs: list[MessageToStore]) -> int:
    return sum(91 + len(m.body) + len(m.topic) + len(m.properties.encode()) for m in msgs)


# -- the disk ----------------------------------------------------------------------------------------


def dd_write_mb_s(directory: Path, mib: int = 256) -> float:
    target = directory / "dd.bin"
    out = subprocess.run(
        ["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={mib}", "conv=fdatasync"],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    target.unlink()
    # "268435456 bytes (268 MB, 256 MiB) copied, 0.43 s, 624 MB/s"
    m = re.search(r"(\d+) bytes .* copied, ([\d.,]+) s", out)
    if m is None:
        raise SystemExit(f"cannot read dd's output: {out!r}")
    return int(m.group(1)) / float(m.group(2).replace(",", ".")) / 1e6


def write_fsync_us(
    directory: Path, size: int, blocks: Literal["appended", "new", "written"], rounds: int = 300
) -> float:
    """One write of *size* bytes + fdatasync, *rounds* times one after another, into: "appended"
    blocks (the file grows, so each sync also commits its size), "new" blocks of a sparse file (as the
    commit log would write into a new segment: each sync commits the blocks it allocated), or "written"
    blocks written and synced before (nothing to commit but the data)."""
    target = directory / "fsync.bin"
    fd = os.open(target, os.O_RDWR | os.O_CREAT, 0o644)
    block = os.urandom(size)
    try:
        if blocks == "new":
            os.ftruncate(fd, size * rounds)
        elif blocks == "written":
            os.pwrite(fd, bytes(size * rounds), 0)
            os.fsync(fd)
        start = time.perf_counter()
        for i in range(rounds):
            os.pwrite(fd, block, i * size)
            os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        target.unlink()
    return elapsed / rounds * 1e6


# -- the store ---------------------------------------------------------------------------------------


def open_store(directory: Path, name: str, mode: FlushDiskType) -> MessageStore:
    store = MessageStore(StoreConfig(directory / name, flush_disk_type=mode))
    store.start()
    return store


def timed(store: MessageStore, run: Callable[[], None]) -> tuple[float, float]:
    """Seconds to run *run*, and to run it and flush what it wrote (the disk's share counted too)."""
    start = time.perf_counter()
    run()
    appended = time.perf_counter() - start
    if not asyncio.run(store.wait_flushed(store.commitlog_max_offset)):
        raise SystemExit("flush timed out")  # else the time measured would be the timeout
    return appended, time.perf_counter() - start


def single_puts(store: MessageStore, msgs: list[MessageToStore]) -> None:
    put = store.put
    for m in msgs:
        put(m)


def make_batches(msgs: list[MessageToStore]) -> list[MessageBatch]:
    """Batches of BATCH messages of one queue each, as the broker hands a SEND_BATCH_MESSAGE over."""
    by_queue: dict[int, list[MessageToStore]] = {}
    for m in msgs:
        by_queue.setdefault(m.queue_id, []).append(m)
    batches = [MessageBatch.of(q[i : i + BATCH]) for q in by_queue.values() for i in range(0, len(q), BATCH)]
    if None in batches:
        raise SystemExit("the bench's messages do not form batches")
    return [b for b in batches if b is not None]


def batch_puts(store: MessageStore, batches: list[MessageBatch]) -> None:
    put_batch = store.put_batch
    for b in batches:
        put_batch(b)


def together_puts(store: MessageStore, msgs: list[MessageToStore]) -> None:
    """Pairs in one write each, as a transaction's settlement stores its copy and its op record."""
    put_together = store.put_together
    for i in range(0, len(msgs), 2):
        put_together(msgs[i : i + 2])


def concurrent_producers(store: MessageStore, msgs: list[MessageToStore], sync: bool) -> None:
    """PRODUCERS tasks, each sending its share one at a time: the shape of many synchronous clients."""

    async def producer(mine: list[MessageToStore]) -> None:
        for m in mine:
            res = store.put(m)
            if sync:
                if not await store.wait_flushed(res.commitlog_end_offset):
                    raise SystemExit("flush timed out")
            else:
                await asyncio.sleep(0)  # the reply is due now; let the other producers run

    async def main() -> None:
        await asyncio.gather(*(producer(msgs[i::PRODUCERS]) for i in range(PRODUCERS)))

    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=200_000, help="messages per workload")
    parser.add_argument("--sync-count", type=int, default=40_000, help="messages per SYNC_FLUSH workload")
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument(
        "--rounds", type=int, default=3, help="fresh stores per workload (3); the median is shown"
    )
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: temp dir)")
    parser.add_argument(
        "--busy-poll-us",
        type=int,
        default=0,
        metavar="US",
        help="the broker's busyPollMicros in the through-broker rows (0, as by default)",
    )
    parser.add_argument(
        "--only-broker", action="store_true", help="only the through-broker rows (and the disk's figures)"
    )
    args = parser.parse_args()

    msgs = make_messages(args.count, args.size)
    sync_msgs = msgs[: args.sync_count]
    batches = make_batches(msgs)
    sync_batches = make_batches(sync_msgs)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        disk_mb_s = dd_write_mb_s(directory)
        fsync_us = write_fsync_us(directory, 4096, "appended")
        overwrite_us = write_fsync_us(directory, 4096, "written")
        group_size = round(record_bytes(sync_msgs) / len(sync_msgs)) * PRODUCERS
        group_fsync_us = write_fsync_us(directory, group_size, "written")
        sparse_group_fsync_us = write_fsync_us(directory, group_size, "new")
        print(
            f"disk: dd sequential write {disk_mb_s:,.0f} MB/s; 4 KiB append+fdatasync {fsync_us:,.0f} µs "
            f"({1e6 / fsync_us:,.0f}/s), 4 KiB overwrite+fdatasync {overwrite_us:,.0f} µs, "
            f"{group_size / 1024:,.0f} KiB+fdatasync into blocks written before {group_fsync_us:,.0f} µs "
            f"(into a new sparse file {sparse_group_fsync_us:,.0f} µs)",
            flush=True,
        )

        workloads: list[tuple[str, FlushDiskType, list[MessageToStore], Callable[[MessageStore], None]]] = [
            ("put, 1 at a time", FlushDiskType.ASYNC_FLUSH, msgs, lambda s: single_puts(s, msgs)),
            (f"put_batch of {BATCH}", FlushDiskType.ASYNC_FLUSH, msgs, lambda s: batch_puts(s, batches)),
            ("put_together of 2", FlushDiskType.ASYNC_FLUSH, msgs, lambda s: together_puts(s, msgs)),
            (
                f"{PRODUCERS} producers",
                FlushDiskType.ASYNC_FLUSH,
                sync_msgs,
                lambda s: concurrent_producers(s, sync_msgs, sync=False),
            ),
            (
                f"{PRODUCERS} producers",
                FlushDiskType.SYNC_FLUSH,
                sync_msgs,
                lambda s: concurrent_producers(s, sync_msgs, sync=True),
            ),
            (
                f"put_batch of {BATCH}",
                FlushDiskType.SYNC_FLUSH,
                sync_msgs,
                lambda s: batches_waiting(s, sync_batches),
            ),
        ]
        print(
            f"  {'mode':<11} {'workload':<22} {'appends/s':>10} {'flushed/s':>10} {'MB/s':>6}  of disk"
            f"  flushed/s of the {args.rounds} rounds"
        )
        rates: dict[tuple[str, str], float] = {}
        for i, (name, mode, batch_msgs, run) in enumerate([] if args.only_broker else workloads):
            rounds = []
            for r in range(args.rounds):
                store = open_store(directory, f"store{i}-{r}", mode)
                try:
                    rounds.append(timed(store, lambda: run(store)))  # noqa: B023 - called at once
                    stored = sum(store.max_offset("BenchTopic", q) for q in store.queue_ids("BenchTopic"))
                    if stored != len(batch_msgs):  # a refused put would otherwise pass for a fast one
                        raise SystemExit(f"{mode.value} {name}: only {stored} of {len(batch_msgs)} stored")
                finally:
                    store.shutdown()
                    shutil.rmtree(directory / f"store{i}-{r}")
            count = len(batch_msgs)
            rates[mode.value, name] = report(
                mode.value,
                name,
                [(count / a, count / f) for a, f in rounds],
                record_bytes(batch_msgs) / count,
                disk_mb_s,
            )
        for mode in FlushDiskType:
            per_s = [
                through_broker(directory, mode, sync_msgs, r, args.busy_poll_us) for r in range(args.rounds)
            ]
            rates[mode.value, "broker"] = report(
                mode.value,
                f"{PRODUCERS} producers, broker",
                [(rate, rate) for rate in per_s],
                record_bytes(sync_msgs) / len(sync_msgs),
                disk_mb_s,
            )

    broker_ratio = rates["SYNC_FLUSH", "broker"] / rates["ASYNC_FLUSH", "broker"]
    if args.only_broker:
        print(f"\nSYNC_FLUSH / ASYNC_FLUSH, {PRODUCERS} producers: {broker_ratio:.2f} through the broker")
        return
    producers = f"{PRODUCERS} producers"
    # Each producer waits for the fdatasync after its put, so one sync covers at most PRODUCERS
    # messages; when the sync takes longer than PRODUCERS puts, each cycle is the puts, one after
    # another on the loop, then one sync of their records.
    puts_us = PRODUCERS * 1e6 / rates["ASYNC_FLUSH", producers]
    print(
        f"\nSYNC_FLUSH / ASYNC_FLUSH, {PRODUCERS} producers: "
        f"{rates['SYNC_FLUSH', producers] / rates['ASYNC_FLUSH', producers]:.2f} in the store "
        f"(at most {puts_us / (puts_us + group_fsync_us):.2f} on this disk: {PRODUCERS} puts take "
        f"{puts_us:,.0f} µs, then their {group_size / 1024:,.0f} KiB's write+fdatasync "
        f"{group_fsync_us:,.0f} µs), "
        f"{broker_ratio:.2f} through the broker"
    )
    print(f"python {sys.version.split()[0]}, {args.count:,} messages of {args.size} bytes")


def report(
    mode: str, name: str, rounds: list[tuple[float, float]], record_size: float, disk_mb_s: float
) -> float:
    """One line for a workload's rounds, each (appends/s, flushed/s): each figure's own median (of an
    even count, the slower of the middle two), then every round's flushed/s. Returns the median
    flushed/s. The two medians may come from different rounds: a round whose final flush met a slow
    disk does not pull its appends/s down with it."""
    appends = statistics.median_low(a for a, _ in rounds)
    flushed = statistics.median_low(f for _, f in rounds)
    mb_s = flushed * record_size / 1e6
    print(
        f"  {mode:<11} {name:<22} {appends:>10,.0f} {flushed:>10,.0f} {mb_s:>6,.0f}"
        f"  {mb_s / disk_mb_s:>5.2f}  " + " ".join(f"{f:,.0f}" for _, f in rounds),
        flush=True,
    )
    return flushed


def through_broker(
    directory: Path, mode: FlushDiskType, msgs: list[MessageToStore], round_: int, busy_poll_us: int
) -> float:
    """Messages/s of PRODUCERS connections to a broker process, each sending and waiting in turn."""
    conf = directory / f"broker-{mode.value}.conf"
    conf.write_text(f"flushDiskType={mode.value}\nbusyPollMicros={busy_poll_us}\n")
    server, _ = start_standalone(directory / f"broker-{mode.value}-{round_}", conf)
    addr = broker_address(server)
    share = len(msgs) // PRODUCERS

    async def producer(client: RemotingClient, index: int) -> None:
        for i in range(share):
            m = msgs[index * share + i]
            reply = await client.invoke(
                addr, send_request("BenchTopic", m.body, m.queue_id, {"KEYS": m.keys})
            )
            if reply.code != ResponseCode.SUCCESS:
                raise SystemExit(f"send failed: {reply.code} {reply.remark}")

    async def main() -> float:
        clients = [RemotingClient() for _ in range(PRODUCERS)]
        await create_topic(clients[0], addr, "BenchTopic", 8)
        for c in clients:  # connect before the clock starts
            await c.invoke(addr, send_request("BenchTopic", b"warm-up", 0))
        start = time.perf_counter()
        await asyncio.gather(*(producer(c, i) for i, c in enumerate(clients)))
        elapsed = time.perf_counter() - start
        for c in clients:
            await c.close()
        return share * PRODUCERS / elapsed

    try:
        return asyncio.run(main())
    finally:
        server.terminate()


def batches_waiting(store: MessageStore, batches: list[MessageBatch]) -> None:
    """One producer sending batches under SYNC_FLUSH, each waiting for its fsync."""

    async def main() -> None:
        for b in batches:
            if not await store.wait_flushed(store.put_batch(b).commitlog_end_offset):
                raise SystemExit("flush timed out")

    asyncio.run(main())


if __name__ == "__main__":
    main()
