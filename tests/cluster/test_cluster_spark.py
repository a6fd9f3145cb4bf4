"""Spark reads a cluster's topics from the bucket alone (no etcd, no gateway): the catalog
mirrored from etcd, log objects of several gateways (one of them killed mid-way, so its
writer was sealed) and compacted segments, equal to what a consumer reads, also after
DeleteRecords."""

import signal
import time

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kafscale.spark_connector.planning import read_catalog
from kafscale.storage_backends import open_store
from tests.support.spark import spark_session

from .conftest import wait_until
from .test_cluster import create_topic, read_all

pytest.importorskip("pyspark", reason="pyspark is a test dependency (kafscale[spark])")


@pytest.fixture(scope="module")
def spark():
    yield from spark_session("kafscale-cluster-tests")


def _produce(cluster, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce("orders", key=b"%d" % i, value=b"order-%d" % i)
    assert producer.flush(30) == 0


def test_spark_reads_a_clusters_topics_from_the_bucket_alone(cluster, spark):
    create_topic(cluster, "orders", 3)
    owners = cluster.wait_owned("orders", 3, {0, 1, 2})
    _produce(cluster, 0, 1500)
    victim = owners[1][0]  # the gateway leading partition 1 dies; another one seals its writer
    cluster.gateways[victim].process.send_signal(signal.SIGKILL)
    cluster.gateways[victim].process.wait()
    cluster.wait_owned("orders", 3, {0, 1, 2} - {victim})
    _produce(cluster, 1500, 1500)
    consumed = read_all(cluster, "orders", 3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.delete_records([TopicPartition("orders", 0, 100)]).values():
        future.result(10)

    store = open_store(cluster.location, s3=cluster.s3.options())
    def orders_log_start():
        orders = read_catalog(store, "kafscale").get("orders")
        return orders.log_start.get(0) if orders else None

    wait_until(lambda: orders_log_start() == 100, 15,
               lambda: f"the mirrored catalog is {read_catalog(store, 'kafscale').get('orders')}")
    expected = {(p, o): v for (p, o), v in consumed.items() if p != 0 or o >= 100}
    assert len(expected) == 3000 - 100

    options = cluster.s3.options()
    df = (spark.read.format("kafscale").option("subscribe", "orders")
          .option("s3.endpoint", options.endpoint).option("s3.region", options.region)
          .option("s3.accessKeyId", options.access_key_id).option("s3.secretAccessKey", options.secret_access_key)
          .option("s3.pathStyle", "true").option("s3.allowHttp", "true").load(cluster.location))
    rows = {(r.partition, r.offset): bytes(r.value).decode() for r in df.select("partition", "offset", "value").collect()}
    assert rows == expected
    started = time.monotonic()
    assert df.count() == len(expected) and time.monotonic() - started < 120
