"""Share groups (KIP-932) in a cluster of three gateways on one etcd and one S3 bucket: the
share-partitions held by the partitions' owners, the group by its slot's owner, and an owner
killed -9 or paused past its lease mid-stream losing no acknowledgement."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest
import trio
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from devkit.wire_client import Client
from kafscale.protocol import ErrorCode
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class
from tests.cluster.conftest import LEASE_MS
from tests.cluster.test_cluster import create_topic


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_a_share_group_loses_no_acknowledgement_when_a_partition_owner_fails(cluster, fault):
    """An owner killed -9, or SIGSTOPped past its lease and then woken: its partitions move,
    their share state is read by the new owners from the store; no record whose
    acknowledgement was confirmed comes again, and every record is accepted in the end."""
    topic, group = "queue", f"workers-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, 6)
    cluster.wait_owned(topic, 6, {0, 1, 2})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    values = [b"%d" % i for i in range(6000)]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % 6)
    assert producer.flush(60) == 0

    confirmed: set[bytes] = set()
    uncertain: set[bytes] = set()  # acknowledged in a commit whose outcome the client never learned
    redelivered: list[bytes] = []
    stop = threading.Event()

    def consume(k: int) -> None:
        consumer = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "client.id": f"w{k}",
                                  "max.poll.records": "100", "share.acknowledgement.mode": "explicit",
                                  "socket.timeout.ms": "5000", "topic.metadata.refresh.interval.ms": "1000"})
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                batch = [m for m in consumer.poll(0.5) if m.error() is None]
                for message in batch:
                    if message.value() in confirmed:
                        redelivered.append(message.value())
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                if not batch:
                    continue
                time.sleep(0.02)
                try:
                    results = consumer.commit_sync(10)
                except Exception:  # not confirmed: may come again, or may have been stored
                    uncertain.update(m.value() for m in batch)
                    continue
                failed = {(tp.topic, tp.partition) for tp, error in results.items() if error is not None}
                confirmed.update(m.value() for m in batch if (m.topic(), m.partition()) not in failed)
                uncertain.update(m.value() for m in batch if (m.topic(), m.partition()) in failed)
        finally:
            consumer.close()

    workers = [threading.Thread(target=consume, args=(k,)) for k in range(3)]
    for worker in workers:
        worker.start()
    try:
        deadline = time.monotonic() + 60
        while len(confirmed) < 1500 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(confirmed) >= 1500, f"only {len(confirmed)} confirmed before the kill"
        victim = cluster.owners(topic)[0][0]
        survivors = {0, 1, 2} - {victim}
        if fault == "kill":
            cluster.gateways[victim].kill()
            cluster.wait_owned(topic, 6, survivors, timeout=LEASE_MS / 1000 + 10)
        else:
            process = cluster.gateways[victim].process
            os.kill(process.pid, signal.SIGSTOP)
            try:
                cluster.wait_owned(topic, 6, survivors, timeout=LEASE_MS / 1000 + 10)
                time.sleep(1)
            finally:
                os.kill(process.pid, signal.SIGCONT)  # it wakes holding stale state: fenced
        deadline = time.monotonic() + 120
        while _start_offsets(cluster, group, topic) != [1000] * 6 and time.monotonic() < deadline:
            time.sleep(1)
    finally:
        stop.set()
        for worker in workers:
            worker.join(60)
    print(f"{fault}: {len(confirmed)} confirmed, {len(uncertain)} in commits with no answer, "
          f"{len(set(values) - confirmed)} accepted unconfirmed")
    assert redelivered == [], f"{len(redelivered)} acknowledged records delivered again"
    # Every record accepted: each partition's share start offset at its end (1,000 records each).
    assert _start_offsets(cluster, group, topic) == [1000] * 6
    # A record whose acknowledgement was stored by a gateway killed before it answered is accepted
    # without the client knowing: it is never delivered again, so never confirmed. Only those.
    assert set(values) - confirmed <= uncertain, f"{len(set(values) - confirmed - uncertain)} records never accepted"


def _start_offsets(cluster, group: str, topic: str) -> list[int]:
    """Each partition's share start offset, as the group's coordinator answers
    DescribeShareGroupOffsets (90) from the stored state."""
    request = build(request_class(90, 1), dict(groups=[dict(group_id=group, topics=[
        dict(topic_name=topic, partitions=list(range(6)))])]))

    async def ask() -> list[int]:
        for gateway in cluster.live():
            try:
                client = await Client.connect(gateway.port)
                answer = await client.call(90, 1, request)
                await client.stream.aclose()
            except OSError:
                continue
            described = answer.groups[0]
            if described.error_code == ErrorCode.none:
                return [p.start_offset for p in sorted(described.topics[0].partitions, key=lambda p: p.partition_index)]
        return []

    return trio.run(ask)
