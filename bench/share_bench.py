"""Share groups (KIP-932) beside a plain Fetch consumer, in one run on the embedded default.

- **Throughput**: a 4-partition topic of 200,000 × 100 B records read whole by a share group
  of 1, 4 and 16 confluent-kafka ShareConsumers (implicit acknowledgement: what a poll
  returned is accepted at the next), and by one consumer given the partitions (Fetch);
  records/s and gateway CPU per record (from /proc).
- **Store writes per 1,000 acknowledgements**: the gateway's share-state writes over the
  records acknowledged, for each share run.
- **Acquisition latency**: one record produced at a time, 200 times; the time until a waiting
  ShareConsumer's poll returns it (the long poll woken by the produce).
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from devkit.ports import free_port

from . import report
from .broker_bench import Broker, kafscale_broker

RECORDS = 200_000
PARTITIONS = 4
PAYLOAD = b"x" * 100


def _earliest(admin: AdminClient, group: str) -> None:
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _cpu(broker: Broker) -> float:
    user, system = broker.cpu_seconds()
    return user + system


def _share_run(broker: Broker, admin: AdminClient, topic: str, consumers: int) -> dict:
    group = f"share-{consumers}-{uuid.uuid4().hex[:6]}"
    _earliest(admin, group)
    seen: set[bytes] = set()
    lock, stop = threading.Lock(), threading.Event()
    writes, acked, cpu = broker.metric("kafscale_share_state_writes"), broker.metric(
        "kafscale_share_acknowledged_records"), _cpu(broker)

    first: list[float] = []

    def work() -> None:
        consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        consumer.subscribe([topic])
        while not stop.is_set():
            got = [m.value() for m in consumer.poll(0.2) if m.error() is None]
            with lock:
                if got and not first:
                    first.append(time.monotonic())
                seen.update(got)
        consumer.close()

    started = time.monotonic()
    threads = [threading.Thread(target=work) for _ in range(consumers)]
    for thread in threads:
        thread.start()
    while len(seen) < RECORDS and time.monotonic() - started < 300:
        time.sleep(0.01)
    elapsed = time.monotonic() - first[0]  # from the first record: joining is not reading
    stop.set()
    for thread in threads:
        thread.join(60)
    time.sleep(0.5)
    written = broker.metric("kafscale_share_state_writes") - writes
    acknowledged = broker.metric("kafscale_share_acknowledged_records") - acked
    return dict(rate=len(seen) / elapsed, cpu_us=(_cpu(broker) - cpu) / len(seen) * 1e6,
                writes_per_1000=written / max(acknowledged, 1) * 1000, acknowledged=acknowledged, seen=len(seen))


def _fetch_run(broker: Broker, topic: str) -> dict:
    """One consumer given the partitions (no group to join), reading with Fetch."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"plain-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    cpu, count, started = _cpu(broker), 0, time.monotonic()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    while count < RECORDS and time.monotonic() - started < 300:
        count += sum(1 for m in consumer.consume(1000, 0.2) if m.error() is None)
    elapsed = time.monotonic() - started
    consumer.close()
    return dict(rate=count / elapsed, cpu_us=(_cpu(broker) - cpu) / max(count, 1) * 1e6)


def _latency(broker: Broker, admin: AdminClient) -> list[float]:
    topic, group = f"latency-{uuid.uuid4().hex[:6]}", f"latency-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.subscribe([topic])
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    consumer.poll(2)  # joined, its share-partition started (latest)
    waits = []
    for i in range(200):
        sent = time.monotonic()
        producer.produce(topic, value=b"%d" % i)
        producer.flush(10)
        deadline = sent + 10
        while time.monotonic() < deadline:
            if any(m.error() is None for m in consumer.poll(0.5)):
                waits.append((time.monotonic() - sent) * 1000)
                break
    consumer.close()
    return waits


def run() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        http_port = free_port()
        broker = kafscale_broker(Path(tmp), "--http-port", str(http_port))
        broker.http_port = http_port
        with broker:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            topic = "queue"
            admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(30)
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
            for i in range(RECORDS):
                producer.produce(topic, value=PAYLOAD[:-8] + b"%08d" % i, partition=i % PARTITIONS)
                if i % 10_000 == 0:
                    producer.poll(0)
            producer.flush(60)
            plain = _fetch_run(broker, topic)
            shares = {n: _share_run(broker, admin, topic, n) for n in (1, 4, 16)}
            waits = _latency(broker, admin)
    rows = [["Fetch, 1 consumer given the partitions", f"{plain['rate']:,.0f}", f"{plain['cpu_us']:.1f}", "—"]]
    for n, result in shares.items():
        print(f"share group, {n} consumer(s): {result}")
        rows.append([f"share group, {n} consumer{'s' if n > 1 else ''}", f"{result['rate']:,.0f}",
                     f"{result['cpu_us']:.1f}", f"{result['writes_per_1000']:.1f}"])
    waits.sort()
    p50, p99 = statistics.median(waits), waits[int(len(waits) * 0.99) - 1]
    print(f"fetch {plain}; acquisition latency p50 {p50:.1f} ms p99 {p99:.1f} ms over {len(waits)}")
    report.save(
        "80-share-groups",
        "Share groups: consume throughput, store writes per acknowledgement, acquisition latency",
        "python -m bench shares",
        f"One gateway on its embedded default (filesystem). A {PARTITIONS}-partition topic of {RECORDS:,} × 100 B "
        "records is read whole by a consumer given the partitions (Fetch, no group), then by share groups of 1, 4 and 16 confluent-kafka 2.16 "
        "ShareConsumers (threads of one process, implicit acknowledgement, max.poll.records 500), all in the same "
        "run. Records/s from the first record read to the last (a group's join is not reading). CPU is the "
        "gateway's (user + system, /proc) per record read, join included. Writes: share-state objects stored "
        "per 1,000 records acknowledged (every acknowledgement is stored before it is answered; concurrent ones "
        "share a write).",
        ["reader", "records/s", "gateway CPU µs/record", "store writes / 1,000 acks"],
        rows,
        afterword=f"Acquisition latency (a record produced with acks=all, until a waiting ShareConsumer's poll "
                  f"returns it), {len(waits)} records one at a time: p50 {p50:.1f} ms, p99 {p99:.1f} ms.",
    )
