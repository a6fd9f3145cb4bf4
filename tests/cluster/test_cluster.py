"""Three gateways, one etcd, one S3 bucket, real clients: ownership, failover and fencing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import LEASE_MS, ready, wait_until

# Produces forever (acks=all) and writes every acknowledged (partition, offset, value).
PRODUCER = r"""
import json, os, sys
from confluent_kafka import Producer
bootstrap, topic, out_path, idempotent = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
out = os.open(out_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # one write() per line: never torn
def report(err, msg):
    if err is None:
        os.write(out, (json.dumps([msg.partition(), msg.offset(), msg.value().decode()]) + "\n").encode())
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                     "message.timeout.ms": 120000, "enable.idempotence": idempotent,
                     "topic.metadata.refresh.interval.ms": 1000})
i = 0
while True:
    try:
        producer.produce(topic, key=str(i % 31).encode(), value=f"m-{i}".encode(), on_delivery=report)
        i += 1
        if i % 50 == 0:
            producer.poll(0.005)  # a steady few thousand messages per second
    except BufferError:
        producer.poll(0.01)
"""


class BackgroundProducer:
    def __init__(self, cluster, topic: str, tmp_path, idempotent: bool = False) -> None:
        self.path = tmp_path / f"acks-{topic}.jsonl"
        self.path.touch()
        self.process = subprocess.Popen([sys.executable, "-c", PRODUCER, cluster.bootstrap, topic, str(self.path),
                                         "1" if idempotent else "0"])

    def acked(self) -> list:
        with open(self.path) as handle:
            return [json.loads(line) for line in handle if line.endswith("\n")]

    def acked_count(self) -> int:
        """How many acknowledgements so far (lines counted, not parsed: the file grows large)."""
        with open(self.path, "rb") as handle:
            return handle.read().count(b"\n")

    def wait_for(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.acked_count() < count:
            assert time.monotonic() < deadline, f"only {self.acked_count()} of {count} acks after {timeout}s"
            assert self.process.poll() is None, "the producer died"
            time.sleep(0.05)

    def stop(self) -> list:
        self.process.kill()
        self.process.wait()
        return self.acked()


def create_topic(cluster, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(15)


def _high_watermark(consumer, topic: str, partition: int) -> int:
    """ListOffsets(latest), retried while a partition moves (NOT_LEADER_OR_FOLLOWER is retriable:
    librdkafka does not retry this call by itself)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15)[1]
        except KafkaException as exc:
            moving = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                      KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT)
            if exc.args[0].code() not in moving or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def read_all(cluster, topic: str, partitions: int) -> dict[tuple[int, int], str]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "verify", "enable.auto.commit": False})
    try:
        # Requests accepted before the producer was killed may still be flushing: wait
        # until the high watermarks stop moving.
        ends: dict[int, int] = {}
        while True:
            latest = {p: _high_watermark(consumer, topic, p) for p in range(partitions)}
            if latest == ends:
                break
            ends = latest
            time.sleep(1.0)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        stored: dict[tuple[int, int], str] = {}
        deadline = time.monotonic() + 60
        while len(stored) < sum(ends.values()) and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and not message.error():
                stored[(message.partition(), message.offset())] = message.value().decode()
        for partition, end in ends.items():
            read = sum(1 for p, _ in stored if p == partition)
            assert read == end, f"read {read} records of {topic}-{partition}, its high watermark is {end}"
        return stored
    finally:
        consumer.close()


