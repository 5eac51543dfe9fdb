"""How CometMQ's costs grow with the work: queues, topics, connections, log size.

    .venv/bin/python bench/scaling.py [--only NAME[,NAME...]] [--dir PATH] [--full]

Each curve is printed as a table, with the ratio between its ends (see docs/performance.md, section
"Scaling", for what bounds each). Small counts by default; ``--full`` takes the counts the docs' table
was made with. Curves (``--only``):

- ``startup``: seconds from starting a standalone until it answers, on a data directory holding 10,
  1 000 and 10 000 topics (``--startup-topics``) of 8 queues, each queue holding a message; beside it
  the same start on an empty directory (the floor: Python, imports, the servers);
- ``create``: topics created per second through the admin request, and the latency of the first send
  to a new queue beside a send to a queue that already holds messages;
- ``queues``: batched produce and consume throughput spread over 8, 800 and 8 000 queues (over topics
  of 8 queues), in one run;
- ``rss``: the broker's resident memory per idle connection, per topic queue and per consumer group;
- ``cold``: consume throughput from a backlog read from disk (page cache dropped when root) beside the
  disk's own read speed (``dd`` with O_DIRECT);
- ``restart``: start-up after kill -9 with commit logs of 1 GiB and 20 GiB (``--restart-gib``);
- ``producers``: 1 → 1 000 concurrent connections each sending synchronously: total throughput, p99.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from cometmq.client import Message, MessageQueue, Producer
from cometmq.protocol import ResponseCode
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import encode_host
from cometmq.protocol.topic_config import TopicConfig
from cometmq.remoting import RemotingClient
from cometmq.store import MessageStore, MessageToStore, StoreConfig

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "broker")]

from _support import create_topic, heartbeat, pull, send_request  # noqa: E402

from processes import ServerProcess, cpu_seconds, standalone_args  # noqa: E402

QUEUES_PER_TOPIC = 8
HOST = encode_host("127.0.0.1", 50000)
# Topics stored per opening of the store while building a data directory: every queue written while it
# is open holds a descriptor, and a process may have few (ulimit -n).
TOPICS_PER_OPENING = 500


def topic_name(i: int) -> str:
    return f"ScaleTopic{i:05d}"


@contextlib.contextmanager
def no_fsync() -> Iterator[None]:
    """fsync and fdatasync do nothing in this process meanwhile: a data directory built for a
    measurement needs no durability while it is built (``os.sync`` afterwards), and syncing each of
    tens of thousands of new queue files (and its directory) would take most of the build."""
    saved = os.fsync, os.fdatasync
    os.fsync = os.fdatasync = lambda fd: None
    try:
        yield
    finally:
        os.fsync, os.fdatasync = saved
        os.sync()


def build_data_dir(data_dir: Path, topics: int, body_size: int = 100) -> None:
    """A standalone's data directory with *topics* topics of 8 queues, one message in each queue,
    written through the store (quicker than through a broker) and listed in config/topics.json."""
    body = os.urandom(body_size)
    props = encode_properties({"UNIQ_KEY": "0" * 32, "TAGS": "TagA"})
    with no_fsync():
        for first in range(0, topics, TOPICS_PER_OPENING):
            names = [topic_name(i) for i in range(first, min(topics, first + TOPICS_PER_OPENING))]
            queues = [(name, q) for name in names for q in range(QUEUES_PER_TOPIC)]
            put_through_store(data_dir, queues, body, props, tags_code=2598919)
    write_topic_table(data_dir, [topic_name(i) for i in range(topics)])


def put_through_store(
    data_dir: Path, queues: Iterable[tuple[str, int]], body: bytes, properties: str, tags_code: int
) -> None:
    """One message of *body* into each (topic, queue id) of *queues*, in turn, through one opening
    of the store on *data_dir*."""
    store = MessageStore(StoreConfig(data_dir))
    store.start()
    try:
        for topic, queue_id in queues:
            store.put(
                MessageToStore(
                    topic=topic,
                    queue_id=queue_id,
                    flag=0,
                    body=body,
                    properties=properties,
                    sys_flag=0,
                    born_timestamp=int(time.time() * 1000),
                    born_host=HOST,
                    store_host=HOST,
                    tags_code=tags_code,
                )
            )
    finally:
        store.shutdown()


def write_topic_table(data_dir: Path, names: list[str]) -> None:
    """config/topics.json listing *names*, each with 8 queues."""
    table = {name: TopicConfig(name, QUEUES_PER_TOPIC, QUEUES_PER_TOPIC).to_json() for name in names}
    config_dir = data_dir / "config"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "topics.json").write_text(
        json.dumps({"dataVersion": {"counter": 1, "timestamp": 0}, "topicConfigTable": table})
    )


class Broker:
    """A ``cometmq standalone`` on *data_dir* (ports the OS picks), started in ``__init__``; the
    seconds its start took (launch to ready line) in ``started_in``."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = data_dir
        begin = time.perf_counter()
        self.server = ServerProcess(
            standalone_args(data_dir, *extra), data_dir.parent / f"{data_dir.name}.log"
        )
        try:
            self.server.wait_ready("CometMQ standalone ready:", timeout=1800)
        except BaseException:
            self.server.terminate()
            raise
        self.started_in = time.perf_counter() - begin
        ready = re.search(r"namesrv (\S+), broker \S+ at (\S+),", self.server.ready_line)
        assert ready is not None, self.server.ready_line
        self.namesrv, self.addr = ready.group(1), ready.group(2)
        self.pid = self.server.proc.pid

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise SystemExit("no VmRSS in /proc/PID/status")

    def stop(self) -> None:
        if self.server.terminate(timeout=600) != 0:
            raise SystemExit(
                f"the broker exited with {self.server.proc.returncode}:\n{self.server.log()[-3000:]}"
            )

    def kill(self) -> None:
        self.server.proc.kill()
        self.server.terminate()


