"""confluent-kafka (librdkafka 2.16) against a real gateway process."""

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000


def _consume_all(bootstrap: str, topic: str, expected: int, partitions: int, timeout: float = 30.0, **extra):
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}", "enable.auto.commit": False,
        **extra,
    })
    # assign() with explicit offsets: the group protocol arrives with the consumer-groups issue.
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    messages = []
    deadline = time.monotonic() + timeout
    while len(messages) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            raise KafkaException(message.error())
        messages.append(message)
    consumer.close()
    return messages


def test_produce_every_codec_restart_and_consume(gateway):
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    futures = admin.create_topics([NewTopic("orders", num_partitions=3, replication_factor=1)])
    futures["orders"].result(10)

    sent = {}
    for codec in CODECS:
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "compression.type": codec,
                             "acks": "all", "linger.ms": 5})
        delivered = []
        for i in range(300):
            key = f"{codec}-{i}".encode()
            producer.produce("orders", key=key, value=(f"value {i} " * 10).encode(),
                             headers=[("codec", codec.encode()), ("n", str(i).encode())],
                             timestamp=BASE_TS + i,
                             on_delivery=lambda err, msg: delivered.append((err, msg)))  # noqa: B023 (flushed below)
        assert producer.flush(30) == 0
        assert all(err is None for err, _ in delivered), [err for err, _ in delivered if err]
        for _, msg in delivered:  # delivery reports carry no headers: rebuild them
            i = msg.key().decode().rsplit("-", 1)[1]
            headers = [("codec", codec.encode()), ("n", i.encode())]
            sent[(msg.partition(), msg.offset())] = (msg.key(), msg.value(), headers)

    gateway.restart()  # everything acknowledged must survive

    messages = _consume_all(gateway.bootstrap, "orders", len(sent), 3)
    got = {(m.partition(), m.offset()): (m.key(), m.value(), m.headers()) for m in messages}
    assert got == sent
    # Keyed messages keep per-partition order: offsets are dense from 0.
    for partition in range(3):
        offsets = sorted(o for p, o in got if p == partition)
        assert offsets == list(range(len(offsets)))


def test_list_offsets_by_time_and_watermarks(gateway):
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(100):
        producer.produce("timed", value=b"v%d" % i, timestamp=BASE_TS + i * 1000, partition=0)
        if i % 10 == 9:
            producer.flush(10)  # several segments
    assert producer.flush(10) == 0

    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "lo", "enable.auto.commit": False})
    low, high = consumer.get_watermark_offsets(TopicPartition("timed", 0), timeout=10)
    assert (low, high) == (0, 100)
    found = consumer.offsets_for_times([TopicPartition("timed", 0, BASE_TS + 42_500)], timeout=10)
    assert found[0].offset == 43
    found = consumer.offsets_for_times([TopicPartition("timed", 0, BASE_TS)], timeout=10)
    assert found[0].offset == 0
    found = consumer.offsets_for_times([TopicPartition("timed", 0, BASE_TS + 10**9)], timeout=10)
    assert found[0].offset == -1  # nothing that late: Kafka answers -1 (end)
    consumer.close()

    gateway.restart()  # timestamps come back from the stored indexes
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "lo2", "enable.auto.commit": False})
    found = consumer.offsets_for_times([TopicPartition("timed", 0, BASE_TS + 77_000)], timeout=10)
    assert found[0].offset == 77
    consumer.assign([TopicPartition("timed", 0, 77)])
    message = consumer.poll(10)
    assert message is not None and message.value() == b"v77" and message.timestamp()[1] == BASE_TS + 77_000
    consumer.close()


def test_admin_create_describe_delete(gateway):
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic("adm", num_partitions=4, replication_factor=1)])["adm"].result(10)
    again = admin.create_topics([NewTopic("adm", num_partitions=4, replication_factor=1)])["adm"]
    with pytest.raises(KafkaException) as info:
        again.result(10)
    assert "TOPIC_ALREADY_EXISTS" in str(info.value)
    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics["adm"].partitions) == 4
    admin.delete_topics(["adm"])["adm"].result(10)
    assert "adm" not in admin.list_topics(timeout=10).topics
    with pytest.raises(KafkaException):
        admin.delete_topics(["adm"])["adm"].result(10)


def test_consumer_waits_for_new_data_long_poll(gateway):
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all"})
    producer.produce("live", value=b"first", partition=0)
    producer.flush(10)
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "live", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 5000})
    consumer.assign([TopicPartition("live", 0, 1)])
    consumer.poll(0.5)
    started = time.monotonic()
    producer.produce("live", value=b"second", partition=0)
    producer.flush(10)
    message = None
    while message is None and time.monotonic() - started < 10:
        message = consumer.poll(0.2)
    assert message is not None and message.value() == b"second"
    # Delivered because new data woke the fetch, well before the 5 s max wait.
    assert time.monotonic() - started < 3
    consumer.close()


def test_unknown_topic_without_auto_create(tmp_path):
    from tests.support.gateway_process import GatewayProcess

    gateway = GatewayProcess(tmp_path / "d", "--no-auto-create-topics").start()
    try:
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "message.timeout.ms": 3000})
        errors = []
        producer.produce("missing", value=b"x", on_delivery=lambda err, msg: errors.append(err))
        producer.flush(10)
        assert len(errors) == 1 and errors[0] is not None
        # librdkafka reports the unknown topic, or times the message out waiting for it.
        assert errors[0].name() in ("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_MSG_TIMED_OUT"), errors[0]
    finally:
        gateway.kill()
