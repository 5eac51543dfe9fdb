"""POP consumption beside pulling, in one run: messages a second and broker CPU per message of
CometMQ's SimpleConsumer (receive 32, ack each) against its LitePullConsumer reading the same number
of messages, on one `cometmq standalone`.

    .venv/bin/python bench/pop.py [--count 3000] [--rounds 3] [--size 1024]

Each round sends --count messages of --size bytes to a fresh topic of 4 queues for each consumer, then
times the consumer reading all of them (the SimpleConsumer acks every message, its acks of one receive
sent together; the LitePullConsumer reads the queues' ranges, no commits); the two take turns first.
Prints the medians over the rounds and the ratio pop / pull. The machine is shared: only the ratio of
one run means anything.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from cometmq.client import AdminClient, LitePullConsumer, Message, Producer, SimpleConsumer
from processes import cpu_seconds, start_standalone

QUEUES = 4


async def _fill(namesrv: str, topic: str, count: int, size: int) -> None:
    async with AdminClient(namesrv) as admin:
        await admin.create_topic(topic, queues=QUEUES)
    body = b"p" * size
    async with Producer("PID_bench_pop", namesrv) as producer:
        for start in range(0, count, 64):
            await producer.send_batch([Message(topic, body) for _ in range(min(64, count - start))])


async def _pull(namesrv: str, topic: str, count: int) -> float:
    async with LitePullConsumer(f"GID_pull_{topic}", namesrv, auto_commit=False) as consumer:
        started = time.perf_counter()
        got = 0
        for queue in await consumer.fetch_queues(topic):
            async for batch in consumer.read(queue, 0, await consumer.end_offset(queue)):
                got += len(batch)
        elapsed = time.perf_counter() - started
    assert got == count, (got, count)
    return elapsed


async def _pop(namesrv: str, topic: str, count: int) -> float:
    async with SimpleConsumer(
        f"GID_pop_{topic}", namesrv, subscriptions={topic: "*"}, consume_from="first"
    ) as consumer:
        started = time.perf_counter()
        got = 0
        while got < count:
            messages = await consumer.receive(32, 60, await_duration=5)
            await asyncio.gather(*(consumer.ack(message) for message in messages))
            got += len(messages)
        elapsed = time.perf_counter() - started
    assert got == count, (got, count)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=3000, help="messages per consumer and round (3000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians are printed (3)")
    parser.add_argument("--size", type=int, default=1024, help="message body bytes (1024)")
    args = parser.parse_args()
    figures: dict[str, list[tuple[float, float]]] = {"pull": [], "pop": []}
    with tempfile.TemporaryDirectory() as tmp:
        server, namesrv = start_standalone(Path(tmp) / "data")
        try:
            for round_number in range(args.rounds):
                kinds = ("pull", "pop") if round_number % 2 == 0 else ("pop", "pull")
                for kind in kinds:
                    topic = f"BenchPop{kind}{round_number}"
                    asyncio.run(_fill(namesrv, topic, args.count, args.size))
                    before = cpu_seconds(server.proc.pid)
                    read = _pull if kind == "pull" else _pop
                    elapsed = asyncio.run(read(namesrv, topic, args.count))
                    broker_us = (cpu_seconds(server.proc.pid) - before) / args.count * 1e6
                    figures[kind].append((args.count / elapsed, broker_us))
        finally:
            server.terminate()
    print(f"{'consumer':<34} {'msg/s':>9} {'broker µs/msg':>14}")
    medians = {}
    for kind, label in (("pull", "LitePullConsumer.read"), ("pop", "SimpleConsumer receive + ack")):
        rate = statistics.median(rate for rate, _ in figures[kind])
        cpu = statistics.median(cpu for _, cpu in figures[kind])
        medians[kind] = (rate, cpu)
        print(f"{label:<34} {rate:>9.0f} {cpu:>14.1f}")
    rate_ratio = medians["pop"][0] / medians["pull"][0]
    # The CPU clock ticks every 10 ms: a short pull round may read 0.
    cpu_ratio = f"{medians['pop'][1] / medians['pull'][1]:.1f}x" if medians["pull"][1] else "n/a"
    print(f"pop / pull: {rate_ratio:.2f} of the rate, {cpu_ratio} the broker CPU")


if __name__ == "__main__":
    main()
