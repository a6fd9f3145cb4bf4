"""Consumer groups with kafka-python and aiokafka (their own assignors, client-side)."""

import asyncio
import threading
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer
from kafka import KafkaConsumer

from tests.e2e.conftest import make_topic


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "sticky"])
def test_kafka_python_group_of_three(groups_gateway, assignor):
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    chosen = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
              "sticky": StickyPartitionAssignor}[assignor]
    gateway = groups_gateway
    make_topic(gateway, "kp-group")
    group = f"g-{uuid.uuid4()}"
    consumers = [KafkaConsumer("kp-group", bootstrap_servers=gateway.bootstrap, group_id=group,
                               auto_offset_reset="earliest", enable_auto_commit=False,
                               partition_assignment_strategy=[chosen], session_timeout_ms=10000)
                 for _ in range(3)]
    seen = {i: [] for i in range(3)}
    deadline = time.monotonic() + 60

    def member(i):
        # One thread per consumer, as applications run them. (Driving all three from one
        # thread starves their I/O; under CPU load kafka-python then acts on stale
        # REBALANCE_IN_PROGRESS heartbeats after rejoining, and its leader keeps rejoining.)
        while time.monotonic() < deadline and sum(map(len, seen.values())) < 300:
            records = consumers[i].poll(timeout_ms=100)
            for batch in records.values():
                seen[i].extend(int(r.value) for r in batch)
            if records:
                consumers[i].commit()

    threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(v for values in seen.values() for v in values) == list(range(300))
        assignments = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
        assert sorted(p for a in assignments for p in a) == list(range(6))
        assert all(assignments), assignments
    finally:  # a failed test must not leave client threads running into the next tests
        for consumer in consumers:
            consumer.close()


def test_aiokafka_group_of_two_commits_and_resumes(groups_gateway):
    gateway = groups_gateway
    make_topic(gateway, "aio-group", partitions=4, messages=200)
    group = f"g-{uuid.uuid4()}"

    async def scenario():
        consumers = [AIOKafkaConsumer("aio-group", bootstrap_servers=gateway.bootstrap, group_id=group,
                                      auto_offset_reset="earliest", enable_auto_commit=False,
                                      session_timeout_ms=10000, heartbeat_interval_ms=500)
                     for _ in range(2)]
        for consumer in consumers:
            await consumer.start()
        seen = []
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(seen) < 200:
                for consumer in consumers:
                    batches = await consumer.getmany(timeout_ms=100)
                    for records in batches.values():
                        seen.extend(int(r.value) for r in records)
                    if batches:
                        await consumer.commit()
            sizes = [len(c.assignment()) for c in consumers]
        finally:
            for consumer in consumers:
                await consumer.stop()
        late = AIOKafkaConsumer("aio-group", bootstrap_servers=gateway.bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=False)
        await late.start()
        try:
            leftover = await late.getmany(timeout_ms=2000)
        finally:
            await late.stop()
        return seen, sizes, sum(len(v) for v in leftover.values())

    seen, sizes, leftover = asyncio.run(scenario())
    assert sorted(seen) == list(range(200))
    assert sorted(sizes) == [2, 2]
    assert leftover == 0  # everything was committed: a new member resumes at the end
