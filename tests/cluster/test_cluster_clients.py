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
