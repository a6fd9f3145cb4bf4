"""Consumer groups with confluent-kafka: 3 members on 6 partitions, each message once;
members joining, leaving and dying; commits surviving a restart; cooperative-sticky;
static membership."""

import subprocess
import sys
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.e2e.conftest import make_topic

SESSION_MS = 6000


def _consumer(gateway, group, **extra):
    return Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500,
                     "enable.auto.commit": False, **extra})


def _drain(consumers, until, timeout=60.0):
    """Poll every consumer until ``until(seen)``; returns {consumer index: [values]}."""
    seen = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(seen):
        for i, consumer in enumerate(consumers):
            message = consumer.poll(0.05)
            if message is not None and not message.error():
                seen[i].append(int(message.value()))
                consumer.commit(message, asynchronous=False)
    return seen


def test_three_members_share_six_partitions_each_message_once(groups_gateway):
    gateway = groups_gateway
    make_topic(gateway, "shared", messages=600)
    group = f"g-{uuid.uuid4()}"
    consumers = [_consumer(gateway, group) for _ in range(3)]
    started = time.monotonic()
    for consumer in consumers:
        consumer.subscribe(["shared"])
    seen = _drain(consumers, lambda s: sum(map(len, s.values())) >= 600)
    elapsed = time.monotonic() - started
    everything = sorted(v for values in seen.values() for v in values)
    assert everything == list(range(600))  # each message exactly once across members
    assert all(seen[i] for i in range(3)), "every member got partitions"
    assignments = [sorted(p.partition for p in c.assignment()) for c in consumers]
    assert sorted(p for a in assignments for p in a) == list(range(6))
    assert elapsed < 30
    for consumer in consumers:
        consumer.close()


def test_rebalance_on_join_leave_and_death_loses_nothing(groups_gateway):
    gateway = groups_gateway
    make_topic(gateway, "churn", messages=0)
    group = f"g-{uuid.uuid4()}"
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all"})
    produced = 0

    def produce(n):
        nonlocal produced
        for _ in range(n):
            producer.produce("churn", value=b"%d" % produced, partition=produced % 6)
            produced += 1
        assert producer.flush(10) == 0

    first, second = _consumer(gateway, group), _consumer(gateway, group)
    first.subscribe(["churn"])
    produce(120)
    seen = _drain([first], lambda s: len(s[0]) >= 120)
    consumed = seen[0]
    second.subscribe(["churn"])  # a member joins
    produce(120)
    seen = _drain([first, second], lambda s: len(s[0]) + len(s[1]) >= 120 and all(s.values()))
    consumed += seen[0] + seen[1]
    second.close()  # a member leaves
    produce(120)
    seen = _drain([first], lambda s: len(s[0]) >= 120)
    consumed += seen[0]
    # A third member in its own process, then kill -9: no LeaveGroup, no more heartbeats.
    third = subprocess.Popen([sys.executable, "-c", MEMBER_SCRIPT, gateway.bootstrap, group, "churn"],
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
    deadline = time.monotonic() + SESSION_MS / 1000 + 20
    while time.monotonic() < deadline and not (len(first.assignment()) == 6 and set(consumed) >= set(range(produced))):
        message = first.poll(0.1)
        if message is not None and not message.error():
            consumed.append(int(message.value()))
            first.commit(message, asynchronous=False)
    # At-least-once: nothing lost; duplicates only where a partition moved before its commit.
    assert set(consumed) == set(range(produced))
    assert len(first.assignment()) == 6
    first.close()


MEMBER_SCRIPT = r"""
import sys
from confluent_kafka import Consumer
bootstrap, group, topic = sys.argv[1:4]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "enable.auto.commit": False})
consumer.subscribe([topic])
while True:
    message = consumer.poll(0.1)
    if message is not None and not message.error():
        consumer.commit(message, asynchronous=False)
        print(int(message.value()), flush=True)
"""


def test_commits_survive_restart_and_new_consumer_resumes(groups_gateway):
    gateway = groups_gateway
    make_topic(gateway, "resume", partitions=2, messages=100)
    group = f"g-{uuid.uuid4()}"
    consumer = _consumer(gateway, group)
    consumer.subscribe(["resume"])
    seen = _drain([consumer], lambda s: len(s[0]) >= 60)
    consumer.close()
    committed_before = len(seen[0])
    gateway.restart()
    check = _consumer(gateway, group)
    committed = check.committed([TopicPartition("resume", 0), TopicPartition("resume", 1)], timeout=10)
    assert sum(tp.offset for tp in committed) == committed_before
    check.subscribe(["resume"])
    rest = _drain([check], lambda s: len(s[0]) >= 100 - committed_before)
    assert sorted(seen[0] + rest[0]) == list(range(100))
    never = _consumer(gateway, f"g-{uuid.uuid4()}").committed([TopicPartition("resume", 0)], timeout=10)
    assert never[0].offset == -1001  # librdkafka's OFFSET_INVALID: the broker said -1
    check.close()


def test_cooperative_sticky_rebalance(groups_gateway):
    gateway = groups_gateway
    make_topic(gateway, "coop", messages=300)
    group = f"g-{uuid.uuid4()}"
    settings = {"partition.assignment.strategy": "cooperative-sticky"}
    first = _consumer(gateway, group, **settings)
    first.subscribe(["coop"])
    seen = _drain([first], lambda s: len(s[0]) >= 300)
    second = _consumer(gateway, group, **settings)
    second.subscribe(["coop"])
    _drain([first, second], lambda s: len(first.assignment()) == 3 and len(second.assignment()) == 3, timeout=40)
    assert len(first.assignment()) == 3 and len(second.assignment()) == 3
    assert first.assignment()[0].partition in range(6)
    assert sorted(seen[0]) == list(range(300))
    first.close()
    second.close()


def test_static_member_rejoins_without_rebalance(groups_gateway):
    gateway = groups_gateway
    make_topic(gateway, "static", partitions=4, messages=40)
    group = f"g-{uuid.uuid4()}"
    members = [_consumer(gateway, group, **{"group.instance.id": f"instance-{i}"}) for i in range(2)]
    for member in members:
        member.subscribe(["static"])
    _drain(members, lambda s: sum(map(len, s.values())) >= 40)
    before = [sorted(p.partition for p in m.assignment()) for m in members]
    rebalances_before = _rebalances(gateway)
    members[1].close()  # static members do not leave the group on close
    replacement = _consumer(gateway, group, **{"group.instance.id": "instance-1"})
    replacement.subscribe(["static"])
    _drain([members[0], replacement], lambda s: bool(replacement.assignment()), timeout=20)
    assert sorted(p.partition for p in replacement.assignment()) == before[1]
    assert _rebalances(gateway) == rebalances_before  # no rebalance happened
    members[0].close()
    replacement.close()


def _rebalances(gateway) -> float:
    for line in gateway.metrics().splitlines():
        if line.startswith("kafscale_group_rebalances_total "):
            return float(line.split()[1])
    raise AssertionError("no rebalance metric")
