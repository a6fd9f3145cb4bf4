"""Compacted topics with real clients: 1,000,000 records over 11,000 keys, 1,000 of them
deleted with tombstones (gzip batches: every client here reads gzip), cleaned by the
gateway's cleaner; then every client reads each
key's newest value, from any start offset, across the gaps; the tombstones go after
delete.retention.ms."""

import asyncio
import json
import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.support.gateway_process import GatewayProcess

RECORDS = 1_000_000
KEYS = 11_000
DELETED = range(10_000, 11_000)  # keys whose last record is a tombstone
RETENTION_MS = 12_000
CLIENTS = Path(__file__).resolve().parent.parent / "clients"


def _key(i: int) -> bytes:
    return b"key-%08d" % i


def _wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"not within {timeout} s: {what}")


@pytest.fixture(scope="module")
def compacted(tmp_path_factory):
    """A gateway holding the cleaned topic "state" and, per key, its newest (offset, value)."""
    data = tmp_path_factory.mktemp("compacted") / "data"
    gateway = GatewayProcess(data, "--compaction-delay-ms", "300", "--cleaner-backoff-ms", "300",
                             "--segment-bytes", str(8 << 20)).start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic("state", 1, 1, config={
            "cleanup.policy": "compact", "delete.retention.ms": str(RETENTION_MS),
            "min.cleanable.dirty.ratio": "0.1"})])["state"].result(10)
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all", "linger.ms": 20,
                             "compression.type": "gzip", "batch.num.messages": 10_000, "enable.idempotence": True,
                             "queue.buffering.max.messages": 200_000})
        newest: dict[bytes, tuple[int, bytes | None]] = {}
        rng = random.Random(22)

        def remember(err, message):
            assert err is None, err
            key = message.key()
            if key not in newest or newest[key][0] < message.offset():
                newest[key] = (message.offset(), message.value())

        started = time.monotonic()
        for i in range(RECORDS):
            key = _key(i % KEYS)
            while True:
                try:
                    producer.produce("state", key=key, value=b"%d:%s" % (i, rng.randbytes(40).hex().encode()), on_delivery=remember)
                    break
                except BufferError:  # the client's queue is full: let deliveries drain it
                    producer.poll(0.05)
        for k in DELETED:
            producer.produce("state", key=_key(k), value=None, on_delivery=remember)
        assert producer.flush(120) == 0
        produced_s = time.monotonic() - started
        # Every record but each key's newest is cleaned away (the head of the log too, once compacted).
        superseded = RECORDS + len(DELETED) - KEYS
        _wait_for(lambda: gateway.metric("kafscale_cleaner_records_removed") >= superseded, 180,
                  f"{superseded} records cleaned")
        print(f"produced {RECORDS} in {produced_s:.1f} s; cleaned in {time.monotonic() - started - produced_s:.1f} s "
              f"more; {gateway.metric('kafscale_cleaner_passes'):.0f} passes")
        yield gateway, newest
    finally:
        gateway.kill()


def _confluent_read(bootstrap: str, start: int = 0) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "read", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition("state", 0, start)])
    out = []
    try:
        while True:
            message = consumer.poll(10)
            assert message is not None, "no message and no end of partition within 10 s"
            if message.error():
                if message.error().code() == -191:  # _PARTITION_EOF
                    return out
                raise KafkaException(message.error())
            out.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()


def _expected(newest, start=0, tombstones=True):
    return sorted((offset, key, value) for key, (offset, value) in newest.items()
                  if offset >= start and (tombstones or value is not None))


