"""Spark over transactional topics (kafka.isolation.level, Spark's Kafka option): under
read_committed a DataFrame holds exactly what a read_committed consumer reads (aborted
records dropped, nothing at or past an open transaction), under read_uncommitted every
record; a stream under read_committed stops at the last stable offset and goes on once
the transaction ends."""

import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.gateway_process import GatewayProcess
from tests.support.kafka_reading import read_to_end
from tests.support.spark import spark_session

pyspark = pytest.importorskip("pyspark", reason="pyspark is a test dependency (kafscale[spark])")


@pytest.fixture(scope="module")
def spark():
    yield from spark_session("kafscale-txn-tests")


def _consume(bootstrap: str, isolation: str, partitions: int = 2) -> list[tuple[int, int, bytes]]:
    return sorted((m.partition(), m.offset(), m.value()) for m in read_to_end(bootstrap, "ledger", partitions, isolation))


def _frame(spark, data, isolation: str) -> list[tuple[int, int, bytes]]:
    df = (spark.read.format("kafscale").option("subscribe", "ledger")
          .option("kafka.isolation.level", isolation).load(str(data)))
    return sorted((r.partition, r.offset, bytes(r.value)) for r in df.select("partition", "offset", "value").collect())


def test_spark_reads_committed_or_uncommitted_records_as_consumers_do(spark, tmp_path):
    data = tmp_path / "data"
    gateway = GatewayProcess(data).start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic("ledger", 2, 1)])["ledger"].result(10)
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "transactional.id": "spark-ledger"})
        producer.init_transactions(15)
        for n in range(8):
            producer.begin_transaction()
            for i in range(25):
                producer.produce("ledger", value=f"{n}-{i}".encode(), partition=i % 2)
            if n % 3 == 1:
                producer.flush(10)
                producer.abort_transaction(15)
            else:
                producer.commit_transaction(15)
        plain = Producer({"bootstrap.servers": gateway.bootstrap})
        plain.produce("ledger", value=b"plain", partition=0)
        plain.flush(10)
        producer.begin_transaction()  # left open: read_committed stops before it
        producer.produce("ledger", value=b"open-0", partition=0)
        producer.flush(10)
        plain.produce("ledger", value=b"after-open", partition=0)
        plain.flush(10)

        committed = _consume(gateway.bootstrap, "read_committed")
        assert committed and all(not v.startswith((b"1-", b"4-", b"7-", b"open", b"after")) for _, _, v in committed)
        assert _frame(spark, data, "read_committed") == committed
        assert _frame(spark, data, "read_uncommitted") == _consume(gateway.bootstrap, "read_uncommitted")

        stream = (spark.readStream.format("kafscale").option("subscribe", "ledger")
                  .option("kafka.isolation.level", "read_committed").load(str(data))
                  .select("partition", "offset", "value").writeStream.format("memory").queryName("ledger_stream")
                  .trigger(processingTime="500 milliseconds").start())
        try:
            def streamed():
                return sorted((r.partition, r.offset, bytes(r.value))
                              for r in spark.sql("select * from ledger_stream").collect())

            deadline = time.monotonic() + 60
            while streamed() != committed:
                assert time.monotonic() < deadline, "the stream did not reach the last stable offset"
                time.sleep(0.5)
            producer.commit_transaction(15)  # the open transaction commits: the stream goes on
            after = _consume(gateway.bootstrap, "read_committed")
            assert {v for _, _, v in after} - {v for _, _, v in committed} == {b"open-0", b"after-open"}
            while streamed() != after:
                assert time.monotonic() < deadline, "the stream did not go on after the commit"
                time.sleep(0.5)
        finally:
            stream.stop()
    finally:
        gateway.stop()


def test_an_unknown_isolation_level_is_refused_by_name(spark, tmp_path):
    with pytest.raises(Exception, match="kafka.isolation.level"):
        spark.read.format("kafscale").option("subscribe", "t").option("kafka.isolation.level", "dirty") \
            .load(str(tmp_path)).collect()
