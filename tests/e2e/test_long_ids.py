"""Transactional ids and group ids as long as Kafka allows, through librdkafka: the
filesystem store once named their objects by the id in hex and passed its 255-byte limit
(InitProducerId and OffsetCommit answered storage errors, retried until they timed out)."""

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

LONG_TRANSACTIONAL_ID = "t" * 1000
LONG_GROUP_ID = "g" * 1000


def test_a_thousand_byte_transactional_id_and_group_id(gateway):
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic("long-ids", num_partitions=1, replication_factor=1)])["long-ids"].result(30)
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "transactional.id": LONG_TRANSACTIONAL_ID})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce("long-ids", value=b"%d" % i)
    producer.commit_transaction(30)

    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": LONG_GROUP_ID,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("long-ids", 0, 0)])
        values = []
        while len(values) < 5:
            message = consumer.poll(10)
            assert message is not None, values
            if not message.error():
                values.append(message.value())
        assert values == [b"%d" % i for i in range(5)]
        consumer.commit(offsets=[TopicPartition("long-ids", 0, 5)], asynchronous=False)
    finally:
        consumer.close()

    gateway.restart()
    again = Producer({"bootstrap.servers": gateway.bootstrap, "transactional.id": LONG_TRANSACTIONAL_ID})
    again.init_transactions(30)  # the stored id is found and its epoch bumped
    reader = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": LONG_GROUP_ID})
    try:
        (committed,) = reader.committed([TopicPartition("long-ids", 0)], timeout=30)
        assert committed.offset == 5
    finally:
        reader.close()
    described = admin.describe_consumer_groups([LONG_GROUP_ID])[LONG_GROUP_ID].result(30)
    assert described.group_id == LONG_GROUP_ID
