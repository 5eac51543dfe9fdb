"""What transactions and deduplication cost a producer, in one run: transactional sends per second
beside plain single sends (16 producers), and batched produce with deduplication on beside off.

    .venv/bin/python bench/transactions.py [--rounds 3] [--count 30000] [--dedup-count 200000]
                                           [--dir PATH] [--quick] [--json]

Transactions: one `cometmq standalone` with default settings but for small store files (ports picked
by the OS, data in a temp dir under --dir), two topics of 8 queues, and CometMQ's Python client in this
process, 1 KiB bodies:

- plain: a `Producer`, 16 asyncio tasks each awaiting `send` of one message before the next
  (SEND_MESSAGE_V2, answered once the message is stored);
- transactional: a `TransactionProducer`, 16 tasks each awaiting `send_in_transaction(message,
  execute)` with an `execute` that answers COMMIT at once: the half message is sent and stored, then
  END_TRANSACTION (which this client awaits; RocketMQ's Java client sends it oneway) stores the copy
  consumers see together with the op record that settles the half. Two rows: `execute` a plain
  function (run in the producer's worker threads, as a local transaction that may block must be: the
  row pays a thread hand-off per transaction) and `execute` an `async def` (awaited on the loop).

The 16 producers are 16 concurrent senders on one producer, as RocketMQ's own benchmark runs
(example/benchmark Producer and TransactionProducer: --threadCount threads sharing one
DefaultMQProducer or TransactionMQProducer); one producer also means one connection to the broker.
Before the clock starts, each of the two sends one message (routes and connection ready).

The rounds interleave the three rows, in order then in reverse and so on, so a slow spell of the
machine touches all alike. Each figure is the median over the rounds: msg/s, the p50 of one awaited
call, and the CPU time per message of the server process and of this one (the client), which say
where a transaction's cost lies. The ratio is against the plain figure of the same run; the target is
transactional >= 0.5x plain. The plain row is the ceiling: the same loop with nothing but the send.
The row "two sends in a row" is a second one: each of its units is two plain sends awaited one after
the other, the round trips a transaction makes (half and END) and nearly its records (a transaction
stores three: half, copy, op record), without any transaction work; its msg/s counts units.

After the rounds the bench reads the queues' offsets and stops unless the plain topic holds as many
messages as were sent, and the transactional topic as many committed copies as transactional messages
were sent, with as many half messages and op records (an op record settles one half: none is left to
the broker's check-back).

Deduplication: bench/dedup.py's rounds (`produce_rates`: a server of its own in the system temp dir,
`cometmq bench produce`, the stored-count check), --dedup-count messages in batches of 100, 8 in
flight, per workload and round; msg/s alone. The target is on >= 0.8x off.

The machine is noisy: compare the ratios of one run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cometmq.client import (
    AdminClient,
    Message,
    MessageQueue,
    Producer,
    ReceivedMessage,
    SendStatus,
    TransactionProducer,
    TransactionState,
)
from cometmq.protocol.naming import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests")]

from dedup import produce_rates  # noqa: E402  (bench/, this script's directory)
from processes import TEST_BROKER_CONF, cpu_seconds, start_standalone  # noqa: E402

PRODUCERS = 16
SIZE = 1024
QUEUES = 8
PLAIN_TOPIC = "BenchPlainSend"
TRANSACTION_TOPIC = "BenchTransactionalSend"
PLAIN = "send, 16 producers"
TRANSACTIONAL = "send_in_transaction, 16 producers"
TRANSACTIONAL_ASYNC = "  the same, async def execute"
TWO_SENDS = "two sends in a row, 16 producers"
BATCH = 100
IN_FLIGHT = 8
DEDUP_OFF = f"batches of {BATCH}, deduplication off"
DEDUP_ON = f"batches of {BATCH}, deduplication on"


@dataclass
class Workload:
    """One row: its figures of every round."""

    name: str
    msg_per_s: list[float] = field(default_factory=list)
    p50_us: list[float] = field(default_factory=list)  # of one awaited call
    broker_cpu_us: list[float] = field(default_factory=list)  # per message, the server process's
    client_cpu_us: list[float] = field(default_factory=list)  # per message, this process's

    def row(self) -> dict[str, Any]:
        """The medians, and msg/s of every round; a figure not measured (bench/dedup.py gives msg/s
        alone) is left out."""
        row: dict[str, Any] = {"workload": self.name, "msg_per_s": round(statistics.median(self.msg_per_s))}
        for key in ("p50_us", "broker_cpu_us", "client_cpu_us"):
            values = getattr(self, key)
            if values:
                row[key] = round(statistics.median(values), 1)
        row["rounds"] = [round(rate) for rate in self.msg_per_s]
        return row


@dataclass(frozen=True)
class Target:
    """The ratio of one workload's median msg/s to its baseline's (*label*), and the least it should be."""

    label: str
    workload: str
    baseline: str
    at_least: float | None  # None: a ratio to a ceiling, no target


SendOne = Callable[[bytes], Awaitable[None]]


async def timed(send_one: SendOne, count: int, body: bytes, workload: Workload, broker_pid: int) -> None:
    """*count* calls of *send_one*, PRODUCERS at a time, each awaited before its task's next."""
    pending = iter(range(count))
    latencies: list[int] = []

    async def producer() -> None:
        for _ in pending:
            started = time.perf_counter_ns()
            await send_one(body)
            latencies.append(time.perf_counter_ns() - started)

    broker_cpu, client_cpu = cpu_seconds(broker_pid), time.process_time()
    start = time.perf_counter()
    await asyncio.gather(*(producer() for _ in range(PRODUCERS)))
    workload.msg_per_s.append(count / (time.perf_counter() - start))
    workload.p50_us.append(statistics.median(latencies) / 1000)
    workload.broker_cpu_us.append((cpu_seconds(broker_pid) - broker_cpu) / count * 1e6)
    workload.client_cpu_us.append((time.process_time() - client_cpu) / count * 1e6)


