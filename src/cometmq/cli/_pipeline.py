"""``cometmq pipeline demo``: the reference pipeline (order events → Spark Structured Streaming →
revenue per category and window → a topic and Parquet) end to end against a running cluster."""

from __future__ import annotations

import argparse
import importlib.util

from cometmq.cli._admin import add_namesrv_option, whole_number
from cometmq.cli._connect import add_connect_options, security
from cometmq.errors import CometMQError

# pipeline.LOCAL_MASTER, not imported from there: that module needs PySpark, which may be missing.
LOCAL_MASTER = "local[2]"
INSTALL_HINT = "the pipeline needs PySpark and PyArrow: pip install 'cometmq[spark]'"


def add_pipeline_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pipeline = commands.add_parser(
        "pipeline",
        help="run the reference Spark pipeline against a running cluster",
        description="The reference pipeline: CometMQ topics in and out of Spark Structured Streaming.",
    )
    pipeline_commands = pipeline.add_subparsers(dest="pipeline_command", metavar="COMMAND", required=True)
    demo = pipeline_commands.add_parser(
        "demo",
        help="send orders, aggregate them in Spark, print and check the results",
        description=(
            "Send a deterministic stream of order events (JSON, with an event time) to topic 'orders'; "
            "a Spark Structured Streaming job sums the revenue per category in one-minute "
            "event-time windows (30 s watermark) and writes each closed window to topic "
            "'orders-by-category' and to Parquet; a consumer prints the results as they arrive. "
            "At the end both outputs are compared with the totals computed in Python. Needs "
            "PySpark (pip install 'cometmq[spark]') and Java 17+. Spark runs locally unless --master "
            "names a cluster, whose executors need cometmq installed and the work directory shared."
        ),
    )
    add_namesrv_option(demo)
    add_connect_options(demo)
    demo.add_argument(
        "--events", type=whole_number(1), default=3000, metavar="N", help="order events to send (3000)"
    )
    demo.add_argument(
        "--rate", type=float, default=300.0, metavar="N", help="events per second, 0 for no pause (300)"
    )
    demo.add_argument("--seed", type=int, default=7, help="seed of the event generator (7)")
    demo.add_argument(
        "--master",
        default=LOCAL_MASTER,
        metavar="URL",
        help=f"Spark's master: {LOCAL_MASTER} (the default) or a cluster's, such as spark://HOST:7077",
    )
    demo.add_argument(
        "--workdir",
        metavar="DIR",
        help="where Parquet, the checkpoint and Spark's files go (default: a new temporary directory); "
        "its parquet/ and checkpoint/ are emptied first",
    )
    demo.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    if args.rate < 0:
        raise CometMQError("--rate must not be negative")
    if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
        raise CometMQError(INSTALL_HINT)
    from pyspark.errors import PySparkException

    from cometmq.spark.pipeline import run_demo

    try:
        result = run_demo(
            args.namesrv,
            args.workdir,
            events=args.events,
            rate=args.rate,
            seed=args.seed,
            connect=security(args).connector_options(),
            master=args.master,
        )
    except PySparkException as exc:
        text = str(exc).strip()
        first_line = text.splitlines()[0] if text else type(exc).__name__
        raise CometMQError(f"the Spark query failed: {first_line}") from exc
    return 0 if result.ok else 1
