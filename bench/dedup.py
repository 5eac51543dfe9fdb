"""What deduplication costs batched produce: the same load with the topic's deduplication on beside off.

    .venv/bin/python bench/dedup.py [--count 200000] [--batch 100] [--inflight 8] [--size 1024] [--rounds 3]

In one run: `cometmq standalone` (ports picked by the OS, data in a temp dir), two topics of 4 queues,
one created with `--attributes +deduplication=true` and one without; then `cometmq bench produce`
(batches of --batch, --inflight in flight, a fresh UNIQ_KEY per message, as a producer's) against
each topic in turn, --rounds times (off first, then on first, and so on). Prints each workload's
median messages/s over the rounds, and on / off: the share of throughput deduplication keeps (each
message's key looked up before the store's append, and remembered after). It stops if a topic holds
fewer or more messages than were sent.

The machine is noisy: compare the ratio of one run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from cometmq.client import AdminClient, MessageQueue

COMMAND = [sys.executable, "-m", "cometmq"]
TOPICS = {"off": "BenchDedupOff", "on": "BenchDedupOn"}


def _cometmq(*args: str) -> str:
    done = subprocess.run([*COMMAND, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"cometmq {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def _start_standalone(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    log = (data_dir.parent / "standalone.log").open("w")
    server = subprocess.Popen(
        [
            *COMMAND,
            "standalone",
            "--data-dir",
            str(data_dir),
            "--namesrv-port",
            "0",
            "--broker-port",
            "0",
            "--metrics-port",
            "0",
            "--no-dashboard",
            "--proxy-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    assert server.stdout is not None
    for line in server.stdout:
        found = re.search(r"namesrv (\S+), broker", line)
        if found is not None:
            return server, found.group(1)
    raise SystemExit(f"the standalone server exited with {server.wait()}")


async def _stored(namesrv: str, topic: str) -> int:
    """Messages *topic* holds, over its queues."""
    async with AdminClient(namesrv) as admin:
        route = await admin.topic_route(topic)
        total = 0
        for queue_data in route.queue_datas:
            for queue_id in range(queue_data.write_queue_nums):
                low, high = await admin.offset_bounds(MessageQueue(topic, queue_data.broker_name, queue_id))
                total += high - low
        return total


def produce_rates(rounds: int, count: int, batch: int, inflight: int, size: int) -> dict[str, list[int]]:
    """Messages/s of each round's batched produce into the topic with deduplication "off" and the one
    with it "on", on a standalone server of its own; stops if a topic holds fewer or more messages than
    were sent."""
    with tempfile.TemporaryDirectory(prefix="cometmq-bench-dedup-") as tmp:
        server, namesrv = _start_standalone(Path(tmp) / "data")
        try:
            _cometmq("topic", "create", TOPICS["off"], "--queues", "4", "-n", namesrv)
            _cometmq(
                "topic",
                "create",
                TOPICS["on"],
                "--queues",
                "4",
                "--attributes",
                "+deduplication=true",
                "-n",
                namesrv,
            )
            rates: dict[str, list[int]] = {"off": [], "on": []}
            for round_number in range(rounds):
                # Off first, then on first: neither gains from running second (a warmer page cache).
                modes = ["off", "on"] if round_number % 2 == 0 else ["on", "off"]
                for mode in modes:
                    topic = TOPICS[mode]
                    report = json.loads(
                        _cometmq(
                            "bench",
                            "produce",
                            "-n",
                            namesrv,
                            "--topic",
                            topic,
                            "--count",
                            str(count),
                            "--batch",
                            str(batch),
                            "--inflight",
                            str(inflight),
                            "--size",
                            str(size),
                            "--json",
                        )
                    )
                    rates[mode].append(report["rows"][0]["msg_per_s"])
            # Every run sends one message before its clock starts; each has a fresh UNIQ_KEY.
            expected = rounds * (count + 1)
            for topic in TOPICS.values():
                stored = asyncio.run(_stored(namesrv, topic))
                if stored != expected:
                    raise SystemExit(f"{topic} holds {stored} messages, not the {expected} sent")
        finally:
            server.terminate()
            server.wait()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=200_000, help="messages per workload (200000)")
    parser.add_argument("--batch", type=int, default=100, help="messages per batch (100)")
    parser.add_argument("--inflight", type=int, default=8, help="batches in flight (8)")
    parser.add_argument("--size", type=int, default=1024, help="body size (1024)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of both, alternating which runs first; medians (3)"
    )
    args = parser.parse_args()
    rates = produce_rates(args.rounds, args.count, args.batch, args.inflight, args.size)
    off, on = (statistics.median(rates[mode]) for mode in ("off", "on"))
    print(f"batched produce, batches of {args.batch}, {args.inflight} in flight, {args.size} B bodies:")
    print(f"  deduplication off: {off:,.0f} msg/s   (rounds: {rates['off']})")
    print(f"  deduplication on:  {on:,.0f} msg/s   (rounds: {rates['on']})")
    print(f"on / off: {on / off:.2f}")


if __name__ == "__main__":
    main()