class Sends:
    """The two producers and what they sent."""

    def __init__(self, namesrv: str) -> None:
        self.plain = Producer("BenchPlainProducer", namesrv)
        self.transactional = TransactionProducer("BenchTransactionProducer", namesrv, check=self.check)
        self.plain_sent = 0
        self.transactional_sent = 0
        self.check_backs = 0

    def check(self, message: ReceivedMessage) -> TransactionState:
        """Every local transaction committed; a check-back only means an END_TRANSACTION went astray."""
        self.check_backs += 1
        return TransactionState.COMMIT

    async def send_plain(self, body: bytes) -> None:
        result = await self.plain.send(Message(PLAIN_TOPIC, body))
        if result.status is not SendStatus.SEND_OK:
            raise SystemExit(f"a plain send was answered {result.status.name}")
        self.plain_sent += 1

    async def send_two(self, body: bytes) -> None:
        """The round trips and the stored records of a transaction, without one: two plain sends."""
        await self.send_plain(body)
        await self.send_plain(body)

    async def send_transactional(self, body: bytes) -> None:
        result = await self.transactional.send_in_transaction(Message(TRANSACTION_TOPIC, body), commit)
        if result.status is not SendStatus.SEND_OK or result.state is not TransactionState.COMMIT:
            raise SystemExit(f"a transactional send was answered {result.status.name}, {result.state.name}")
        self.transactional_sent += 1

    async def send_transactional_async(self, body: bytes) -> None:
        result = await self.transactional.send_in_transaction(Message(TRANSACTION_TOPIC, body), commit_async)
        if result.status is not SendStatus.SEND_OK or result.state is not TransactionState.COMMIT:
            raise SystemExit(f"a transactional send was answered {result.status.name}, {result.state.name}")
        self.transactional_sent += 1


def commit(message: Message) -> TransactionState:
    return TransactionState.COMMIT


async def commit_async(message: Message) -> TransactionState:
    return TransactionState.COMMIT


async def transaction_rows(
    namesrv: str, broker_pid: int, rounds: int, count: int, log: Callable[[str], None]
) -> tuple[list[Workload], dict[str, int]]:
    """Both workloads' figures over *rounds* interleaved rounds, and what the queues hold after."""
    async with AdminClient(namesrv) as admin:
        for topic in (PLAIN_TOPIC, TRANSACTION_TOPIC):
            await admin.create_topic(topic, QUEUES)
    body = os.urandom(SIZE)
    sends = Sends(namesrv)
    plain, transactional = Workload(PLAIN), Workload(TRANSACTIONAL)
    transactional_async, two = Workload(TRANSACTIONAL_ASYNC), Workload(TWO_SENDS)
    runs: list[tuple[SendOne, Workload]] = [
        (sends.send_plain, plain),
        (sends.send_transactional, transactional),
        (sends.send_transactional_async, transactional_async),
        (sends.send_two, two),
    ]
    async with sends.plain, sends.transactional:
        for send_one, _ in runs:
            await send_one(body)
        for round_no in range(rounds):
            for send_one, workload in runs if round_no % 2 == 0 else runs[::-1]:
                await timed(send_one, count, body, workload, broker_pid)
                log(f"round {round_no + 1}/{rounds}: {workload.name}: {workload.msg_per_s[-1]:,.0f} msg/s")
    counted = await count_stored(namesrv)
    counted |= {
        "plain_sent": sends.plain_sent,
        "transactional_sent": sends.transactional_sent,
        "check_backs": sends.check_backs,
    }
    sent = sends.transactional_sent
    wrong = {
        name: stored
        for name, stored, expected in (
            ("plain stored", counted["plain_stored"], sends.plain_sent),
            ("committed copies", counted["committed_copies"], sent),
            ("half messages", counted["half_messages"], sent),
            ("op records", counted["op_records"], sent),
        )
        if stored != expected
    }
    if wrong:
        raise SystemExit(
            f"sent {sends.plain_sent} plain and {sent} transactional messages, but the broker holds {wrong}"
        )
    return [plain, transactional, transactional_async, two], counted


