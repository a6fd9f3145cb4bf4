"""Independent clients through three gateways: each follows Metadata to the partition leaders
(different gateways) — kafkajs (Node) and sarama (Go) produce, confluent-kafka reads back."""

from __future__ import annotations

import json
import subprocess

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.e2e.test_kafkajs import NODE, NODE_DIR
from tests.e2e.test_sarama import _build


def _leaders(cluster, topic: str) -> set[int]:
    return {node for node, _ in cluster.wait_owned(topic, 2, {0, 1, 2}).values()}


def test_kafkajs_produces_through_the_cluster(cluster):
    if NODE is None:
        pytest.fail("node is missing (scripts/test.sh installs it)")
    done = subprocess.run([NODE, str(NODE_DIR / "produce.js"), cluster.gateways[0].bootstrap, "js-cluster", "gzip",
                           "100"], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(ack["error"] == 0 for ack in report["acks"])
    assert sorted((o["partition"], o["high"]) for o in report["offsets"]) == [(0, "50"), (1, "50")]
    assert len(_leaders(cluster, "js-cluster")) == 2  # the two partitions live on two gateways

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition("js-cluster", p, 0) for p in (0, 1)])
    got = {}
    while len(got) < 100:
        message = consumer.poll(10)
        assert message is not None and not message.error()
        got[int(message.key()[1:])] = message
    consumer.close()
    assert all(m.partition() == i % 2 and m.offset() == i // 2 and m.value() == f"value {i}".encode()
               for i, m in got.items())


def test_sarama_produces_and_consumes_through_the_cluster(cluster, tmp_path_factory):
    from tests.cluster.test_cluster import create_topic

    binary = _build("sarama-e2e", tmp_path_factory.mktemp("gocache"))
    create_topic(cluster, "go-cluster", 1)
    leader = cluster.wait_owned("go-cluster", 1, {0, 1, 2})[0][0]
    elsewhere = cluster.gateways[(leader + 1) % 3].bootstrap  # sarama must follow Metadata to the leader
    done = subprocess.run([str(binary), elsewhere, "go-cluster", "lz4", "60"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["acked"] == list(range(60))
    assert [r["value"] for r in report["records"]] == [f"value {i}" for i in range(60)]


def test_kafka_python_and_aiokafka_follow_leaders_across_gateways(cluster):
    import asyncio  # aiokafka runs on asyncio (this test is a plain function, not a trio one)

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaPythonPartition

    from tests.cluster.test_cluster import create_topic

    create_topic(cluster, "py-cluster", 6)
    assert len({node for node, _ in cluster.wait_owned("py-cluster", 6, {0, 1, 2}).values()}) == 3
    producer = KafkaProducer(bootstrap_servers=cluster.gateways[0].bootstrap, acks="all")
    try:
        futures = [producer.send("py-cluster", key=b"%d" % i, value=b"kp-%d" % i, partition=i % 6)
                   for i in range(300)]
        producer.flush()
        assert sorted(f.get(10).partition for f in futures) == sorted(i % 6 for i in range(300))
    finally:
        producer.close()

    async def aio_round_trip() -> set[bytes]:
        aio_producer = AIOKafkaProducer(bootstrap_servers=cluster.gateways[1].bootstrap, acks="all")
        await aio_producer.start()
        try:
            for i in range(300):
                await aio_producer.send_and_wait("py-cluster", value=b"aio-%d" % i, partition=i % 6)
        finally:
            await aio_producer.stop()
        consumer = AIOKafkaConsumer("py-cluster", bootstrap_servers=cluster.gateways[2].bootstrap,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        seen: set[bytes] = set()
        try:
            while len(seen) < 600:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                seen |= {m.value for messages in batches.values() for m in messages}
        finally:
            await consumer.stop()
        return seen

    assert asyncio.run(aio_round_trip()) == {b"kp-%d" % i for i in range(300)} | {b"aio-%d" % i for i in range(300)}

    consumer = KafkaConsumer(bootstrap_servers=cluster.gateways[2].bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10000)
    try:
        consumer.assign([KafkaPythonPartition("py-cluster", p) for p in range(6)])
        consumer.seek_to_beginning()
        values = set()
        for message in consumer:
            values.add(message.value)
            if len(values) == 600:
                break
    finally:
        consumer.close()
    assert len(values) == 600
