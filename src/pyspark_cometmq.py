"""Lets PySpark find the ``cometmq`` data source by itself (it registers every top-level module named
``pyspark_*`` that has a ``DefaultSource``), so ``format("cometmq")`` works without an import."""

from cometmq.spark import CometMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
