"""A Spark driver process for the exactly-once write test: streams topic IN into topic OUT through the
CometMQ sink, until it is killed or (``--available-now``) until everything IN holds is written.

python write_driver.py NAMESRV IN OUT CHECKPOINT MAX_OFFSETS_PER_TRIGGER [--available-now]

Each task hands its rows to the sink a few at a time, with a pause in between, so that a micro-batch
is being written long enough for the test to kill the driver in the middle of it.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from spark_support import make_session

ROWS_PER_STEP = 50
STEP_PAUSE_S = 0.05


def paced(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for start in range(0, batch.num_rows, ROWS_PER_STEP):
            time.sleep(STEP_PAUSE_S)
            yield batch.slice(start, ROWS_PER_STEP)


if __name__ == "__main__":
    namesrv, source, target, checkpoint, per_trigger = sys.argv[1:6]
    available_now = "--available-now" in sys.argv[6:]
    spark = make_session(Path(tempfile.mkdtemp(prefix="cometmq-driver-")))
    rows = (
        spark.readStream.format("cometmq")
        .option("namesrv", namesrv)
        .option("topic", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
        .select("body")
        .mapInArrow(paced, "body binary")
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
