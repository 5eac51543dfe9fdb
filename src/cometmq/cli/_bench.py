"""``cometmq bench produce|consume|latency``: drive a running cluster with the Python client and report
messages/s, MB/s and latency percentiles.

The workloads are those of the peer benchmark (``shared/tools/peerbench``), so figures can be put side by
side: batched produce, consume from the start, one synchronous send at a time, and end to end at a fixed
rate with the consumer in a second process. Bodies are 1 KiB of random bytes from a pool of 256.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, cast

from cometmq.cli._admin import admin_options, print_json, whole_number
from cometmq.cli._connect import security, security_environ
from cometmq.cli._loop import run_async
from cometmq.client import AdminClient, LitePullConsumer, Message, MessageQueue, Producer, blocking
from cometmq.client.litepull import MAX_PULL_BATCH
from cometmq.console import Progress, format_table
from cometmq.errors import CometMQError
from cometmq.protocol.topic_config import BATCH_CQ, QUEUE_TYPE_ATTRIBUTE
from cometmq.remoting import CLIENT_LIMIT_US, MAX_LIMIT_US, BusyPoller

DEFAULT_TOPIC = "CometBench"
# The topic of --inner-batch when none is named: a BatchCQ topic cannot be made of an existing one.
DEFAULT_INNER_BATCH_TOPIC = "CometBenchInnerBatch"
_INNER_BATCH_HELP = (
    "use a topic whose queue.type is BatchCQ, created so when missing "
    f"(default topic {DEFAULT_INNER_BATCH_TOPIC}): each batch is stored as one record"
)
BENCH_GROUP = "cometmq_bench"
_BODY_POOL = 256
# The end-to-end workload stamps each body: CLOCK_MONOTONIC ns at send time and a sequence number.
_STAMP = struct.Struct(">qq")
# How the bench starts its helper processes: this interpreter, this package.
_SELF = (sys.executable, "-m", "cometmq")


def add_bench_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = admin_options()
    common.add_argument("--topic", default=DEFAULT_TOPIC, help=f"topic to use (default {DEFAULT_TOPIC})")
    common.add_argument(
        "--size", type=whole_number(_STAMP.size), default=1024, metavar="BYTES", help="body size (1024)"
    )
    common.add_argument(
        "--queues",
        type=whole_number(1),
        default=4,
        metavar="N",
        help="queues of the topic if it is created (4)",
    )
    common.add_argument(
        "--rounds",
        type=whole_number(1),
        default=1,
        metavar="N",
        help="run the workload N times; report each figure's median, and the rounds' range (1)",
    )
    bench = commands.add_parser(
        "bench",
        help="measure a running cluster: produce, consume, latency",
        description=(
            "Measure throughput and latency against a running cluster with CometMQ's Python client "
            "(one client process; end-to-end latency adds a consumer process). The topic is created "
            "when missing. Prints a table (or --json); a progress bar shows on a terminal. With "
            "--rounds N the workload runs N times and each figure is the median over the rounds."
        ),
    )
    workloads = bench.add_subparsers(dest="bench_command", metavar="WORKLOAD", required=True)

    produce = workloads.add_parser(
        "produce",
        parents=[common],
        help="batched sends, several batches in flight",
        description="Send COUNT messages in batches (SEND_BATCH_MESSAGE), INFLIGHT batches at a time.",
    )
    produce.add_argument("--count", type=whole_number(1), default=200_000, help="messages (200000)")
    produce.add_argument("--batch", type=whole_number(1), default=100, help="messages per batch (100)")
    produce.add_argument("--inflight", type=whole_number(1), default=8, help="batches in flight (8)")
    produce.add_argument("--inner-batch", action="store_true", help=_INNER_BATCH_HELP)
    produce.set_defaults(func=_command(_produce))

    consume = workloads.add_parser(
        "consume",
        parents=[common],
        help="read a topic from its start",
        description=(
            "Read COUNT messages from the start of every queue of the topic with a LitePullConsumer "
            "(queues assigned, no group offsets touched). The topic must hold them: run "
            "'cometmq bench produce' first."
        ),
    )
    consume.add_argument("--count", type=whole_number(1), default=200_000, help="messages (200000)")
    consume.add_argument(
        "--pull-batch",
        type=whole_number(1, MAX_PULL_BATCH),
        default=256,
        help="messages asked per pull (256)",
    )
    consume.add_argument("--inner-batch", action="store_true", help=_INNER_BATCH_HELP)
    consume.set_defaults(func=_command(_consume))

    latency = workloads.add_parser(
        "latency",
        parents=[common],
        help="synchronous send latency, then end-to-end latency at a fixed rate",
        description=(
            "First COUNT synchronous sends, one at a time (after WARMUP more): the latency of each "
            "until its SEND_OK, with the asyncio producer, then (unless --no-blocking) with the "
            "blocking one from a plain thread. Then, unless --no-e2e, RATE messages/s for DURATION "
            "seconds while a consumer in a second process receives them: latency from send to receipt (both "
            "processes read CLOCK_MONOTONIC; the first WARMUP messages are left out). On a KVM guest "
            "that halts an idle vCPU at once, which makes every wake-up costly, a note under the table "
            "says so."
        ),
    )
    latency.add_argument(
        "--count", type=whole_number(1), default=5_000, help="synchronous sends measured (5000)"
    )
    latency.add_argument("--warmup", type=whole_number(0), default=200, help="sends not measured (200)")
    latency.add_argument(
        "--rate", type=whole_number(1), default=2_000, help="end-to-end messages per second (2000)"
    )
    latency.add_argument("--duration", type=float, default=10.0, help="end-to-end seconds (10)")
    latency.add_argument("--no-e2e", action="store_true", help="skip the end-to-end run")
    latency.add_argument(
        "--no-blocking",
        action="store_true",
        help="skip the sync sends through the blocking client (cometmq.client.blocking) from a thread",
    )
    latency.add_argument(
        "--no-floor",
        action="store_true",
        help="skip the round trip without a broker measured first (the machine's floor)",
    )
    for flag, whose in (
        (
            "--busy-poll-us",
            "the producers' (and the floor's) busy-poll limit: keep polling after each request or "
            "reply instead of sleeping, for an adaptive window of at most US µs (0, never); the broker "
            f"has its own ('cometmq standalone --busy-poll-us') ({CLIENT_LIMIT_US}, the clients' default)",
        ),
        (
            "--consumer-busy-poll-us",
            f"the end-to-end consumer's busy-poll limit ({CLIENT_LIMIT_US}, the clients' default)",
        ),
    ):
        latency.add_argument(
            flag, type=whole_number(0, MAX_LIMIT_US), default=CLIENT_LIMIT_US, metavar="US", help=whose
        )
    latency.add_argument(
        "--busy-poll-fixed",
        action="store_true",
        help="the producers, the consumer and the floor poll their whole window every time (not adaptive)",
    )
    latency.set_defaults(func=_command(_latency))

    # The floor's echo process (started by 'latency'; not for direct use).
    echo = workloads.add_parser("echo-serve")
    echo.add_argument("--reply-size", type=int, required=True)
    echo.add_argument("--busy-poll-us", type=int, default=0)
    echo.add_argument("--busy-poll-fixed", action="store_true")
    echo.set_defaults(
        func=lambda args: run_async(
            _echo_serve(args.reply_size, BusyPoller(args.busy_poll_us, not args.busy_poll_fixed)),
            fast_loop=True,
        )
    )

    # The end-to-end consumer process (started by 'latency'; not for direct use).
    receive = workloads.add_parser("e2e-receive", parents=[common])
    receive.add_argument("--count", type=int, required=True)
    receive.add_argument("--warmup", type=int, default=200)
    receive.add_argument("--deadline", type=float, required=True)
    receive.add_argument("--rate", type=int, required=True)
    receive.add_argument("--busy-poll-us", type=int, default=0)
    receive.add_argument("--busy-poll-fixed", action="store_true")
    receive.set_defaults(func=lambda args: run_async(_e2e_receive(args), fast_loop=True))


BenchAction = Callable[[argparse.Namespace], Awaitable[dict[str, Any]]]


def _command(action: BenchAction) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        async def main() -> int:
            results = [await action(args) for _ in range(args.rounds)]
            rounds = [result["rows"] for result in results]
            report = median_rows(rounds) if len(rounds) > 1 else {"rows": rounds[0]}
            if "note" in results[-1]:
                report["note"] = results[-1]["note"]
            _print_result(report, args.json)
            return 0

        return run_async(main(), fast_loop=True)

    return run


# The figure whose spread over the rounds the table shows: throughput, else the median latency.
_HEADLINE = ("msg_per_s", "p50_us")


def median_rows(rounds: Sequence[Sequence[dict[str, Any]]]) -> dict[str, Any]:
    """One report from several rounds of a workload (each a list of rows, the same workloads in the
    same order): every number is its median over the rounds that have it, as the peer benchmark
    reports, and each row's ``rounds`` holds its headline figure of every round, in order (None for a
    round without it). The machine is noisy: one round's figure can be off by half."""
    rows = []
    for same in zip(*rounds, strict=True):
        row: dict[str, Any] = {}
        for r in same:  # every key of every round: a round without latency samples has no p50
            row.update(r)
        for key, value in row.items():
            if isinstance(value, int | float):
                median = statistics.median(r[key] for r in same if key in r)
                row[key] = round(median, 3) if isinstance(value, float) else round(median)
        headline = next((key for key in _HEADLINE if key in row), None)
        if headline is not None:
            row["rounds"] = [r.get(headline) for r in same]
        rows.append(row)
    return {"rows": rows}


