"""What the RocketMQ 5 proxy hop costs: sends and receive+ack per second with the official 5.x Python
client through CometMQ's gRPC proxy, beside CometMQ's own client straight to the broker, in one run.

    .venv/bin/python bench/proxy.py [--count 2000] [--rounds 3] [--body-size 1024] [--inflight 32]

One `cometmq standalone` (its proxy on a free port, small store files, data in a temp dir). Each round
runs every row once, on a topic of its own (8 queues), the rows in order in even rounds and in reverse
in odd ones, so a slow spell of the machine touches all alike:

- 5.x send: the official client (rocketmq-python-client, in .venv-rocketmq5, tests/rocketmq5/_driver.py's
  bench-produce) sends --count messages with ``send_async``, --inflight in flight, through the proxy;
- CometMQ send: CometMQ's ``Producer`` in this process, --inflight asyncio tasks each awaiting ``send``,
  straight to the broker (SEND_MESSAGE_V2);
- 5.x receive+ack: the official ``SimpleConsumer`` (bench-consume): ``receive(32, 30 s)`` then ``ack`` of
  each message, until --count are acked;
- CometMQ consume: CometMQ's ``PushConsumer`` (pulls, offsets committed by the client: RocketMQ 4.x's
  way), a listener that returns at once, until --count are consumed.

Each figure is the median over the rounds of msg/s (timed by the client from its first send or first
received message, without its start) and of the server's CPU time per message (user + system of the
standalone process, proxy included, over the whole row: for the 5.x rows it includes the client's start,
routes and heartbeats, a fixed cost that --count spreads). The ratios set the 5.x row against the
CometMQ row of the same kind: the 5.x client is Python too, so the msg/s ratio says what client and
proxy hop cost together; the server's CPU per message says what the proxy adds on the server.

The machine is noisy: compare the ratios of one run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cometmq.client import ConsumeResult, Message, Producer, PushConsumer
from cometmq.client.message import ReceivedMessage

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "rocketmq5")]

from client5 import Client5, client5_missing  # noqa: E402
from proxied import ProxiedStandalone, admin  # noqa: E402

from processes import TEST_BROKER_CONF, cpu_seconds  # noqa: E402

ROWS = ("5.x send", "CometMQ send", "5.x receive+ack", "CometMQ consume")
# The row a 5.x row is set against.
PEERS = {"5.x send": "CometMQ send", "5.x receive+ack": "CometMQ consume"}


class Bench:
    def __init__(self, server: ProxiedStandalone, args: argparse.Namespace, workdir: Path) -> None:
        self.server = server
        self.count: int = args.count
        self.body_size: int = args.body_size
        self.inflight: int = args.inflight
        self.timeout: float = args.timeout
        self.workdir = workdir
        assert server.process is not None
        self.pid = server.process.proc.pid

    def driver(self, scenario: str, topic: str, *extra: str) -> float:
        """Runs a 5.x bench scenario; its msg/s."""
        count = ("--count", str(self.count))
        with Client5(
            scenario, self.server.endpoints, "--topic", topic, *count, *extra, workdir=self.workdir
        ) as run:
            done = run.finish(timeout=self.timeout)
        if not done["ok"]:
            raise SystemExit(f"bench failed: {scenario} {done}\n{run.diagnostics()}")
        return float(done["rate"])

    async def send_direct(self, topic: str) -> float:
        body = b"x" * self.body_size
        async with Producer(f"PID_{topic}", self.server.namesrv) as producer:
            await producer.send(Message(topic, body))  # route and connection ready before the clock
            remaining = self.count - 1
            started = time.perf_counter()

            async def sender() -> None:
                nonlocal remaining
                while remaining > 0:
                    remaining -= 1
                    await producer.send(Message(topic, body))

            await asyncio.gather(*(sender() for _ in range(self.inflight)))
            return (self.count - 1) / (time.perf_counter() - started)

    async def consume_direct(self, topic: str) -> float:
        consumed = 0
        first: float | None = None
        finished = asyncio.Event()

        async def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
            nonlocal consumed, first
            if first is None:
                first = time.perf_counter()
            consumed += len(messages)
            if consumed >= self.count:
                finished.set()
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(f"GID_{topic}", self.server.namesrv, consume_from="first")
        consumer.subscribe(topic)
        consumer.listen(listener)
        await consumer.start()
        try:
            await asyncio.wait_for(finished.wait(), self.timeout)
        finally:
            await consumer.close()
        assert first is not None
        return consumed / (time.perf_counter() - first)

    def row(self, name: str, topic: str) -> tuple[float, float]:
        """One row on *topic*: (msg/s, the server's CPU µs per message)."""
        cpu_before = cpu_seconds(self.pid)
        if name == "5.x send":
            sizes = ("--body-size", str(self.body_size), "--inflight", str(self.inflight))
            rate = self.driver("bench-produce", topic, *sizes)
        elif name == "CometMQ send":
            rate = asyncio.run(self.send_direct(topic))
        elif name == "5.x receive+ack":
            rate = self.driver("bench-consume", topic, "--group", f"GID_{topic}")
        else:
            rate = asyncio.run(self.consume_direct(topic))
        return rate, (cpu_seconds(self.pid) - cpu_before) / self.count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=2000, help="messages per row and round (2000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians are printed (3)")
    parser.add_argument("--body-size", type=int, default=1024, help="bytes per message (1024)")
    parser.add_argument("--inflight", type=int, default=32, help="sends in flight at a time (32)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a row may take at most (600)")
    args = parser.parse_args()
    missing = client5_missing()
    if missing is not None:
        raise SystemExit(missing)

    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in ROWS}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        conf = workdir / "broker.conf"
        conf.write_text(TEST_BROKER_CONF)
        server = ProxiedStandalone(workdir / "data", "-c", str(conf))
        server.start()
        try:
            bench = Bench(server, args, workdir)
            for round_number in range(args.rounds):
                # A topic per round and kind, written by the send row, read by the consume row after it.
                topics = {kind: f"Bench{kind}{round_number}" for kind in ("5x", "Direct")}
                for topic in topics.values():
                    admin(
                        server.namesrv,
                        "topic",
                        "create",
                        topic,
                        "--queues",
                        "8",
                        "-a",
                        "+message.type=NORMAL",
                    )
                order = [("5.x send", "5x"), ("CometMQ send", "Direct")]
                for sends in order if round_number % 2 == 0 else order[::-1]:
                    figures[sends[0]].append(bench.row(sends[0], topics[sends[1]]))
                order = [("5.x receive+ack", "5x"), ("CometMQ consume", "Direct")]
                for reads in order if round_number % 2 == 0 else order[::-1]:
                    figures[reads[0]].append(bench.row(reads[0], topics[reads[1]]))
        finally:
            server.stop()

    medians = {
        name: (statistics.median(r for r, _ in rows), statistics.median(c for _, c in rows))
        for name, rows in figures.items()
    }
    print(f"{args.count} messages of {args.body_size} B per row, {args.rounds} round(s), medians")
    print(f"{'row':<22} {'msg/s':>10} {'server CPU µs/msg':>18}")
    for name, (rate, cpu) in medians.items():
        print(f"{name:<22} {rate:>10,.0f} {cpu:>18,.1f}")
    for name, peer in PEERS.items():
        (rate, cpu), (peer_rate, peer_cpu) = medians[name], medians[peer]
        print(f"{name} / {peer}: msg/s {rate / peer_rate:.2f}x, server CPU per message {cpu / peer_cpu:.2f}x")


if __name__ == "__main__":
    main()
