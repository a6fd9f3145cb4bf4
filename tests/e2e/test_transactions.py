"""Transactions with real clients: commit and abort, read_committed and read_uncommitted
consumers, a restart between (kill -9), a transaction left open across a restart that its
timeout aborts, zombie fencing, and a consume-transform-produce worker killed midway that
still writes exactly one output per input."""

import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.gateway_process import GatewayProcess


def _create(bootstrap: str, *topics: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1) for name, partitions in topics]).values():
        future.result(10)


def _read(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int, timeout: float = 15,
          settle: float = 1.5) -> list[bytes]:
    """Every value of the topic a consumer with ``isolation`` sees (waits for ``expect``, then
    ``settle`` seconds more so anything extra would show)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic_ns()}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    settled_at = None
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
            if len(values) >= expect:
                settled_at = settled_at or time.monotonic() + settle
                if time.monotonic() >= settled_at:
                    break
    finally:
        consumer.close()
    return values


def _transactional(bootstrap: str, transactional_id: str, **extra) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **extra})
    producer.init_transactions(15)
    return producer


@pytest.fixture
def gateway(tmp_path):
    process = GatewayProcess(tmp_path / "data", "--transaction-check-interval-ms", "200").start()
    yield process
    process.stop()


def test_committed_records_are_read_and_aborted_ones_only_by_read_uncommitted(gateway):
    _create(gateway.bootstrap, ("tx", 3))
    producer = _transactional(gateway.bootstrap, "app-1")
    for round_ in range(6):
        producer.begin_transaction()
        for i in range(50):
            producer.produce("tx", value=b"%s-%d-%d" % (b"commit" if round_ % 2 == 0 else b"abort", round_, i),
                             partition=i % 3)
        if round_ % 2 == 0:
            producer.commit_transaction(15)
        else:
            producer.flush(15)  # stored, then aborted
            producer.abort_transaction(15)
    committed = _read(gateway.bootstrap, "tx", 3, "read_committed", 150)
    assert len(committed) == 150 and all(v.startswith(b"commit") for v in committed)
    everything = _read(gateway.bootstrap, "tx", 3, "read_uncommitted", 300)
    assert len(everything) == 300
    assert (gateway.metric("kafscale_transactions_committed"), gateway.metric("kafscale_transactions_aborted"),
            gateway.metric("kafscale_transaction_markers_written")) == (3, 3, 18)

    gateway.kill()  # kill -9: what read_committed sees is rebuilt from storage
    gateway.start()
    again = _read(gateway.bootstrap, "tx", 3, "read_committed", 150)
    assert sorted(again) == sorted(committed)
    producer.begin_transaction()  # the same producer goes on after the restart
    producer.produce("tx", value=b"commit-after-restart", partition=0)
    producer.commit_transaction(15)
    assert b"commit-after-restart" in _read(gateway.bootstrap, "tx", 3, "read_committed", 151)


def test_a_transaction_left_open_holds_read_committed_back_until_its_timeout_aborts_it(gateway):
    _create(gateway.bootstrap, ("open", 1))
    producer = _transactional(gateway.bootstrap, "stuck", **{"transaction.timeout.ms": 10_000})
    producer.begin_transaction()
    producer.produce("open", value=b"never-committed", partition=0)
    producer.flush(10)
    began = time.monotonic()
    other = Producer({"bootstrap.servers": gateway.bootstrap})
    other.produce("open", value=b"plain-after", partition=0)
    other.flush(10)
    gateway.kill()  # the open transaction outlives the gateway
    gateway.start()
    # Until the timeout, read_committed stops at the open transaction's first record.
    assert _read(gateway.bootstrap, "open", 1, "read_committed", 1, timeout=1.5, settle=0) == []
    assert time.monotonic() - began < 10, "the check above must run before the timeout"
    # Then the sweep aborts it; the plain record after it is visible, the aborted one never.
    assert _read(gateway.bootstrap, "open", 1, "read_committed", 1, timeout=30) == [b"plain-after"]
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)  # fenced: its transaction was aborted


def test_a_second_producer_of_an_id_fences_the_first(gateway):
    _create(gateway.bootstrap, ("fence", 1))
    zombie = _transactional(gateway.bootstrap, "shared-id")
    zombie.begin_transaction()
    zombie.produce("fence", value=b"zombie", partition=0)
    zombie.flush(10)
    successor = _transactional(gateway.bootstrap, "shared-id")  # aborts the zombie's transaction
    successor.begin_transaction()
    successor.produce("fence", value=b"successor", partition=0)
    successor.commit_transaction(15)
    with pytest.raises(KafkaException) as fenced:
        zombie.produce("fence", value=b"zombie-2", partition=0)
        zombie.commit_transaction(10)
    assert fenced.value.args[0].fatal() or "fenced" in str(fenced.value).lower()
    assert _read(gateway.bootstrap, "fence", 1, "read_committed", 1) == [b"successor"]


@pytest.mark.parametrize("app", ["txn_worker", "txn_worker_aiokafka"])
def test_consume_transform_produce_across_a_killed_worker_writes_each_output_once(gateway, app):
    _create(gateway.bootstrap, ("in", 2), ("out", 2))
    source = Producer({"bootstrap.servers": gateway.bootstrap, "enable.idempotence": True})
    inputs = [b"record-%04d" % i for i in range(400)]
    for i, value in enumerate(inputs):
        source.produce("in", key=b"%d" % i, value=value, partition=i % 2)
    source.flush(10)
    worker = [sys.executable, "-m", f"tests.apps.{app}", gateway.bootstrap]
    died = subprocess.run([*worker, "--die-after", "3"], timeout=120, capture_output=True)
    assert died.returncode == 9, died.stderr.decode()[-2000:]
    finished = subprocess.run(worker, timeout=180, capture_output=True)
    assert finished.returncode == 0, finished.stderr.decode()[-2000:]
    outputs = _read(gateway.bootstrap, "out", 2, "read_committed", len(inputs), timeout=30)
    assert sorted(outputs) == sorted(v.upper() for v in inputs)  # each exactly once
    uncommitted = _read(gateway.bootstrap, "out", 2, "read_uncommitted", len(inputs) + 1, timeout=10)
    assert len(uncommitted) > len(inputs)  # the killed worker's outputs are stored, aborted
