"""The reference pipeline: order events → Spark Structured Streaming → revenue per category and
event-time window → topic ``orders-by-category`` and Parquet.

The pieces are importable on their own: :func:`generate_events` (deterministic, seeded),
:func:`expected_aggregates` (the same totals in plain Python), :func:`aggregate_orders` and
:func:`build_query` (the Spark job), and :func:`run_demo`, which runs everything end to end
(``cometmq pipeline demo``).

Choices, and why:

- **Append mode with a watermark.** A window is written once, when the watermark passes its end,
  so what reaches Parquet and the result topic is final: no updates to merge downstream.
- **No event is ever late.** Every event is at most ``MAX_LATENESS_MS`` (20 s) older than the newest
  event sent before it, and the watermark trails the newest event seen by ``WATERMARK_MS`` (30 s).
  The events go to one queue (one sharding key), so Spark's micro-batches are prefixes of the send
  order whatever their boundaries, and no event arrives behind a watermark that has already passed
  it: Spark's totals equal :func:`expected_aggregates` exactly. (Over several queues, each batch cuts
  each queue at a different point; that disorder adds to the lateness and needs a wider watermark.)
- **A flush event ends the demo.** A watermark only moves with new events, so the last windows would
  wait for orders that never come. After the orders, the generator sends :func:`flush_event`, one
  window plus one watermark after the newest order: the watermark passes every real window and they
  are all emitted. Its own window stays open, so it never shows in the results. (``availableNow``
  would not help: it stops when the data runs out, with the last windows still open.)
- **One foreachBatch, two sinks.** Each micro-batch's final windows are written to
  ``OUT/batch_id=N`` (overwritten when Spark replays the batch after a failure, so Parquet holds each
  window once) and then published to the result topic (at least once, like Spark's Kafka sink: a
  replayed batch publishes again; the message keys name the window, for consumers that de-duplicate).
  Two separate streaming queries would read the topic and keep the aggregation state twice.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from cometmq.client.message import MessageQueue

__all__ = [
    "RESULT_TOPIC",
    "SOURCE_TOPIC",
    "Aggregates",
    "DemoResult",
    "OrderEvent",
    "WindowTotal",
    "aggregate_orders",
    "build_query",
    "expected_aggregates",
    "flush_event",
    "generate_events",
    "parse_result",
    "read_parquet_results",
    "run_demo",
    "spark_session",
    "to_aggregates",
]

SOURCE_TOPIC = "orders"
RESULT_TOPIC = "orders-by-category"
WINDOW_MS = 60_000
WATERMARK_MS = 30_000
MAX_LATENESS_MS = 20_000
DEFAULT_START_MS = 1_735_732_800_000  # 2025-01-01T12:00:00Z
DEFAULT_SPAN_MS = 5 * 60_000
FLUSH_CATEGORY = "_flush"
# Every order goes to the queue this key picks: see "No event is ever late" above.
SHARDING_KEY = "orders"
PRODUCER_GROUP = "cometmq-pipeline-demo"
RESULT_GROUP = "cometmq-pipeline-demo-results"
# The order event as the query parses it; the amount is a JSON number with two decimals, read as a
# decimal so the sums are exact.
ORDER_SCHEMA = "order_id string, customer string, category string, amount decimal(10,2), event_time bigint"
RESULT_COLUMNS = ("window_start", "window_end", "category", "revenue", "orders")

# category: (weight, lowest amount in cents, highest)
_CATEGORIES: dict[str, tuple[int, int, int]] = {
    "books": (3, 499, 6_000),
    "electronics": (1, 1_999, 99_900),
    "garden": (1, 299, 25_000),
    "grocery": (4, 150, 8_000),
    "sports": (2, 999, 30_000),
    "toys": (2, 399, 12_000),
}

Key = tuple[int, str]  # (window start, ms since the epoch; category)


@dataclass(frozen=True, slots=True)
class OrderEvent:
    order_id: str
    customer: str
    category: str
    amount_cents: int
    event_time_ms: int

    @property
    def amount(self) -> Decimal:
        return Decimal(self.amount_cents).scaleb(-2)

    def to_json(self) -> bytes:
        """The message body. The amount is written from a Decimal (``12.30``), never through a float."""
        return (
            f'{{"order_id": {json.dumps(self.order_id)}, "customer": {json.dumps(self.customer)}, '
            f'"category": {json.dumps(self.category)}, "amount": {self.amount}, '
            f'"event_time": {self.event_time_ms}}}'
        ).encode()


@dataclass(frozen=True, slots=True)
class WindowTotal:
    revenue: Decimal
    orders: int


Aggregates = dict[Key, WindowTotal]


def generate_events(
    count: int,
    *,
    seed: int = 7,
    start_ms: int = DEFAULT_START_MS,
    span_ms: int = DEFAULT_SPAN_MS,
    late_fraction: float = 0.1,
    max_lateness_ms: int = MAX_LATENESS_MS,
) -> list[OrderEvent]:
    """``count`` orders with event times spread evenly over ``span_ms`` from ``start_ms``, in send
    order; ``late_fraction`` of them are out of order, up to ``max_lateness_ms`` older than their
    place in the stream (never more, so each is within the watermark). Same arguments, same events."""
    rng = random.Random(seed)
    names = list(_CATEGORIES)
    weights = [w for w, _, _ in _CATEGORIES.values()]
    events = []
    for i in range(count):
        category = rng.choices(names, weights)[0]
        _, low, high = _CATEGORIES[category]
        event_time = start_ms + i * span_ms // max(count, 1)
        if rng.random() < late_fraction:
            # At most max_lateness_ms before this position's time, which is never before an earlier
            # event's position: so at most max_lateness_ms older than anything sent before it.
            event_time -= rng.randint(1, max_lateness_ms)
        events.append(
            OrderEvent(
                order_id=f"o-{seed}-{i:07d}",
                customer=f"c{rng.randrange(1000):04d}",
                category=category,
                amount_cents=rng.randint(low, high),
                event_time_ms=event_time,
            )
        )
    return events


def flush_event(
    events: Sequence[OrderEvent], *, window_ms: int = WINDOW_MS, watermark_ms: int = WATERMARK_MS
) -> OrderEvent:
    """An event far enough ahead in event time that the watermark passes the end of every window of
    ``events``: it closes them. Its own window never closes, so it is never in the results."""
    newest = max((e.event_time_ms for e in events), default=DEFAULT_START_MS)
    return OrderEvent("flush", "-", FLUSH_CATEGORY, 0, newest + window_ms + watermark_ms)


def window_start(event_time_ms: int, window_ms: int = WINDOW_MS) -> int:
    """Spark's tumbling window for an event time (windows aligned to the epoch)."""
    return event_time_ms - event_time_ms % window_ms


