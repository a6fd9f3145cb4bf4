"""The two group protocols side by side: what a member joining a busy group costs the others,
and what heartbeats and joins cost at 500 members.

- **Join gap**: 3 confluent-kafka members consume a topic of 12 partitions fed at a steady
  rate; a 4th joins. For each of the 3, the longest time without a record in the 20 s after
  the join, for the classic protocol (eager `range`, and `cooperative-sticky`) and the
  consumer protocol (KIP-848, `uniform`), with each protocol's default heartbeat interval.
- **500 members**: raw heartbeats on one connection (devkit's wire client), so the numbers are
  the gateway's: time until all 500 hold their assignment, then gateway CPU per heartbeat over
  steady rounds (from /proc), for both protocols in the same run.
"""

from __future__ import annotations

import datetime
import tempfile
import threading
import time
import uuid
from pathlib import Path

import trio
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from devkit.wire_client import Client
from kafscale.protocol.entities import build
from kafscale.protocol.messages import decode_response, request_class

from . import report
from .broker_bench import Broker, kafscale_broker

PARTITIONS = 12
RATE = 2000  # records per second while the 4th member joins
MEMBERS = 500
ROUNDS = 5  # steady heartbeat rounds measured per protocol


def _longest_gaps(bootstrap: str, topic: str, settings: dict) -> list[float]:
    group = f"gap-{uuid.uuid4()}"
    stop = threading.Event()
    times: list[list[float]] = [[] for _ in range(4)]
    joined_at: list[float] = []

    def member(index: int) -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "latest",
                             **settings})
        consumer.subscribe([topic])
        while not stop.is_set():
            message = consumer.poll(0.05)
            if message is not None and not message.error():
                times[index].append(time.monotonic())
        consumer.close()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        sent = 0
        started = time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - started) * RATE)
            while sent < due:
                producer.produce(topic, b"x" * 100, partition=sent % PARTITIONS)
                sent += 1
            producer.poll(0)
            time.sleep(0.005)
        producer.flush(10)

    threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
    threads.append(threading.Thread(target=produce))
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(t and t[-1] > time.monotonic() - 0.5 for t in times[:3]):
        time.sleep(0.2)
    time.sleep(5)  # all three consuming steadily
    joined_at.append(time.monotonic())
    fourth = threading.Thread(target=member, args=(3,))
    fourth.start()
    time.sleep(20)
    stop.set()
    for thread in [*threads, fourth]:
        thread.join(30)
    start, end = joined_at[0], joined_at[0] + 20
    gaps = []
    for index in range(3):
        window = [start] + [t for t in times[index] if start <= t <= end] + [end]
        gaps.append(max(b - a for a, b in zip(window, window[1:], strict=False)))
    if not times[3]:
        raise RuntimeError(f"the 4th member never consumed ({settings})")
    return gaps


def _heartbeat(member_id: str, epoch: int, topic: str | None, owned=None):
    return build(request_class(68, 1), dict(
        group_id="scale-consumer", member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout=datetime.timedelta(seconds=30) if epoch == 0 else datetime.timedelta(milliseconds=-1),
        subscribed_topic_names=[topic] if topic else None, subscribed_topic_regex=None, server_assignor=None,
        topic_partitions=owned))


async def _pipelined(client: Client, api_key: int, version: int, bodies: list) -> list:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_send_all, client, api_key, version, bodies)
        answers = []
        for _ in bodies:
            payload = await client.receive()
            assert payload is not None
            answers.append(decode_response(api_key, version, payload)[1])
    return answers


async def _send_all(client: Client, api_key: int, version: int, bodies: list) -> None:
    for index, body in enumerate(bodies):
        await client.send(api_key, version, body, index)


async def _consumer_protocol_scale(broker: Broker, topic: str) -> tuple[float, float]:
    client = await Client.connect(broker.port)
    ids = [f"member-{i}" for i in range(MEMBERS)]
    epochs = dict.fromkeys(ids, 0)
    owned: dict[str, list] = {m: [] for m in ids}
    started = time.perf_counter()
    first = True
    for _ in range(200):
        bodies = [_heartbeat(m, epochs[m], topic if first else None,
                             None if first else [dict(topic_id=t, partitions=ps) for t, ps in owned[m]])
                  for m in ids]
        answers = await _pipelined(client, 68, 1, bodies)
        first = False
        for member, answer in zip(ids, answers, strict=True):
            assert answer.error_code == 0, answer
            epochs[member] = answer.member_epoch
            if answer.assignment is not None:
                owned[member] = [(tp.topic_id, list(tp.partitions)) for tp in answer.assignment.topic_partitions]
        if len(set(epochs.values())) == 1 and sum(len(ps) for m in ids for _, ps in owned[m]) == MEMBERS:
            break
    stable = time.perf_counter() - started
    before = sum(broker.cpu_seconds())
    for _ in range(ROUNDS):
        bodies = [_heartbeat(m, epochs[m], None, [dict(topic_id=t, partitions=ps) for t, ps in owned[m]])
                  for m in ids]
        await _pipelined(client, 68, 1, bodies)
    per_beat = (sum(broker.cpu_seconds()) - before) / (ROUNDS * MEMBERS)
    return stable, per_beat


