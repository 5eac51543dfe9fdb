"""Latency and CPU with the default busy polling, beside Redis in the same run.

    .venv/bin/python bench/polling.py [--rounds 3] [--count 5000] [--duration 10] [--no-redis]
                                      [--variants default,off,fixed]

Each round, for each variant in turn: a fresh `cometmq standalone`, then

- **idle**: its CPU over --idle-seconds of wall time, nothing connected; then its CPU and that of a
  client process holding a started producer and push consumer, neither sending, over as long;
- **100 msg/s**: `cometmq bench latency` sending 100 messages a second end to end for
  --load-seconds: the CPU of the broker, of the producer process and of the consumer process over the
  middle of that run (each from /proc/PID/stat, as a share of one core);
- **latency**: `cometmq bench latency` (sync sends, then end to end at --rate msg/s), the broker's
  CPU over the whole run;
- **Redis** (unless --no-redis): redis-server as peerbench starts it, with peerbench's own client
  (its W3 synchronous XADD and its W4 end to end at the same rate), from /tmp/peerbench-venv.

The variants: `default` (no polling flag: the broker adaptive up to 1000 µs, the clients up to
200 µs), `off` (nothing polls), `fixed` (the broker a fixed 1000 µs, the producers a fixed 50 µs,
the consumer not at all: the best fixed windows found on the development VM).

Prints a table of medians over the rounds and the ratios CometMQ / Redis. The machine is shared and
noisy: only the ratios of one run mean anything.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from cometmq.remoting import CLIENT_LIMIT_US  # noqa: E402
from processes import COMMAND, StandaloneServer, cpu_seconds  # noqa: E402

PEERBENCH = Path("/work/shared/tools/peerbench")
PEER_PYTHON = Path("/tmp/peerbench-venv/bin/python")

# name → (the standalone's flags, `bench latency`'s flags)
VARIANTS: dict[str, tuple[list[str], list[str]]] = {
    "default": ([], []),
    "off": (["--busy-poll-us", "0"], ["--busy-poll-us", "0", "--consumer-busy-poll-us", "0"]),
    "fixed": (
        ["--busy-poll-us", "1000", "--busy-poll-fixed"],
        ["--busy-poll-us", "50", "--consumer-busy-poll-us", "0", "--busy-poll-fixed"],
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--count", type=int, default=2000, help="synchronous sends measured (2000)")
    parser.add_argument("--warmup", type=int, default=200, help="sends and messages not measured (200)")
    parser.add_argument("--rate", type=int, default=2000, help="end-to-end messages per second (2000)")
    parser.add_argument("--duration", type=float, default=5.0, help="end-to-end seconds (5)")
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--load-seconds", type=float, default=10.0, help="the 100 msg/s run (10)")
    parser.add_argument("--no-redis", action="store_true")
    parser.add_argument(
        "--variants", default="default", help=f"comma-separated, of {', '.join(VARIANTS)} (default)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    variants = args.variants.split(",")
    if unknown := set(variants) - set(VARIANTS):
        parser.error(f"unknown variants: {', '.join(sorted(unknown))}")
    redis = not args.no_redis and PEER_PYTHON.exists() and shutil_which("redis-server")
    rounds = []
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
        result: dict[str, float] = {}
        for variant in variants:
            broker_args, client_args = VARIANTS[variant]
            measured = cometmq_round(args, broker_args, client_args)
            result.update({f"{variant}:{key}": value for key, value in measured.items()})
        if redis:
            result.update(redis_round(args))
        rounds.append(result)
    figures = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    spread = {key: (min(r[key] for r in rounds), max(r[key] for r in rounds)) for key in rounds[0]}
    if args.json:
        print(json.dumps({"medians": figures, "rounds": rounds}, indent=1))
        return
    print_report(figures, spread, len(rounds), variants, redis=bool(redis), rate=args.rate)


def shutil_which(name: str) -> bool:
    return any((Path(d) / name).exists() for d in os.environ.get("PATH", "").split(os.pathsep))


def cometmq_round(
    args: argparse.Namespace, broker_args: list[str], client_args: list[str]
) -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = StandaloneServer(Path(tmp) / "data", *broker_args)
        server.start()
        try:
            assert server.process is not None
            broker = server.process.proc.pid
            time.sleep(1.0)  # start-up's own work settles
            out.update(idle(server.namesrv, broker, args.idle_seconds, client_args))
            out.update(load_at_100(server.namesrv, broker, args, client_args))
            started = cpu_seconds(broker)
            wall = time.monotonic()
            rows = bench_latency(
                server.namesrv,
                args,
                *("--count", str(args.count), "--warmup", str(args.warmup), "--rate", str(args.rate)),
                *client_args,
            )
            out["broker_cpu_at_rate"] = (cpu_seconds(broker) - started) / (time.monotonic() - wall)
            by_name = {row["workload"]: row for row in rows}
            sync = by_name["one synchronous send at a time"]
            blocking = by_name["one blocking send at a time"]
            e2e = next(row for name, row in by_name.items() if name.startswith("end to end"))
            out.update(
                sync_p50=sync["p50_us"],
                sync_p99=sync["p99_us"],
                blocking_p50=blocking["p50_us"],
                blocking_p99=blocking["p99_us"],
                e2e_p50=e2e["p50_us"],
                e2e_p99=e2e["p99_us"],
            )
        finally:
            server.stop()
    return out


def bench_latency(namesrv: str, args: argparse.Namespace, *extra: str) -> list[dict[str, Any]]:
    run = subprocess.run(
        [
            *COMMAND,
            "bench",
            "latency",
            "--namesrv",
            namesrv,
            "--no-floor",
            "--duration",
            str(args.duration),
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rows: list[dict[str, Any]] = json.loads(run.stdout)["rows"]
    return rows


# An idle client process: a producer that has sent one message and a push consumer subscribed to its
# topic, both started, then nothing until stdin closes.
IDLE_CLIENTS = """
import asyncio, sys
from cometmq.client import Message, Producer, PushConsumer

