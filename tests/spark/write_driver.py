"""A Spark driver process for the exactly-once write test: streams topic IN into topic OUT through the
CometMQ sink, until it is killed or (``--available-now``) until everything IN holds is written.

python write_driver.py NAMESRV IN OUT CHECKPOINT MAX_OFFSETS_PER_TRIGGER [--available-now]

Each row passes through a UDF that pauses a moment, and the sink gets the rows in small Arrow
batches, which it sends as they come: a micro-batch is being written long enough for the test to
kill the driver in the middle of it.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql.functions import col, udf
from spark_support import make_session

ROW_PAUSE_S = 0.001
ROWS_PER_ARROW_BATCH = 50


def slowly(body: bytes) -> bytes:
    time.sleep(ROW_PAUSE_S)
    return body


if __name__ == "__main__":
    namesrv, source, target, checkpoint, per_trigger = sys.argv[1:6]
    available_now = "--available-now" in sys.argv[6:]
    spark = make_session(Path(tempfile.mkdtemp(prefix="cometmq-driver-")))
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(ROWS_PER_ARROW_BATCH))
    rows = (
        spark.readStream.format("cometmq")
        .option("namesrv", namesrv)
        .option("topic", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
        .select(udf(slowly, "binary", useArrow=False)(col("body")).alias("body"))
    )
    writer = (
        rows.writeStream.format("cometmq")
        .option("namesrv", namesrv)
        .option("topic", target)
        .option("checkpointLocation", checkpoint)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print("query started", flush=True)
    query.awaitTermination()
