"""Read throughput of the PySpark data source (`cometmq.spark`) beside a Python source's ceiling.

    .venv/bin/python bench/spark.py [--messages 1000000] [--queues 4] [--rounds 3] [--namesrv HOST:PORT]
        [--master local[2]] [--master cluster] [--master spark://HOST:PORT] [--min-partitions N]

Starts a `cometmq standalone` server in a temp dir (or uses --namesrv), creates a topic of QUEUES
queues and loads MESSAGES messages of 1 KiB into it with `Producer.send_batch` (tags, keys and
UNIQ_KEY set as a normal producer sets them). Then, for each master (by default `local[2]`, then
`cluster`: a Spark standalone cluster of one worker with 2 cores started here with `spark-class`, as
the tests start it; or a `spark://` URL of a running one), in one SparkSession on that master, it
times jobs that read everything into Spark's `noop` sink:

- `cometmq`, batch: `spark.read.format("cometmq")...load().write.format("noop").save()`;
- `cometmq`, streaming: `readStream` from `earliest`, `trigger(availableNow=True)`, `noop` sink;
- `synthetic`, the ceiling: a Python data source defined here with exactly the connector's schema
  (`SCHEMA_DDL`, batches in `ARROW_SCHEMA`), the same partitions (one per queue, as many rows each)
  and batches of as many rows as the connector's first batch. Its `read()` builds, once per
  partition, a Python list per column (bodies: references to 256 prebuilt 1 KiB `bytes`; 32-digit
  ids, keys as one-element lists, tags, offsets, timestamps, constants; `properties` null as the
  connector's by default), then yields `pa.RecordBatch.from_arrays` of `pa.array`s of list slices.
  So the ceiling counts building those lists (timed: it runs in the job) and converting Python objects
  to Arrow, plus everything Spark does with the batches; it has no network, broker or decoding;
- `synthetic-prebuilt`: the same source re-yielding one batch built once: no per-row Python work at
  all (Spark's own cost of taking Arrow batches from a Python worker, and the noop sink);
- with `--min-partitions N`, `cometmq-minPartitions`: the batch read with the connector's
  `minPartitions` option (a queue's range split over several partitions).

A warm-up runs each job once (and checks schemas and row counts), then ROUNDS rounds run the jobs
in turn; medians are reported per master, with the connector's ratio to the ceiling on the same
master (the goal: >= 0.70). Besides wall time, each run's CPU time is read from /proc: that of this
script's process tree (Spark's JVMs, its Python workers, the standalone server and the Spark cluster
started here) per message, the server's share, and the load other processes put on the machine
meanwhile. The ratio of CPU per message is the
steadier figure on a shared machine; wall-clock figures only compare when "other load" is ~0.
`--messages 20000 --rounds 1` is a quick smoke run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "spark"))

from spark_cluster import SparkCluster  # noqa: E402

from cometmq.client import AdminClient, Message, MessageQueue, Producer  # noqa: E402
from cometmq.console import format_table  # noqa: E402
from cometmq.spark import ARROW_SCHEMA, SCHEMA_DDL  # noqa: E402
from cometmq.spark._cluster import Cluster  # noqa: E402
from cometmq.spark._read import QueueRange, read_range  # noqa: E402
from cometmq.spark._schema import PROPERTIES_TYPE  # noqa: E402
from cometmq.spark.pipeline import spark_session  # noqa: E402
from processes import ServerProcess, cpu_seconds, start_standalone  # noqa: E402

TARGET = 0.70
CORES = os.cpu_count() or 1
TICKS = os.sysconf("SC_CLK_TCK")
TOPIC = "SparkBench"
GROUP = "cometmq_spark_bench"
TAGS = ("created", "paid", "shipped", "closed")
BODY_POOL = 256
SEND_BATCH = 100
IN_FLIGHT = 8


# -- loading the topic -------------------------------------------------------------------------------


async def load(namesrv: str, topic: str, queues: int, count: int, size: int) -> float:
    """Create ``topic`` and send ``count`` messages of ``size`` bytes to it; returns messages/s."""
    async with AdminClient(namesrv) as admin:
        await admin.create_topic(topic, queues)
    rng = random.Random(7)
    bodies = [rng.randbytes(size) for _ in range(BODY_POOL)]
    batches = (
        [
            Message(topic, bodies[i % BODY_POOL], tags=TAGS[i % len(TAGS)], keys=f"order-{i}")
            for i in range(start, min(start + SEND_BATCH, count))
        ]
        for start in range(0, count, SEND_BATCH)
    )
    sent = 0
    step = max(count // 10, 1)
    started = time.perf_counter()
    async with Producer(GROUP, namesrv, send_timeout=30.0) as producer:

        async def sender() -> None:
            nonlocal sent
            for batch in batches:  # the generator is shared: each batch goes to one sender
                await producer.send_batch(batch)
                before, sent = sent, sent + len(batch)
                if sent // step != before // step or sent == count:
                    rate = sent / (time.perf_counter() - started)
                    print(f"  loaded {sent:>10,} of {count:,} ({rate:,.0f} msg/s)", flush=True)

        await asyncio.gather(*(sender() for _ in range(IN_FLIGHT)))
    return count / (time.perf_counter() - started)


def topic_layout(namesrv: str, topic: str) -> list[tuple[MessageQueue, int, int]]:
    """(queue, first offset, end offset) of every queue of ``topic``."""
    cluster = Cluster(namesrv)
    try:
        queues = cluster.run(cluster.queues([topic]))
        bounds = cluster.run(cluster.bounds(queues))
    finally:
        cluster.close()
    return [(q, *bounds[q]) for q in queues]


def probe_batch(namesrv: str, queue: MessageQueue, start: int, end: int) -> pa.RecordBatch:
    """The first Arrow batch the connector reads from ``queue`` (its size sets the synthetic one's)."""
    batches = read_range(QueueRange(namesrv, queue, start, end, "*", True, False))
    try:
        return next(batches)
    finally:
        batches.close()  # type: ignore[attr-defined]


# -- the synthetic source (the ceiling) --------------------------------------------------------------


class SyntheticDataSource(DataSource):
    """``format("synthetic")``: the connector's schema, from Python memory. Options: ``rows`` (rows
    per partition, comma-separated), ``batchRows``, ``bodySize``, ``prebuilt`` (true: re-yield one
    batch built once)."""

    @classmethod
    def name(cls) -> str:
        return "synthetic"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return SyntheticReader(dict(self.options))


class SyntheticReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.topic = options.get("topic", TOPIC)
        self.broker = options.get("broker", "broker-a")
        self.rows = [int(n) for n in options["rows"].split(",")]
        self.batch_rows = int(options["batchrows"])
        self.body_size = int(options.get("bodysize", "1024"))
        self.prebuilt = options.get("prebuilt", "false") == "true"

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition((queue_id, rows)) for queue_id, rows in enumerate(self.rows)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        queue_id, n = partition.value
        step = self.batch_rows
        size = min(n, step) if self.prebuilt else n
        columns = synthetic_columns(self.topic, self.broker, queue_id, size, self.body_size)
        if self.prebuilt:
            batch = synthetic_batch(columns, 0, min(n, step))
            for start in range(0, n, step):
                yield batch if start + step <= n else batch.slice(0, n - start)
            return
        for start in range(0, n, step):
            yield synthetic_batch(columns, start, min(start + step, n))


def synthetic_columns(topic: str, broker: str, queue_id: int, n: int, body_size: int) -> list[list[Any]]:
    """Python lists of every column but ``properties`` (null, as the connector's by default)."""
    rng = random.Random(queue_id)
    pool = [rng.randbytes(body_size) for _ in range(BODY_POOL)]
    born = 1_795_000_000_000_000 + queue_id  # µs
    return [
        [topic] * n,
        [broker] * n,
        [queue_id] * n,
        list(range(n)),
        [f"7F0000010000{queue_id:04X}0000{i:012X}" for i in range(n)],  # 32 hex digits, as UNIQ_KEY
        [[f"order-{i}"] for i in range(n)],
        [TAGS[i & 3] for i in range(n)],
        [pool[i % BODY_POOL] for i in range(n)],
        [born + i for i in range(n)],
        [born + i + 1000 for i in range(n)],
        [0] * n,
    ]


# The synthetic columns are the schema's but for ``properties``, which is null (as the connector's by
# default).
_PROPERTIES_AT = ARROW_SCHEMA.get_field_index("properties")
_TYPES = [field.type for field in ARROW_SCHEMA if field.name != "properties"]


def synthetic_batch(columns: list[list[Any]], start: int, end: int) -> pa.RecordBatch:
    arrays = [pa.array(column[start:end], kind) for column, kind in zip(columns, _TYPES, strict=True)]
    arrays.insert(_PROPERTIES_AT, pa.nulls(end - start, PROPERTIES_TYPE))
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


# -- CPU accounting ----------------------------------------------------------------------------------


def machine_busy_s() -> float:
    """CPU seconds spent busy, over all cores and every process, since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / TICKS


def process_cpu_s(pid: int | None) -> float:
    """CPU seconds of process ``pid`` (all its threads); 0 without one."""
    return 0.0 if pid is None else cpu_seconds(pid)


def tree_cpu_s(root: int) -> float:
    """CPU seconds of process ``root`` and its descendants (threads, and children already reaped,
    included): this script, Spark's JVM and Python workers, and the standalone server if it runs."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid = int(entry)
        parents[pid] = int(fields[1])
        times[pid] = sum(int(x) for x in fields[11:15]) / TICKS  # utime stime cutime cstime
    total = 0.0
    for pid, cpu in times.items():
        ancestor = pid
        while ancestor not in (root, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == root:
            total += cpu
    return total


# -- the jobs ----------------------------------------------------------------------------------------


@dataclass
class Run:
    seconds: float
    own_cpu_s: float  # this script's process tree: Spark (JVM, Python workers) and the server
    broker_cpu_s: float  # the standalone server's share of it
    busy_cpu_s: float  # the whole machine

    @property
    def others_load(self) -> float:
        """Cores other processes kept busy during the run (0 on a quiet machine)."""
        return max(self.busy_cpu_s - self.own_cpu_s, 0.0) / self.seconds


@dataclass
class Job:
    name: str
    what: str
    run: Callable[[], int]  # returns the rows read, or -1 when the job cannot tell
    results: list[Run]


def make_session(tmp: Path, master: str) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # the tests' light settings, cometmq registered
    spark = spark_session(tmp, "cometmq-bench", master=master)
    spark.dataSource.register(SyntheticDataSource)
    return spark


@contextlib.contextmanager
def master_url(master: str, tmp: Path) -> Iterator[str]:
    """``master`` as a SparkSession takes it: ``cluster`` starts a standalone cluster for the while."""
    if master != "cluster":
        yield master
        return
    started = time.perf_counter()
    cluster = SparkCluster(tmp / "spark-cluster")
    try:
        cluster.start()
        print(f"Spark standalone cluster at {cluster.master_url} in {time.perf_counter() - started:.1f} s")
        yield cluster.master_url
    finally:
        cluster.stop()


def define_jobs(
    spark: Any,
    tmp: Path,
    namesrv: str,
    queues: list[tuple[MessageQueue, int, int]],
    batch_rows: int,
    stream: bool,
    min_partitions: int | None,
) -> list[Job]:
    topic = queues[0][0].topic

    def connector_batch(**options: str) -> Callable[[], int]:
        def run() -> int:
            reader = spark.read.format("cometmq").option("namesrv", namesrv).option("topic", topic)
            reader.options(**options).load().write.format("noop").mode("overwrite").save()
            return -1

        return run

    def connector_stream() -> int:
        query = (
            spark.readStream.format("cometmq")
            .option("namesrv", namesrv)
            .option("topic", topic)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("noop")
            .trigger(availableNow=True)
            .option("checkpointLocation", tempfile.mkdtemp(prefix="checkpoint-", dir=tmp))
            .start()
        )
        query.awaitTermination()
        if query.exception() is not None:
            raise SystemExit(f"streaming query failed: {query.exception()}")
        return sum(int(p["numInputRows"]) for p in query.recentProgress)

    def synthetic(prebuilt: bool) -> Callable[[], int]:
        def run() -> int:
            reader = synthetic_reader(spark, queues, batch_rows).option("prebuilt", str(prebuilt).lower())
            reader.load().write.format("noop").mode("overwrite").save()
            return -1

        return run

    jobs = [
        Job("cometmq", "spark.read, noop sink", connector_batch(), []),
        Job("synthetic", "Python lists → Arrow (the ceiling)", synthetic(False), []),
        Job("synthetic-prebuilt", "one prebuilt batch re-yielded", synthetic(True), []),
    ]
    if stream:
        jobs.append(Job("cometmq-stream", "readStream, availableNow, noop", connector_stream, []))
    if min_partitions is not None:
        split = connector_batch(minPartitions=str(min_partitions))
        jobs.append(Job("cometmq-minPartitions", f"spark.read, minPartitions {min_partitions}", split, []))
    return jobs


def synthetic_reader(spark: Any, queues: list[tuple[MessageQueue, int, int]], batch_rows: int) -> Any:
    return (
        spark.read.format("synthetic")
        .option("topic", queues[0][0].topic)
        .option("broker", queues[0][0].broker_name)
        .option("rows", ",".join(str(end - start) for _, start, end in queues))
        .option("batchRows", str(batch_rows))
    )


def timed(job: Job, broker_pid: int | None) -> Run:
    me = os.getpid()
    busy, own, broker = machine_busy_s(), tree_cpu_s(me), process_cpu_s(broker_pid)
    started = time.perf_counter()
    job.run()
    seconds = time.perf_counter() - started
    return Run(seconds, tree_cpu_s(me) - own, process_cpu_s(broker_pid) - broker, machine_busy_s() - busy)


def warm_up(
    spark: Any, jobs: list[Job], namesrv: str, queues: list[tuple[MessageQueue, int, int]], batch_rows: int
) -> None:
    """Each job once; schemas and row counts checked (count() reads every column: Python sources
    have no column pruning)."""
    expected = sum(end - start for _, start, end in queues)
    connector = (
        spark.read.format("cometmq").option("namesrv", namesrv).option("topic", queues[0][0].topic).load()
    )
    synthetic = synthetic_reader(spark, queues, batch_rows).load()
    if synthetic.schema != connector.schema:
        raise SystemExit("the synthetic source's schema is not the connector's")
    counts = connector.count(), synthetic.count()
    if counts != (expected, expected):
        raise SystemExit(f"row counts (cometmq, synthetic) are {counts}, not {expected}")
    for job in jobs:
        started = time.perf_counter()
        got = job.run()
        if got not in (-1, expected):
            raise SystemExit(f"{job.name}: read {got} rows, want {expected}")
        print(f"  warm-up {job.name}: {time.perf_counter() - started:.1f} s", flush=True)


# -- main --------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages to load (1000000)")
    parser.add_argument("--size", type=int, default=1024, help="body bytes (1024)")
    parser.add_argument("--queues", type=int, default=4, help="queues of the topic (4)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of every job (3)")
    parser.add_argument("--namesrv", help="use this cluster instead of starting a standalone server")
    parser.add_argument("--topic", default=TOPIC, help=f"topic to create and load ({TOPIC})")
    parser.add_argument(
        "--no-load", action="store_true", help="read the topic as it is (loaded by an earlier run)"
    )
    parser.add_argument("--no-stream", action="store_true", help="skip the streaming job")
    parser.add_argument("--dir", type=Path, default=None, help="where the temp dir goes")
    parser.add_argument(
        "--master",
        action="append",
        dest="masters",
        metavar="MASTER",
        help="local[N], cluster (a standalone cluster started here) or spark://HOST:PORT; "
        "repeat for several (default: local[2], then cluster)",
    )
    parser.add_argument(
        "--min-partitions",
        type=int,
        metavar="N",
        help="also time the batch read with the connector's minPartitions option set to N",
    )
    args = parser.parse_args()
    args.masters = args.masters or ["local[2]", "cluster"]

    with tempfile.TemporaryDirectory(prefix="cometmq-spark-bench-", dir=args.dir) as name:
        tmp = Path(name)
        server: ServerProcess | None = None
        namesrv = args.namesrv
        if namesrv is None:
            server, namesrv = start_standalone(tmp / "data")
            print(f"standalone server at {namesrv} (data in {tmp / 'data'})", flush=True)
        try:
            bench(args, tmp, namesrv, server.proc.pid if server is not None else None)
        finally:
            if server is not None:
                server.terminate()


def bench(args: argparse.Namespace, tmp: Path, namesrv: str, broker_pid: int | None) -> None:
    if not args.no_load:
        print(f"loading {args.messages:,} messages of {args.size} bytes into {args.topic}", flush=True)
        load_rate = asyncio.run(load(namesrv, args.topic, args.queues, args.messages, args.size))
        print(f"  loaded at {load_rate:,.0f} msg/s", flush=True)
    layout = topic_layout(namesrv, args.topic)
    rows = [end - start for _, start, end in layout]
    total = sum(rows)
    if not total:
        raise SystemExit(f"topic {args.topic} is empty")
    queue, start, end = max(layout, key=lambda q: q[2] - q[1])
    probe = probe_batch(namesrv, queue, start, end)
    if probe.schema != ARROW_SCHEMA:
        raise SystemExit("the connector's batches do not have ARROW_SCHEMA")
    batch_rows = probe.num_rows
    body_bytes = sum(len(b) for b in probe.column("body").to_pylist()) / batch_rows
    print(
        f"{total:,} messages in {len(rows)} queues ({', '.join(f'{n:,}' for n in rows)}); "
        f"the connector yields batches of {batch_rows} rows",
        flush=True,
    )

    for master in args.masters:
        with master_url(master, tmp) as url:
            started = time.perf_counter()
            spark = make_session(tmp, url)
            seconds = time.perf_counter() - started
            print(f"SparkSession on {spark.sparkContext.master} started in {seconds:.1f} s", flush=True)
            try:
                jobs = define_jobs(
                    spark, tmp, namesrv, layout, batch_rows, not args.no_stream, args.min_partitions
                )
                warm_up(spark, jobs, namesrv, layout, batch_rows)
                for round_no in range(1, args.rounds + 1):
                    for job in jobs:
                        result = timed(job, broker_pid)
                        job.results.append(result)
                        print(
                            f"  round {round_no} {job.name:<21} {result.seconds:6.2f} s  "
                            f"{total / result.seconds:>9,.0f} msg/s  "
                            f"CPU {result.own_cpu_s / total * 1e6:5.1f} µs/msg "
                            f"(server {result.broker_cpu_s / total * 1e6:3.1f})  "
                            f"other load {result.others_load:.1f} cores",
                            flush=True,
                        )
            finally:
                spark.stop()
        report(jobs, total, body_bytes, args, master)


def median_rate(job: Job, total: int) -> float:
    return total / statistics.median(r.seconds for r in job.results)


def median_cpu_us(job: Job, total: int) -> float:
    return statistics.median(r.own_cpu_s for r in job.results) / total * 1e6


def report(jobs: list[Job], total: int, body_bytes: float, args: argparse.Namespace, master: str) -> None:
    by_name = {job.name: job for job in jobs}
    ceiling = median_rate(by_name["synthetic"], total)
    ceiling_cpu = median_cpu_us(by_name["synthetic"], total)
    table = []
    for job in jobs:
        rate = median_rate(job, total)
        cpu = median_cpu_us(job, total)
        table.append(
            [
                job.name,
                job.what,
                f"{rate:,.0f}",
                f"{rate * body_bytes / 1e6:,.0f}",
                f"{rate / ceiling:.2f}",
                f"{cpu:.1f}",
                f"{statistics.median(r.broker_cpu_s for r in job.results) / total * 1e6:.1f}",
                f"{ceiling_cpu / cpu:.2f}",
                f"{statistics.median(r.others_load for r in job.results):.1f}",
                ", ".join(f"{total / r.seconds:,.0f}" for r in job.results),
            ]
        )
    print(f"\nSpark master {master}:")
    print(
        format_table(
            [
                "job", "what", "msgs/s", "MB/s", "of ceiling", "CPU µs/msg", "server µs/msg",
                "of ceiling (CPU)", "other load", "runs (msgs/s)",
            ],
            table,
        )
    )  # fmt: skip
    ratio = median_rate(by_name["cometmq"], total) / ceiling
    verdict = "meets" if ratio >= TARGET else "is below"
    # Each round's own pair (the jobs run one after the other): slower moments of the host fall on both.
    per_round = [
        ceiling_run.seconds / run.seconds
        for run, ceiling_run in zip(by_name["cometmq"].results, by_name["synthetic"].results, strict=True)
    ]
    print(
        f"\n{master}: cometmq batch read / synthetic ceiling: {ratio:.3f} (of the medians), which "
        f"{verdict} the {TARGET:.0%} target; round by round {', '.join(f'{r:.3f}' for r in per_round)} "
        f"(median {statistics.median(per_round):.3f}).\n"
        f"Medians of {args.rounds} round(s), {total:,} messages of {args.size} bytes; MB/s of bodies.\n"
        "CPU µs/msg: CPU time of this script's process tree (Spark's JVMs and Python workers, the "
        "Spark cluster started here, and the standalone server unless --namesrv) per message; of "
        "ceiling (CPU) compares those. Other load: cores kept busy by other processes meanwhile "
        "(figures are only comparable when it is ~0)."
    )
    print(f"python {sys.version.split()[0]}, pyarrow {pa.__version__}, {CORES} cores")


if __name__ == "__main__":
    main()