def verify(cluster, topic: str, partitions: int, acked: list) -> dict:
    """Every acknowledged message is at its offset; offsets are dense; no two segments and no
    two log-object entries claim the same offset. Returns counts for the assertion messages."""
    stored = read_all(cluster, topic, partitions)
    for partition, offset, value in acked:
        assert stored.get((partition, offset)) == value, \
            f"acked {value} at {partition}/{offset} is missing (stored there: {stored.get((partition, offset))}, " \
            f"{sum(1 for p, _ in stored if p == partition)} read); segments: {cluster.segment_ranges(topic, partition)}"
    acked_values = {value for _, _, value in acked}
    assert len(acked_values) == len(acked), "a message was acknowledged twice"
    for partition in range(partitions):
        offsets = sorted(o for p, o in stored if p == partition)
        assert offsets == list(range(len(offsets))), f"partition {partition} has holes"
        ranges = cluster.segment_ranges(topic, partition)
        for (_, last), (next_base, _) in zip(ranges, ranges[1:], strict=False):
            assert last < next_base, f"segments of {topic}-{partition} overlap: {ranges}"
        entries = cluster.log_entry_ranges(topic, partition)  # still in shared log objects
        for (_, last), (next_base, _) in zip(entries, entries[1:], strict=False):
            assert last < next_base, f"two log objects claim offsets of {topic}-{partition}: {entries}"
    copies: dict[str, int] = {}
    for value in stored.values():
        copies[value] = copies.get(value, 0) + 1
    return {"stored": len(stored), "acked": len(acked),
            "duplicated": sum(1 for v, n in copies.items() if n > 1),
            "first_copies": first_copies_of_duplicates(stored, acked)}


def first_copies_of_duplicates(stored: dict[tuple[int, int], str], acked: list) -> dict[int, list[int]]:
    """partition → offsets of the earlier copy of every value stored twice. Asserts that no
    value is stored three times and that no earlier copy is the acknowledged one."""
    where: dict[str, list[tuple[int, int]]] = {}
    for position, value in stored.items():
        where.setdefault(value, []).append(position)
    acked_at = {value: (partition, offset) for partition, offset, value in acked}
    first: dict[int, list[int]] = {}
    for value, positions in where.items():
        if len(positions) == 1:
            continue
        assert len(positions) == 2, f"{value} stored {len(positions)} times: {positions}"
        earlier = min(positions, key=lambda position: position[1])
        assert acked_at.get(value) != earlier, f"{value} acknowledged at {earlier}, then stored again"
        first.setdefault(earlier[0], []).append(earlier[1])
    return {partition: sorted(offsets) for partition, offsets in first.items()}


