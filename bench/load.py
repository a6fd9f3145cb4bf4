"""Client-side load for the broker benchmarks (run as its own process so the client
never shares a GIL with the broker under test). Prints one JSON line.

    python -m bench.load create BOOTSTRAP TOPIC PARTITIONS
    python -m bench.load produce BOOTSTRAP TOPIC COUNT SIZE [PARTITIONS [KEYS]]
    python -m bench.load consume BOOTSTRAP TOPIC COUNT PARTITIONS
    python -m bench.load latency BOOTSTRAP TOPIC RATE SECONDS
    python -m bench.load connect BOOTSTRAP COUNT
    python -m bench.load transactions BOOTSTRAP TOPIC SECONDS SIZE PARTITIONS TXN_MS (0: idempotent, no transactions)

KAFSCALE_BENCH_CLIENT (JSON) adds librdkafka settings to every client: security.protocol,
sasl.* and ssl.* for the security benchmark.
"""

from __future__ import annotations

import json
import os
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CLIENT = json.loads(os.environ.get("KAFSCALE_BENCH_CLIENT", "{}"))


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT})
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    except Exception as exc:  # already exists is fine for a re-run
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise


def produce(bootstrap: str, topic: str, count: int, size: int, partitions: int = 3, keys: int = 0) -> dict:
    """``keys``: each record gets one of that many 16-byte keys (round robin), else none."""
    create(bootstrap, topic, partitions)
    stats: list[dict] = []  # librdkafka's statistics: Produce requests sent, whatever the broker
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
                         "queue.buffering.max.kbytes": 1_048_576, "statistics.interval.ms": 200,
                         "stats_cb": lambda text: stats.append(json.loads(text)), **CLIENT})
    payload = b"x" * size
    errors = 0

    def report(err, _msg):
        nonlocal errors
        if err is not None:
            errors += 1

    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                if keys:
                    producer.produce(topic, key=b"%016d" % (i % keys), value=payload, on_delivery=report)
                else:
                    producer.produce(topic, value=payload, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.001)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(300)
    seconds = time.perf_counter() - started
    stats.clear()
    while not stats:  # the statistics after the last answer
        producer.poll(0.1)
    requests = sum(broker.get("req", {}).get("Produce", 0) for broker in stats[-1]["brokers"].values())
    return {"seconds": seconds, "messages": count, "bytes": count * size, "errors": errors, "requests": requests}


def transactions(bootstrap: str, topic: str, seconds: float, size: int, partitions: int, txn_ms: int) -> dict:
    """Produce for ``seconds`` as fast as the producer goes, in transactions of ``txn_ms`` (each
    committed; the commit's duration timed), or idempotently without transactions (0)."""
    create(bootstrap, topic, partitions)
    settings = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000,
                "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                "enable.idempotence": True, **CLIENT}
    if txn_ms:
        settings["transactional.id"] = f"bench-{topic}"
    producer = Producer(settings)
    if txn_ms:
        producer.init_transactions(30)
    payload = b"x" * size
    commits: list[float] = []
    count = 0
    started = time.perf_counter()
    end = started + seconds
    while time.perf_counter() < end:
        if txn_ms:
            producer.begin_transaction()
        window = time.perf_counter() + (txn_ms / 1000 if txn_ms else 0.1)
        while time.perf_counter() < window:
            try:
                producer.produce(topic, value=payload, partition=count % partitions)
                count += 1
            except BufferError:
                producer.poll(0.001)
            if count % 1000 == 0:
                producer.poll(0)
        if txn_ms:
            began = time.perf_counter()
            producer.commit_transaction(60)  # flushes the transaction's records, then EndTxn
            commits.append(time.perf_counter() - began)
    producer.flush(300)
    elapsed = time.perf_counter() - started
    commits.sort()
    return {"seconds": elapsed, "messages": count, "bytes": count * size, "transactions": len(commits),
            "commit_p50_ms": commits[len(commits) // 2] * 1000 if commits else None,
            "commit_p99_ms": commits[min(len(commits) - 1, int(len(commits) * 0.99))] * 1000 if commits else None}


def consume(bootstrap: str, topic: str, count: int, partitions: int) -> dict:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
                         "queued.max.messages.kbytes": 1_048_576, **CLIENT})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    received = 0
    started = time.perf_counter()
    deadline = started + 300
    while received < count and time.perf_counter() < deadline:
        for message in consumer.consume(10_000, 1.0):
            if not message.error():
                received += 1
    seconds = time.perf_counter() - started
    consumer.close()
    return {"seconds": seconds, "messages": received}


