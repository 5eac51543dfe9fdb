"""Inner-batch topics beside ordinary ones and the peers' figures: batched produce and consume from the
start, each round on a fresh default standalone, the ordinary and the inner-batch workload alternating.

    .venv/bin/python bench/inner_batch.py [--rounds 3] [--count 200000] [--peer-w1 N --peer-w2 N]

Each round starts `cometmq standalone` on a new data directory (ports the OS picks) and runs, in this
order, `cometmq bench produce` to an ordinary topic, `cometmq bench produce --inner-batch`, then
`cometmq bench consume` of each (1 KiB bodies, batches of 100, 8 in flight, as `cometmq bench`'s
defaults). Prints the median msg/s of each workload over the rounds with its range, the ratio of the
inner-batch figure to the ordinary one (same round, same machine), and the ratio of each to the best
peer's W1 (produce) or W2 (consume) given with --peer-w1/--peer-w2: peerbench's figures from the same
sitting (`/work/shared/tools/peerbench/run.sh`), or, by default, those recorded in docs/performance.md.

Then the client's and the broker's CPU per message, in process, which the machine's load disturbs far
less than throughput: the consumer's decode of a pull body (`decode_pulled`) of ordinary records and of
inner batches, and the broker's pull (`get_messages` and the answer's encoding) of each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from cometmq.client.message import decode_pulled
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.protocol.record import INNER_BATCH_FLAG, NEED_UNWRAP_FLAG, encode_host
from cometmq.store import MessageStore, MessageToStore, StoreConfig
from processes import cpu_seconds, start_standalone

# The best peers' figures as docs/performance.md records them (RabbitMQ Streams' W1, Redis's W2).
RECORDED_W1 = 354_517
RECORDED_W2 = 515_344
_ALL = 64 << 20  # max_bytes of the in-process pulls: every message of the queue in one answer
WORKLOADS = (
    ("produce", ("produce",)),
    ("produce --inner-batch", ("produce", "--inner-batch")),
    ("consume", ("consume",)),
    ("consume --inner-batch", ("consume", "--inner-batch")),
)


Figures = dict[str, list[tuple[int, float]]]


def _bench(namesrv: str, broker_pid: int, args: tuple[str, ...], count: int) -> tuple[int, float]:
    """msg/s of one `cometmq bench` workload, and the CPU µs per message of the standalone process (name
    server and broker) meanwhile. (The client's is not comparable: its start-up and the making of its
    messages, outside the timed part, weigh on it.)"""
    command = [
        sys.executable,
        "-m",
        "cometmq",
        "bench",
        *args,
        "--count",
        str(count),
        "-n",
        namesrv,
        "--json",
    ]
    broker_before = cpu_seconds(broker_pid)
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=True)
    broker_us = (cpu_seconds(broker_pid) - broker_before) / count * 1e6
    (row,) = json.loads(done.stdout)["rows"]
    return int(row["msg_per_s"]), broker_us


def throughput(rounds: int, count: int) -> Figures:
    figures: Figures = {name: [] for name, _ in WORKLOADS}
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            server, namesrv = start_standalone(Path(tmp) / "data")
            try:
                for name, args in WORKLOADS:
                    figures[name].append(_bench(namesrv, server.proc.pid, args, count))
            finally:
                server.terminate()
    return figures


def _cpu_us(action: object, repeat: int, messages: int) -> float:
    """Median CPU µs per message of ``action()`` over a few runs of *repeat* calls."""
    runs = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(repeat):
            action()  # type: ignore[operator]
        runs.append((time.process_time() - start) / (repeat * messages) * 1e6)
    return statistics.median(runs)


def cpu_per_message(batch: int, size: int) -> list[tuple[str, float, float]]:
    """(what, ordinary µs, inner-batch µs) per message: the consumer's decode and the broker's pull."""
    host = encode_host("127.0.0.1", 10911)
    bodies = [os.urandom(size) for _ in range(16)]
    with tempfile.TemporaryDirectory() as tmp:
        store = MessageStore(StoreConfig(Path(tmp)))
        store.start()
        try:
            store.declare_batch_topic("Inner")
            for start in range(0, 20 * batch, batch):
                store.put_batch(
                    [
                        MessageToStore(
                            "Plain", 0, 0, bodies[i % 16], f"UNIQ_KEY\x01ID{start + i}", 0, 1, host, host
                        )
                        for i in range(batch)
                    ]
                )
                entries = [BatchEntry(0, bodies[i % 16], f"UNIQ_KEY\x01ID{start + i}") for i in range(batch)]
                inner = MessageToStore(
                    "Inner",
                    0,
                    0,
                    encode_batch_body(entries),
                    f"INNER_NUM\x01{batch}",
                    INNER_BATCH_FLAG | NEED_UNWRAP_FLAG,
                    1,
                    host,
                    host,
                )
                store.put_inner_batch(inner, batch)
            rows = []
            pulled = {}
            for topic in ("Plain", "Inner"):
                result = store.get_messages(topic, 0, 0, 4096, max_bytes=_ALL)
                assert result.message_count == 20 * batch
                pulled[topic] = b"".join(result.buffers)
            rows.append(
                (
                    "broker: get_messages of 2 000 messages",
                    _cpu_us(lambda: store.get_messages("Plain", 0, 0, 4096, max_bytes=_ALL), 50, 20 * batch),
                    _cpu_us(lambda: store.get_messages("Inner", 0, 0, 4096, max_bytes=_ALL), 50, 20 * batch),
                )
            )
            rows.append(
                (
                    "client: decode_pulled of the answer",
                    _cpu_us(lambda: decode_pulled(pulled["Plain"], "b"), 20, 20 * batch),
                    _cpu_us(lambda: decode_pulled(pulled["Inner"], "b"), 20, 20 * batch),
                )
            )
            return rows
        finally:
            store.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each on a fresh standalone (3)")
    parser.add_argument("--count", type=int, default=200_000, help="messages per workload (200000)")
    parser.add_argument("--peer-w1", type=int, default=RECORDED_W1, help="best peer's W1 msg/s (recorded)")
    parser.add_argument("--peer-w2", type=int, default=RECORDED_W2, help="best peer's W2 msg/s (recorded)")
    parser.add_argument("--no-throughput", action="store_true", help="only the CPU per message")
    args = parser.parse_args()
    if not args.no_throughput:
        figures = throughput(args.rounds, args.count)
        medians = {name: statistics.median(rate for rate, _ in values) for name, values in figures.items()}
        print(f"medians of {args.rounds} round(s) of {args.count} messages (msg/s range: min-max)")
        print(
            f"{'workload':<24} {'msg/s':>10} {'range':>21} {'vs ordinary':>12} {'vs best peer':>13}"
            f" {'broker CPU µs/msg':>18}"
        )
        for name, values in figures.items():
            peer = args.peer_w1 if name.startswith("produce") else args.peer_w2
            ordinary = medians[name.split(" ")[0]]
            rates = [rate for rate, _ in values]
            broker_us = statistics.median(b for _, b in values)
            print(
                f"{name:<24} {medians[name]:>10,.0f} {min(rates):>10,}-{max(rates):<10,}"
                f" {medians[name] / ordinary:>11.2f}x {medians[name] / peer:>12.2f}x"
                f" {broker_us:>18.2f}"
            )
        print(f"best peer: W1 {args.peer_w1:,} msg/s, W2 {args.peer_w2:,} msg/s")
    print()
    print("CPU µs per message (1 KiB bodies, batches of 100)")
    print(f"{'what':<40} {'ordinary':>9} {'inner batch':>12} {'ratio':>7}")
    for what, ordinary_us, inner_us in cpu_per_message(100, 1024):
        print(f"{what:<40} {ordinary_us:>9.2f} {inner_us:>12.2f} {ordinary_us / inner_us:>6.2f}x")


if __name__ == "__main__":
    main()
