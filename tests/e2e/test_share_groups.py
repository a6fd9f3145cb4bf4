"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka 2.16) against a real
gateway process: sharing one partition, accept/release/reject per record, the delivery
limit, locks of consumers killed -9, and the gateway killed -9 mid-stream."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
import trio
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from devkit.wire_client import Client
from kafscale.protocol import ErrorCode
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class
from tests.support.gateway_process import GatewayProcess

pytestmark = pytest.mark.e2e


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _setup(bootstrap: str, partitions: int, values: list[bytes], **group_configs: str) -> tuple[str, str]:
    """A new topic holding ``values`` (spread over its partitions) and a share group with
    ``group_configs`` (dots written as underscores) set before it exists."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic, group = _name("queue"), _name("workers")
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(30)
    configs = {"share.auto.offset.reset": "earliest", **{k.replace("_", "."): v for k, v in group_configs.items()}}
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % partitions)
    assert producer.flush(30) == 0
    return topic, group


def _consumer(bootstrap: str, group: str, topic: str, **config: str) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": "100",
                              **{k.replace("_", "."): v for k, v in config.items()}})
    consumer.subscribe([topic])
    return consumer


@pytest.fixture
def gateway(tmp_path):
    process = GatewayProcess(tmp_path / "data").start()
    yield process
    process.stop()


def test_eight_share_consumers_share_one_partition_evenly_and_accept_every_record_once(gateway):
    values = [str(i).encode() for i in range(16_000)]
    topic, group = _setup(gateway.bootstrap, 1, values)
    per_consumer: collections.Counter[int] = collections.Counter()
    deliveries: collections.Counter[bytes] = collections.Counter()
    lock, stop = threading.Lock(), threading.Event()

    def work(k: int) -> None:
        consumer = _consumer(gateway.bootstrap, group, topic)
        try:
            while not stop.is_set():
                for message in consumer.poll(0.5):
                    assert message.error() is None, message.error()
                    time.sleep(0.001)  # a worker's processing: the queue, not the client, is the limit
                    with lock:
                        per_consumer[k] += 1
                        deliveries[message.value()] += 1
        finally:
            consumer.close()  # implicit mode: what the last poll returned is accepted

    workers = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + 120
    while len(deliveries) < len(values) and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    for worker in workers:
        worker.join(60)
    assert set(deliveries) == set(values)
    assert max(deliveries.values()) == 1, "a record was delivered twice"
    mean = len(values) / 8
    print("records per consumer:", sorted(per_consumer.values()))
    assert len(per_consumer) == 8 and all(abs(n - mean) <= 0.2 * mean for n in per_consumer.values())


def test_release_reject_and_the_delivery_limit_per_record(gateway):
    """Explicit acknowledgement: a released record comes back (with its delivery count), a
    rejected one never; a record released every time is archived after the limit (3)."""
    values = [b"accept-%d" % i for i in range(20)] + [b"release-once", b"reject", b"poison"]
    topic, group = _setup(gateway.bootstrap, 1, values, share_delivery_count_limit="3")
    consumer = _consumer(gateway.bootstrap, group, topic, share_acknowledgement_mode="explicit")
    deliveries: dict[bytes, list[int]] = collections.defaultdict(list)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                assert message.error() is None, message.error()
                value = message.value()
                deliveries[value].append(message.delivery_count())
                if value == b"poison" or (value == b"release-once" and len(deliveries[value]) == 1):
                    consumer.acknowledge(message, AcknowledgeType.RELEASE)
                elif value == b"reject":
                    consumer.acknowledge(message, AcknowledgeType.REJECT)
                else:
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            consumer.commit_sync()
            if len(deliveries[b"poison"]) >= 3 and len(deliveries) == len(values):
                consumer.poll(2)  # anything more would come now
                break
    finally:
        consumer.close()
    assert deliveries[b"release-once"] == [1, 2]
    assert deliveries[b"reject"] == [1]
    assert deliveries[b"poison"] == [1, 2, 3]
    assert all(deliveries[v] == [1] for v in values if v.startswith(b"accept"))


_HOLDER = textwrap.dedent("""
    import sys, time
    from confluent_kafka import ShareConsumer
    bootstrap, group, topic = sys.argv[1:4]
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": "100",
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    while True:
        got = [m for m in consumer.poll(1) if m.error() is None]
        if got:
            print(len(got), flush=True)
            time.sleep(3600)  # holds them, acknowledging nothing, until killed
