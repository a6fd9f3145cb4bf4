"""The log cleaner (compacted topics): its throughput per core, the key map's bytes per key,
the object-store requests of a pass, and produce throughput on a compacted topic next to a
delete topic, in one run, on the filesystem and on S3 (SeaweedFS behind the counting proxy)."""

from __future__ import annotations

import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from kafscale.protocol.cleaning import KeyMap, key_digest

from . import report
from .broker_bench import Broker, _load
from .objects_bench import _delta, on_each_store

RECORDS, KEYS, SIZE, PARTITIONS = 1_000_000, 100_000, 100, 3
TARGET_MB_S = 10.0


def key_map_bytes_per_key(keys: int = 200_000, *, native: bool = True) -> float:
    """Memory the cleaner's key map holds per key, filled with ``keys`` keys (tracemalloc
    sees the C table's PyMem allocations too)."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    mapped = KeyMap(1 << 34, native=native)
    table = mapped._table
    for i in range(keys):
        table.put(key_digest(b"%016d" % i), 10**9 + i)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return used / keys


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {timeout} s: {what}")
        time.sleep(0.5)


def measure(broker: Broker, counter) -> dict:
    bootstrap, metric = broker.bootstrap, broker.metric
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Held back by min.compaction.lag.ms while produced, so the cleaner's work is measured alone.
    admin.create_topics([NewTopic("compacted", PARTITIONS, 1, config={
        "cleanup.policy": "compact", "min.compaction.lag.ms": str(10**9)})])["compacted"].result(30)
    admin.create_topics([NewTopic("deleted", PARTITIONS, 1)])["deleted"].result(30)
    deleted = _load("produce", bootstrap, "deleted", RECORDS, SIZE, PARTITIONS, KEYS)
    compacted = _load("produce", bootstrap, "compacted", RECORDS, SIZE, PARTITIONS, KEYS)
    # Compacted into segments (the writer's newest log object always stays).
    _wait(lambda: metric("kafscale_compaction_backlog_objects") <= 1, 300, "compaction done")
    time.sleep(2)
    before_requests, (user, system) = counter.counts(), broker.cpu_seconds()
    before = {name: metric(f"kafscale_cleaner_{name}") for name in
              ("passes", "bytes_read", "records_removed", "seconds", "segments_rewritten")}
    resource = ConfigResource("topic", "compacted", incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    started = time.monotonic()
    superseded = RECORDS - KEYS
    _wait(lambda: metric("kafscale_cleaner_records_removed") - before["records_removed"] >= superseded, 900,
          "the topic cleaned")
    wall = time.monotonic() - started
    user2, system2 = broker.cpu_seconds()
    after = {name: metric(f"kafscale_cleaner_{name}") - before[name] for name in before}
    requests = _delta(counter.counts(), before_requests)
    cpu = user2 + system2 - user - system
    return {"produce_delete": deleted, "produce_compact": compacted, "cpu": cpu, "wall": wall,
            "cleaner": after, "requests": requests}


def _row(name: str, backend: str, result: dict) -> list[str]:
    cleaner, cpu = result["cleaner"], result["cpu"]
    mb = cleaner["bytes_read"] / 1e6
    passes = max(cleaner["passes"], 1)
    requests = ", ".join(f"{k} {v / passes:,.1f}" for k, v in sorted(result["requests"].items()) if v)
    delete, compact = result["produce_delete"], result["produce_compact"]
    return [name, backend, f"{RECORDS / cpu:,.0f} rec/s, {mb / cpu:,.1f} MB/s (target {TARGET_MB_S:.0f})",
            f"{cpu:.1f} CPU-s, {result['wall']:.1f} s wall, {cleaner['seconds']:.1f} s in passes",
            f"{cleaner['passes']:.0f} passes, {cleaner['segments_rewritten']:.0f} segments rewritten; "
            f"per pass: {requests or 'none counted'}",
            f"{compact['messages'] / compact['seconds']:,.0f} vs {delete['messages'] / delete['seconds']:,.0f} msgs/s"]


def run() -> None:
    rows = []
    per_key, per_key_dict = key_map_bytes_per_key(), key_map_bytes_per_key(native=False)
    print(f"key map: {per_key:.0f} bytes per key (C table), {per_key_dict:.0f} (dict)")
    command = [sys.executable, "-m", "kafscale.gateway.cli", "--compaction-delay-ms", "2000",
               "--cleaner-backoff-ms", "500"]
    name = f"kafscale {report.commit()}"
    with tempfile.TemporaryDirectory() as tmp:
        for store, result in on_each_store(Path(tmp), "clean", name, command, measure):
            rows.append(_row(name, store, result))
            print(" | ".join(rows[-1]))
    report.save(
        "60-cleaner",
        "The log cleaner: throughput per core, requests per pass, produce on a compacted topic",
        "python -m bench cleaner",
        f"{RECORDS:,} records of {SIZE} B with 16-byte keys over {KEYS:,} keys, {PARTITIONS} partitions, produced by "
        "confluent-kafka while min.compaction.lag.ms holds the cleaner back; then the lag is set to 0 and the "
        "gateway's CPU (user+system, /proc) is measured until every superseded record is removed. Throughput = "
        "records and dirty segment bytes mapped per CPU-second (the rewrite reads them again, and compaction and "
        f"the janitor run meanwhile, so this is a lower bound). The key map holds {per_key:.0f} bytes per key "
        f"in its C table ({per_key_dict:.0f} in the dict fallback; tracemalloc, 200,000 keys; the table doubles, "
        "so this varies from 32 to 64 with the key count); the default 128 MiB map holds at most "
        f"{KeyMap(128 << 20).capacity / 1e6:.1f} M keys per pass. S3 requests per pass counted by the proxy (GET "
        "includes LIST). Produce: the same keyed load into a compacted and a delete topic, msgs/s, same run.",
        ["gateway", "store", "cleaner throughput per core", "cost", "passes and requests", "produce compact vs delete"],
        rows,
    )