async def _classic_scale(broker: Broker) -> tuple[float, float]:
    client = await Client.connect(broker.port)
    protocols = [dict(name="range", metadata=b"\x00\x01\x00\x00\x00\x01\x00\x05scale\x00\x00\x00\x00")]

    def join(member_id: str):
        return build(request_class(11, 9), dict(
            group_id="scale-classic", session_timeout=45_000, rebalance_timeout=60_000, member_id=member_id,
            group_instance_id=None, protocol_type="consumer", protocols=protocols, reason=None))

    started = time.perf_counter()
    handshakes = await _pipelined(client, 11, 9, [join("") for _ in range(MEMBERS)])
    ids = [answer.member_id for answer in handshakes]
    joined = await _pipelined(client, 11, 9, [join(m) for m in ids])
    generation = joined[0].generation_id
    assert all(answer.generation_id == generation for answer in joined), "the members landed in several generations"
    leader = joined[0].leader
    assignments = [dict(member_id=m, assignment=b"a") for m in ids]
    syncs = [build(request_class(14, 5), dict(
        group_id="scale-classic", generation_id=generation, member_id=m, group_instance_id=None,
        protocol_type="consumer", protocol_name="range", assignments=assignments if m == leader else []))
        for m in ids]
    synced = await _pipelined(client, 14, 5, syncs[::-1])  # followers first: they wait for the leader
    assert all(answer.error_code == 0 for answer in synced), synced[0]
    stable = time.perf_counter() - started
    beats = [build(request_class(12, 4), dict(group_id="scale-classic", generation_id=generation, member_id=m,
                                              group_instance_id=None)) for m in ids]
    before = sum(broker.cpu_seconds())
    for _ in range(ROUNDS):
        answers = await _pipelined(client, 12, 4, beats)
        assert all(answer.error_code == 0 for answer in answers)
    per_beat = (sum(broker.cpu_seconds()) - before) / (ROUNDS * MEMBERS)
    return stable, per_beat


def run() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        broker = kafscale_broker(Path(tmp))
        with broker:
            assert broker.process is not None
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for future in admin.create_topics([NewTopic("busy", PARTITIONS, 1), NewTopic("scale", MEMBERS, 1)]).values():
                future.result(30)
            time.sleep(1)
            gaps = {
                "classic, range (eager)": (_longest_gaps(broker.bootstrap, "busy", {}), 3000),
                "classic, cooperative-sticky": (_longest_gaps(
                    broker.bootstrap, "busy", {"partition.assignment.strategy": "cooperative-sticky"}), 3000),
                "consumer (KIP-848), uniform": (_longest_gaps(
                    broker.bootstrap, "busy", {"group.protocol": "consumer"}), 5000),
            }
            consumer_stable, consumer_cpu = trio.run(_consumer_protocol_scale, broker, "scale")
            classic_stable, classic_cpu = trio.run(_classic_scale, broker)
    gap_rows = []
    for name, (longest, interval) in gaps.items():
        print(f"{name}: longest gaps {', '.join(f'{g:.2f}' for g in longest)} s (heartbeat interval {interval} ms)")
        gap_rows.append([name, f"{interval / 1000:.0f} s", " / ".join(f"{g:.2f} s" for g in longest)])
    report.save(
        "31-group-join-gap",
        "Consumer groups: what a member joining a busy group costs the others",
        "python -m bench group-protocols",
        f"Three confluent-kafka members consume a {PARTITIONS}-partition topic fed at {RATE} records/s; a fourth "
        "joins. Each cell: the longest time one of the three went without a record in the 20 s after the join "
        "(target for the consumer protocol: none longer than one heartbeat interval). Each protocol runs with "
        "its own default heartbeat interval (classic: the client's heartbeat.interval.ms; consumer: the "
        "gateway's group_consumer_heartbeat_interval_ms).",
        ["protocol, assignor", "heartbeat interval", "longest gap of each of the 3 members"],
        gap_rows,
    )
    scale_rows = [
        ["classic (JoinGroup, SyncGroup, Heartbeat)", f"{classic_stable:.2f} s", f"{classic_cpu * 1e6:.0f} µs"],
        ["consumer (ConsumerGroupHeartbeat)", f"{consumer_stable:.2f} s", f"{consumer_cpu * 1e6:.0f} µs"],
    ]
    for row in scale_rows:
        print(" | ".join(row))
    report.save(
        "32-group-scale",
        f"Consumer groups: {MEMBERS} members",
        "python -m bench group-protocols",
        f"{MEMBERS} members on one connection (pipelined raw requests, devkit/wire_client.py), so the figures are "
        f"the gateway's alone. Time to stable: classic, from the first JoinGroup until every SyncGroup is "
        f"answered (the assignment is the client's; here one byte each), which includes the gateway's default "
        f"group.initial.rebalance.delay.ms of 3 s that lets all {MEMBERS} land in one generation; consumer protocol, from the first "
        f"heartbeat until every member is at the group's epoch holding its partition of a {MEMBERS}-partition "
        f"topic (rounds of one heartbeat per member). CPU per heartbeat: the gateway process's user+system time "
        f"over {ROUNDS} steady rounds (Heartbeat v4; ConsumerGroupHeartbeat v1 carrying the owned partitions, "
        "as clients send them), divided by the heartbeats.",
        ["protocol", "time to stable", "gateway CPU per heartbeat"],
        scale_rows,
    )