async def count_stored(namesrv: str) -> dict[str, int]:
    """Messages the two topics hold, and the records of the half and op queues (this broker's own)."""
    async with AdminClient(namesrv) as admin:

        async def held(queues: list[MessageQueue]) -> int:
            bounds = await asyncio.gather(*(admin.offset_bounds(queue) for queue in queues))
            return sum(high - low for low, high in bounds)

        committed = await admin.readable_queues(TRANSACTION_TOPIC)
        broker = committed[0].broker_name  # a standalone server is one broker
        return {
            "plain_stored": await held(await admin.readable_queues(PLAIN_TOPIC)),
            "committed_copies": await held(committed),
            "half_messages": await held([MessageQueue(TRANS_HALF_TOPIC, broker, 0)]),
            "op_records": await held([MessageQueue(TRANS_OP_HALF_TOPIC, broker, 0)]),
        }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=30_000, help="messages per workload and round")
    parser.add_argument(
        "--dedup-count", type=int, default=200_000, help="messages per batched produce and round"
    )
    parser.add_argument(
        "--dir", type=Path, help="where the transactions' server keeps its data (default: a temp dir)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="1 round of 1 600 sends and 2 000 batched messages (a smoke test)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.count, args.dedup_count = 1, 1_600, 2_000

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        conf = Path(tmp) / "broker.conf"
        conf.write_text(TEST_BROKER_CONF)
        server, namesrv = start_standalone(Path(tmp) / "data", conf)
        try:
            workloads, counted = asyncio.run(
                transaction_rows(namesrv, server.proc.pid, args.rounds, args.count, log)
            )
        finally:
            server.terminate()
    log("deduplication off and on: bench/dedup.py's rounds")
    rates = produce_rates(args.rounds, args.dedup_count, BATCH, IN_FLIGHT, SIZE)
    workloads += [
        Workload(DEDUP_OFF, msg_per_s=[float(rate) for rate in rates["off"]]),
        Workload(DEDUP_ON, msg_per_s=[float(rate) for rate in rates["on"]]),
    ]
    targets = [
        Target("transactional / plain", TRANSACTIONAL, PLAIN, 0.5),
        Target("transactional, async def execute / plain", TRANSACTIONAL_ASYNC, PLAIN, 0.5),
        Target("transactional, async def execute / two sends in a row", TRANSACTIONAL_ASYNC, TWO_SENDS, None),
        Target("deduplication on / off", DEDUP_ON, DEDUP_OFF, 0.8),
    ]
    result = figures(workloads, targets, counted)
    if args.json:
        print(json.dumps(result))
    else:
        report(result, args.rounds)
    return 0


def figures(workloads: list[Workload], targets: list[Target], counted: dict[str, int]) -> dict[str, Any]:
    rows = {workload.name: workload.row() for workload in workloads}
    ratios = []
    for target in targets:
        ratio = rows[target.workload]["msg_per_s"] / rows[target.baseline]["msg_per_s"]
        if target.at_least is not None:
            rows[target.workload]["ratio"] = round(ratio, 3)
        ratios.append(
            {
                "label": target.label,
                "workload": target.workload,
                "baseline": target.baseline,
                "ratio": round(ratio, 3),
                "at_least": target.at_least,
                "met": target.at_least is None or ratio >= target.at_least,
            }
        )
    return {"rows": list(rows.values()), "targets": ratios, "counted": counted}


def report(result: dict[str, Any], rounds: int) -> None:
    print(f"1 KiB messages, medians of {rounds} round(s); each ratio is to its baseline's figure of this run")
    print(
        f"{'workload':<36}{'msg/s':>9}{'ratio':>8}{'p50 µs':>9}{'broker CPU µs/msg':>19}"
        f"{'client CPU µs/msg':>19}   rounds msg/s"
    )
    for row in result["rows"]:
        ratio = f"{row['ratio']:.2f}x" if "ratio" in row else ""
        p50, broker, client = (
            format(row[key], spec) if key in row else ""
            for key, spec in (("p50_us", ",.0f"), ("broker_cpu_us", ".1f"), ("client_cpu_us", ".1f"))
        )
        each = " ".join(f"{rate:,}" for rate in row["rounds"])
        print(
            f"{row['workload']:<36}{row['msg_per_s']:>9,}{ratio:>8}{p50:>9}{broker:>19}{client:>19}   {each}"
        )
    for target in result["targets"]:
        if target["at_least"] is None:
            print(f"{target['label']}: {target['ratio']:.2f}")
            continue
        met = "met" if target["met"] else "not met"
        print(f"{target['label']}: {target['ratio']:.2f} (target >= {target['at_least']}: {met})")
    d = result["counted"]
    print(
        f"counted after the rounds: {d['transactional_sent']:,} transactional sent, "
        f"{d['committed_copies']:,} committed copies, {d['half_messages']:,} half messages, "
        f"{d['op_records']:,} op records, "
        f"{d['check_backs']} check-backs; {d['plain_sent']:,} plain sent, {d['plain_stored']:,} stored"
    )


if __name__ == "__main__":
    sys.exit(main())
