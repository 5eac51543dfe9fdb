"""A Spark driver process for the crash tests: streams a topic into Parquet until it is killed, or
(``--available-now``) until everything the topic holds is written.

python stream_driver.py NAMESRV TOPIC OUT_DIR CHECKPOINT_DIR MAX_OFFSETS_PER_TRIGGER [--available-now]
    [--master URL]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from spark_support import make_session, parquet_query

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for name in ("namesrv", "topic", "out", "checkpoint"):
        parser.add_argument(name)
    parser.add_argument("per_trigger", type=int)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    spark = make_session(Path(tempfile.mkdtemp(prefix="cometmq-driver-")), args.master)
    query = parquet_query(
        spark,
        args.namesrv,
        args.topic,
        Path(args.out),
        Path(args.checkpoint),
        args.per_trigger,
        available_now=args.available_now,
    )
    print("query started", flush=True)
    query.awaitTermination()
