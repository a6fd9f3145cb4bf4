"""A local Spark session for the connector's tests (executors use this venv's Python)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator


def spark_session(app: str, master: str = "local[2]") -> Iterator:
    """``master`` "local[2,3]" lets a failed task be retried (plain local mode never does)."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (SparkSession.builder.master(master).appName(app)
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
