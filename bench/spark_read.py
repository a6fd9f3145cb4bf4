"""Read a topic with Spark from storage and print the seconds of each read as JSON:
``python bench/spark_read.py DATA TOPIC COUNT [RUNS [BOOTSTRAP]]``; with a gateway's BOOTSTRAP,
the seconds of writing the topic's rows back through it (``format("kafscale")``, at least
once and exactly once) too. In the same session, the ceiling of
any Python data source: one whose tasks yield the same number of rows of the same schema
(values of 100 B) as ready Arrow batches (built in the task with no reading or decoding).

Run as a script (not ``-m``) so that an earlier commit's connector, put first on
PYTHONPATH by bench/baseline.py, is the one imported (by the driver and the workers).
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(data: str, topic: str, count: int, runs: int = 4, bootstrap: str | None = None) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from kafscale.spark_connector import register

    register(spark)  # discovery of pyspark_* modules does not see editable installs
    ceiling_source = _ceiling_source(count)
    if ceiling_source is not None:
        spark.dataSource.register(ceiling_source)

    def timed(reader) -> float:
        started = time.perf_counter()
        total = reader().agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect()[0]
        if total.n != count:
            raise SystemExit(f"read {total.n} records, expected {count}")
        return time.perf_counter() - started

    seconds: list[float] = []
    ceiling: list[float] = []
    try:
        for _ in range(runs):  # interleaved: neither gains from a warmer session
            seconds.append(timed(lambda: spark.read.format("kafscale").option("subscribe", topic).load(data)))
            if ceiling_source is not None:
                ceiling.append(timed(lambda: spark.read.format("arrow_ceiling").load()))
        writes = _writes(spark, data, topic, bootstrap) if bootstrap else {}
    finally:
        spark.stop()
    import kafscale

    print(json.dumps({"seconds": seconds, "ceiling": ceiling, "writes": writes,
                      "connector": os.path.dirname(kafscale.__file__)}))


def _writes(spark, data: str, topic: str, bootstrap: str) -> dict[str, float]:
    """Seconds to write the topic's rows (key, value) to a new topic through the gateway."""
    rows = spark.read.format("kafscale").option("subscribe", topic).load(data).select("key", "value")
    found: dict[str, float] = {}
    for delivery in ("at_least_once", "exactly_once") * 2:  # the best of two each, interleaved
        started = time.perf_counter()
        try:
            (rows.write.format("kafscale").mode("append").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", f"{topic}-{delivery}").option("delivery", delivery)
             .option("transactionalIdPrefix", f"bench-{delivery}").save())
        except Exception as exc:  # an earlier connector without a sink
            print(f"writing with {delivery}: {str(exc)[:300]}", file=sys.stderr)
            continue
        found[delivery] = min(found.get(delivery, float("inf")), time.perf_counter() - started)
    return found


def _ceiling_source(count: int, partitions: int = 3):
    """A data source whose tasks yield ready Arrow batches: Spark's cost of taking rows from
    Python, with no reading or decoding at all. (None where pyspark's API is older.)"""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from kafscale.spark_connector.rows import SPARK_SCHEMA, arrow_schema

    rows_per_batch = 65_536

    def ready_batch(partition: int, rows: int) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([
            pa.nulls(rows, pa.binary()), pa.repeat(pa.scalar(b"v" * 100, pa.binary()), rows),
            pa.repeat(pa.scalar("spark-bench", pa.string()), rows), pa.repeat(pa.scalar(partition, pa.int32()), rows),
            pa.array(range(rows), pa.int64()),
            pa.repeat(pa.scalar(1_700_000_000_000_000, pa.int64()), rows).cast(pa.timestamp("us", tz="UTC")),
            pa.repeat(pa.scalar(0, pa.int32()), rows)], schema=arrow_schema(False))

    class Reader(DataSourceReader):
        def partitions(self):
            return [InputPartition(p) for p in range(partitions)]

        def read(self, partition):
            rows = count // partitions + (1 if partition.value < count % partitions else 0)
            full, rest = divmod(rows, rows_per_batch)
            batches = [ready_batch(partition.value, rows_per_batch)] * full + \
                ([ready_batch(partition.value, rest)] if rest else [])
            yield from batches

    class Ceiling(DataSource):
        @classmethod
        def name(cls):
            return "arrow_ceiling"

        def schema(self):
            return SPARK_SCHEMA

        def reader(self, schema):
            return Reader()

    return Ceiling


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *(int(a) for a in sys.argv[4:5]), *sys.argv[5:6])
