"""kafkajs 2.2.4 (Node.js): topic admin, produce under each codec it ships or we install
(none, gzip, snappy via kafkajs-snappy), offsets; the records are read back with
confluent-kafka. (kafkajs consumers always join a group: they are exercised by the
consumer-groups issue.)"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

NODE_DIR = Path(__file__).resolve().parent.parent / "clients" / "node"
NODE = shutil.which("node")
INSTALLED = (NODE_DIR / "node_modules" / "kafkajs").is_dir()
pytestmark = pytest.mark.skipif(
    not (NODE and INSTALLED) and not os.environ.get("CI"),
    reason="node or kafkajs missing (scripts/test.sh installs them; in CI their absence fails)",
)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy"])
def test_kafkajs_produce_and_offsets(gateway, codec):
    topic = f"js-{codec}"
    done = subprocess.run([NODE, str(NODE_DIR / "produce.js"), gateway.bootstrap, topic, codec, "100"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["partitions"] == 2
    assert all(ack["error"] == 0 for ack in report["acks"])
    assert sorted((o["partition"], o["high"], o["low"]) for o in report["offsets"]) == [(0, "50", "0"), (1, "50", "0")]
    # message 50 is the 26th message of partition 0 (offset 25); in partition 1 the first
    # at or after it is message 51 (offset 25).
    assert sorted((o["partition"], o["offset"]) for o in report["byTime"]) == [(0, "25"), (1, "25")]

    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    got = {}
    while len(got) < 100:
        message = consumer.poll(10)
        assert message is not None and not message.error()
        i = int(message.key()[1:])
        got[i] = message
    consumer.close()
    for i, message in got.items():
        assert message.partition() == i % 2 and message.offset() == i // 2
        assert message.value() == f"value {i}".encode()
        assert message.headers() == [("n", str(i).encode())]
        assert message.timestamp()[1] == 1_700_000_000_000 + i


def test_kafkajs_consumer_group(tmp_path):
    from tests.support.gateway_process import GatewayProcess

    gateway = GatewayProcess(tmp_path / "data", "--group-initial-rebalance-delay-ms", "1000").start()
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic("js-group", num_partitions=6, replication_factor=1)])["js-group"].result(10)
        done = subprocess.run([NODE, str(NODE_DIR / "group.js"), gateway.bootstrap, "js-group", "js-g", "3", "300"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        values = sorted(int(m["value"]) for member in report["seen"] for m in member)
        assert values == list(range(300))  # each message once across the three members
        # Produced once the group was stable: every member owns partitions and reads.
        assert all(report["seen"]), [len(member) for member in report["seen"]]
        assert report["state"] == "Stable" and report["members"] == 3
    finally:
        gateway.kill()
