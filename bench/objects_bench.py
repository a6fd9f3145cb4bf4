"""What the object store sees: objects written per second at a steady load over 6 and 120
partitions, and per GiB of a bulk load, with the produce-ack latency, on the filesystem and
on an S3 server, for this commit and (``KAFSCALE_BENCH_BASELINE=<ref>``) an earlier one.

S3 requests are counted by a proxy between the gateway and SeaweedFS (``weed mini``):
``shared/tools/s3_count_proxy.py`` beside the project. On the filesystem, the files created
(names seen by polling the data directory every 200 ms, so files compaction deletes are counted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from devkit.ports import free_port

from . import baseline, report
from .broker_bench import Broker, _load

ROOT = Path(__file__).resolve().parent.parent
PROXY = ROOT.parent / "shared" / "tools" / "s3_count_proxy.py"
RATE, SECONDS, SIZE = 2400, 15.0, 100
BULK = 300_000
BULK_LARGE = 3_000_000


class FileCounter:
    """Names of files ever seen under a directory (polled), i.e. files created."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            for folder, _, names in os.walk(self.root):
                self.seen.update(os.path.join(folder, name) for name in names)
            time.sleep(0.2)

    def counts(self) -> dict[str, int]:
        return {"PUT": len(self.seen)}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class ProxyCounter:
    def __init__(self, path: Path) -> None:
        self.path = path

    def counts(self) -> dict[str, int]:
        time.sleep(0.6)  # the proxy rewrites its counts every 0.5 s
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def stop(self) -> None:
        pass


@contextmanager
def counted_s3_gateway(workdir: Path, tag: str, name: str, command: list[str], env: dict | None):
    """A gateway on SeaweedFS (``weed mini``) behind the counting proxy: (broker, counter)."""
    from devkit.seaweed_server import SeaweedServer

    (workdir / f"{tag}-weed").mkdir()
    weed = SeaweedServer(workdir / f"{tag}-weed")
    proxy_port, counts = free_port(), workdir / f"{tag}-counts.json"
    proxy = subprocess.Popen([sys.executable, str(PROXY), str(proxy_port), str(weed.port), str(counts)])
    try:
        time.sleep(0.5)
        args = ["--storage", f"s3://kafscale-tests/{tag}", "--s3-endpoint", f"http://127.0.0.1:{proxy_port}",
                *weed.gateway_args()[2:]]
        port, http_port = free_port(), free_port()
        with Broker(f"{name} s3", [*command, "--port", str(port), "--http-port", str(http_port), *args,
                                   "--log-level", "WARNING"], port, workdir, http_port, env) as broker:
            yield broker, ProxyCounter(counts)
    finally:
        proxy.kill()
        weed.stop()


class NotCounted:
    """The filesystem: its requests are not counted."""

    def counts(self) -> dict:
        return {}


def on_each_store(workdir: Path, tag: str, name: str, command: list[str], measure) -> list[tuple[str, object]]:
    """``measure(broker, counter)`` on a gateway over the filesystem, then (when the counting
    proxy is there) over S3 (SeaweedFS) with its requests counted: [(store, result)]."""
    results: list[tuple[str, object]] = []
    data = workdir / f"{tag}-data"
    data.mkdir()
    port, http_port = free_port(), free_port()
    with Broker(name, [*command, "--port", str(port), "--http-port", str(http_port), "--storage", str(data),
                       "--log-level", "WARNING"], port, workdir, http_port, None) as broker:
        results.append(("filesystem", measure(broker, NotCounted())))
    if PROXY.exists():
        with counted_s3_gateway(workdir, tag, name, command, None) as (broker, counter):
            results.append(("S3 (SeaweedFS)", measure(broker, counter)))
    return results


def _delta(after: dict, before: dict) -> dict:
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}