def expected_aggregates(events: Iterable[OrderEvent], window_ms: int = WINDOW_MS) -> Aggregates:
    """Revenue and order count per (window start, category), computed in plain Python."""
    revenue: dict[Key, int] = {}
    orders: dict[Key, int] = {}
    for event in events:
        if event.category == FLUSH_CATEGORY:
            continue
        key = (window_start(event.event_time_ms, window_ms), event.category)
        revenue[key] = revenue.get(key, 0) + event.amount_cents
        orders[key] = orders.get(key, 0) + 1
    return {
        key: WindowTotal(Decimal(cents).scaleb(-2), orders[key]) for key, cents in sorted(revenue.items())
    }


def to_aggregates(pairs: Iterable[tuple[Key, WindowTotal]]) -> Aggregates:
    """Collect (key, total) pairs; the same window twice with the same total counts once (an
    at-least-once redelivery), with different totals it is an error."""
    out: Aggregates = {}
    for key, total in pairs:
        if key in out and out[key] != total:
            raise ValueError(f"window {key} reported twice with different totals: {out[key]} and {total}")
        out[key] = total
    return dict(sorted(out.items()))


# The Spark job ------------------------------------------------------------------------------------


def aggregate_orders(
    source: DataFrame, *, window_ms: int = WINDOW_MS, watermark_ms: int = WATERMARK_MS
) -> DataFrame:
    """Order messages (the connector's rows) → revenue and order count per event-time window and
    category: ``window_start, window_end, category, revenue, orders``. Bodies that are not order
    events are left out."""
    from pyspark.sql import functions as F

    orders = source.select(F.from_json(F.col("body").cast("string"), ORDER_SCHEMA).alias("o")).select("o.*")
    return (
        orders.where(
            F.col("event_time").isNotNull() & F.col("category").isNotNull() & F.col("amount").isNotNull()
        )
        .withColumn("event_time", F.timestamp_millis("event_time"))
        .withWatermark("event_time", f"{watermark_ms} milliseconds")
        .groupBy(F.window("event_time", f"{window_ms} milliseconds"), "category")
        .agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "category",
            "revenue",
            "orders",
        )
    )