def _bodies(size: int) -> list[bytes]:
    return [os.urandom(size) for _ in range(_BODY_POOL)]


def percentiles(samples_ns: Sequence[int]) -> dict[str, float]:
    """p50, p99 and max of latencies in ns, as µs."""
    ordered = sorted(samples_ns)
    if not ordered:
        return {"p50_us": 0.0, "p99_us": 0.0, "max_us": 0.0}

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000

    return {"p50_us": at(0.50), "p99_us": at(0.99), "max_us": ordered[-1] / 1000}


async def _ensure_topic(args: argparse.Namespace) -> None:
    """Create the topic when missing (a BatchCQ one with --inner-batch); with --inner-batch an existing
    topic must be BatchCQ."""
    inner_batch = getattr(args, "inner_batch", False)
    if inner_batch and args.topic == DEFAULT_TOPIC:
        args.topic = DEFAULT_INNER_BATCH_TOPIC
    async with AdminClient(args.namesrv, timeout=args.timeout, **security(args).client_options()) as admin:
        if args.topic not in await admin.topic_list():
            attributes = f"+{QUEUE_TYPE_ATTRIBUTE}={BATCH_CQ}" if inner_batch else None
            await admin.create_topic(args.topic, args.queues, attributes=attributes)
        elif inner_batch:
            queue_type = (await admin.topic_attributes()).get(args.topic, {}).get(QUEUE_TYPE_ATTRIBUTE)
            if queue_type != BATCH_CQ:
                raise CometMQError(
                    f"topic {args.topic!r} exists and its {QUEUE_TYPE_ATTRIBUTE} is not {BATCH_CQ}: "
                    "name another with --topic"
                )