def test_partitions_spread_over_the_gateways_and_clients_use_all_of_them(cluster, tmp_path):
    create_topic(cluster, "spread", 6)
    per_node = lambda: [sum(1 for n, _ in cluster.owners("spread").values() if n == node) for node in (0, 1, 2)]  # noqa: E731
    wait_until(lambda: per_node() == [2, 2, 2], 15, lambda: cluster.owners("spread"))
    owners = cluster.wait_owned("spread", 6, {0, 1, 2})
    # Each gateway's own view agrees (its /metrics counts what it leads).
    owned = lambda: [g.metric("kafscale_owned_partitions") for g in cluster.gateways]  # noqa: E731
    wait_until(lambda: owned() == [2, 2, 2], 5, lambda: owned())
    assert all(g.metric("kafscale_lease_valid") == 1 for g in cluster.gateways)
    # Every gateway answers Metadata with the three gateways and, once its view is
    # refreshed (cluster_refresh_ms), the same leaders as etcd.
    for gateway in cluster.gateways:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        leaders = lambda: {p: m.leader for p, m in admin.list_topics("spread", timeout=10).topics["spread"].partitions.items()}  # noqa: E731, B023 (used in this iteration)
        wait_until(lambda: leaders() == {p: node for p, (node, _) in owners.items()}, 5,  # noqa: B023
                   lambda: f"{gateway.bootstrap} reports leaders {leaders()}, etcd {owners}")  # noqa: B023
        metadata = admin.list_topics("spread", timeout=10)
        assert sorted((b.id, b.port) for b in metadata.brokers.values()) == \
            sorted((i, g.port) for i, g in enumerate(cluster.gateways))
    # kcat (librdkafka's C CLI) sees the same cluster.
    listing = json.loads(subprocess.run(["kcat", "-L", "-J", "-b", cluster.gateways[1].bootstrap, "-t", "spread"],
                                        capture_output=True, text=True, timeout=30, check=True).stdout)
    assert sorted(b["id"] for b in listing["brokers"]) == [0, 1, 2]
    assert {p["partition"]: p["leader"] for p in listing["topics"][0]["partitions"]} == \
        {p: node for p, (node, _) in owners.items()}
    producer = Producer({"bootstrap.servers": cluster.gateways[0].bootstrap, "acks": "all", "linger.ms": 5})
    acked = []
    for i in range(3000):
        producer.produce("spread", key=b"%d" % i, value=b"v%d" % i,
                         on_delivery=lambda err, msg: acked.append((err, msg.partition(), msg.offset())))
    assert producer.flush(30) == 0
    assert all(err is None for err, _, _ in acked) and len({p for _, p, _ in acked}) == 6
    # A consumer group reads everything through whichever gateway coordinates it.
    consumer = Consumer({"bootstrap.servers": cluster.gateways[2].bootstrap, "group.id": "spread-readers",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["spread"])
    got = set()
    deadline = time.monotonic() + 30
    while len(got) < 3000 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got.add(message.value())
    consumer.close()
    assert len(got) == 3000


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_kill_9_one_gateway_mid_produce_its_partitions_move_and_nothing_acked_is_lost(cluster, tmp_path, idempotent):
    kill_one_gateway_mid_produce(cluster, tmp_path, idempotent)


def test_kill_9_failover_on_seaweedfs(seaweed_cluster, tmp_path):
    """The same failover on another S3 implementation (SeaweedFS: real SigV4, its own
    conditional-put code path)."""
    kill_one_gateway_mid_produce(seaweed_cluster, tmp_path, idempotent=True)


def kill_one_gateway_mid_produce(cluster, tmp_path, idempotent: bool) -> None:
    create_topic(cluster, "failover", 6)
    # Balanced first, so the victim's partitions are the ones it held since the producer began.
    per_node = lambda: sorted(n for n, _ in cluster.owners("failover").values())  # noqa: E731
    wait_until(lambda: per_node() == [0, 0, 1, 1, 2, 2], 30, lambda: cluster.owners("failover"))
    before_kill = cluster.owners("failover")
    producer = BackgroundProducer(cluster, "failover", tmp_path, idempotent)
    try:
        producer.wait_for(3000)
        assert cluster.owners("failover") == before_kill, "a partition moved before the kill"
        victim = cluster.gateways[1]
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait()
        killed_at = time.monotonic()
        owners = cluster.wait_owned("failover", 6, {0, 2}, timeout=LEASE_MS / 1000 + 10)
        moved_after = time.monotonic() - killed_at
        before = producer.acked_count()
        producer.wait_for(before + 3000)  # the client carries on through the other two
    finally:
        acked = producer.stop()
    moved = [p for p, (node, _) in before_kill.items() if node == 1]
    assert moved and all(owners[p][1] > before_kill[p][1] for p in moved), (before_kill, owners)
    counts = verify(cluster, "failover", 6, acked)
    first_copies = counts.pop("first_copies")
    runs = {p: (o[0], o[-1]) for p, o in first_copies.items()}
    print(f"partitions moved {moved_after:.1f} s after kill -9; {counts}; earlier copies {runs}")
    if idempotent:
        # The new owners rebuilt the producer's sequences from storage: a batch stored
        # just before the kill and retried after it is answered, not written again.
        assert counts["duplicated"] == 0, counts
    else:
        # Without idempotence a batch the killed gateway stored but never answered is stored
        # again on retry, and nothing else is: the earlier copies are one unanswered run at
        # the end of what the victim wrote of each of its partitions. How long that run is
        # depends on how far the client ran ahead (a CI run under load: 5,308 of 53,508).
        assert set(first_copies) <= set(moved), (moved, first_copies)
        for partition, offsets in first_copies.items():
            assert offsets == list(range(offsets[0], offsets[-1] + 1)), \
                f"earlier copies in {partition} are not one run: {offsets[:5]}...{offsets[-5:]}"


def test_gateway_paused_past_its_lease_is_fenced_and_loses_nothing(cluster, tmp_path):
    create_topic(cluster, "paused", 6)
    cluster.wait_owned("paused", 6, {0, 1, 2})
    producer = BackgroundProducer(cluster, "paused", tmp_path, idempotent=True)
    victim = cluster.gateways[2]
    try:
        producer.wait_for(2000)
        victim.process.send_signal(signal.SIGSTOP)  # mid-produce: its writes are in flight
        owners = cluster.wait_owned("paused", 6, {0, 1}, timeout=LEASE_MS / 1000 + 10)
        assert all(node != 2 for node, _ in owners.values())
        producer.wait_for(producer.acked_count() + 2000)
        victim.process.send_signal(signal.SIGCONT)  # wakes up believing it still owns partitions
        # It notices its lease is gone, joins again and takes back its share.
        cluster.wait_owned("paused", 6, {0, 1, 2})
        wait_until(lambda: any(node == 2 for node, _ in cluster.owners("paused").values()), 30,
                   "the resumed gateway never took partitions back")
        producer.wait_for(producer.acked_count() + 2000)
    finally:
        victim.process.send_signal(signal.SIGCONT)
        acked = producer.stop()
    assert "lease" in victim.logs() and "gone" in victim.logs()
    counts = verify(cluster, "paused", 6, acked)
    print(counts)
    assert counts["duplicated"] == 0, counts


def test_etcd_restart_the_gateways_recover(cluster, tmp_path):
    create_topic(cluster, "etcd-restart", 3)
    cluster.wait_owned("etcd-restart", 3, {0, 1, 2})
    producer = BackgroundProducer(cluster, "etcd-restart", tmp_path)
    try:
        producer.wait_for(1000)
        cluster.etcd.restart(down_s=2.0)
        producer.wait_for(producer.acked_count() + 2000, timeout=90)
        wait_until(lambda: all(ready(g) for g in cluster.gateways), 30, "gateways not ready after etcd came back")
    finally:
        acked = producer.stop()
    verify(cluster, "etcd-restart", 3, acked)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consumer_group_continues_when_its_coordinator_dies(cluster, tmp_path, protocol):
    from kafscale.gateway.groups.store import slot_of

    create_topic(cluster, "grouped", 6)
    cluster.wait_owned("grouped", 6, {0, 1, 2})
    group = f"survivors-{protocol}"
    coordinator = cluster.coordinator_of_slot(slot_of(group, 16), {0, 1, 2})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})

    def produce(start: int, count: int) -> None:
        for i in range(start, start + count):
            producer.produce("grouped", key=b"%d" % i, value=b"%d" % i)
        assert producer.flush(60) == 0

    produce(0, 2000)
    # The consumer protocol (KIP-848) takes its session timeout from the coordinator.
    timeouts = {"session.timeout.ms": 6000} if protocol == "classic" else {"group.protocol": "consumer"}
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": True,
                         "auto.commit.interval.ms": 200, "topic.metadata.refresh.interval.ms": 1000, **timeouts})
    consumer.subscribe(["grouped"])
    seen: set[bytes] = set()

    def consume_until(count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(seen) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                seen.add(message.value())

    try:
        consume_until(2000, 30)
        assert len(seen) == 2000
        cluster.gateways[coordinator].kill()
        survivors = {0, 1, 2} - {coordinator}
        cluster.wait_owned("grouped", 6, survivors, timeout=LEASE_MS / 1000 + 10)
        produce(2000, 2000)
        consume_until(4000, 60)
        assert len(seen) == 4000, f"consumed {len(seen)} of 4000 after the coordinator died"
        assert cluster.coordinator_of_slot(slot_of(group, 16), survivors) != coordinator
        # Commits land at the new coordinator: the group's committed offsets reach the end.
        committed = lambda: consumer.committed([TopicPartition("grouped", p) for p in range(6)], timeout=10)  # noqa: E731

        def all_committed() -> bool:
            # Keeps the member alive and its auto-commits going. Everything fetched is taken, not
            # one record per check: when the coordinator died before the group's first commit
            # (the first 2,000 records take a tenth of a second), the new one has no committed
            # offsets, so the group reads all 4,000 records again from the earliest.
            while consumer.poll(0.2) is not None:
                pass
            return sum(max(tp.offset, 0) for tp in committed()) == 4000

        wait_until(all_committed, 30, lambda: f"committed {committed()}")
    finally:
        consumer.close()


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_a_group_outlives_its_coordinator_paused_past_its_lease(cluster, tmp_path, protocol):
    """Members heartbeat while their coordinator is SIGSTOPped past its lease: another gateway
    adopts the group's slot from the stored state and the members carry on (KIP-848 members at
    their epochs; classic members join it again); when the paused one wakes up, the group's
    committed offsets stay at the end."""
    from kafscale.gateway.groups.store import slot_of

    create_topic(cluster, "heartbeats", 4)
    cluster.wait_owned("heartbeats", 4, {0, 1, 2})
    group = f"paused-coordinator-{protocol}"
    paused_node = cluster.coordinator_of_slot(slot_of(group, 16), {0, 1, 2})
    # Clients give up on a paused gateway's open connections after socket.timeout.ms (librdkafka's
    # default: 60 s), then follow the partitions and the group to the gateways that took them.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                         "socket.timeout.ms": 10_000})

    def produce(start: int, count: int) -> None:
        for i in range(start, start + count):
            producer.produce("heartbeats", value=b"%d" % i, partition=i % 4)
        assert producer.flush(90) == 0

    consumers = [Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "group.protocol": protocol,
                           "auto.offset.reset": "earliest", "enable.auto.commit": True,
                           "auto.commit.interval.ms": 200, "topic.metadata.refresh.interval.ms": 1000,
                           "socket.timeout.ms": 10_000})
                 for _ in range(2)]
    for consumer in consumers:
        consumer.subscribe(["heartbeats"])
    seen: set[bytes] = set()

    def consume_until(count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(seen) < count and time.monotonic() < deadline:
            for consumer in consumers:  # everything fetched, not one record per turn
                seen.update(m.value() for m in consumer.consume(500, 0.05) if not m.error())

    def committed() -> int | None:
        """The group's committed total; None while its coordinator moves (NOT_COORDINATOR)."""
        try:
            return sum(max(tp.offset, 0) for tp in consumers[0].committed(
                [TopicPartition("heartbeats", p) for p in range(4)], timeout=10))
        except KafkaException:
            return None

    def all_committed() -> bool:
        consume_until(len(seen) + 1, 0.5)  # keeps both members polling, heartbeating, committing
        return committed() == 2000

    paused = cluster.gateways[paused_node]
    try:
        produce(0, 1000)
        consume_until(1000, 40)
        assert len(seen) == 1000
        paused.process.send_signal(signal.SIGSTOP)
        survivors = {0, 1, 2} - {paused_node}
        cluster.wait_owned("heartbeats", 4, survivors, timeout=LEASE_MS / 1000 + 10)
        produce(1000, 1000)
        consume_until(2000, 90)
        assert len(seen) == 2000, f"consumed {len(seen)} of 2000 while the coordinator was paused"
        wait_until(all_committed, 40, lambda: f"committed {committed()}")
        paused.process.send_signal(signal.SIGCONT)  # wakes up believing it still coordinates the group
        wait_until(lambda: any(node == paused_node for node, _ in cluster.owners("heartbeats").values()), 30,
                   "the resumed gateway never took partitions back")
        consume_until(2001, 3)
        wait_until(all_committed, 20, lambda: f"committed {committed()} after the coordinator woke up")
    finally:
        paused.process.send_signal(signal.SIGCONT)
        for consumer in consumers:
            consumer.close()


def test_a_joining_gateway_takes_its_share_and_clients_follow(cluster, tmp_path):
    create_topic(cluster, "grow", 8)
    cluster.wait_owned("grow", 8, {0, 1, 2})
    producer = BackgroundProducer(cluster, "grow", tmp_path)
    try:
        producer.wait_for(1000)
        cluster.add()
        spread = lambda: sorted(sum(1 for n, _ in cluster.owners("grow").values() if n == node) for node in range(4))  # noqa: E731
        wait_until(lambda: spread() == [2] * 4, 30, lambda: f"not rebalanced: {cluster.owners('grow')}")
        producer.wait_for(producer.acked_count() + 2000)
    finally:
        acked = producer.stop()
    verify(cluster, "grow", 8, acked)


def test_topic_changes_made_through_one_gateway_reach_the_others(cluster, tmp_path):
    """segment.bytes altered through a gateway that does not own the partition applies at its
    owner (to the segments compaction writes); a deleted topic's committed offsets leave the group wherever it is coordinated."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    from kafscale.gateway.cluster.placement import Placement

    # Admin requests go to the controller (the lowest live node id, 0): pick a topic that
    # another gateway owns (every gateway computes the same placement).
    placement = Placement([0, 1, 2])
    topic = next(t for t in (f"changing-{i}" for i in range(20)) if placement.topic(t, 1)[0] != 0)
    create_topic(cluster, topic, 1)
    expected = placement.topic(topic, 1)[0]
    wait_until(lambda: cluster.owners(topic).get(0, (None,))[0] == expected, 15,  # the assignment has settled
               lambda: cluster.owners(topic))
    owner = expected
    elsewhere = cluster.gateways[0].bootstrap
    # One record per batch, many batches per request: segments may split between batches.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 50,
                         "batch.num.messages": 1})
    for _ in range(200):
        producer.produce(topic, value=b"x" * 100, partition=0)
    assert producer.flush(30) == 0
    covered = lambda n: (lambda: sum(last - base + 1 for base, last in cluster.segment_ranges(topic, 0)) >= n)  # noqa: E731
    wait_until(covered(200), 20, lambda: cluster.segment_ranges(topic, 0))  # compacted (after a second)
    before = cluster.segment_ranges(topic, 0)
    assert max(last - base + 1 for base, last in before) > 15  # compaction gathers many batches

    admin = AdminClient({"bootstrap.servers": elsewhere})
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("segment.bytes", "2048", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    assert 'api="INCREMENTAL_ALTER_CONFIGS"' not in cluster.gateways[owner].metrics()  # changed elsewhere
    time.sleep(1.0)  # a few refreshes of the owner
    for _ in range(200):  # ~35 KB of batches: compacted into ~2 KB segments by the owner
        producer.produce(topic, value=b"y" * 100, partition=0)
    assert producer.flush(30) == 0
    wait_until(covered(400), 20, lambda: cluster.segment_ranges(topic, 0))
    after = cluster.segment_ranges(topic, 0)[len(before):]
    # ~170-byte batches: at most 12 fit in 2 KiB (a segment closes before it would exceed it).
    assert after and max(last - base + 1 for base, last in after) <= 12, after

    group = "changing-readers"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 42)], asynchronous=False)
    consumer.close()
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    assert [(tp.topic, tp.offset) for tp in listed.topic_partitions] == [(topic, 42)]
    admin.delete_topics([topic])[topic].result(10)
    remaining = lambda: admin.list_consumer_group_offsets(  # noqa: E731
        [ConsumerGroupTopicPartitions(group)])[group].result(10).topic_partitions
    wait_until(lambda: not remaining(), 10, lambda: f"offsets of the deleted topic remain: {remaining()}")


def test_sigterm_hands_partitions_over_at_once(cluster, tmp_path):
    """A clean stop (rolling restart) flushes, revokes its lease and its partitions move
    without waiting for the lease to run out; nothing acknowledged is lost or doubled."""
    create_topic(cluster, "rolling", 6)
    before = cluster.wait_owned("rolling", 6, {0, 1, 2})
    producer = BackgroundProducer(cluster, "rolling", tmp_path, idempotent=True)
    try:
        producer.wait_for(2000)
        stopping = cluster.gateways[0]
        stopping.process.send_signal(signal.SIGTERM)
        stopped_at = time.monotonic()
        assert stopping.process.wait(20) == 0
        owners = cluster.wait_owned("rolling", 6, {1, 2}, timeout=LEASE_MS / 1000 + 10)
        moved_after = time.monotonic() - stopped_at
        producer.wait_for(producer.acked_count() + 2000)
        stopping.start()  # back, and it takes its share again
        wait_until(lambda: any(node == 0 for node, _ in cluster.owners("rolling").values()), 20,
                   lambda: cluster.owners("rolling"))
        producer.wait_for(producer.acked_count() + 2000)
    finally:
        acked = producer.stop()
    assert any(node == 0 for node, _ in before.values())
    assert moved_after < LEASE_MS / 1000, f"partitions moved only after {moved_after:.1f} s (lease expiry)"
    moved = [p for p, (node, _) in before.items() if node == 0]
    assert all(owners[p][1] > before[p][1] for p in moved), (before, owners)  # new leader epochs
    counts = verify(cluster, "rolling", 6, acked)
    assert counts["duplicated"] == 0, counts


def test_group_configs_set_through_one_gateway_reach_the_groups_coordinator(cluster):
    """IncrementalAlterConfigs on a GROUP, sent to any gateway, is stored in etcd and followed
    by every gateway's watch: the group's coordinator answers its members' heartbeats with it,
    and every gateway describes it."""
    import trio

    from devkit.wire_client import Client
    from kafscale.protocol.entities import build
    from kafscale.protocol.messages import request_class

    create_topic(cluster, "tuned-topic", 2)

    def request(key: int, version: int, **values):
        return build(request_class(key, version), values)

    async def described(gateway) -> str:
        client = await Client.connect(gateway.port)
        body = await client.call(32, 4, request(32, 4, resources=[dict(
            resource_type=32, resource_name="tuned", configuration_keys=["consumer.heartbeat.interval.ms"])],
            include_synonyms=False, include_documentation=False))
        await client.stream.aclose()
        return body.results[0].configs[0].value

    async def scenario() -> None:
        first = await Client.connect(cluster.gateways[0].port)
        altered = await first.call(44, 1, request(44, 1, resources=[dict(
            resource_type=32, resource_name="tuned", configs=[dict(
                name="consumer.heartbeat.interval.ms", config_operation=0, value="1234")])], validate_only=False))
        assert altered.responses[0].error_code == 0
        found = await first.call(10, 4, request(10, 4, key_type=0, coordinator_keys=["tuned"]))
        coordinator = next(g for g in cluster.gateways if g.port == found.coordinators[0].port)
        await first.stream.aclose()
        with trio.fail_after(10):  # each gateway's watch brings the change
            for gateway in cluster.gateways:
                while await described(gateway) != "1234":
                    await trio.sleep(0.1)
        member = await Client.connect(coordinator.port)
        joined = await member.call(68, 1, request(
            68, 1, group_id="tuned", member_id="m-1", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout=30_000, subscribed_topic_names=["tuned-topic"], subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=[]))
        await member.stream.aclose()
        assert joined.error_code == 0 and joined.heartbeat_interval.total_seconds() == 1.234

    trio.run(scenario)