async def main(namesrv, busy_poll_us):
    async with Producer("PID_idle", namesrv, busy_poll_us=busy_poll_us) as producer:
        await producer.send(Message("IdleBench", b"x"))
        consumer = PushConsumer("GID_idle", namesrv, busy_poll_us=busy_poll_us)
        consumer.subscribe("IdleBench")

        async def handle(messages):
            return None

        consumer.listen(handle)
        async with consumer:
            print("ready", flush=True)
            await asyncio.to_thread(sys.stdin.read)

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def idle(namesrv: str, broker: int, seconds: float, client_args: list[str]) -> dict[str, float]:
    """The broker's CPU with nothing connected, then its and an idle client process's, over *seconds*
    each."""
    out = {"broker_idle_cpu": cpu_share([broker], seconds)[0]}
    busy_poll_us = (
        client_args[client_args.index("--busy-poll-us") + 1] if "--busy-poll-us" in client_args else ""
    )
    subprocess.run([*COMMAND, "topic", "create", "IdleBench", "-n", namesrv], check=True, capture_output=True)
    client = subprocess.Popen(
        [sys.executable, "-c", IDLE_CLIENTS, namesrv, busy_poll_us or str(CLIENT_LIMIT_US)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdout is not None
        if client.stdout.readline().strip() != "ready":
            raise SystemExit("the idle clients did not start")
        time.sleep(1.0)  # the consumer's first rebalance and pulls settle
        out["broker_idle_clients_cpu"], out["client_idle_cpu"] = cpu_share([broker, client.pid], seconds)
    finally:
        client.communicate("", timeout=60)
    return out


def load_at_100(
    namesrv: str, broker: int, args: argparse.Namespace, client_args: list[str]
) -> dict[str, float]:
    """100 messages a second end to end (`bench latency`: its own process sends, its e2e-receive child
    consumes); the three processes' CPU over the middle of the run."""
    seconds = args.load_seconds
    bench = subprocess.Popen(
        [
            *COMMAND,
            "bench",
            "latency",
            "--namesrv",
            namesrv,
            "--no-floor",
            "--no-blocking",
            "--count",
            "1",
            "--warmup",
            "10",
            "--rate",
            "100",
            "--duration",
            str(seconds),
            "--json",
            *client_args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        consumer = wait_for_child(bench.pid)
        # Its loop's socket pair, then its connections to the name server and the broker: nearly ready.
        wait_for_sockets(consumer, 4)
        time.sleep(min(1.0, seconds / 4))  # at the queues' ends, and the sends have begun
        broker_cpu, producer_cpu, consumer_cpu = cpu_share([broker, bench.pid, consumer], seconds / 2)
        bench.communicate(timeout=seconds + 120)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    return {"broker_cpu_100": broker_cpu, "producer_cpu_100": producer_cpu, "consumer_cpu_100": consumer_cpu}


def wait_for_child(pid: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.05)
    raise SystemExit("the bench's end-to-end consumer did not start")


def wait_for_sockets(pid: int, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            fds = Path(f"/proc/{pid}/fd").iterdir()
            if sum(os.readlink(fd).startswith("socket:") for fd in fds) >= count:
                return
        time.sleep(0.05)
    raise SystemExit("the bench's end-to-end consumer did not connect")


def cpu_share(pids: list[int], seconds: float) -> list[float]:
    """Each process's CPU over *seconds* of wall time, as a share of one core."""
    before = [cpu_seconds(pid) for pid in pids]
    wall = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - wall
    return [(cpu_seconds(pid) - b) / elapsed for pid, b in zip(pids, before, strict=True)]


@contextlib.contextmanager
def redis_server() -> Iterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        # As peerbench starts it: AOF every second, no snapshots.
        server = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--dir", tmp, "--appendonly", "yes",
             "--appendfsync", "everysec", "--save", "", "--daemonize", "no", "--logfile", ""],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit("redis-server did not start")
                time.sleep(0.05)
            yield port
        finally:
            server.terminate()
            server.wait()


def peer(*args: str) -> dict[str, Any]:
    run = subprocess.run(
        [str(PEER_PYTHON), str(PEERBENCH / "peer_redis.py"), *args],
        cwd=PEERBENCH,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def redis_round(args: argparse.Namespace) -> dict[str, float]:
    with redis_server() as port:
        w3 = peer("w3", "--port", str(port), "--n", str(args.count), "--warmup", str(args.warmup))
        consumer = subprocess.Popen(
            [str(PEER_PYTHON), str(PEERBENCH / "peer_redis.py"), "w4c", "--port", str(port),
             "--rate", str(args.rate), "--duration", str(args.duration), "--warmup", str(args.warmup)],
            cwd=PEERBENCH, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert consumer.stdout is not None
            while consumer.stdout.readline().strip() != "READY":
                if consumer.poll() is not None:
                    raise SystemExit("the Redis W4 consumer did not start")
            peer(
                *("w4p", "--port", str(port), "--rate", str(args.rate), "--duration", str(args.duration)),
                *("--warmup", str(args.warmup)),
            )
            out, _ = consumer.communicate(timeout=args.duration + 60)
        finally:
            if consumer.poll() is None:
                consumer.kill()
                consumer.wait()
        w4 = json.loads(out.strip().splitlines()[-1])
    return {
        "redis_sync_p50": w3["p50_us"],
        "redis_sync_p99": w3["p99_us"],
        "redis_e2e_p50": w4["p50_us"],
        "redis_e2e_p99": w4["p99_us"],
    }


def print_report(
    figures: dict[str, float],
    spread: dict[str, tuple[float, float]],
    rounds: int,
    variants: list[str],
    *,
    redis: bool,
    rate: int,
) -> None:
    def cell(key: str, scale: float = 1.0, digits: int = 0) -> str:
        low, high = spread[key]
        text = f"{figures[key] * scale:,.{digits}f}"
        return text if rounds == 1 else f"{text} ({low * scale:,.{digits}f}-{high * scale:,.{digits}f})"

    print(f"medians over {rounds} round(s) (min-max)")
    print("| latency, µs | polling | CometMQ p50 | p99 | Redis p50 | p99 | p50 ratio | p99 ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, ours, theirs in (
        ("one synchronous send", "sync", "redis_sync"),
        ("one blocking send", "blocking", "redis_sync"),
        (f"end to end at {rate} msg/s", "e2e", "redis_e2e"),
    ):
        for variant in variants:
            key = f"{variant}:{ours}"
            row = [name, variant, cell(f"{key}_p50"), cell(f"{key}_p99")]
            if redis:
                row += [cell(f"{theirs}_p50"), cell(f"{theirs}_p99")]
                row += [f"{figures[f'{key}_{p}'] / figures[f'{theirs}_{p}']:.2f}" for p in ("p50", "p99")]
            else:
                row += ["", "", "", ""]
            print("| " + " | ".join(row) + " |")
    print()
    print("| CPU, % of one core | polling | broker | producer | consumer |")
    print("| --- | --- | --- | --- | --- |")
    for variant in variants:
        v = f"{variant}:"
        print(f"| idle | {variant} | {cell(v + 'broker_idle_cpu', 100, 2)} | | |")
        print(
            f"| idle, a producer and a push consumer connected (one process) | {variant} "
            f"| {cell(v + 'broker_idle_clients_cpu', 100, 2)} | {cell(v + 'client_idle_cpu', 100, 2)} | |"
        )
        print(
            f"| 100 msg/s end to end | {variant} | {cell(v + 'broker_cpu_100', 100, 1)} "
            f"| {cell(v + 'producer_cpu_100', 100, 1)} | {cell(v + 'consumer_cpu_100', 100, 1)} |"
        )
        print(
            f"| the latency run (sync sends, then {rate} msg/s) | {variant} "
            f"| {cell(v + 'broker_cpu_at_rate', 100, 1)} | | |"
        )


if __name__ == "__main__":
    main()
