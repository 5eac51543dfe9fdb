"""A PySpark data source for CometMQ topics: ``spark.readStream.format("cometmq")`` and friends.

Needs the ``spark`` extra (``pip install cometmq[spark]``: pyspark and pyarrow). Importing this
module registers the source with the active SparkSession, if there is one; :func:`register` does it
for a given SparkSession. PySpark also finds it by itself through the top-level module
``pyspark_cometmq``. Options and guarantees: docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from cometmq.errors import OptionError
from cometmq.spark._columns import SYSTEM_PROPERTIES
from cometmq.spark._offsets import offsets_behind_latest
from cometmq.spark._schema import ARROW_SCHEMA, SCHEMA_DDL
from cometmq.spark._source import CometMQDataSource
from cometmq.spark._write import message_id, queue_of

__all__ = [
    "ARROW_SCHEMA",
    "SCHEMA_DDL",
    "SYSTEM_PROPERTIES",
    "CometMQDataSource",
    "OptionError",
    "message_id",
    "offsets_behind_latest",
    "queue_of",
    "register",
]


def register(spark: Any = None) -> None:
    """Register ``format("cometmq")`` with ``spark`` (default: the active SparkSession)."""
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            return
    spark.dataSource.register(CometMQDataSource)


register()
