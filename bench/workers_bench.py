"""``--workers``: one gateway process against two, on the embedded default (filesystem,
fsync), with the clients on the same machine.

- **Small requests**: 4 producer processes (confluent-kafka, acks=all, linger.ms 0, at most
  50 records in flight each, so requests stay small) writing 100 B records to a
  12-partition topic for 20 s: acknowledged records/s.
- **Bulk**: one producer, 1,000,000 × 100 B (bench.load's produce: linger 5 ms, large
  batches): records/s.

Each row gives the gateway's CPU (the parent and every worker, from /proc) per record, and
the machine's idle share during the run. The projection to 16 cores takes the CPU one
small-request record costs the gateway at 2 workers and divides 16 cores by it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from devkit.ports import free_port

from . import report
from .broker_bench import CLK_TCK, ROOT, Broker, _load

SECONDS = 20
PRODUCERS = 4
PARTITIONS = 12

SMALL_PRODUCER = r"""
import json, sys, time
from confluent_kafka import Producer
bootstrap, topic, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
acked = 0
stats = []
def report(err, msg):
    global acked
    if err is None:
        acked += 1
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "statistics.interval.ms": 500,
                     "stats_cb": lambda text: stats.append(json.loads(text))})
payload = b"x" * 100
end = time.monotonic() + seconds
while time.monotonic() < end:
    producer.produce(topic, value=payload, on_delivery=report)
    while len(producer) >= 50:
        producer.poll(0.001)
    producer.poll(0)
producer.flush(60)
stats.clear()
while not stats:
    producer.poll(0.1)
print(acked, sum(b.get("req", {}).get("Produce", 0) for b in stats[-1]["brokers"].values()))
"""


def _cpu(broker: Broker, pids: list[int]) -> float:
    """The gateway's CPU seconds so far: the parent and the workers it had at the start."""
    return sum(broker.cpu_seconds(pids))


def _idle() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return int(fields[3]) / CLK_TCK


def _wait_brokers(bootstrap: str, count: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while len(admin.list_topics(timeout=10).brokers) != count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} workers did not come up")
        time.sleep(0.2)


def _with_workers(workers: int, load) -> dict:
    with tempfile.TemporaryDirectory(prefix="kafscale-workers-bench-") as work:
        workdir = Path(work)
        port = free_port()
        command = [sys.executable, "-m", "kafscale.gateway.cli", "--port", str(port), "--http-port", "-1",
                   "--storage", str(workdir / "data"), "--log-level", "WARNING", "--workers", str(workers)]
        with Broker("kafscale", command, port, workdir) as broker:
            _wait_brokers(broker.bootstrap, workers)
            time.sleep(2)  # partitions and group slots settle
            return load(broker)


def _small_requests(broker: Broker) -> dict:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("small", PARTITIONS, 1)])["small"].result(30)
    time.sleep(1)
    pids = broker.pids()
    cpu, idle, started = _cpu(broker, pids), _idle(), time.perf_counter()
    producers = [subprocess.Popen([sys.executable, "-c", SMALL_PRODUCER, broker.bootstrap, "small", str(SECONDS)],
                                  stdout=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(PRODUCERS)]
    answers = [p.communicate(timeout=SECONDS + 120)[0].split() for p in producers]
    seconds = time.perf_counter() - started
    return {"records": sum(int(a[0]) for a in answers), "requests": sum(int(a[1]) for a in answers),
            "seconds": seconds, "cpu": _cpu(broker, pids) - cpu,
            "idle": (_idle() - idle) / seconds / (os.cpu_count() or 1)}


def _bulk(broker: Broker) -> dict:
    pids = broker.pids()
    cpu, idle = _cpu(broker, pids), _idle()
    result = _load("produce", broker.bootstrap, "bulk", 1_000_000, 100, 6)
    return {"records": result["messages"], "requests": result["requests"], "seconds": result["seconds"],
            "cpu": _cpu(broker, pids) - cpu,
            "idle": (_idle() - idle) / result["seconds"] / (os.cpu_count() or 1)}


def run() -> None:
    rows, rates = [], {}
    for name, load in (("small requests", _small_requests), ("bulk", _bulk)):
        for workers in (1, 2):
            result = _with_workers(workers, load)
            rate = result["records"] / result["seconds"]
            rates[(name, workers)] = (rate, result["cpu"] / result["records"])
            ratio = f"{rate / rates[(name, 1)][0]:.2f}×" if workers == 2 else "1.00×"
            rows.append([name, workers, f"{rate:,.0f}", ratio, f"{result['requests'] / result['seconds']:,.0f}",
                         f"{result['cpu'] / result['records'] * 1e6:.1f}",
                         f"{result['cpu'] / result['requests'] * 1e6:.0f}",
                         f"{result['idle'] * 100:.0f} %"])
            print(rows[-1], flush=True)
    small_cost = rates[("small requests", 2)][1]
    report.save(
        "85-workers", "Workers: one gateway process against two on this machine",
        "python -m bench workers",
        f"Embedded default (filesystem, fsync), `--workers 1` and `--workers 2`, the clients on the same "
        f"{os.cpu_count()}-core machine. Small requests: {PRODUCERS} producer processes, acks=all, linger.ms 0, "
        f"at most 50 records in flight each, 100 B records to {PARTITIONS} partitions for {SECONDS} s. Bulk: one "
        "producer, 1,000,000 × 100 B, linger 5 ms. CPU is the gateway's: the parent and every worker.",
        ["load", "workers", "records/s", "vs 1 worker", "Produce requests/s", "gateway CPU µs/record",
         "gateway CPU µs/request", "machine idle"], rows,
        "Projected to 16 cores with the clients elsewhere, from CPU alone (16 core-seconds over the CPU one small-"
        f"request record costs at 2 workers): {16 / small_cost:,.0f} records/s, an upper bound that leaves the store's "
        "and the coordination's limits out. The bulk rows are bound by the one producer, not the gateway (its "
        "CPU per record times the rate is a third of a core).")
