"""Consumer-group scenarios both group protocols pass with confluent-kafka (the classic one in
tests/e2e/test_groups_confluent.py, KIP-848's in tests/e2e/test_consumer_protocol.py): the
settings that choose the protocol are the only difference."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer

__all__ = ["drain", "churn"]

MEMBER_SCRIPT = r"""
import json, sys
from confluent_kafka import Consumer
bootstrap, group, topic, settings = sys.argv[1:5]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, **json.loads(settings)})
consumer.subscribe([topic])
while True:
    message = consumer.poll(0.1)
    if message is not None and not message.error():
        consumer.commit(message, asynchronous=False)
        print(int(message.value()), flush=True)
"""


def drain(consumers: list[Consumer], until, timeout: float = 60.0) -> dict[int, list[int]]:
    """Poll every consumer, committing each record, until ``until(seen)``; {consumer index: [values]}."""
    seen: dict[int, list[int]] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(seen):
        for i, consumer in enumerate(consumers):
            message = consumer.poll(0.05)
            if message is not None and not message.error():
                seen[i].append(int(message.value()))
                consumer.commit(message, asynchronous=False)
    return seen


def churn(bootstrap: str, topic: str, group: str, settings: dict, session_s: float) -> None:
    """Members of a 6-partition group join, leave and die (kill -9 of a member in its own
    process: no leave, no more heartbeats) while records keep coming: at the end the first
    member holds every partition again and every record was consumed (at least once;
    duplicates only where a partition moved before its commit)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    produced = 0

    def produce(n: int) -> None:
        nonlocal produced
        for _ in range(n):
            producer.produce(topic, value=b"%d" % produced, partition=produced % 6)
            produced += 1
        assert producer.flush(10) == 0

    def consumer() -> Consumer:
        return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **settings})

    first, second = consumer(), consumer()
    first.subscribe([topic])
    produce(120)
    consumed = drain([first], lambda s: len(s[0]) >= 120)[0]
    second.subscribe([topic])  # a member joins
    produce(120)
    seen = drain([first, second], lambda s: len(s[0]) + len(s[1]) >= 120 and all(s.values()))
    consumed += seen[0] + seen[1]
    second.close()  # a member leaves
    produce(120)
    consumed += drain([first], lambda s: len(s[0]) >= 120)[0]
    third = subprocess.Popen([sys.executable, "-c", MEMBER_SCRIPT, bootstrap, group, topic, json.dumps(settings)],
                             stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(first.assignment()) == 6:
            message = first.poll(0.1)
            if message is not None and not message.error():
                consumed.append(int(message.value()))
                first.commit(message, asynchronous=False)
        assert len(first.assignment()) < 6, "the third member never got partitions"
        time.sleep(1)
    finally:
        third.kill()
        output, _ = third.communicate()
    consumed += [int(line) for line in output.split()]
    produce(120)
    deadline = time.monotonic() + session_s + 20
    while time.monotonic() < deadline and not (len(first.assignment()) == 6 and set(consumed) >= set(range(produced))):
        message = first.poll(0.1)
        if message is not None and not message.error():
            consumed.append(int(message.value()))
            first.commit(message, asynchronous=False)
    assert set(consumed) == set(range(produced))
    assert len(first.assignment()) == 6
    first.close()
