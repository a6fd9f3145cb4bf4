"""Consumer groups with confluent-kafka: 3 members on 6 partitions, each message once;
members joining, leaving and dying; commits surviving a restart; cooperative-sticky;
static membership."""

import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from tests.e2e.conftest import make_topic
from tests.support.group_scenarios import churn, drain

SESSION_MS = 6000


def _consumer(gateway, group, **extra):
    return Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500,
                     "enable.auto.commit": False, **extra})


def test_three_members_share_six_partitions_each_message_once(groups_gateway):
    gateway = groups_gateway
    make_topic(gateway, "shared", messages=600)
    group = f"g-{uuid.uuid4()}"
    consumers = [_consumer(gateway, group) for _ in range(3)]
    started = time.monotonic()
    for consumer in consumers:
        consumer.subscribe(["shared"])
    seen = drain(consumers, lambda s: sum(map(len, s.values())) >= 600)
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
    make_topic(groups_gateway, "churn", messages=0)
    churn(groups_gateway.bootstrap, "churn", f"g-{uuid.uuid4()}",
          {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500}, SESSION_MS / 1000)


def test_commits_survive_restart_and_new_consumer_resumes(groups_gateway):
    gateway = groups_gateway
    make_topic(gateway, "resume", partitions=2, messages=100)
    group = f"g-{uuid.uuid4()}"
    consumer = _consumer(gateway, group)
    consumer.subscribe(["resume"])
    seen = drain([consumer], lambda s: len(s[0]) >= 60)
    consumer.close()
    committed_before = len(seen[0])
    gateway.restart()
    check = _consumer(gateway, group)
    committed = check.committed([TopicPartition("resume", 0), TopicPartition("resume", 1)], timeout=10)
    assert sum(tp.offset for tp in committed) == committed_before
    check.subscribe(["resume"])
    rest = drain([check], lambda s: len(s[0]) >= 100 - committed_before)
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
    seen = drain([first], lambda s: len(s[0]) >= 300)
    second = _consumer(gateway, group, **settings)
    second.subscribe(["coop"])
    drain([first, second], lambda s: len(first.assignment()) == 3 and len(second.assignment()) == 3, timeout=40)
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
    drain(members, lambda s: sum(map(len, s.values())) >= 40)
    before = [sorted(p.partition for p in m.assignment()) for m in members]
    rebalances_before = _rebalances(gateway)
    members[1].close()  # static members do not leave the group on close
    replacement = _consumer(gateway, group, **{"group.instance.id": "instance-1"})
    replacement.subscribe(["static"])
    drain([members[0], replacement], lambda s: bool(replacement.assignment()), timeout=20)
    assert sorted(p.partition for p in replacement.assignment()) == before[1]
    assert _rebalances(gateway) == rebalances_before  # no rebalance happened
    members[0].close()
    replacement.close()


def _rebalances(gateway) -> float:
    for line in gateway.metrics().splitlines():
        if line.startswith("kafscale_group_rebalances_total "):
            return float(line.split()[1])
    raise AssertionError("no rebalance metric")