def test_the_cleaned_log_holds_each_keys_newest_record_and_the_tombstones(compacted):
    gateway, newest = compacted
    got = _confluent_read(gateway.bootstrap)
    assert len(got) == KEYS and got == _expected(newest)
    assert sum(1 for _, _, value in got if value is None) == len(DELETED)
    kcat = shutil.which("kcat")
    if kcat or os.environ.get("CI"):
        done = subprocess.run([kcat or "kcat", "-C", "-b", gateway.bootstrap, "-t", "state", "-p", "0",
                               "-o", "beginning", "-e", "-J"], capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        rows = [json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()]
        assert [(r["offset"], r["key"].encode(), r["payload"] and r["payload"].encode()) for r in rows] == \
               _expected(newest)
        assert [r["offset"] for r in rows if r["payload"] is None] == \
               sorted(newest[_key(k)][0] for k in DELETED)


@pytest.fixture(scope="module")
def tombstones_gone(compacted):
    gateway, newest = compacted
    _wait_for(lambda: gateway.metric("kafscale_cleaner_records_removed") >= RECORDS + len(DELETED) - KEYS
              + len(DELETED), RETENTION_MS / 1000 + 60, "the tombstones removed after delete.retention.ms")
    return gateway, {key: entry for key, entry in newest.items() if entry[1] is not None}


def test_after_delete_retention_only_the_live_keys_remain_from_any_start_offset(tombstones_gone):
    gateway, live = tombstones_gone
    assert len(live) == 10_000
    assert _confluent_read(gateway.bootstrap) == _expected(live)
    offsets = sorted(offset for offset, _ in live.values())
    # From offsets that were cleaned away, that hold a record, and past the last record.
    for start in (1, 123_457, offsets[0], offsets[0] + 1, offsets[5000], offsets[-1], offsets[-1] + 1, RECORDS):
        assert _confluent_read(gateway.bootstrap, start) == _expected(live, start), start


def test_kafka_python_reads_the_cleaned_log(tombstones_gone):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as Partition

    gateway, live = tombstones_gone
    consumer = KafkaConsumer(bootstrap_servers=gateway.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([Partition("state", 0)])
    consumer.seek_to_beginning()
    got = [(m.offset, m.key, m.value) for m in consumer]
    consumer.close()
    assert got == _expected(live)


def test_aiokafka_reads_the_cleaned_log(tombstones_gone):
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as Partition

    gateway, live = tombstones_gone

    async def read():
        consumer = AIOKafkaConsumer(bootstrap_servers=gateway.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = Partition("state", 0)
            consumer.assign([tp])
            consumer.seek(tp, 17)  # a cleaned-away offset
            out = []
            while batch := await consumer.getmany(tp, timeout_ms=3000):
                out += [(m.offset, m.key, m.value) for m in batch[tp]]
            return out
        finally:
            await consumer.stop()

    assert asyncio.run(read()) == _expected(live, 17)


def test_kafkajs_reads_the_cleaned_log(tombstones_gone):
    gateway, live = tombstones_gone
    node = shutil.which("node")
    if not (node and (CLIENTS / "node" / "node_modules" / "kafkajs").is_dir()):
        assert not os.environ.get("CI"), "node and kafkajs must be installed in CI"
        pytest.skip("node or kafkajs missing (scripts/test.sh installs them)")
    done = subprocess.run([node, str(CLIENTS / "node" / "read.js"), gateway.bootstrap, "state", "js-read"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    records = json.loads(done.stdout.strip().splitlines()[-1])["records"]
    assert [(o, k.encode(), v.encode()) for o, k, v in records] == _expected(live)


def test_sarama_reads_the_cleaned_log(tombstones_gone, tmp_path):
    from tests.e2e.test_sarama import SARAMA_SRC, _build

    gateway, live = tombstones_gone
    if not (shutil.which("go") and SARAMA_SRC.is_dir()):
        assert not os.environ.get("CI"), "go and sarama must be installed in CI"
        pytest.skip("golang-go / sarama missing (scripts/test.sh installs them)")
    binary = _build("sarama-read", tmp_path / "gocache")
    start = sorted(offset for offset, _ in live.values())[100] - 1  # a cleaned-away offset
    done = subprocess.run([str(binary), gateway.bootstrap, "state", str(start)], capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    records = json.loads(done.stdout.strip().splitlines()[-1])["records"]
    assert [(r["offset"], r["key"].encode(), r["value"].encode()) for r in records] == _expected(live, start)
    assert not any(r["null"] for r in records)


def test_a_schema_registry_style_store_reads_its_compacted_topic_to_the_end(tmp_path):
    """What Schema Registry does at start-up: check that ``_schemas`` is one compacted
    partition, then read it to the end offset (by position) for each key's latest value,
    also when the log's last records were cleaned away."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as Partition

    gateway = GatewayProcess(tmp_path / "data", "--compaction-delay-ms", "200", "--cleaner-backoff-ms", "200").start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic("_schemas", 1, 1, config={
            "cleanup.policy": "compact", "delete.retention.ms": "500"})])["_schemas"].result(10)
        resource = ConfigResource("topic", "_schemas")
        described = admin.describe_configs([resource])[resource].result(10)
        assert described["cleanup.policy"].value == "compact"
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all"})
        writes = [("s1", "v1"), ("s2", "v1"), ("s3", "v1"), ("s1", "v2"), ("s4", "v1"), ("s5", "v1"),
                  ("s3", None), ("s5", None)]  # the log ends with a tombstone
        for key, value in writes:
            producer.produce("_schemas", key=key.encode(), value=value and value.encode())
            producer.flush(10)  # one batch each
        # s1 v1, s3 v1, s5 v1 and both tombstones: the last batch is left empty (its header stays).
        _wait_for(lambda: gateway.metric("kafscale_cleaner_records_removed") >= 5, 60,
                  "superseded records and expired tombstones cleaned")
        consumer = KafkaConsumer(bootstrap_servers=gateway.bootstrap, enable_auto_commit=False)
        tp = Partition("_schemas", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        assert end == len(writes)
        latest: dict[bytes, bytes | None] = {}
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end:  # Schema Registry's KafkaStoreReaderThread
            assert time.monotonic() < deadline, f"stuck at {consumer.position(tp)} of {end}"
            for records in consumer.poll(timeout_ms=500).values():
                latest.update((record.key, record.value) for record in records)
        consumer.close()
        assert {k: v for k, v in latest.items() if v is not None} == {b"s1": b"v2", b"s2": b"v1", b"s4": b"v1"}
    finally:
        gateway.kill()


def test_a_record_without_a_key_is_refused_by_a_compacted_topic(tmp_path):
    gateway = GatewayProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic("keyed", 1, 1, config={"cleanup.policy": "compact"})])["keyed"].result(10)
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all", "linger.ms": 0})
        reports = []
        producer.produce("keyed", value=b"no key", on_delivery=lambda err, msg: reports.append(err))
        producer.flush(10)
        producer.produce("keyed", key=b"k", value=b"keyed", on_delivery=lambda err, msg: reports.append(err))
        producer.flush(10)
        assert reports[0] is not None and reports[0].name() == "INVALID_RECORD"
        assert reports[1] is None
        got = _read_topic(gateway.bootstrap, "keyed")
        assert [(o, k, v) for o, k, v in got] == [(0, b"k", b"keyed")]  # the refused record took no offset
    finally:
        gateway.kill()


def _read_topic(bootstrap: str, topic: str) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "read", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    try:
        while (message := consumer.poll(10)) is not None:
            if message.error():
                return out
            out.append((message.offset(), message.key(), message.value()))
        raise AssertionError("no end of partition within 10 s")
    finally:
        consumer.close()


def test_kafka_python_admin_appends_and_subtracts_compact(tmp_path):
    """kafka-python's admin client: create a compacted topic, APPEND delete, SUBTRACT compact
    (IncrementalAlterConfigs), and read the policy back each time (DescribeConfigs)."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as PythonNewTopic

    gateway = GatewayProcess(tmp_path / "data").start()
    admin = KafkaAdminClient(bootstrap_servers=gateway.bootstrap)
    try:
        admin.create_topics([PythonNewTopic("kp-compact", 1, 1, topic_configs={"cleanup.policy": "compact"})])

        def policy() -> str:
            found = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-compact")],
                                           config_filter="all")
            entry = found["topic"]["kp-compact"]["cleanup.policy"]
            assert entry["config_source"] == "DYNAMIC_TOPIC_CONFIG"  # set on the topic, not a default
            return entry["value"]

        assert policy() == "compact"
        for op, value, expected in (("APPEND", "delete", "compact,delete"), ("SUBTRACT", "compact", "delete")):
            admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-compact",
                                                configs={"cleanup.policy": (op, value)})], incremental=True)
            assert policy() == expected
    finally:
        admin.close()
        gateway.kill()