async def _produce(args: argparse.Namespace) -> dict[str, Any]:
    await _ensure_topic(args)
    bodies = _bodies(args.size)
    batches = [
        [
            Message(args.topic, bodies[(start + i) % _BODY_POOL])
            for i in range(min(args.batch, args.count - start))
        ]
        for start in range(0, args.count, args.batch)
    ]
    async with Producer(
        BENCH_GROUP, args.namesrv, send_timeout=args.timeout, **security(args).client_options()
    ) as producer:
        await producer.send_batch(batches[0][:1])  # routes and connections ready before the clock starts
        progress = Progress("produce", args.count)
        pending = iter(batches)
        latencies: list[int] = []

        async def sender() -> None:
            for batch in pending:
                started = time.perf_counter_ns()
                await producer.send_batch(batch)
                latencies.append(time.perf_counter_ns() - started)
                progress.advance(len(batch))

        start = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(args.inflight)))
        seconds = time.perf_counter() - start
        progress.close()
    return {
        "rows": [
            _row(
                f"produce, {'inner ' if args.inner_batch else ''}batches of {args.batch}",
                args.count,
                args.size,
                seconds,
                latencies,
                "per batch",
            )
        ]
    }


async def _consume(args: argparse.Namespace) -> dict[str, Any]:
    if args.inner_batch:
        await _ensure_topic(args)  # the BatchCQ topic --inner-batch names, which must hold the messages
    consumer = LitePullConsumer(
        BENCH_GROUP,
        args.namesrv,
        auto_commit=False,
        pull_batch_size=args.pull_batch,
        **security(args).client_options(),
    )
    async with consumer:
        queues = await consumer.fetch_queues(args.topic)
        if not queues:
            raise CometMQError(f"topic {args.topic!r} has no queues; run 'cometmq bench produce' first")
        available = 0
        for queue in queues:
            available += await consumer.end_offset(queue) - await consumer.begin_offset(queue)
        if available < args.count:
            raise CometMQError(
                f"topic {args.topic!r} holds {available} messages, fewer than --count {args.count}; "
                "run 'cometmq bench produce' first"
            )
        consumer.assign(queues)
        for queue in queues:
            await consumer.seek_to_beginning(queue)
        progress = Progress("consume", args.count)
        received = 0
        size = 0
        start = time.perf_counter()
        while received < args.count:
            messages = await consumer.poll(timeout=args.timeout)
            if not messages:
                raise CometMQError(f"no message for {args.timeout:g} s after {received} of {args.count}")
            received += len(messages)
            size += sum(len(m.body) for m in messages)
            progress.advance(len(messages))
        seconds = time.perf_counter() - start
        progress.close()
    what = "consume inner batches from the start" if args.inner_batch else "consume from the start"
    return {"rows": [_row(what, received, size / max(received, 1), seconds, [], "")]}


