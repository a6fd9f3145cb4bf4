"""``__consumer_offsets`` as lag tools read it (Burrow, older lag exporters): an internal,
compacted, read-only topic whose records are every group's commits and group metadata in
Kafka's own key/value schemas, each group in partition abs(hash(group)) % 50, read here
by a plain confluent-kafka consumer and held equal to what OffsetFetch answers."""

import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kafscale.protocol.group_records import offsets_partition, parse_key, parse_offset_commit_value
from tests.e2e.conftest import make_topic


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def read_offsets_topic(bootstrap: str) -> dict[tuple[str, str, int], int | None]:
    """Every offset commit in the topic, newest last: (group, topic, partition) -> offset."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    partitions = len(metadata.topics["__consumer_offsets"].partitions)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lag-monitor", "enable.partition.eof": True,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    found: dict[tuple[str, str, int], int | None] = {}
    ends = set()
    try:
        consumer.assign([TopicPartition("__consumer_offsets", p, 0) for p in range(partitions)])
        while len(ends) < partitions:
            message = consumer.poll(10)
            assert message is not None, f"{len(ends)} of {partitions} partitions read to their end"
            if message.error():
                ends.add(message.partition())
                continue
            key = parse_key(message.key())
            if key is not None and len(key) == 3:
                assert message.partition() == offsets_partition(key[0], partitions)
                value = message.value()
                found[key] = None if value is None else parse_offset_commit_value(value)[0]
    finally:
        consumer.close()
    return found


def test_lag_tools_read_every_groups_commits_from_consumer_offsets(gateway):
    make_topic(gateway, "orders", partitions=3, messages=30)
    commit(gateway.bootstrap, "billing", "orders", {0: 4, 1: 7})
    commit(gateway.bootstrap, "shipping", "orders", {2: 9})
    commit(gateway.bootstrap, "billing", "orders", {0: 10})  # a newer commit: read last
    metadata = AdminClient({"bootstrap.servers": gateway.bootstrap}).list_topics(timeout=10)
    assert len(metadata.topics["__consumer_offsets"].partitions) == 50
    # The records follow each commit by one flush of the shared log (on S3, a PUT later).
    expected = {("billing", "orders", 0): 10, ("billing", "orders", 1): 7, ("shipping", "orders", 2): 9}
    deadline = time.monotonic() + 30
    while (seen := read_offsets_topic(gateway.bootstrap)) != expected and time.monotonic() < deadline:
        time.sleep(0.5)
    assert seen == expected
    # What OffsetFetch answers for each group is what the topic says.
    for group in ("billing", "shipping"):
        consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": group})
        try:
            committed = consumer.committed([TopicPartition("orders", p) for p in range(3)], timeout=10)
        finally:
            consumer.close()
        assert {(group, c.topic, c.partition): c.offset for c in committed if c.offset >= 0} == \
            {k: v for k, v in seen.items() if k[0] == group}
    # Written only by the gateway: a client's produce is refused as Kafka refuses it.
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "retries": 0, "enable.idempotence": False})
    errors: list = []
    producer.produce("__consumer_offsets", value=b"x", partition=0, on_delivery=lambda e, m: errors.append(e))
    producer.flush(10)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_EXCEPTION, errors
    # And the group's offsets survive a restart in the topic, as in the group store.
    gateway.restart()
    assert read_offsets_topic(gateway.bootstrap) == expected
