"""Compacted topics in a cluster: each partition's owner cleans it; a gateway paused past its
lease mid-cleaning loses its partitions, their new owners clean on, and no key's newest
acknowledged record is lost or replaced by an older one."""

import signal
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import LEASE_MS, wait_until

PARTITIONS = 3


def _produce(cluster, acked: dict, rounds: int, tag: str) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True, "message.timeout.ms": 60000})

    def remember(err, message):
        assert err is None, err
        slot = (message.partition(), message.key())
        if slot not in acked or acked[slot][0] < message.offset():
            acked[slot] = (message.offset(), message.value())

    for i in range(rounds):
        value = None if i % 13 == 0 else f"{tag}-{i}".encode()
        producer.produce("changelog", key=b"k%d" % (i % 200), value=value, on_delivery=remember)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def _last_per_key(cluster) -> dict:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "verify", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition("changelog", p, 0) for p in range(PARTITIONS)])
    found, ends = {}, set()
    deadline = time.monotonic() + 60
    try:
        while len(ends) < PARTITIONS:
            assert time.monotonic() < deadline, "not read to the end within 60 s"
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error():
                if message.error().code() == -191:
                    ends.add(message.partition())
                    continue
                raise KafkaException(message.error())
            found[(message.partition(), message.key())] = (message.offset(), message.value())
    finally:
        consumer.close()
    return found


def test_owners_clean_and_a_paused_cleaner_loses_nothing(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("changelog", PARTITIONS, 1, config={
        "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})])["changelog"].result(15)
    cluster.wait_owned("changelog", PARTITIONS, {0, 1, 2})
    acked: dict = {}
    _produce(cluster, acked, 20_000, "first")

    def removed() -> float:
        return sum(g.metric("kafscale_cleaner_records_removed") for g in cluster.live())

    wait_until(lambda: removed() > 15_000, 60, "the owners cleaned their partitions")
    cleaners = [g for g in cluster.gateways if g.metric("kafscale_cleaner_records_removed") > 0]
    assert len(cleaners) >= 2, "each owner cleans its own partitions"

    victim = cluster.gateways[cluster.owners("changelog")[0][0]]
    _produce(cluster, acked, 6_000, "second")  # dirty again: the victim's next pass has work
    victim.process.send_signal(signal.SIGSTOP)
    try:
        owners = cluster.wait_owned("changelog", PARTITIONS, {g for g in range(3) if cluster.gateways[g] is not victim},
                                    timeout=LEASE_MS / 1000 + 15)
        assert all(cluster.gateways[node] is not victim for node, _ in owners.values())
        _produce(cluster, acked, 6_000, "third")
    finally:
        victim.process.send_signal(signal.SIGCONT)  # wakes up mid-pass, believing it owns partitions
    cluster.wait_owned("changelog", PARTITIONS, {0, 1, 2})
    live = {slot: entry for slot, entry in acked.items() if entry[1] is not None}

    def newest_only() -> bool:
        found = _last_per_key(cluster)
        for slot, (offset, value) in acked.items():
            assert found.get(slot, (offset, None) if value is None else None) == (offset, value), slot
        return {slot: entry for slot, entry in found.items() if entry[1] is not None} == live

    wait_until(newest_only, 90, "the partitions cleaned down to each key's newest record", interval=1)
