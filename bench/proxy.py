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
- CometMQ receive+ack: CometMQ's ``SimpleConsumer`` in this process, the same calls straight to the
  broker (POP_MESSAGE of up to 32, ACK_MESSAGE of each), on the CometMQ send row's topic;
- CometMQ consume: CometMQ's ``PushConsumer`` (pulls of 32, offsets committed by the client: RocketMQ
  4.x's way, no call per message), a listener that returns at once, until --count are consumed, on the
  same topic: the ceiling of consuming.

Each figure is the median over the rounds of msg/s and of the server's CPU time per message (user +
system of the standalone process, proxy included), both over the same span: from the first send, or the
first messages received, to the last, the clients' start left out. The ratios set each 5.x row against the
CometMQ row making the same calls straight to the broker: the 5.x client is Python too, so the msg/s
ratio says what client and proxy hop cost together; the server's CPU per message says what the proxy
adds on the server.

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

from cometmq.client import ConsumeResult, Message, Producer, PushConsumer, SimpleConsumer
from cometmq.client.message import ReceivedMessage

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "rocketmq5")]

from client5 import Client5, client5_missing  # noqa: E402
from proxied import ProxiedStandalone, admin  # noqa: E402

from processes import TEST_BROKER_CONF, cpu_seconds  # noqa: E402

ROWS = ("5.x send", "CometMQ send", "5.x receive+ack", "CometMQ receive+ack", "CometMQ consume")
# The row a 5.x row is set against: the same calls, straight to the broker.
PEERS = {"5.x send": "CometMQ send", "5.x receive+ack": "CometMQ receive+ack"}


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

    def driver(self, scenario: str, topic: str, *extra: str) -> tuple[float, float]:
        """Runs a 5.x bench scenario: its msg/s and the server's CPU µs per message from its clock on."""
        count = ("--count", str(self.count))
        with Client5(
            scenario, self.server.endpoints, "--topic", topic, *count, *extra, workdir=self.workdir
        ) as run:
            run.wait_for("clock", timeout=self.timeout)
            cpu = cpu_seconds(self.pid)
            done = run.finish(timeout=self.timeout)
            cpu = cpu_seconds(self.pid) - cpu
        if not done["ok"]:
            raise SystemExit(f"bench failed: {scenario} {done}\n{run.diagnostics()}")
        return float(done["rate"]), cpu / self.count * 1e6

    async def send_direct(self, topic: str) -> tuple[float, float]:
        body = b"x" * self.body_size
        async with Producer(f"PID_{topic}", self.server.namesrv) as producer:
            await producer.send(Message(topic, body))  # route and connection ready before the clock
            remaining = self.count - 1
            cpu = cpu_seconds(self.pid)
            started = time.perf_counter()

            async def sender() -> None:
                nonlocal remaining
                while remaining > 0:
                    remaining -= 1
                    await producer.send(Message(topic, body))

            await asyncio.gather(*(sender() for _ in range(self.inflight)))
            elapsed = time.perf_counter() - started
            cpu = cpu_seconds(self.pid) - cpu
        return (self.count - 1) / elapsed, cpu / (self.count - 1) * 1e6

    async def consume_direct(self, topic: str) -> tuple[float, float]:
        consumed = 0
        clock: tuple[float, float] | None = None  # when the first messages came: (perf_counter, server CPU)
        finished = asyncio.Event()

        async def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
            nonlocal consumed, clock
            if clock is None:
                clock = time.perf_counter(), cpu_seconds(self.pid)
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
            elapsed, cpu = time.perf_counter(), cpu_seconds(self.pid)
        finally:
            await consumer.close()
        assert clock is not None
        return consumed / (elapsed - clock[0]), (cpu - clock[1]) / consumed * 1e6

    async def receive_direct(self, topic: str) -> tuple[float, float]:
        acked = 0
        clock: tuple[float, float] | None = None  # as consume_direct's
        async with SimpleConsumer(
            f"GID_simple_{topic}", self.server.namesrv, subscriptions={topic: "*"}, consume_from="first",
            await_duration=5,
        ) as consumer:  # fmt: skip
            deadline = time.monotonic() + self.timeout
            while acked < self.count and time.monotonic() < deadline:
                messages = await consumer.receive(max_messages=32, invisible_duration=30)
                if messages and clock is None:
                    clock = time.perf_counter(), cpu_seconds(self.pid)
                for message in messages:
                    await consumer.ack(message)
                    acked += 1
            elapsed, cpu = time.perf_counter(), cpu_seconds(self.pid)
        if clock is None or acked < self.count:
            raise SystemExit(f"bench failed: {acked} of {self.count} messages received and acked")
        return acked / (elapsed - clock[0]), (cpu - clock[1]) / acked * 1e6

    def row(self, name: str, topic: str) -> tuple[float, float]:
        """One row on *topic*: (msg/s, the server's CPU µs per message)."""
        if name == "5.x send":
            sizes = ("--body-size", str(self.body_size), "--inflight", str(self.inflight))
            return self.driver("bench-produce", topic, *sizes)
        if name == "CometMQ send":
            return asyncio.run(self.send_direct(topic))
        if name == "5.x receive+ack":
            return self.driver("bench-consume", topic, "--group", f"GID_{topic}")
        if name == "CometMQ receive+ack":
            return asyncio.run(self.receive_direct(topic))
        return asyncio.run(self.consume_direct(topic))


def ratio(value: float, peer: float) -> str:
    # A short run's CPU time can be below the clock's tick (10 ms): 0 s.
    return f"{value / peer:.2f}x" if peer else "n/a"


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
                # A topic per round and kind, written by its send row, read by the consuming rows after it.
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
                order = [
                    ("5.x receive+ack", "5x"),
                    ("CometMQ receive+ack", "Direct"),
                    ("CometMQ consume", "Direct"),
                ]
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
        print(
            f"{name} / {peer}: msg/s {ratio(rate, peer_rate)}, server CPU per message {ratio(cpu, peer_cpu)}"
        )


if __name__ == "__main__":
    main()
