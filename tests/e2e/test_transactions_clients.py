"""Every client with transactions writes committed and aborted transactions; every client's
read_committed consumer sees exactly the committed records, in order, and read_uncommitted
consumers see them all (kafka-python, aiokafka, kafkajs and confluent-kafka, both ways)."""

import asyncio
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.gateway_process import GatewayProcess

NODE = Path(__file__).resolve().parent.parent / "clients" / "node"
ROUNDS, COUNT = 3, 20
WRITERS = ["confluent", "kafka-python", "aiokafka", "kafkajs"]


def _expected(prefix: str, outcome: str) -> list[str]:
    return [f"{prefix}-{outcome}-{r}-{i}" for r in range(ROUNDS) for i in range(COUNT)]


def _write_confluent(bootstrap, topic):
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(15)
    for round_ in range(ROUNDS):
        for outcome in ("commit", "abort"):
            producer.begin_transaction()
            for i in range(COUNT):
                producer.produce(topic, value=f"{topic}-{outcome}-{round_}-{i}".encode(), partition=0)
            if outcome == "commit":
                producer.commit_transaction(15)
            else:
                producer.flush(15)
                producer.abort_transaction(15)


def _write_kafka_python(bootstrap, topic):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"tx-{topic}")
    producer.init_transactions()
    for round_ in range(ROUNDS):
        for outcome in ("commit", "abort"):
            producer.begin_transaction()
            for i in range(COUNT):
                producer.send(topic, value=f"{topic}-{outcome}-{round_}-{i}".encode(), partition=0)
            if outcome == "commit":
                producer.commit_transaction()
            else:
                producer.flush()
                producer.abort_transaction()
    producer.close()


def _write_aiokafka(bootstrap, topic):
    from aiokafka import AIOKafkaProducer

    async def write():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"tx-{topic}")
        await producer.start()
        try:
            for round_ in range(ROUNDS):
                for outcome in ("commit", "abort"):
                    await producer.begin_transaction()
                    for i in range(COUNT):
                        await producer.send_and_wait(topic, f"{topic}-{outcome}-{round_}-{i}".encode(), partition=0)
                    if outcome == "commit":
                        await producer.commit_transaction()
                    else:
                        await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(write())


def _write_kafkajs(bootstrap, topic):
    out = subprocess.run(["node", str(NODE / "txn.js"), bootstrap, topic, f"tx-{topic}", topic, str(ROUNDS),
                          str(COUNT)], capture_output=True, timeout=120, text=True)
    assert out.returncode == 0, out.stderr[-2000:]


def _read_confluent(bootstrap, topic, committed):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"c-{time.monotonic_ns()}",
                        "isolation.level": "read_committed" if committed else "read_uncommitted"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values, idle_until = [], time.monotonic() + 10
    while time.monotonic() < idle_until:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value().decode())
            idle_until = time.monotonic() + 1.5
    consumer.close()
    return values


def _read_kafka_python(bootstrap, topic, committed):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                             isolation_level="read_committed" if committed else "read_uncommitted",
                             consumer_timeout_ms=2500)
    consumer.assign([KTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    values = [message.value.decode() for message in consumer]
    consumer.close()
    return values


def _read_aiokafka(bootstrap, topic, committed):
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def read():
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                    enable_auto_commit=False,
                                    isolation_level="read_committed" if committed else "read_uncommitted")
        await consumer.start()
        try:
            consumer.assign([ATopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            values = []
            while True:
                batch = await consumer.getmany(timeout_ms=2000)
                if not batch:
                    return values
                values += [m.value.decode() for messages in batch.values() for m in messages]
        finally:
            await consumer.stop()

    return asyncio.run(read())


def _read_kafkajs(bootstrap, topic, committed):
    args = ["node", str(NODE / "read.js"), bootstrap, topic, f"js-{time.monotonic_ns()}"]
    out = subprocess.run(args + ([] if committed else ["uncommitted"]), capture_output=True, timeout=150, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return [value for _, _, value in json.loads(out.stdout)["records"]]


WRITE = {"confluent": _write_confluent, "kafka-python": _write_kafka_python, "aiokafka": _write_aiokafka,
         "kafkajs": _write_kafkajs}
READ = {"confluent": _read_confluent, "kafka-python": _read_kafka_python, "aiokafka": _read_aiokafka,
        "kafkajs": _read_kafkajs}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A gateway holding, for each writing client, a topic of its committed and aborted transactions."""
    if shutil.which("node") is None or not (NODE / "node_modules" / "kafkajs").exists():
        pytest.fail("node and tests/clients/node's modules are needed (scripts/test.sh installs them)")
    gateway = GatewayProcess(tmp_path_factory.mktemp("txn-clients") / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        for future in admin.create_topics([NewTopic(name, 1, 1) for name in WRITERS]).values():
            future.result(10)
        for name in WRITERS:
            WRITE[name](gateway.bootstrap, name)
        yield gateway
    finally:
        gateway.stop()


@pytest.mark.parametrize("reader", list(READ))
@pytest.mark.parametrize("writer", WRITERS)
def test_read_committed_sees_exactly_the_committed_records_in_order(written, writer, reader):
    assert READ[reader](written.bootstrap, writer, committed=True) == _expected(writer, "commit")


@pytest.mark.parametrize("reader", list(READ))
def test_read_uncommitted_sees_every_record(written, reader):
    for writer in WRITERS:
        values = READ[reader](written.bootstrap, writer, committed=False)
        assert sorted(values) == sorted(_expected(writer, "commit") + _expected(writer, "abort"))