def median(values: list[float]) -> float:
    return statistics.median(values)


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def table(title: str, header: list[str], rows: list[list[str]], ends: str) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"\n## {title}\n")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("| " + " | ".join("-" * w for w in widths) + " |")
    for r in rows:
        print("| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + " |")
    print(f"\n{ends}")
    sys.stdout.flush()


def ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def floats(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part]


# -- start-up ----------------------------------------------------------------------------------------


def curve_startup(args: argparse.Namespace, base: Path) -> None:
    """Start-up seconds at each topic count, beside the start on an empty directory (the floor),
    alternating within each round."""
    dirs: dict[int, Path] = {}
    for topics in args.startup_topics:
        data = base / f"startup-{topics}"
        if not (data / "config" / "topics.json").exists():
            begin = time.perf_counter()
            shutil.rmtree(data, ignore_errors=True)
            build_data_dir(data, topics)
            print(f"built {data} ({topics} topics) in {time.perf_counter() - begin:.0f} s", flush=True)
        dirs[topics] = data
    floor: list[float] = []
    seconds: dict[int, list[float]] = {t: [] for t in dirs}
    for _ in range(args.rounds):
        empty = base / "startup-empty"
        shutil.rmtree(empty, ignore_errors=True)
        broker = Broker(empty)
        floor.append(broker.started_in)
        broker.stop()
        for topics, data in dirs.items():
            broker = Broker(data)
            seconds[topics].append(broker.started_in)
            broker.stop()
    rows = [["empty", "0", f"{median(floor):.2f}", "1.00"]]
    for topics, values in seconds.items():
        rows.append(
            [
                str(topics),
                str(topics * QUEUES_PER_TOPIC),
                f"{median(values):.2f}",
                f"{median(values) / median(floor):.2f}",
            ]
        )
    first, last = min(seconds), max(seconds)
    table(
        f"start-up, {QUEUES_PER_TOPIC} queues a topic, each holding a message (median of {args.rounds})",
        ["topics", "queues", "start s", "x empty"],
        rows,
        f"{last} / {first} topics: {median(seconds[last]) / median(seconds[first]):.2f}x",
    )
    if not args.keep:
        for data in dirs.values():
            shutil.rmtree(data, ignore_errors=True)


# -- topic creation and first sends ------------------------------------------------------------------


async def _create_and_first_send(broker: Broker, topics: int, window: int) -> list[list[str]]:
    client = RemotingClient()
    try:
        rates: list[tuple[int, float]] = []
        begin = time.perf_counter()
        for i in range(topics):
            reply = await create_topic(client, broker.addr, f"Created{i:05d}", QUEUES_PER_TOPIC)
            if reply.code != ResponseCode.SUCCESS:
                raise SystemExit(f"creating a topic failed: {reply.code} {reply.remark}")
            if (i + 1) % window == 0:
                now = time.perf_counter()
                rates.append((i + 1, window / (now - begin)))
                begin = now
        # First sends into new queues of the topics just created, each followed by a send to the same
        # queue (which holds a message by then): the difference is what a queue's first message costs.
        first: list[float] = []
        second: list[float] = []
        for i in range(min(topics, 200)):
            for q in range(QUEUES_PER_TOPIC):
                for into in (first, second):
                    started = time.perf_counter_ns()
                    reply = await client.invoke(broker.addr, send_request(f"Created{i:05d}", b"x" * 100, q))
                    into.append((time.perf_counter_ns() - started) / 1000)
                    if reply.code != ResponseCode.SUCCESS:
                        raise SystemExit(f"send failed: {reply.code} {reply.remark}")
    finally:
        await client.close()
    rows = [[f"topics {n - window}..{n}", f"{rate:.0f}", "", ""] for n, rate in rates]
    rows.append(["send, a new queue's first", "", f"{statistics.median(first):.0f}", f"{p99(first):.0f}"])
    rows.append(
        ["send, the same queue's second", "", f"{statistics.median(second):.0f}", f"{p99(second):.0f}"]
    )
    return rows


def curve_create(args: argparse.Namespace, base: Path) -> None:
    data = base / "create"
    shutil.rmtree(data, ignore_errors=True)
    broker = Broker(data)
    try:
        window = max(1, args.create_topics // 5)
        rows = asyncio.run(_create_and_first_send(broker, args.create_topics, window))
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
    first_rate, last_rate = float(rows[0][1]), float(rows[-3][1])
    first_send, second_send = float(rows[-2][2]), float(rows[-1][2])
    table(
        f"topic creation ({QUEUES_PER_TOPIC} queues each, one admin request at a time) and first sends",
        ["what", "topics/s", "p50 µs", "p99 µs"],
        rows,
        f"creation rate, last / first window: {last_rate / first_rate:.2f}x; "
        f"first send / second send p50: {first_send / second_send:.2f}x",
    )


# -- produce and consume over many queues ------------------------------------------------------------


async def _produce_consume(
    broker: Broker, label: str, queues: int, count: int, batch: int, size: int
) -> tuple[float, float]:
    """Create queues/8 topics, send *count* messages in batches of *batch* round-robin over the queues
    (8 batches in flight), then pull them all (8 pulls in flight, 32 messages a pull). msg/s of each."""
    topics = [f"{label}-{i:05d}" for i in range(max(1, queues // QUEUES_PER_TOPIC))]
    per_topic = min(queues, QUEUES_PER_TOPIC)
    client = RemotingClient()
    try:
        for t in topics:
            reply = await create_topic(client, broker.addr, t, per_topic)
            if reply.code != ResponseCode.SUCCESS:
                raise SystemExit(f"creating a topic failed: {reply.code} {reply.remark}")
    finally:
        await client.close()
    body = os.urandom(size)
    async with Producer("ScalingBench", broker.namesrv, send_timeout=60) as producer:
        targets: list[MessageQueue] = []
        for t in topics:
            targets += await producer.fetch_publish_queues(t)
        batches = [
            (
                [
                    Message(targets[b % len(targets)].topic, body)
                    for _ in range(min(batch, count - b * batch))
                ],
                targets[b % len(targets)],
            )
            for b in range(-(-count // batch))
        ]
        pending = iter(batches)

        async def sender() -> None:
            for msgs, queue in pending:
                await producer.send_batch(msgs, queue=queue)

        begin = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(8)))
        produce_s = time.perf_counter() - begin
    # Pulls straight over the wire: the broker's cost per queue, not a consumer's bookkeeping.
    holding = sorted({(q.topic, q.queue_id) for _, q in batches})
    work = iter(holding)
    received = 0
    client = RemotingClient()

    async def puller() -> None:
        nonlocal received
        for topic, queue_id in work:
            pulled = await _pull_queue(client, broker, topic, queue_id)
            received += pulled  # not ``received += await ...``, which reads ``received`` before awaiting

    try:
        begin = time.perf_counter()
        await asyncio.gather(*(puller() for _ in range(8)))
        consume_s = time.perf_counter() - begin
    finally:
        await client.close()
    if received != count:
        raise SystemExit(f"pulled {received} of {count} messages from {label}")
    return count / produce_s, count / consume_s


def create_files_s(directory: Path, queues: int) -> float:
    """Seconds to create *queues* consume-queue directories (topics of 8) and a file in each, as the
    store does for a queue's first message: what a produce run over that many new queues pays to the
    filesystem at least."""
    shutil.rmtree(directory, ignore_errors=True)
    begin = time.perf_counter()
    for q in range(queues):
        path = directory / str(q // QUEUES_PER_TOPIC) / str(q % QUEUES_PER_TOPIC)
        os.makedirs(path)
        os.close(os.open(path / "00000000000000000000", os.O_RDWR | os.O_CREAT, 0o644))
    seconds = time.perf_counter() - begin
    shutil.rmtree(directory)
    return seconds


def curve_queues(args: argparse.Namespace, base: Path) -> None:
    data = base / "queues"
    produce: dict[int, list[float]] = {q: [] for q in args.queues}
    consume: dict[int, list[float]] = {q: [] for q in args.queues}
    files: dict[int, list[float]] = {q: [] for q in args.queues}
    for r in range(args.rounds):
        # A fresh broker a round: a used queue keeps a descriptor per file, and rounds of 8 000 new
        # queues each would add up past the default `ulimit -n`.
        shutil.rmtree(data, ignore_errors=True)
        broker = Broker(data)
        try:
            for queues in args.queues:  # alternating within a round: the ends see the same machine
                p, c = asyncio.run(
                    _produce_consume(broker, f"Q{queues}R{r}", queues, args.count, args.batch, args.size)
                )
                produce[queues].append(p)
                consume[queues].append(c)
                used = min(queues, -(-args.count // args.batch))  # queues that got a batch
                files[queues].append(create_files_s(base / "files", used))
        finally:
            broker.stop()
            shutil.rmtree(data, ignore_errors=True)
    low = min(args.queues)
    rows = [
        [
            str(q),
            f"{median(produce[q]):.0f}",
            f"{median(produce[q]) / median(produce[low]):.2f}",
            f"{median(files[q]) / (args.count / median(produce[q])):.2f}",
            f"{median(consume[q]):.0f}",
            f"{median(consume[q]) / median(consume[low]):.2f}",
        ]
        for q in args.queues
    ]
    high = max(args.queues)
    table(
        f"batched produce and consume over many queues ({args.count} messages of {args.size} B, "
        f"batches of {args.batch}, topics of {QUEUES_PER_TOPIC} queues; median of {args.rounds}). "
        "'files' is the share of the produce run's time that creating its queues' directories and "
        "files alone takes on this filesystem, measured right after it",
        ["queues", "produce msg/s", f"x {low}", "files", "consume msg/s", f"x {low}"],
        rows,
        f"{high} / {low} queues: produce {median(produce[high]) / median(produce[low]):.2f}x, "
        f"consume {median(consume[high]) / median(consume[low]):.2f}x",
    )


# -- memory ------------------------------------------------------------------------------------------


async def _open_connections(addr: str, count: int) -> list[asyncio.StreamWriter]:
    host, port = addr.rsplit(":", 1)
    writers = []
    for _ in range(count):
        _, writer = await asyncio.open_connection(host, int(port))
        writers.append(writer)
    return writers


def settled_rss(broker: Broker) -> int:
    """RSS once it stops moving (the broker's loop has taken what was just done)."""
    last = broker.rss_bytes()
    for _ in range(20):
        time.sleep(0.25)
        now = broker.rss_bytes()
        if abs(now - last) < 64 << 10:
            return now
        last = now
    return last


async def _memory(broker: Broker, connections: int, queues: int, groups: int) -> list[list[str]]:
    rows = []
    before = settled_rss(broker)
    writers = await _open_connections(broker.addr, connections)
    after = settled_rss(broker)
    rows.append(["idle connection", str(connections), f"{(after - before) / connections / 1024:.1f}"])
    for w in writers:
        w.close()
    held = RemotingClient()
    before = settled_rss(broker)
    topics = max(1, queues // QUEUES_PER_TOPIC)
    for i in range(topics):
        await create_topic(held, broker.addr, f"Mem{i:05d}", QUEUES_PER_TOPIC)
        for q in range(QUEUES_PER_TOPIC):
            await held.invoke(broker.addr, send_request(f"Mem{i:05d}", b"x" * 100, q))
    after = settled_rss(broker)
    rows.append(
        [
            "topic queue holding a message",
            str(topics * QUEUES_PER_TOPIC),
            f"{(after - before) / (topics * QUEUES_PER_TOPIC) / 1024:.1f}",
        ]
    )
    before = settled_rss(broker)
    for g in range(groups):
        await held.invoke(broker.addr, heartbeat(f"client-{g}", f"MemGroup{g:05d}", "Mem00000"))
    after = settled_rss(broker)
    rows.append(["consumer group (one consumer)", str(groups), f"{(after - before) / groups / 1024:.1f}"])
    await held.close()
    return rows


def curve_rss(args: argparse.Namespace, base: Path) -> None:
    data = base / "rss"
    shutil.rmtree(data, ignore_errors=True)
    broker = Broker(data)
    try:
        idle = settled_rss(broker)
        rows = asyncio.run(_memory(broker, args.connections, args.rss_queues, args.groups))
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
    table(
        "broker memory (RSS) per unit",
        ["what", "count", "KiB each"],
        rows,
        f"an idle broker: {idle / (1 << 20):.0f} MiB",
    )


# -- cold backlog ------------------------------------------------------------------------------------


def evict(directory: Path) -> None:
    """Drop *directory*'s files from the page cache (the files are not mapped by anyone now)."""
    os.sync()
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def disk_read_mb_s(directory: Path) -> float:
    """Sequential read speed of the commit log's first segment, bypassing the page cache."""
    segment = min((directory / "commitlog").iterdir())
    out = subprocess.run(
        ["dd", f"if={segment}", "of=/dev/null", "bs=1M", "iflag=direct"],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    found = re.search(r"(\d+) bytes .* copied, ([\d.,]+) s", out)
    if found is None:
        raise SystemExit(f"cannot read dd's output: {out!r}")
    return int(found.group(1)) / float(found.group(2).replace(",", ".")) / 1e6


def curve_cold(args: argparse.Namespace, base: Path) -> None:
    data = base / "cold"
    shutil.rmtree(data, ignore_errors=True)
    count = args.cold_mib * (1 << 20) // args.size
    broker = Broker(data)
    try:
        asyncio.run(_produce_consume(broker, "ColdWarm", 8, 8 * args.batch, args.batch, args.size))
        produced = asyncio.run(_produce_only(broker, "Cold", count, args.batch, args.size))
    finally:
        broker.stop()
    rows = []
    ratio = ""
    for _ in range(args.rounds):
        evict(data)
        disk = disk_read_mb_s(data)
        evict(data)
        broker = Broker(data)
        try:
            rate = asyncio.run(_pull_all(broker, "Cold", produced))
            warm = asyncio.run(_pull_all(broker, "Cold", produced))  # the same pulls from the page cache
        finally:
            broker.stop()
        mb_s = rate * args.size / 1e6
        rows.append(
            [
                f"{rate:.0f}",
                f"{warm:.0f}",
                f"{rate / warm:.2f}",
                f"{mb_s:.0f}",
                f"{disk:.0f}",
                f"{mb_s / disk:.2f}",
            ]
        )
        ratio = (
            f"cold / warm consume: {rate / warm:.2f}x; consume / disk read: {mb_s / disk:.2f}x (last round)"
        )
    shutil.rmtree(data, ignore_errors=True)
    table(
        f"consume from a cold backlog of {args.cold_mib} MiB ({args.size} B bodies), page cache dropped",
        [
            "cold msg/s",
            "warm msg/s",
            "cold x warm",
            "cold MB/s (bodies)",
            "disk read MB/s (O_DIRECT)",
            "x disk",
        ],
        rows,
        ratio,
    )


async def _produce_only(broker: Broker, topic: str, count: int, batch: int, size: int) -> int:
    client = RemotingClient()
    try:
        await create_topic(client, broker.addr, topic, QUEUES_PER_TOPIC)
    finally:
        await client.close()
    body = os.urandom(size)
    async with Producer("ScalingBench", broker.namesrv, send_timeout=60) as producer:
        targets = await producer.fetch_publish_queues(topic)
        sent = iter(range(0, count, batch))

        async def sender() -> None:
            for start in sent:
                queue = targets[(start // batch) % len(targets)]
                await producer.send_batch([Message(topic, body)] * min(batch, count - start), queue=queue)

        await asyncio.gather(*(sender() for _ in range(8)))
    return count


async def _pull_queue(client: RemotingClient, broker: Broker, topic: str, queue_id: int) -> int:
    """Pull one queue over the wire from offset 0 to its end; how many messages it held."""
    offset = received = 0
    while True:
        _, records = await pull(client, broker.addr, topic, queue_id, offset, group="ScalingBench")
        if not records:
            return received
        received += len(records)
        offset = records[-1].queue_offset + 1


async def _pull_all(broker: Broker, topic: str, count: int) -> float:
    client = RemotingClient()
    try:
        begin = time.perf_counter()
        received = sum(
            await asyncio.gather(*(_pull_queue(client, broker, topic, q) for q in range(QUEUES_PER_TOPIC)))
        )
        seconds = time.perf_counter() - begin
    finally:
        await client.close()
    if received != count:
        raise SystemExit(f"pulled {received} of {count}")
    return count / seconds


# -- restart after kill -9 ---------------------------------------------------------------------------


def fill_commit_log(data: Path, gib: float) -> None:
    """A store whose commit log holds *gib* GiB of 64 KiB messages over 8 queues (put through the
    store, synced once at the end)."""
    body = os.urandom(64 << 10)
    count = int(gib * (1 << 30)) // (len(body) + 200)
    with no_fsync():
        queues = (("Restart", i % QUEUES_PER_TOPIC) for i in range(count))
        put_through_store(data, queues, body, "", tags_code=0)
    write_topic_table(data, ["Restart"])


async def _keep_sending(broker: Broker, seconds: float) -> None:
    client = RemotingClient()
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await client.invoke(broker.addr, send_request("Restart", b"y" * 1000, 0))
    finally:
        await client.close()


def curve_restart(args: argparse.Namespace, base: Path) -> None:
    rows = []
    clean: dict[float, float] = {}
    killed: dict[float, float] = {}
    for gib in args.restart_gib:
        data = base / f"restart-{gib:g}"
        shutil.rmtree(data, ignore_errors=True)
        begin = time.perf_counter()
        fill_commit_log(data, gib)
        print(f"wrote a {gib:g} GiB commit log in {time.perf_counter() - begin:.0f} s", flush=True)
        try:
            broker = Broker(data)
            asyncio.run(_keep_sending(broker, 1.5))  # past a checkpoint: a crash amid traffic
            broker.kill()
            broker = Broker(data)
            killed[gib] = broker.started_in
            broker.stop()
            broker = Broker(data)
            clean[gib] = broker.started_in
            broker.stop()
        finally:
            shutil.rmtree(data, ignore_errors=True)
        rows.append(
            [f"{gib:g}", f"{killed[gib]:.2f}", f"{clean[gib]:.2f}", f"{killed[gib] / clean[gib]:.2f}"]
        )
    low, high = min(killed), max(killed)
    table(
        "restart after kill -9 amid sends, beside a start after a clean shutdown",
        ["commit log GiB", "after kill -9 s", "after clean stop s", "x clean"],
        rows,
        f"{high:g} / {low:g} GiB after kill -9: {killed[high] / killed[low]:.2f}x",
    )


# -- concurrent synchronous producers ----------------------------------------------------------------


async def _producers(broker: Broker, connections: int, seconds: float) -> tuple[float, float]:
    clients = [RemotingClient() for _ in range(connections)]
    latencies: list[float] = []
    try:
        for c in clients:  # connected before the clock starts
            await c.invoke(broker.addr, send_request("Producers", b"warm-up", 0))
        stop = time.monotonic() + seconds
        sent = 0

        async def producer(client: RemotingClient, queue_id: int) -> None:
            nonlocal sent
            body = b"z" * 1024
            while time.monotonic() < stop:
                started = time.perf_counter_ns()
                reply = await client.invoke(broker.addr, send_request("Producers", body, queue_id))
                latencies.append((time.perf_counter_ns() - started) / 1000)
                if reply.code != ResponseCode.SUCCESS:
                    raise SystemExit(f"send failed: {reply.code} {reply.remark}")
                sent += 1

        begin = time.perf_counter()
        await asyncio.gather(*(producer(c, i % QUEUES_PER_TOPIC) for i, c in enumerate(clients)))
        elapsed = time.perf_counter() - begin
    finally:
        for c in clients:
            await c.close()
    return sent / elapsed, p99(latencies)


def curve_producers(args: argparse.Namespace, base: Path) -> None:
    data = base / "producers"
    shutil.rmtree(data, ignore_errors=True)
    broker = Broker(data)
    rates: dict[int, list[float]] = {n: [] for n in args.producers}
    tails: dict[int, list[float]] = {n: [] for n in args.producers}
    # CPU shares (of one core) of the broker and of this client process during each run: on a shared
    # machine a run neither process keeps busy is waiting for the CPU, not for the other.
    broker_cpu: dict[int, list[float]] = {n: [] for n in args.producers}
    client_cpu: dict[int, list[float]] = {n: [] for n in args.producers}
    try:
        client_setup = RemotingClient()

        async def setup() -> None:
            await create_topic(client_setup, broker.addr, "Producers", QUEUES_PER_TOPIC)
            await client_setup.close()

        asyncio.run(setup())
        for _ in range(args.rounds):
            for n in args.producers:
                cpu, own, wall = cpu_seconds(broker.pid), time.process_time(), time.perf_counter()
                rate, tail = asyncio.run(_producers(broker, n, args.seconds))
                wall = time.perf_counter() - wall
                rates[n].append(rate)
                tails[n].append(tail)
                broker_cpu[n].append((cpu_seconds(broker.pid) - cpu) / wall)
                client_cpu[n].append((time.process_time() - own) / wall)
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
    rows = [
        [
            str(n),
            f"{median(rates[n]):.0f}",
            f"{median(tails[n]):.0f}",
            f"{median(broker_cpu[n]):.2f}",
            f"{median(client_cpu[n]):.2f}",
        ]
        for n in args.producers
    ]
    low, high = min(args.producers), max(args.producers)
    table(
        f"concurrent connections each sending 1 KiB synchronously ({args.seconds:g} s each, "
        f"median of {args.rounds})",
        ["connections", "msg/s total", "p99 µs", "broker CPU", "client CPU"],
        rows,
        f"{high} / {low} connections: throughput {median(rates[high]) / median(rates[low]):.2f}x, "
        f"p99 {median(tails[high]) / median(tails[low]):.2f}x",
    )


CURVES = {
    "startup": curve_startup,
    "create": curve_create,
    "queues": curve_queues,
    "rss": curve_rss,
    "cold": curve_cold,
    "restart": curve_restart,
    "producers": curve_producers,
}
# What --full sets: the counts docs/performance.md's figures were made with.
FULL = {
    "startup_topics": [10, 1000, 10000],
    "create_topics": 2000,
    "queues": [8, 800, 8000],
    "count": 256_000,
    "connections": 1000,
    "rss_queues": 10_000,
    "groups": 1000,
    "cold_mib": 4096,
    "restart_gib": [1.0, 20.0],
    "producers": [1, 10, 100, 1000],
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default=",".join(CURVES), help="curves to run, comma-separated (all)")
    parser.add_argument("--dir", type=Path, default=None, help="where the data directories go (system temp)")
    parser.add_argument("--keep", action="store_true", help="keep the start-up data directories for a rerun")
    parser.add_argument("--full", action="store_true", help="the full counts (see FULL)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, medians reported (1)")
    parser.add_argument("--startup-topics", type=ints, default=[10, 1000], help="topic counts (10,1000)")
    parser.add_argument("--create-topics", type=int, default=200, help="topics created (200)")
    parser.add_argument("--queues", type=ints, default=[8, 80, 800], help="queue counts (8,80,800)")
    parser.add_argument("--count", type=int, default=25_600, help="messages per produce/consume run (25600)")
    parser.add_argument("--batch", type=int, default=32, help="messages per batch (32)")
    parser.add_argument("--size", type=int, default=1024, help="body bytes (1024)")
    parser.add_argument("--connections", type=int, default=100, help="idle connections for the RSS (100)")
    parser.add_argument("--rss-queues", type=int, default=800, help="queues for the RSS (800)")
    parser.add_argument("--groups", type=int, default=100, help="consumer groups for the RSS (100)")
    parser.add_argument("--cold-mib", type=int, default=256, help="cold backlog MiB (256)")
    parser.add_argument("--restart-gib", type=floats, default=[0.25, 1.0], help="commit log GiB (0.25,1)")
    parser.add_argument("--producers", type=ints, default=[1, 10, 100], help="connections (1,10,100)")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per producers run (2)")
    parser.add_argument("--build-only", type=int, default=None, help="build a data dir of N topics and stop")
    args = parser.parse_args()
    if args.full:
        for key, value in FULL.items():
            setattr(args, key, value)
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    base = (
        args.dir
        if args.keep and args.dir is not None
        else Path(tempfile.mkdtemp(prefix="scaling-", dir=args.dir))
    )
    if args.build_only is not None:
        begin = time.perf_counter()
        build_data_dir(base / f"startup-{args.build_only}", args.build_only)
        print(f"built {base / f'startup-{args.build_only}'} in {time.perf_counter() - begin:.1f} s")
        return
    try:
        for name in args.only.split(","):
            CURVES[name](args, base)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