async def _latency(args: argparse.Namespace) -> dict[str, Any]:
    await _ensure_topic(args)
    bodies = _bodies(args.size)
    rows = [] if args.no_floor else [await _round_trip_floor(args)]
    async with Producer(
        BENCH_GROUP,
        args.namesrv,
        send_timeout=args.timeout,
        busy_poll_us=args.busy_poll_us,
        busy_poll_adaptive=not args.busy_poll_fixed,
        **security(args).client_options(),
    ) as producer:
        progress = Progress("sync sends", args.warmup + args.count)
        samples: list[int] = []
        for i in range(args.warmup + args.count):
            msg = Message(args.topic, bodies[i % _BODY_POOL])
            started = time.perf_counter_ns()
            await producer.send(msg)
            if i >= args.warmup:
                samples.append(time.perf_counter_ns() - started)
            progress.advance(1)
        progress.close()
        rows.append(
            _row("one synchronous send at a time", args.count, args.size, 0.0, samples, "send to SEND_OK")
        )
        if not args.no_blocking:
            rows.append(await asyncio.to_thread(_blocking_sends, args, bodies))
        if not args.no_e2e:
            rows.append(await _end_to_end(args, producer, bodies))
    note = idle_halt_note()
    return {"rows": rows} if note is None else {"rows": rows, "note": note}