def measure(broker: Broker, counter) -> list[dict]:
    results = []
    for partitions in (6, 120):
        before = counter.counts()
        load = _load("steady", broker.bootstrap, f"steady-{partitions}", partitions, RATE, SECONDS, SIZE)
        requests = _delta(counter.counts(), before)
        results.append({"label": f"{RATE:,} msgs/s × {SIZE} B, {partitions} partitions", "load": load,
                        "per_s": {k: v / load["seconds"] for k, v in requests.items()}})
    for count in (BULK, BULK_LARGE):  # the larger shows what a GiB costs once a run's fixed writes are amortized
        before = counter.counts()
        load = _load("produce", broker.bootstrap, f"bulk-{count}", count, SIZE, 6)
        requests = _delta(counter.counts(), before)
        gib = load["bytes"] / 2**30
        results.append({"label": f"bulk {count:,} × {SIZE} B, 6 partitions", "load": load,
                        "per_gib": {k: v / gib for k, v in requests.items()}})
    return results


def _versions():
    versions = [(f"kafscale {report.commit()}", [sys.executable, "-m", "kafscale.gateway.cli"], None)]
    earlier = os.environ.get("KAFSCALE_BENCH_BASELINE")
    if earlier:
        command, env = baseline.gateway_command(earlier)
        versions.append((f"kafscale {baseline.short(earlier)} (before)", command, env))
    return versions


def _row(name: str, backend: str, item: dict) -> list[str]:
    load = item["load"]
    if "per_s" in item:
        rates = item["per_s"]
        puts = f"{rates.get('PUT', 0):,.1f}/s"
        others = ", ".join(f"{k} {v:,.1f}/s" for k, v in sorted(rates.items()) if k != "PUT" and v)
        latency = f"{load['p50_ms']:.0f} / {load['p99_ms']:.0f} ms"
        cost = f"${rates.get('PUT', 0) * 86400 * 0.005 / 1000:,.0f}/day" if backend != "filesystem" else ""
    else:
        rates = item["per_gib"]
        puts = f"{rates.get('PUT', 0):,.0f}/GiB"
        others = ", ".join(f"{k} {v:,.0f}/GiB" for k, v in sorted(rates.items()) if k != "PUT" and v)
        latency = f"{load['messages'] / load['seconds']:,.0f} msgs/s"
        cost = ""
    if load.get("errors"):
        latency += f", {load['errors']} errors"
    return [name, backend, item["label"], puts, others, latency, cost]


def run() -> None:

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for name, command, env in _versions():
            tag = name.split()[1]
            # Filesystem.
            data = workdir / tag / "data"
            data.mkdir(parents=True)
            port, http_port = free_port(), free_port()
            counter = FileCounter(data)
            with Broker(name, [*command, "--port", str(port), "--http-port", str(http_port), "--storage", str(data),
                               "--log-level", "WARNING"], port, workdir, http_port, env) as broker:
                for item in measure(broker, counter):
                    rows.append(_row(name, "filesystem", item))
                    print(" | ".join(rows[-1]))
            counter.stop()
            # S3: SeaweedFS behind the counting proxy.
            if not PROXY.exists():
                print(f"no {PROXY}: S3 rows skipped")
                continue
            with counted_s3_gateway(workdir, tag, name, command, env) as (broker, counter):
                for item in measure(broker, counter):
                    rows.append(_row(name, "S3 (SeaweedFS)", item))
                    print(" | ".join(rows[-1]))
    report.save(
        "25-objects",
        "What the object store sees: objects per second and per GiB",
        "KAFSCALE_BENCH_BASELINE=<ref> python -m bench objects",
        f"One gateway with its default configuration (filesystem: linger 0, 4 MiB objects, compaction at 4 MiB "
        f"of a partition or after 60 s; S3: linger 250 ms, 16 MiB objects, compaction at 64 MiB or after 10 min). "
        f"Steady load: confluent-kafka at {RATE:,} msgs/s of {SIZE} B for {SECONDS:.0f} s "
        "spread evenly over the topic's partitions, acks=all, linger.ms=5; ack = produce() to delivery report. "
        f"Bulk: {BULK:,} and {BULK_LARGE:,} messages of {SIZE} B over 6 partitions as fast as the client goes. "
        "S3 requests counted by a proxy in front of SeaweedFS 4 (`weed mini`), by HTTP method (GET includes LIST); filesystem: files "
        "created. Cost = PUTs at $0.005 per 1,000, for a day at that rate. "
        "A row 'kafscale <commit> (before)' is an earlier commit's gateway in the same session.",
        ["gateway", "store", "load", "objects written (PUT)", "other requests", "ack p50 / p99 (bulk: throughput)",
         "PUT cost"],
        rows,
    )
