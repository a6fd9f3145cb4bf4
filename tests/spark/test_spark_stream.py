"""spark.readStream.format("kafscale") with Trigger.AvailableNow: exactly the new records
across restarts of the query, admission control, new partitions picked up."""


import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.support.gateway_process import GatewayProcess
from tests.support.spark import spark_session

pytest.importorskip("pyspark", reason="pyspark is a test dependency (kafscale[spark])")


@pytest.fixture(scope="module")
def spark():
    yield from spark_session("kafscale-stream-tests")


def _produce(gateway, topic, start, count, partitions):
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all"})
    for i in range(start, start + count):
        producer.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert producer.flush(10) == 0


def _run_available_now(spark, data, out, checkpoint, **options):
    stream = (spark.readStream.format("kafscale").option("subscribe", "stream").options(**options).load(str(data))
              .selectExpr("CAST(value AS STRING) AS value", "partition", "offset"))
    query = (stream.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    return query


def test_available_now_reads_exactly_the_new_records_across_restarts(spark, tmp_path):
    gateway = GatewayProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic("stream", num_partitions=2, replication_factor=1)])["stream"].result(10)
        _produce(gateway, "stream", 0, 100, 2)
        out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

        _run_available_now(spark, tmp_path / "data", out, checkpoint)
        assert sorted(int(r.value) for r in spark.read.parquet(str(out)).collect()) == list(range(100))

        _produce(gateway, "stream", 100, 50, 2)
        admin.create_partitions([NewPartitions("stream", 3)])["stream"].result(10)
        _produce(gateway, "stream", 150, 30, 3)  # lands in the new partition too
        query = _run_available_now(spark, tmp_path / "data", out, checkpoint, maxOffsetsPerTrigger="40")
        values = sorted(int(r.value) for r in spark.read.parquet(str(out)).collect())
        assert values == list(range(180))  # every record once: nothing re-read, nothing skipped
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert sum(sizes) == 80 and max(sizes) <= 40 and len(sizes) >= 2  # admission control
        assert 2 in {r.partition for r in spark.read.parquet(str(out)).collect()}

        _run_available_now(spark, tmp_path / "data", out, checkpoint)  # nothing new: nothing read
        assert spark.read.parquet(str(out)).count() == 180
    finally:
        gateway.kill()


def test_ending_offsets_is_refused_in_streams(spark, tmp_path):
    (tmp_path / "data").mkdir()
    with pytest.raises(Exception, match="endingOffsets is not valid in streaming"):
        _run_available_now(spark, tmp_path / "data", tmp_path / "o", tmp_path / "c", endingOffsets="latest")


def _lag(admin, bootstrap, group, topic, partitions):
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

    found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    committed = {tp.partition: tp.offset for tp in found.topic_partitions if tp.topic == topic}
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "lag-probe"})
    try:
        ends = {p: probe.get_watermark_offsets(TopicPartition(topic, p), 5)[1] for p in range(partitions)}
    finally:
        probe.close()
    return {p: ends[p] - committed[p] for p in range(partitions) if p in committed}


def test_progress_group_shows_the_query_to_lag_tools(spark, tmp_path):
    gateway = GatewayProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic("watched", num_partitions=2, replication_factor=1)])["watched"].result(10)
        _produce(gateway, "watched", 0, 100, 2)

        def run():
            stream = (spark.readStream.format("kafscale").option("subscribe", "watched")
                      .option("progressGroup", "spark-watch").option("kafka.bootstrap.servers", gateway.bootstrap)
                      .load(str(tmp_path / "data")))
            query = (stream.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "checkpoint"))
                     .trigger(availableNow=True).start())
            query.awaitTermination(120)
            assert query.exception() is None
            return query

        query = run()
        assert _lag(admin, gateway.bootstrap, "spark-watch", "watched", 2) == {0: 0, 1: 0}
        reported = [p["sources"][0].get("latestOffset") for p in query.recentProgress if p["numInputRows"]]
        assert reported and '"0":50' in reported[-1].replace(" ", "")  # reportLatestOffset, in the progress

        _produce(gateway, "watched", 100, 30, 2)
        assert _lag(admin, gateway.bootstrap, "spark-watch", "watched", 2) == {0: 15, 1: 15}
        run()
        assert _lag(admin, gateway.bootstrap, "spark-watch", "watched", 2) == {0: 0, 1: 0}
        with pytest.raises(Exception, match="progressGroup is for streams"):
            spark.read.format("kafscale").option("subscribe", "watched").option("progressGroup", "g") \
                .option("kafka.bootstrap.servers", gateway.bootstrap).load(str(tmp_path / "data")).count()
    finally:
        gateway.kill()
