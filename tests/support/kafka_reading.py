"""Reading a topic to its end with librdkafka, as an independent check of what was written."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Message, TopicPartition


def read_to_end(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed",
                timeout_s: float = 60) -> list[Message]:
    """Every record of ``topic`` from offset 0 up to each partition's end (the last stable
    offset under read_committed); fails if an end is not reached in time."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic_ns()}",
                         "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found, ends = [], set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(ends) < partitions and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                ends.add(message.partition())
            else:
                found.append(message)
    finally:
        consumer.close()
    assert len(ends) == partitions, f"the consumer did not reach the end of every partition of {topic}"
    return found