def idle_halt_note(root: Path = Path("/")) -> str | None:
    """A line for the latency table when this machine is a KVM guest that halts an idle vCPU at once
    (the haltpoll cpuidle driver with ``guest_halt_poll_ns`` 0): then waking a process that sleeps on
    an idle vCPU costs a VM exit and an interrupt from the host, about 35-45 µs each way on the
    development VM, and most of a round trip. None anywhere else (or when /sys cannot be read)."""
    try:
        driver = (root / "sys/devices/system/cpu/cpuidle/current_driver").read_text().strip()
        poll_ns = int((root / "sys/module/haltpoll/parameters/guest_halt_poll_ns").read_text())
    except (OSError, ValueError):
        return None
    if driver != "haltpoll" or poll_ns > 0:
        return None
    return (
        "this VM halts an idle vCPU at once (cpuidle haltpoll, guest_halt_poll_ns 0): each wake-up of a "
        "sleeping process costs a VM exit, which is most of the floor; see docs/performance.md"
    )


def _blocking_sends(args: argparse.Namespace, bodies: list[bytes]) -> dict[str, Any]:
    """The sync sends again through the blocking facade, from this plain thread: what a script sees."""
    progress = Progress("blocking sends", args.warmup + args.count)
    samples: list[int] = []
    with blocking.Producer(
        BENCH_GROUP + "_blocking",
        args.namesrv,
        send_timeout=args.timeout,
        busy_poll_us=args.busy_poll_us,
        busy_poll_adaptive=not args.busy_poll_fixed,
        **security(args).client_options(),
    ) as producer:
        for i in range(args.warmup + args.count):
            msg = Message(args.topic, bodies[i % _BODY_POOL])
            started = time.perf_counter_ns()
            producer.send(msg)
            if i >= args.warmup:
                samples.append(time.perf_counter_ns() - started)
            progress.advance(1)
    progress.close()
    return _row("one blocking send at a time", args.count, args.size, 0.0, samples, "send() call to return")


# About the sizes of a SEND_MESSAGE_V2 frame beyond its body, and of its SEND_OK response.
_SEND_HEADER_BYTES = 300
_SEND_REPLY_BYTES = 240
_FRAME_LENGTH = struct.Struct(">i")


async def _round_trip_floor(args: argparse.Namespace) -> dict[str, Any]:
    """What one request and its reply cost on this machine without a broker: a second Python process
    on the same event loop echoes each frame with a reply of a send response's size, read whole. A
    synchronous send cannot be quicker than this; on a VM, waking the other process's CPU is most of
    it."""
    server = await asyncio.create_subprocess_exec(
        *_SELF,
        "bench",
        "echo-serve",
        "--reply-size",
        str(_SEND_REPLY_BYTES),
        "--busy-poll-us",
        str(args.busy_poll_us),
        *(["--busy-poll-fixed"] if args.busy_poll_fixed else []),
        stdout=subprocess.PIPE,
    )
    assert server.stdout is not None
    try:
        port = int(await server.stdout.readline())
        loop = asyncio.get_running_loop()
        poller = BusyPoller(args.busy_poll_us, not args.busy_poll_fixed)
        counter = _ReplyCounter(_SEND_REPLY_BYTES, poller)
        transport, _ = await loop.create_connection(lambda: counter, "127.0.0.1", port)
        request_size = args.size + _SEND_HEADER_BYTES
        frame = _FRAME_LENGTH.pack(request_size) + os.urandom(request_size)
        samples: list[int] = []
        for i in range(args.warmup + args.count):
            reply = counter.expect(loop)
            started = time.perf_counter_ns()
            transport.write(frame)
            poller.wrote()
            await reply
            if i >= args.warmup:
                samples.append(time.perf_counter_ns() - started)
        transport.close()
        echoed = int(await server.stdout.readline())  # the server says how many frames it answered
        await server.wait()
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
    if echoed != args.warmup + args.count:
        raise CometMQError(f"the echo process answered {echoed} of {args.warmup + args.count} frames")
    return _row("round trip without a broker", args.count, args.size, 0.0, samples, "write to reply (floor)")