def latency(bootstrap: str, topic: str, rate: int, seconds: float) -> dict:
    create(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, **CLIENT})
    samples: list[float] = []

    def report(err, msg):
        if err is None:
            samples.append(time.perf_counter() - float(msg.value()))

    interval = 1.0 / rate
    started = time.perf_counter()
    next_at = started
    while time.perf_counter() - started < seconds:
        now = time.perf_counter()
        if now >= next_at:
            producer.produce(topic, value=repr(now).encode(), on_delivery=report)
            next_at += interval
        producer.poll(max(0.0, min(interval, next_at - time.perf_counter())))
    producer.flush(30)
    samples.sort()
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))] * 1000  # noqa: E731
    return {"samples": len(samples), "p50_ms": pick(0.50), "p99_ms": pick(0.99), "max_ms": samples[-1] * 1000}


def steady(bootstrap: str, topic: str, partitions: int, rate: int, seconds: float, size: int) -> dict:
    """A steady ``rate`` msgs/s of ``size`` bytes spread over the partitions (acks=all,
    linger.ms=5, as a user would run it), with each message's ack latency."""
    create(bootstrap, topic, partitions)
    time.sleep(1.0)  # let the partitions load before the clock starts
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **CLIENT})
    samples: list[float] = []
    errors = 0
    sent_at: dict[int, float] = {}

    def report(err, msg):
        nonlocal errors
        if err is not None:
            errors += 1
        else:
            samples.append(time.perf_counter() - sent_at.pop(int(msg.key())))

    interval = 1.0 / rate
    payload = b"x" * size
    started = time.perf_counter()
    next_at, i = started, 0
    queue_trace: list[tuple[int, int]] = []  # (second, messages waiting in the client), every 30 s
    while time.perf_counter() - started < seconds:
        now = time.perf_counter()
        if now - started >= 30 * len(queue_trace):
            queue_trace.append((int(now - started), len(producer)))
            print(f"steady t={queue_trace[-1][0]}s queued={queue_trace[-1][1]}", file=sys.stderr, flush=True)
        while now >= next_at:
            sent_at[i] = time.perf_counter()
            producer.produce(topic, key=b"%d" % i, value=payload, partition=i % partitions, on_delivery=report)
            i += 1
            next_at += interval
        # Due messages go out in ticks of up to 5 ms (the client lingers 5 ms anyway): a
        # sub-millisecond poll timeout rounds to 0 in librdkafka, and the loop would spin a core
        # that the gateway, the store and the proxy on the same machine need.
        producer.poll(0)
        time.sleep(max(0.0, min(0.005, next_at - time.perf_counter())))
    producer.flush(60)
    elapsed = time.perf_counter() - started
    samples.sort()
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))] * 1000 if samples else float("nan")  # noqa: E731
    return {"seconds": elapsed, "messages": i, "errors": errors, "p50_ms": pick(0.5), "p99_ms": pick(0.99),
            "queued_max": max(queued for _, queued in queue_trace)}


def connect(bootstrap: str, count: int) -> dict:
    """``count`` clients one after another, each connecting (and authenticating) and asking
    for Metadata once: the cost of a new connection."""
    started = time.perf_counter()
    for _ in range(count):
        AdminClient({"bootstrap.servers": bootstrap, **CLIENT}).list_topics(timeout=30)
    return {"seconds": time.perf_counter() - started, "connections": count}


def main(argv: list[str]) -> None:
    mode, bootstrap, topic, *rest = argv
    if mode == "connect":
        result = connect(bootstrap, int(topic))
    elif mode == "create":
        create(bootstrap, topic, int(rest[0]))
        result = {"created": topic}
    elif mode == "produce":
        result = produce(bootstrap, topic, *map(int, rest))
    elif mode == "consume":
        result = consume(bootstrap, topic, int(rest[0]), int(rest[1]))
    elif mode == "steady":
        result = steady(bootstrap, topic, int(rest[0]), int(rest[1]), float(rest[2]), int(rest[3]))
    elif mode == "latency":
        result = latency(bootstrap, topic, int(rest[0]), float(rest[1]))
    elif mode == "transactions":
        result = transactions(bootstrap, topic, float(rest[0]), int(rest[1]), int(rest[2]), int(rest[3]))
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
