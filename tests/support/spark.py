"""A local Spark session for the connector's tests (executors use this venv's Python)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator


def spark_session(app: str, master: str = "local[2]", **conf: str) -> Iterator:
    """``master`` "local[2,3]" lets a failed task be retried (plain local mode never does);
    ``conf`` adds Spark settings by their full names."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2"))
    for name, value in conf.items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
