"""Time for a consumer group of 3 to become stable, with the clients' default settings."""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from . import report
from .broker_bench import kafscale_broker


def _time_to_stable(bootstrap: str, topic: str) -> float:
    group = f"bench-{uuid.uuid4()}"
    consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": group}) for _ in range(3)]
    started = time.perf_counter()
    for consumer in consumers:
        consumer.subscribe([topic])
    while True:
        for consumer in consumers:
            consumer.poll(0.01)
        if all(len(c.assignment()) == 2 for c in consumers):
            elapsed = time.perf_counter() - started
            break
        if time.perf_counter() - started > 120:
            raise RuntimeError("group never became stable")
    for consumer in consumers:
        consumer.close()
    return elapsed


def run() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        broker = kafscale_broker(Path(tmp))
        with broker:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("groups", num_partitions=6, replication_factor=1)])["groups"].result(30)
            samples = [_time_to_stable(broker.bootstrap, "groups") for _ in range(3)]
    for i, seconds in enumerate(samples, 1):
        print(f"run {i}: {seconds:.2f} s")
        rows.append([f"run {i}", f"{seconds:.2f} s"])
    rows.append(["median", f"{statistics.median(samples):.2f} s"])
    report.save(
        "30-groups",
        "Consumer groups: time to a stable group of 3",
        "python -m bench groups",
        "Three confluent-kafka consumers with default settings (range assignor, "
        "session.timeout.ms 45 s, heartbeat 3 s) subscribe to a 6-partition topic at once; "
        "time from subscribe() until each holds two partitions. The gateway runs with its "
        "defaults, including Kafka's group.initial.rebalance.delay.ms of 3 s, which the first "
        "join waits out so the three members land in one generation. A peer needed 15-23 s.",
        ["run", "time to stable"],
        rows,
    )
