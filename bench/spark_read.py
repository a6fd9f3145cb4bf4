"""Read a topic with Spark from storage and print the seconds of each read as JSON:
``python bench/spark_read.py DATA TOPIC COUNT [RUNS]``.

Run as a script (not ``-m``) so that an earlier commit's connector, put first on
PYTHONPATH by bench/baseline.py, is the one imported (by the driver and the workers).
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(data: str, topic: str, count: int, runs: int = 2) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from kafscale.spark_connector import register

    register(spark)  # discovery of pyspark_* modules does not see editable installs
    try:
        seconds = []
        for _ in range(runs):
            started = time.perf_counter()
            df = spark.read.format("kafscale").option("subscribe", topic).load(data)
            total = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect()[0]
            seconds.append(time.perf_counter() - started)
            if total.n != count:
                raise SystemExit(f"read {total.n} records, expected {count}")
    finally:
        spark.stop()
    import kafscale

    print(json.dumps({"seconds": seconds, "connector": os.path.dirname(kafscale.__file__)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *(int(a) for a in sys.argv[4:5]))