class _ReplyCounter(asyncio.Protocol):
    """Resolves the future of :meth:`expect` once a whole reply of *reply_size* bytes has come."""

    def __init__(self, reply_size: int, poller: BusyPoller) -> None:
        self._reply_size = reply_size
        self._poller = poller
        self._received = 0
        self._waiting: asyncio.Future[None] | None = None

    def expect(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        self._waiting = loop.create_future()
        return self._waiting

    def data_received(self, data: bytes) -> None:
        self._poller.read()
        self._received += len(data)
        if self._received >= self._reply_size and self._waiting is not None:
            self._received -= self._reply_size
            self._waiting.set_result(None)
            self._waiting = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._waiting is not None and not self._waiting.done():
            self._waiting.set_exception(CometMQError("the echo process closed the connection"))


async def _echo_serve(reply_size: int, poller: BusyPoller) -> int:
    """Answer each length-prefixed frame of the one connection with *reply_size* bytes; print the port
    first and, once the connection closes, how many frames were answered."""
    loop = asyncio.get_running_loop()
    closed: asyncio.Future[int] = loop.create_future()
    reply = _FRAME_LENGTH.pack(reply_size - _FRAME_LENGTH.size) + bytes(reply_size - _FRAME_LENGTH.size)

    class Echo(asyncio.Protocol):
        def __init__(self) -> None:
            self.buffer = bytearray()
            self.answered = 0

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = cast(asyncio.Transport, transport)

        def data_received(self, data: bytes) -> None:
            poller.read()
            self.buffer += data
            while len(self.buffer) >= _FRAME_LENGTH.size:
                frame_size = _FRAME_LENGTH.size + _FRAME_LENGTH.unpack_from(self.buffer)[0]
                if len(self.buffer) < frame_size:
                    break
                del self.buffer[:frame_size]
                self.transport.write(reply)
                poller.wrote()
                self.answered += 1

        def connection_lost(self, exc: Exception | None) -> None:
            if not closed.done():
                closed.set_result(self.answered)

    server = await loop.create_server(Echo, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        print(await closed, flush=True)
    return 0


async def _end_to_end(args: argparse.Namespace, producer: Producer, bodies: list[bytes]) -> dict[str, Any]:
    total = int(args.rate * args.duration)
    interval_ns = 1_000_000_000 // args.rate
    deadline = time.time() + args.duration + 30
    receiver = await asyncio.create_subprocess_exec(
        *_SELF,
        "bench",
        "e2e-receive",
        "--namesrv",
        args.namesrv,
        "--topic",
        args.topic,
        "--count",
        str(total),
        "--warmup",
        str(args.warmup),
        "--deadline",
        str(deadline),
        "--rate",
        str(args.rate),
        "--busy-poll-us",
        str(args.consumer_busy_poll_us),
        *(["--busy-poll-fixed"] if args.busy_poll_fixed else []),
        "--json",
        stdout=subprocess.PIPE,
        env={**os.environ, **security_environ(args)},
    )
    assert receiver.stdout is not None
    loop = asyncio.get_running_loop()
    failures: list[BaseException] = []
    stopped = threading.Event()

    def on_sent(outcome: object) -> None:
        if isinstance(outcome, BaseException):
            failures.append(outcome)

    def send(seq: int) -> None:  # on the loop, at its due time
        body = _STAMP.pack(time.monotonic_ns(), seq) + bodies[seq % _BODY_POOL][_STAMP.size :]
        try:
            producer.send_with_callback(Message(args.topic, body), on_sent)
        except Exception as exc:
            failures.append(exc)
        progress.advance(1)

    def pace() -> None:
        # Each send is due 1/RATE s after the one before. The loop cannot wait that precisely: its
        # timers wait in whole milliseconds (epoll and libuv), so at 2 000/s it would send pairs back to
        # back every millisecond, and the second of each pair would queue behind the first. This
        # thread sleeps to each due time and hands the send to the loop, which stamps it, so the
        # hand-over is not part of the latency measured.
        due = time.monotonic_ns()
        for seq in range(total):
            now = time.monotonic_ns()
            if due > now:
                time.sleep((due - now) / 1e9)
            if failures or stopped.is_set():
                return
            try:
                loop.call_soon_threadsafe(send, seq)
            except RuntimeError:  # the loop closed (interrupted)
                return
            due += interval_ns

    try:
        ready = await receiver.stdout.readline()  # the receiver sits at the queues' ends
        if not ready.startswith(b"ready"):
            raise CometMQError("the end-to-end receiver did not start")
        progress = Progress(f"end to end at {args.rate}/s", total)
        await asyncio.to_thread(pace)
        if not failures:
            output, _ = await receiver.communicate()
        if failures:
            raise CometMQError(f"a send failed: {failures[0]}")
        progress.close()
    finally:
        stopped.set()
        if receiver.returncode is None:
            receiver.kill()
            await receiver.wait()
    if receiver.returncode != 0:
        raise CometMQError("the end-to-end receiver failed")
    result: dict[str, Any] = json.loads(output)
    return result


async def _e2e_receive(args: argparse.Namespace) -> int:
    consumer = LitePullConsumer(
        BENCH_GROUP + "_e2e",
        args.namesrv,
        auto_commit=False,
        pull_batch_size=64,
        busy_poll_us=args.busy_poll_us,
        busy_poll_adaptive=not args.busy_poll_fixed,
        **security(args).client_options(),
    )
    async with consumer:
        queues: list[MessageQueue] = await consumer.fetch_queues(args.topic)
        consumer.assign(queues)
        for queue in queues:
            await consumer.seek_to_end(queue)
        await consumer.poll(timeout=0.05)  # pulls are parked at the ends before the sender starts
        print("ready", flush=True)
        samples: list[int] = []
        sent_at: list[tuple[int, int]] = []
        seen = 0
        while seen < args.count and time.time() < args.deadline:
            for message in await consumer.poll(timeout=1.0):
                received = time.monotonic_ns()
                stamp, seq = _STAMP.unpack_from(message.body)
                seen += 1
                if seq >= args.warmup:
                    samples.append(received - stamp)
                    sent_at.append((seq, stamp))
    row = _row(f"end to end at {args.rate} msg/s", seen, args.size, 0.0, samples, "send to receipt")
    # How evenly the sender kept the rate: the share of sends made less than a quarter of the interval
    # after the one before (the pacing's catch-up after a late wake-up, or sends in bursts).
    stamps = [stamp for _, stamp in sorted(sent_at)]
    if len(stamps) > 1:
        quarter = 1e9 / args.rate / 4
        bunched = sum(later - earlier < quarter for earlier, later in itertools.pairwise(stamps))
        row["bunched_sends"] = round(bunched / (len(stamps) - 1), 3)
    print(json.dumps(row), flush=True)
    return 0


def _row(
    workload: str, count: int, size: float, seconds: float, samples: Sequence[int], latency_of: str
) -> dict[str, Any]:
    """One line of the report; latency percentiles when there are samples."""
    row: dict[str, Any] = {"workload": workload, "messages": count}
    if seconds > 0:
        row["msg_per_s"] = round(count / seconds)
        row["mb_per_s"] = round(count * size / seconds / 1e6, 1)
    if samples:
        row.update(percentiles(samples))
        row["latency_of"] = latency_of
    return row


def _print_result(result: dict[str, Any], as_json: bool) -> None:
    rows = result["rows"]
    if as_json:
        print_json(result)
        return
    headers = ["workload", "messages", "msg/s", "MB/s", "p50 µs", "p99 µs", "max µs", "latency of"]
    keys = ["workload", "messages", "msg_per_s", "mb_per_s", "p50_us", "p99_us", "max_us", "latency_of"]
    several = any("rounds" in row for row in rows)
    if several:
        headers.append("rounds: min-max")
    table = []
    for row in rows:
        cells = []
        for key in keys:
            value = row.get(key, "")
            cells.append(f"{value:,.0f}" if isinstance(value, float | int) and key != "mb_per_s" else value)
        if several:
            figures = [figure for figure in row.get("rounds", ()) if figure is not None]
            cells.append(f"{min(figures):,.0f}-{max(figures):,.0f} ({len(figures)})" if figures else "")
        table.append(cells)
    if several:
        print("medians over the rounds")
    print(format_table(headers, table))
    if "note" in result:
        print(f"note: {result['note']}")
