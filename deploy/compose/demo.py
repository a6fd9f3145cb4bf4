"""The quickstart's demo, run from the host against the compose cluster: produce 1,000
records through one gateway, consume them through the other, and read the topic with
Spark straight from the bucket (no gateway in the way).

Needs confluent-kafka and the Spark extra: ``pip install 'kafscale[spark]' confluent-kafka``.
Addresses come from the same variables as compose.yaml."""

from __future__ import annotations

import os
import sys
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

PORT_1 = os.environ.get("KAFSCALE_PORT_1", "19092")
PORT_2 = os.environ.get("KAFSCALE_PORT_2", "19192")
S3_PORT = os.environ.get("S3_PORT", "18333")
TOPIC = os.environ.get("DEMO_TOPIC", "quickstart")
COUNT = 1000


def main() -> int:
    first, second = f"127.0.0.1:{PORT_1}", f"127.0.0.1:{PORT_2}"
    admin = AdminClient({"bootstrap.servers": first})
    brokers = admin.list_topics(timeout=10).brokers
    print(f"brokers in Metadata: {sorted(str(b) for b in brokers.values())}")
    if TOPIC not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic(TOPIC, num_partitions=4, replication_factor=1)])[TOPIC].result(15)
    producer = Producer({"bootstrap.servers": first, "acks": "all", "enable.idempotence": True})
    run = str(int(time.time()))
    for i in range(COUNT):
        producer.produce(TOPIC, key=f"k{i % 10}".encode(), value=f"{run}-{i}".encode())
    assert producer.flush(30) == 0, "records left unsent"
    print(f"produced {COUNT} records through {first}")

    consumer = Consumer({"bootstrap.servers": second, "group.id": f"demo-{run}", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    seen = set()
    deadline = time.monotonic() + 60
    while len(seen) < COUNT and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and not message.error() and message.value().decode().startswith(run):
            seen.add(message.value())
    consumer.close()
    print(f"consumed {len(seen)} of them through {second}")
    if len(seen) != COUNT:
        return 1

    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("kafscale-quickstart")
             .config("spark.ui.enabled", "false").getOrCreate())
    try:
        frame = (spark.read.format("kafscale").option("subscribe", TOPIC)
                 .option("s3.endpoint", f"http://127.0.0.1:{S3_PORT}").option("s3.region", "us-east-1")
                 .option("s3.accessKeyId", os.environ.get("S3_ACCESS_KEY", "kafscale"))
                 .option("s3.secretAccessKey", os.environ.get("S3_SECRET_KEY", "kafscale-secret"))
                 .option("s3.pathStyle", "true").option("s3.allowHttp", "true")
                 .load("s3://kafscale/data"))
        from_bucket = frame.filter(frame.value.cast("string").startswith(run)).count()
    finally:
        spark.stop()
    print(f"Spark read {from_bucket} of them from the bucket")
    return 0 if from_bucket == COUNT else 1


if __name__ == "__main__":
    sys.exit(main())
