"""The gateway on a real S3-compatible server (moto): the single-node client tests again,
a kill -9 mid-produce, and a missing bucket refused at start-up."""

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.gateway_process import GatewayProcess


@pytest.fixture
def s3_gateway(tmp_path, moto_server):
    bucket = moto_server.create_bucket()
    # The later --storage wins over the directory GatewayProcess passes first.
    process = GatewayProcess(tmp_path / "unused", "--storage", f"s3://{bucket}/kafscale-test",
                             *moto_server.gateway_args()).start()
    yield process
    process.kill()


def test_produce_every_codec_restart_consume_on_s3(s3_gateway):
    gateway = s3_gateway
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic("s3t", num_partitions=2, replication_factor=1)])["s3t"].result(10)
    sent = {}
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"]:
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "compression.type": codec, "acks": "all"})
        acks = []
        for i in range(100):
            producer.produce("s3t", key=f"{codec}-{i}".encode(), value=b"v" * (i + 1),
                             headers=[("c", codec.encode())], on_delivery=lambda err, msg: acks.append((err, msg)))
        assert producer.flush(30) == 0
        assert all(err is None for err, _ in acks)
        for _, msg in acks:
            sent[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
    gateway.restart()
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "s3", "enable.auto.commit": False})
    consumer.assign([TopicPartition("s3t", p, 0) for p in range(2)])
    got = {}
    deadline = time.monotonic() + 30
    while len(got) < len(sent) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got[(message.partition(), message.offset())] = (message.key(), message.value())
    found = consumer.offsets_for_times([TopicPartition("s3t", 0, 0)], timeout=10)
    consumer.close()
    assert got == sent
    assert found[0].offset == 0


def test_kill_9_mid_produce_on_s3_loses_nothing_acknowledged(s3_gateway, tmp_path):
    from tests.e2e.test_durability import kill_mid_produce_and_verify

    kill_mid_produce_and_verify(s3_gateway, tmp_path, 5_000)


def test_missing_bucket_stops_the_gateway_with_a_clear_message(tmp_path, moto_server):
    process = GatewayProcess(tmp_path / "unused", "--storage", "s3://no-such-bucket/x", *moto_server.gateway_args())
    with pytest.raises(RuntimeError) as info:
        process.start(timeout=20)
    assert process.process.returncode == 1
    assert "no-such-bucket" in str(info.value) and "must exist" in str(info.value)