def result_messages(results: DataFrame) -> DataFrame:
    """Result rows → the connector's sink columns: a JSON body (times in UTC ISO-8601), the
    category as the tag and ``category@<window start in ms>`` as the key."""
    from pyspark.sql import functions as F

    body = F.to_json(F.struct(*RESULT_COLUMNS), {"timeZone": "UTC"})
    key = F.concat_ws("@", "category", F.unix_millis("window_start").cast("string"))
    return results.select(body.alias("body"), F.col("category").alias("tags"), F.array(key).alias("keys"))


def build_query(
    spark: SparkSession,
    namesrv: str,
    out_dir: str | os.PathLike[str],
    checkpoint_dir: str | os.PathLike[str],
    *,
    source_topic: str = SOURCE_TOPIC,
    result_topic: str = RESULT_TOPIC,
    starting_offsets: str = "earliest",
    window_ms: int = WINDOW_MS,
    watermark_ms: int = WATERMARK_MS,
    max_offsets_per_trigger: int | None = None,
    connect: Mapping[str, str] | None = None,
) -> DataStreamWriter:
    """The streaming job, ready to ``.trigger(...).start()``: read ``source_topic``, aggregate
    (:func:`aggregate_orders`), and write each micro-batch's final windows to Parquet under
    ``out_dir`` and to ``result_topic``. ``starting_offsets``: ``earliest``, ``latest`` or the
    connector's JSON offsets; ``max_offsets_per_trigger`` caps a micro-batch. The SparkSession needs the
    ``cometmq`` format (:func:`cometmq.spark.register`) and few shuffle partitions (the aggregation
    state has one store per partition). ``connect``: the connector's access control and TLS options
    (accessKey, secretKey, tls, tlsCaFile, …) for both ends."""
    out = os.fspath(out_dir)
    connect = dict(connect or {})
    reader = (
        spark.readStream.format("cometmq")
        .options(**connect)
        .option("namesrv", namesrv)
        .option("topic", source_topic)
        .option("startingOffsets", starting_offsets)
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    source = reader.load()
    results = aggregate_orders(source, window_ms=window_ms, watermark_ms=watermark_ms)

    def publish(batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            if batch.isEmpty():  # a batch that only moved the watermark without closing a window
                return
            # Parquet first: a result seen on the topic is already in Parquet.
            batch.write.mode("overwrite").parquet(os.path.join(out, f"batch_id={batch_id}"))
            (
                result_messages(batch)
                .write.format("cometmq")
                .options(**connect)
                .option("namesrv", namesrv)
                .option("topic", result_topic)
                .mode("append")
                .save()
            )
        finally:
            batch.unpersist()

    return (
        results.writeStream.outputMode("append")
        .option("checkpointLocation", os.fspath(checkpoint_dir))
        .queryName("orders_by_category")
        .foreachBatch(publish)
    )


def read_parquet_results(
    spark: SparkSession, out_dir: str | os.PathLike[str]
) -> list[tuple[Key, WindowTotal]]:
    """Every result row the query wrote to Parquet (an empty list before the first)."""
    from pyspark.sql import functions as F

    path = Path(out_dir)
    if not path.is_dir() or not any(path.glob("batch_id=*/*.parquet")):
        return []
    rows = (
        spark.read.parquet(os.fspath(path))
        .select(F.unix_millis("window_start").alias("start"), "category", "revenue", "orders")
        .collect()
    )
    return [((r["start"], r["category"]), WindowTotal(Decimal(r["revenue"]), int(r["orders"]))) for r in rows]


def parse_result(body: bytes) -> tuple[Key, WindowTotal]:
    """One message of the result topic."""
    data = json.loads(body, parse_float=Decimal, parse_int=int)
    start = datetime.datetime.fromisoformat(data["window_start"])
    key = (round(start.timestamp() * 1000), str(data["category"]))
    return key, WindowTotal(Decimal(data["revenue"]), int(data["orders"]))


LOCAL_MASTER = "local[2]"


def spark_session(
    workdir: str | os.PathLike[str], app_name: str = "cometmq-pipeline", *, master: str = LOCAL_MASTER
) -> SparkSession:
    """A small SparkSession (2 cores, 1 GiB driver, quiet logs), files under ``workdir``, with the
    ``cometmq`` format registered. ``master``: ``local[2]`` by default, or a cluster's master URL
    (``spark://host:7077``), whose executors get 512 MiB and at most 2 cores; their Python workers
    run ``PYSPARK_PYTHON`` (default: this interpreter), which must import cometmq where they run."""
    from pyspark.sql import SparkSession

    import cometmq.spark

    # Spark's Python workers must run this interpreter (the one with cometmq and pyarrow installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    base = Path(workdir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    log_conf = base / "log4j2.properties"
    log_conf.write_text(_LOG4J2)
    builder = SparkSession.builder.master(master)
    if not master.startswith("local"):
        builder = builder.config("spark.executor.memory", "512m").config("spark.cores.max", "2")
    spark = (
        builder.appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.warehouse.dir", os.fspath(base / "warehouse"))
        .config("spark.local.dir", os.fspath(base / "spark-local"))
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log_conf}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    cometmq.spark.register(spark)
    return spark


_LOG4J2 = """\
# Written by cometmq.spark.pipeline.spark_session: Spark's errors only, on stderr.
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
# PySpark's gateway counts as a shell: unless its logger has a level of its own, Spark sets WARN
# and prints how to change it at start-up.
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


# The demo -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class DemoResult:
    """What a demo run produced, next to what it should have."""

    expected: Aggregates
    parquet: Aggregates
    topic: Aggregates
    out_dir: Path
    send_seconds: float = 0.0
    total_seconds: float = 0.0
    batches: int = 0

    @property
    def ok(self) -> bool:
        return self.parquet == self.expected and self.topic == self.expected


@dataclass(slots=True)
class _Console:
    """Lines on ``out`` that do not collide with a progress bar drawn on stderr."""

    out: TextIO
    lock: threading.Lock = field(default_factory=threading.Lock)

    def line(self, text: str) -> None:
        with self.lock:
            if sys.stderr.isatty():
                sys.stderr.write("\r\x1b[K")
                sys.stderr.flush()
            print(text, file=self.out, flush=True)


class _ResultPrinter(threading.Thread):
    """Reads the result topic from the given offsets and prints each window as it arrives."""

    def __init__(self, consumer: Any, console: _Console) -> None:
        super().__init__(name="cometmq-pipeline-results", daemon=True)
        self.consumer = consumer
        self.console = console
        self.received: Aggregates = {}
        self.error: BaseException | None = None
        self.changed = threading.Condition()
        self._stopping = threading.Event()

    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                for message in self.consumer.poll(timeout=0.5):
                    try:
                        key, total = parse_result(message.body)
                    except (ValueError, KeyError, TypeError):
                        self.console.line(f"  (not a result, skipped: message {message.msg_id})")
                        continue
                    with self.changed:
                        new = key not in self.received
                        self.received[key] = total
                        self.changed.notify_all()
                    if new:
                        self.console.line(_result_line(key, total))
        except BaseException as exc:
            self.error = exc
            with self.changed:
                self.changed.notify_all()

    def wait_for(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while len(self.received) < count and self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
        return self.error is None

    def stop(self) -> Aggregates:
        """Stop reading; the windows received, by key."""
        self._stopping.set()
        self.join(5)
        with self.changed:
            return dict(sorted(self.received.items()))


def _clock(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%H:%M")


def _result_line(key: Key, total: WindowTotal, window_ms: int = WINDOW_MS) -> str:
    start, category = key
    return (
        f"  window {_clock(start)}-{_clock(start + window_ms)}  {category:<12} "
        f"revenue {total.revenue:>12,.2f}  orders {total.orders:>5}"
    )


def run_demo(
    namesrv: str,
    workdir: str | os.PathLike[str] | None = None,
    *,
    events: int = 3000,
    rate: float = 300.0,
    seed: int = 7,
    progress: bool = True,
    spark: SparkSession | None = None,
    out: TextIO | None = None,
    batch_size: int = 50,
    result_timeout: float = 60.0,
    max_offsets_per_trigger: int | None = None,
    connect: Mapping[str, str] | None = None,
    master: str = LOCAL_MASTER,
) -> DemoResult:
    """Run the pipeline end to end against the cluster at ``namesrv``: start the query, send
    ``events`` orders (``rate`` per second; 0 = as fast as possible) and the flush event, print the
    results as the consumer receives them, then compare Parquet and the topic with
    :func:`expected_aggregates` and print a table.

    ``workdir`` (default: a new temporary directory) receives ``parquet/`` and ``checkpoint/``,
    both emptied first. ``spark``: a SparkSession to use (default: :func:`spark_session` on ``master``,
    stopped at the end). Topics are created when missing; every run reads only what it sent itself.
    ``max_offsets_per_trigger`` splits the orders over more micro-batches (the test uses it so
    that the watermark moves between batches). ``connect``: the connector's access control and TLS
    options (accessKey, secretKey, tls, tlsCaFile, …), used by this function's own clients too.
    """
    from cometmq.client import Message, blocking
    from cometmq.console import Progress, format_table
    from cometmq.spark import _offsets
    from cometmq.spark._options import ConnectOptions

    started = time.perf_counter()
    console = _Console(out if out is not None else sys.stdout)
    base = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="cometmq-pipeline-"))
    out_dir, checkpoint_dir = base / "parquet", base / "checkpoint"
    for stale in (out_dir, checkpoint_dir):
        shutil.rmtree(stale, ignore_errors=True)
    orders = generate_events(events, seed=seed)
    flush = flush_event(orders)
    expected = expected_aggregates(orders)

    # Everything that needs the cluster comes before Spark starts, so a wrong address fails fast.
    security = ConnectOptions.parse({key.lower(): value for key, value in (connect or {}).items()})
    client_options = security.client_options()
    with blocking.AdminClient(namesrv, **client_options) as admin:
        topics = set(admin.topic_list())
        for topic in (SOURCE_TOPIC, RESULT_TOPIC):
            if topic not in topics:
                admin.create_topic(topic, 4)
    consumer = blocking.LitePullConsumer(RESULT_GROUP, namesrv, auto_commit=False, **client_options)
    producer = blocking.Producer(PRODUCER_GROUP, namesrv, **client_options)
    printer: _ResultPrinter | None = None
    query: Any = None
    own_session = spark is None
    try:
        consumer.start()
        producer.start()
        starting = _offsets.to_json(_end_offsets(consumer, SOURCE_TOPIC))
        result_starts = _end_offsets(consumer, RESULT_TOPIC)
        consumer.assign(list(result_starts))
        for queue, offset in result_starts.items():
            consumer.seek(queue, offset)
        printer = _ResultPrinter(consumer, console)
        printer.start()

        if spark is None:
            console.line("Starting Spark")
            spark = spark_session(base, master=master)
        # getOrCreate may hand back a SparkSession already running elsewhere: name the master it uses.
        console.line(f"Using Spark ({spark.sparkContext.master}); work directory {base}")
        query = (
            build_query(
                spark,
                namesrv,
                out_dir,
                checkpoint_dir,
                starting_offsets=json.dumps(starting),
                max_offsets_per_trigger=max_offsets_per_trigger,
                connect=connect,
            )
            .trigger(processingTime="1 second")
            .start()
        )
        if rate > 0:
            # Orders sent from now on are read as they come, so windows close while they flow. (The
            # starting offsets make any order correct; this only makes the demo live.)
            _wait_until_running(query, timeout=120.0)
            console.line(f"Spark query running after {time.perf_counter() - started:.1f} s")
        console.line(
            f"Sending {events:,} orders to {SOURCE_TOPIC!r}; windows of {WINDOW_MS // 1000} s close "
            f"{WATERMARK_MS // 1000} s of event time after their end:"
        )
        send_started = time.perf_counter()
        bar = Progress("orders", events + 1, stream=sys.stderr if progress else _NULL)
        messages = [Message(SOURCE_TOPIC, e.to_json(), tags=e.category, keys=e.order_id) for e in orders]
        messages.append(Message(SOURCE_TOPIC, flush.to_json(), tags=FLUSH_CATEGORY, keys=flush.order_id))
        interval = batch_size / rate if rate > 0 else 0.0
        next_send = time.monotonic()
        for at in range(0, len(messages), batch_size):
            chunk = messages[at : at + batch_size]
            producer.send_batch(chunk, sharding_key=SHARDING_KEY)
            bar.advance(len(chunk))
            _raise_query_error(query)
            next_send += interval
            pause = next_send - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        bar.close()
        send_seconds = time.perf_counter() - send_started
        console.line(
            f"Sent {events:,} orders and the flush event in {send_seconds:.1f} s; closing the last windows"
        )

        query.processAllAvailable()
        if not printer.wait_for(len(expected), result_timeout) and printer.error is None:
            console.line(
                f"  (only {len(printer.received)} of {len(expected)} windows arrived in {result_timeout:g} s)"
            )
        if printer.error is not None:
            raise printer.error
        received = printer.stop()
        batches = len(query.recentProgress)
        query.stop()
        parquet = to_aggregates(read_parquet_results(spark, out_dir))
        result = DemoResult(
            expected=expected,
            parquet=parquet,
            topic=received,
            out_dir=out_dir,
            send_seconds=send_seconds,
            total_seconds=time.perf_counter() - started,
            batches=batches,
        )
        console.line("")
        console.line(format_table(*_summary(result)))
        for line in _differences(result):
            console.line(line)
        console.line(
            f"\n{'OK' if result.ok else 'MISMATCH'}: {len(expected)} windows x categories, "
            f"{batches} micro-batches; Parquet in {out_dir}; {result.total_seconds:.1f} s in all"
        )
        return result
    finally:
        if query is not None and query.isActive:
            query.stop()
        if printer is not None:
            printer.stop()
        producer.close()
        consumer.close()
        if own_session and spark is not None:
            spark.stop()


def _end_offsets(consumer: Any, topic: str) -> dict[MessageQueue, int]:
    """The next offset of every queue of ``topic``."""
    return {queue: consumer.end_offset(queue) for queue in consumer.fetch_queues(topic)}


def _wait_until_running(query: Any, timeout: float) -> None:
    """Until the query's first trigger is done."""
    deadline = time.monotonic() + timeout
    while query.lastProgress is None:
        _raise_query_error(query)
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Spark query did not run its first trigger in {timeout:g} s")
        time.sleep(0.1)


def _raise_query_error(query: Any) -> None:
    error = query.exception()
    if error is not None:
        raise error


def _summary(result: DemoResult) -> tuple[list[str], list[list[object]]]:
    """Per category: windows, orders and revenue as Python computed them and as Parquet and the
    topic hold them."""
    headers = [
        "CATEGORY",
        "WINDOWS",
        "ORDERS",
        "REVENUE (PYTHON)",
        "REVENUE (PARQUET)",
        "REVENUE (TOPIC)",
        "MATCH",
    ]
    sources = (result.expected, result.parquet, result.topic)
    rows: list[list[object]] = []
    for category in sorted({c for aggregates in sources for _, c in aggregates}):
        expected, parquet, topic = ({k: v for k, v in a.items() if k[1] == category} for a in sources)
        revenues = [
            f"{sum((t.revenue for t in a.values()), Decimal(0)):,.2f}" for a in (expected, parquet, topic)
        ]
        match = parquet == expected and topic == expected
        rows.append(
            [
                category,
                len(expected),
                sum(t.orders for t in expected.values()),
                *revenues,
                "yes" if match else "NO",
            ]
        )
    return headers, rows


def _differences(result: DemoResult, limit: int = 10) -> list[str]:
    lines = []
    for name, got in (("Parquet", result.parquet), ("topic", result.topic)):
        for key in sorted(set(result.expected) | set(got)):
            want, have = result.expected.get(key), got.get(key)
            if want != have:
                lines.append(f"  {name}: window {_clock(key[0])} {key[1]}: expected {want}, got {have}")
    return lines[:limit] + ([f"  … and {len(lines) - limit} more"] if len(lines) > limit else [])


class _NullStream:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


_NULL: Any = _NullStream()
