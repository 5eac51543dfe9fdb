"""A Spark driver process for the cluster tests: reads a topic in one batch into Parquet, then prints
the master it ran on and the application's name.

python batch_driver.py NAMESRV TOPIC OUT_DIR --master URL
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from spark_support import make_session

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for name in ("namesrv", "topic", "out"):
        parser.add_argument(name)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    spark = make_session(Path(tempfile.mkdtemp(prefix="cometmq-driver-")), args.master)
    rows = (
        spark.read.format("cometmq")
        .option("namesrv", args.namesrv)
        .option("topic", args.topic)
        .load()
        .select("queue_id", "queue_offset", "body")
    )
    rows.write.parquet(args.out)
    print(f"master {spark.sparkContext.master} application {spark.sparkContext.appName}", flush=True)
    spark.stop()
