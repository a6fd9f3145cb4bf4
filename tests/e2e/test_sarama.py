"""sarama 1.22 (Go, Debian's package): sync producer with acks=all under every codec,
then a partition consumer reading it all back."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

GO_DIR = Path(__file__).resolve().parent.parent / "clients" / "go"
SARAMA_SRC = Path("/usr/share/gocode/src/github.com/Shopify/sarama")
pytestmark = pytest.mark.skipif(
    not (shutil.which("go") and SARAMA_SRC.is_dir()) and not os.environ.get("CI"),
    reason="golang-go / golang-github-shopify-sarama-dev missing (scripts/test.sh installs them; "
    "in CI their absence fails)",
)


def _build(name: str, cache: Path) -> Path:
    binary = GO_DIR / "bin" / name
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": f"{GO_DIR}:/usr/share/gocode",
           "GOCACHE": str(cache), "GOFLAGS": ""}
    done = subprocess.run(["go", "build", "-o", str(binary), name], cwd=GO_DIR, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return binary


@pytest.fixture(scope="session")
def sarama_binary(tmp_path_factory):
    return _build("sarama-e2e", tmp_path_factory.mktemp("gocache"))


@pytest.fixture(scope="session")
def sarama_group_binary(tmp_path_factory):
    return _build("sarama-group", tmp_path_factory.mktemp("gocache"))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_sarama_produce_and_consume(gateway, sarama_binary, codec):
    topic = f"sarama-{codec}"
    done = subprocess.run([str(sarama_binary), gateway.bootstrap, topic, codec, "60"],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["acked"] == list(range(60))
    assert report["records"] == [
        dict(offset=i, key=f"k{i}", value=f"value {i}", header=f"n={i}", timestamp=1_700_000_000_000 + i)
        for i in range(60)
    ]


def test_sarama_consumer_group(tmp_path, sarama_group_binary):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.support.gateway_process import GatewayProcess

    gateway = GatewayProcess(tmp_path / "data", "--group-initial-rebalance-delay-ms", "1000").start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic("go-group", num_partitions=6, replication_factor=1)])["go-group"].result(10)
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all"})
        for i in range(300):
            producer.produce("go-group", value=b"%d" % i, partition=i % 6)
        assert producer.flush(10) == 0
        done = subprocess.run([str(sarama_group_binary), gateway.bootstrap, "go-group", "go-g", "3", "300"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert sorted(int(v) for member in report["seen"] for v in (member or [])) == list(range(300))
        # Sarama at V2_1_0_0 commits with OffsetCommit v1 (a version kio no longer has): the
        # group's offsets are stored. The 300th message's mark may race the members' close.
        from confluent_kafka import Consumer, TopicPartition

        reader = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "go-g"})
        committed = [tp.offset for tp in reader.committed([TopicPartition("go-group", p) for p in range(6)], timeout=10)]
        reader.close()
        assert all(0 < offset <= 50 for offset in committed), committed
        assert sum(committed) >= 299, committed
    finally:
        gateway.kill()
