"""A Spark driver process for the crash test: streams a topic into Parquet until it is killed.

python stream_driver.py NAMESRV TOPIC OUT_DIR CHECKPOINT_DIR MAX_OFFSETS_PER_TRIGGER
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from spark_support import make_session, parquet_query

if __name__ == "__main__":
    namesrv, topic, out, checkpoint, per_trigger = sys.argv[1:6]
    spark = make_session(Path(tempfile.mkdtemp(prefix="cometmq-driver-")))
    query = parquet_query(spark, namesrv, topic, Path(out), Path(checkpoint), int(per_trigger))
    print("query started", flush=True)
    query.awaitTermination()
