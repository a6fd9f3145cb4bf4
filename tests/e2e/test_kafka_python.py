"""kafka-python 3.x against a real gateway process."""

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_produce_restart_consume(gateway, codec):
    topic = f"kp-{codec or 'none'}"
    admin = KafkaAdminClient(bootstrap_servers=gateway.bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap, acks="all", compression_type=codec,
                             linger_ms=5)
    acked = {}
    for i in range(200):
        future = producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, headers=[("i", b"%d" % i)],
                               timestamp_ms=1_700_000_000_000 + i)
        acked[i] = future
    producer.flush()
    positions = {i: (f.get(10).partition, f.get(10).offset) for i, f in acked.items()}
    producer.close()

    gateway.restart()

    consumer = KafkaConsumer(bootstrap_servers=gateway.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    consumer.seek_to_beginning()
    got = {}
    for message in consumer:
        i = int(message.value[1:])
        got[i] = (message.partition, message.offset)
        assert message.key == b"k%d" % i and message.headers == [("i", b"%d" % i)]
        assert message.timestamp == 1_700_000_000_000 + i
        if len(got) == 200:
            break
    consumer.close()
    assert got == positions


def test_offsets_for_times_and_end_offsets(gateway):
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap, acks=1)
    for i in range(30):
        producer.send("kp-times", value=b"x", partition=0, timestamp_ms=10_000 + i * 10)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=gateway.bootstrap, enable_auto_commit=False)
    tp = TopicPartition("kp-times", 0)
    assert consumer.end_offsets([tp])[tp] == 30
    assert consumer.beginning_offsets([tp])[tp] == 0
    found = consumer.offsets_for_times({tp: 10_155})[tp]
    assert (found.offset, found.timestamp) == (16, 10_160)
    consumer.close()


def test_offsets_for_times_on_a_missing_partition_times_out_promptly(gateway):
    """Reported: kafka-python hung over 40 s here against the gateway (Kafka: a timeout after
    request_timeout_ms). It must fail within the client's own timeout."""
    import time

    from kafka.errors import KafkaTimeoutError

    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap)
    producer.send("times", b"x").get(10)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=gateway.bootstrap, request_timeout_ms=500, fetch_max_wait_ms=100)
    try:
        for missing in (TopicPartition("times", 5), TopicPartition("no-such-topic", 3)):
            started = time.monotonic()
            with pytest.raises(KafkaTimeoutError):
                consumer.offsets_for_times({missing: 0})
            assert time.monotonic() - started < 3
    finally:
        consumer.close()


def test_kafka_python_infers_the_broker_version_from_api_versions(gateway):
    """kafka-python picks its protocol from the ApiVersions table: the gateway serves Kafka
    4.3's newest version of every API it serves but three (docs/compatibility.md), which
    kafka-python 3.0 reads as Kafka 4.3 (it once inferred 3.2, then 3.9, then 4.0); every other
    kafka-python test runs against that."""
    consumer = KafkaConsumer(bootstrap_servers=gateway.bootstrap)
    try:
        assert consumer.config["api_version"] == (4, 3)
    finally:
        consumer.close()
