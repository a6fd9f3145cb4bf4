"""Spark reading a topic straight from storage vs the same topic through the gateway."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from . import report
from .broker_bench import Broker, _free_port, _load

COUNT = 2_000_000


def run() -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        port = _free_port()
        broker = Broker("kafscale", [sys.executable, "-m", "kafscale.gateway.cli", "--port", str(port),
                                     "--http-port", "-1", "--storage", str(data), "--log-level", "WARNING"],
                        port, Path(tmp))
        with broker:
            produced = _load("produce", broker.bootstrap, "spark-bench", COUNT, 100)
            consumed = _load("consume", broker.bootstrap, "spark-bench", COUNT, 3)
        os.environ["PYSPARK_PYTHON"] = sys.executable
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        try:
            samples = []
            for _ in range(2):
                started = time.perf_counter()
                df = spark.read.format("kafscale").option("subscribe", "spark-bench").load(str(data))
                total = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect()[0]
                samples.append(time.perf_counter() - started)
                assert total.n == COUNT, total
        finally:
            spark.stop()
    best = min(samples)
    rows = [
        ["Spark local[2], format kafscale (from storage)", f"{COUNT / best:,.0f} records/s",
         f"{COUNT * 100 / best / 1e6:.1f} MB/s of values", f"best of {len(samples)}: {best:.1f} s"],
        ["confluent-kafka through the gateway", f"{consumed['messages'] / consumed['seconds']:,.0f} records/s",
         f"{consumed['messages'] * 100 / consumed['seconds'] / 1e6:.1f} MB/s of values", f"{consumed['seconds']:.1f} s"],
    ]
    for row in rows:
        print(" | ".join(row))
    report.save(
        "40-spark",
        "Spark: reading a topic from storage vs through the gateway",
        "python -m bench spark",
        f"{COUNT:,} records of 100 B in 3 partitions, produced by confluent-kafka "
        f"({produced['messages'] / produced['seconds']:,.0f} msgs/s). Spark time includes planning "
        "and a full decode of every record into Arrow (count and sum of value lengths); session start "
        "excluded. Target: >= 1M records/s.",
        ["reader", "records/s", "throughput", "time"],
        rows,
    )
