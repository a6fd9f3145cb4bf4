"""Spark's data-source discovery imports every top-level ``pyspark_*`` module and registers
its ``DefaultSource``, so ``spark.read.format("kafscale")`` works with no register call.

This module must stay importable everywhere: without pyspark it exports nothing.
"""

try:
    from kafscale.spark_connector.datasource import KafscaleDataSource as DefaultSource
except ImportError:  # pyspark (or pyarrow) is not installed: nothing to register
    DefaultSource = None  # type: ignore[assignment,misc]
else:
    __all__ = ["DefaultSource"]