""")


def test_records_a_consumer_held_when_killed_are_delivered_again_after_the_lock(gateway):
    values = [str(i).encode() for i in range(50)]
    topic, group = _setup(gateway.bootstrap, 1, values, share_record_lock_duration_ms="2000")
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, gateway.bootstrap, group, topic],
                              stdout=subprocess.PIPE, text=True)
    try:
        held = int(holder.stdout.readline())
        assert held > 0
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    killed_at = time.monotonic()
    consumer = _consumer(gateway.bootstrap, group, topic)
    seen: dict[bytes, int] = {}
    try:
        deadline = time.monotonic() + 30
        while len(seen) < len(values) and time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                assert message.error() is None, message.error()
                seen[message.value()] = message.delivery_count()
    finally:
        consumer.close()
    assert set(seen) == set(values)
    again = [v for v, count in seen.items() if count == 2]
    assert len(again) == held, "what the killed consumer held comes again, a second delivery"
    assert time.monotonic() - killed_at >= 1.0  # not before the lock ended (2 s from acquisition)


def test_the_gateway_killed_mid_stream_never_redelivers_an_acknowledged_record_nor_loses_one(gateway):
    """Several rounds: a consumer acknowledges in explicit mode with commit_sync while the
    gateway is killed -9 at a random moment and restarted. A record whose acknowledgement
    the gateway confirmed is never delivered again; every record is accepted in the end (the
    stored share start offsets reach the end). A gateway killed after storing an acknowledgement
    and before answering it leaves those records accepted unbeknown to the client: never
    delivered again, so never confirmed; only those may go unconfirmed."""
    values = [str(i).encode() for i in range(6000)]
    topic, group = _setup(gateway.bootstrap, 2, values)
    confirmed: set[bytes] = set()
    uncertain: set[bytes] = set()  # acknowledged in a commit whose outcome the client never learned
    redelivered: list[bytes] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def consume() -> None:
        consumer = _consumer(gateway.bootstrap, group, topic, share_acknowledgement_mode="explicit",
                             socket_timeout_ms="5000")
        try:
            while not stop.is_set():
                batch = [m for m in consumer.poll(0.5) if m.error() is None]
                for message in batch:
                    if message.value() in confirmed:
                        redelivered.append(message.value())
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                if not batch:
                    continue
                time.sleep(0.01)
                try:
                    results = consumer.commit_sync(10)
                except Exception:  # the gateway is down: not confirmed, may come again or be stored
                    uncertain.update(m.value() for m in batch)
                    continue
                failed = {(tp.topic, tp.partition) for tp, error in results.items() if error is not None}
                confirmed.update(m.value() for m in batch if (m.topic(), m.partition()) not in failed)
                uncertain.update(m.value() for m in batch if (m.topic(), m.partition()) in failed)
        except BaseException as exc:
            errors.append(exc)
        finally:
            consumer.close()

    worker = threading.Thread(target=consume)
    worker.start()
    try:
        for round_ in range(3):
            time.sleep(1.0 + round_ * 0.4)
            gateway.kill()
            gateway.restart()
        deadline = time.monotonic() + 90
        while _start_offsets(gateway.bootstrap, group, topic, 2) != [3000, 3000] and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        stop.set()
        worker.join(60)
    assert not errors, errors
    assert redelivered == []
    assert _start_offsets(gateway.bootstrap, group, topic, 2) == [3000, 3000]  # every record accepted
    assert set(values) - confirmed <= uncertain, f"{len(set(values) - confirmed - uncertain)} never accepted"


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_read_committed_share_groups_never_see_an_aborted_record(gateway, isolation):
    topic, group = _setup(gateway.bootstrap, 1, [], share_isolation_level=isolation)
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "transactional.id": _name("txn")})
    producer.init_transactions(30)
    for outcome in ("aborted", "committed", "aborted", "committed"):
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, value=f"{outcome}-{i}".encode())
        producer.flush(30)
        (producer.abort_transaction if outcome == "aborted" else producer.commit_transaction)(30)
    consumer = _consumer(gateway.bootstrap, group, topic)
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 20
        expected = 20 if isolation == "read_committed" else 40
        while len(seen) < expected and time.monotonic() < deadline:
            seen += [m.value().decode() for m in consumer.poll(0.5) if m.error() is None]
        consumer.poll(1)  # nothing more comes
    finally:
        consumer.close()
    if isolation == "read_committed":
        assert sorted(seen) == sorted([f"committed-{i}" for i in range(10)] * 2)  # two committed transactions
    else:
        assert len(seen) == 40 and sum(v.startswith("aborted") for v in seen) == 20


def _start_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    """Each partition's share start offset, as the gateway answers DescribeShareGroupOffsets
    (90) from the stored state ([] while it does not answer)."""
    request = build(request_class(90, 1), dict(groups=[dict(group_id=group, topics=[
        dict(topic_name=topic, partitions=list(range(partitions)))])]))
    port = int(bootstrap.rsplit(":", 1)[1])

    async def ask() -> list[int]:
        try:
            client = await Client.connect(port)
            answer = await client.call(90, 1, request)
            await client.stream.aclose()
        except OSError:
            return []
        described = answer.groups[0]
        if described.error_code != ErrorCode.none:
            return []
        return [p.start_offset for p in sorted(described.topics[0].partitions, key=lambda p: p.partition_index)]

    return trio.run(ask)
