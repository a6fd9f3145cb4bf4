"""A local Spark session for the connector's tests (executors use this venv's Python)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator


def spark_session(app: str) -> Iterator:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName(app)
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
