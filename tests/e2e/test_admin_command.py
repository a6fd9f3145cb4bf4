"""kafscale-admin against a running gateway, checked against what real clients see:
topics made and altered through it, a group's lag equal to what its consumer's own position
says, offsets reset, an open transaction listed and described."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support import tansu
from tests.support.gateway_process import GatewayProcess


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    process = GatewayProcess(tmp_path_factory.mktemp("admin") / "data").start()
    yield process
    process.kill()


def admin(gateway, *args: str, expect: int = 0) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "kafscale.admin.cli", "-b", gateway.bootstrap, *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == expect, done.stdout + done.stderr
    return done


def as_json(gateway, *args: str):
    return json.loads(admin(gateway, "--json", *args).stdout)


def test_topics_are_created_described_altered_and_deleted(gateway):
    admin(gateway, "topics", "create", "ledger", "--partitions", "3", "--config", "cleanup.policy=compact")
    assert {"topic": "ledger", "partitions": 3, "internal": False} in as_json(gateway, "topics", "list")
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    for i in range(10):
        producer.produce("ledger", key=b"k%d" % i, value=b"v", partition=1)
    assert producer.flush(10) == 0
    described = as_json(gateway, "topics", "describe", "ledger")
    assert described["configs"]["cleanup.policy"] == "compact"
    assert [(p["partition"], p["log_start"], p["log_end"]) for p in described["partitions"]] == [
        (0, 0, 0), (1, 0, 10), (2, 0, 0)]
    admin(gateway, "topics", "alter-configs", "ledger", "--set", "retention.ms=3600000", "--delete", "cleanup.policy")
    configs = as_json(gateway, "topics", "describe", "ledger")["configs"]
    assert configs["retention.ms"] == "3600000" and configs["cleanup.policy"] == "delete"
    table = admin(gateway, "topics", "describe", "ledger").stdout
    assert "PARTITION  LEADER  LOG_START  LOG_END" in table
    refused = admin(gateway, "topics", "create", "ledger", expect=1)
    assert "topic_already_exists" in refused.stderr.lower()
    admin(gateway, "topics", "delete", "ledger")
    gone = admin(gateway, "topics", "describe", "ledger", expect=1)
    assert "unknown_topic_or_partition" in gone.stderr and "Traceback" not in gone.stderr


def test_group_lag_equals_the_consumers_own_position_and_offsets_reset(gateway):
    admin(gateway, "topics", "create", "orders", "--partitions", "2")
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    for i in range(100):
        producer.produce("orders", value=b"o%d" % i, partition=i % 2)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "billing",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["orders"])
    read = 0
    while read < 70:
        message = consumer.poll(5)
        assert message is not None
        read += 1
    consumer.commit(asynchronous=False)
    positions = {tp.partition: tp.offset for tp in consumer.position([TopicPartition("orders", 0),
                                                                       TopicPartition("orders", 1)])}
    described = as_json(gateway, "groups", "describe", "billing")
    assert described["state"] == "Stable" and len(described["members"]) == 1
    lag = {row["partition"]: row["lag"] for row in described["offsets"]}
    assert lag == {p: 50 - positions[p] for p in (0, 1)}
    assert sum(lag.values()) == 30
    # A group with members refuses a reset (as Kafka's tool says: stop the consumers first).
    refused = admin(gateway, "groups", "reset-offsets", "billing", "--topic", "orders", "--to", "earliest", expect=1)
    assert "billing" in refused.stderr
    consumer.close()
    assert {"group": "billing", "protocol_type": "consumer", "state": "Empty", "coordinator": 0} in \
        as_json(gateway, "groups", "list")
    reset = as_json(gateway, "groups", "reset-offsets", "billing", "--topic", "orders", "--to", "earliest")
    assert [(r["partition"], r["before"], r["after"]) for r in reset] == [(0, positions[0], 0), (1, positions[1], 0)]
    assert sum(row["lag"] for row in as_json(gateway, "groups", "describe", "billing")["offsets"]) == 100


def test_a_consumer_protocol_group_is_described_with_its_members_partitions(gateway):
    admin(gateway, "topics", "create", "kip848", "--partitions", "2")
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "modern", "group.protocol": "consumer",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["kip848"])
    for _ in range(100):
        consumer.poll(0.1)
        if len(consumer.assignment()) == 2:
            break
    described = as_json(gateway, "groups", "describe", "modern")
    (member,) = described["members"]
    assert (described["state"], described["protocol_type"], described["protocol"]) == ("Stable", "consumer", "uniform")
    assert member["partitions"] == ["kip848-0", "kip848-1"] and member["member_epoch"] > 0
    consumer.close()


def test_an_open_transaction_is_listed_and_described(gateway):
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "transactional.id": "payments-1"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("payments", value=b"p")
    producer.flush(10)
    listed = as_json(gateway, "transactions", "list")
    assert [(t["transactional_id"], t["state"]) for t in listed] == [("payments-1", "Ongoing")]
    described = as_json(gateway, "transactions", "describe", "payments-1")
    assert described["state"] == "Ongoing" and described["partitions"] == ["payments-0"]
    producer.commit_transaction(10)
    assert as_json(gateway, "transactions", "describe", "payments-1")["state"] == "CompleteCommit"


def test_brokers_and_an_unreachable_cluster(gateway):
    (broker,) = as_json(gateway, "brokers")
    assert (broker["port"], broker["controller"]) == (gateway.port, True)
    done = subprocess.run([sys.executable, "-m", "kafscale.admin.cli", "-b", "127.0.0.1:1", "brokers"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "no broker reachable" in done.stderr and "Traceback" not in done.stderr


def test_an_open_transaction_is_found_only_when_hanging_and_can_be_aborted_by_hand(gateway):
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "transactional.id": "refunds-1"})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("refunds", value=b"r%d" % i, partition=0)
    producer.flush(10)
    # Its coordinator has it as ongoing: not hanging.
    assert as_json(gateway, "transactions", "find-hanging", "--topic", "refunds") == []
    wrong = admin(gateway, "transactions", "abort", "--topic", "refunds", "--partition", "0", "--start-offset", "1",
                  expect=1)
    assert "no open transaction starts at offset 1" in wrong.stderr
    aborted = as_json(gateway, "transactions", "abort", "--topic", "refunds", "--partition", "0", "--start-offset", "0")
    assert aborted["aborted"] is True
    # The abort marker ends it on the partition: read_committed readers pass over its records.
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "refund-readers",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("refunds", 0, 0)])
    low, high = consumer.get_watermark_offsets(TopicPartition("refunds", 0), timeout=10)
    assert high == 4  # three records and the marker, all below the last stable offset now
    seen = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            seen.append(message.value())
    consumer.close()
    assert seen == []


class _Peer:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap


@pytest.fixture(params=["kafscale", "tansu"])
def any_broker(request, gateway, tmp_path):
    """The same commands against a Kafscale gateway and against Tansu, a Kafka-protocol peer."""
    if request.param == "kafscale":
        yield gateway
        return
    with tansu.running(tmp_path / "tansu.log") as bootstrap:
        yield _Peer(bootstrap)


def test_lag_equals_the_consumers_own_position_on_any_kafka_broker(any_broker):
    topic, group = f"lag-{time.time_ns()}", f"lag-readers-{time.time_ns()}"
    admin(any_broker, "topics", "create", topic, "--partitions", "3")
    producer = Producer({"bootstrap.servers": any_broker.bootstrap})
    for i in range(90):
        producer.produce(topic, value=b"m%d" % i, partition=i % 3)
        # One record per batch: Tansu 0.6 answers ListOffsets(latest) with its count of batches,
        # not of records (librdkafka's watermarks show the same), so only then do they agree.
        assert producer.flush(10) == 0
    ends = {p["partition"]: p["log_end"] for p in as_json(any_broker, "topics", "describe", topic)["partitions"]}
    assert ends == {0: 30, 1: 30, 2: 30}
    consumer = Consumer({"bootstrap.servers": any_broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p) for p in range(3)])
    read = 0
    while read < 40:
        message = consumer.poll(5)
        assert message is not None, f"read {read} of 40"
        if not message.error():
            read += 1
    consumer.commit(asynchronous=False)
    positions = {tp.partition: tp.offset for tp in consumer.position([TopicPartition(topic, p) for p in range(3)])}
    consumer.close()
    described = as_json(any_broker, "groups", "describe", group)
    lag = {row["partition"]: row["lag"] for row in described["offsets"] if row["topic"] == topic}
    assert lag == {p: 30 - positions[p] for p in range(3) if positions[p] >= 0}
    assert lag and sum(30 - lag[p] for p in lag) == 40  # the records read, wherever they came from
