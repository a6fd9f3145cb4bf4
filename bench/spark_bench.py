"""Spark reading a topic straight from storage vs the same topic through the gateway; with
``KAFSCALE_BENCH_BASELINE=<ref>`` also an earlier commit's gateway and connector, same run."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from devkit.ports import free_port

from . import baseline, report
from .broker_bench import Broker, _load

COUNT = 2_000_000
ROOT = Path(__file__).resolve().parent.parent


def _settle(data: Path, timeout_s: float = 60) -> None:
    """Until compaction has moved the topic into segments and the janitor deleted the log
    objects (at most a few left), so every run reads the same layout."""
    deadline = time.monotonic() + timeout_s
    while sum(p.suffix == ".kfl" for p in data.rglob("*.kfl")) > 2 and time.monotonic() < deadline:
        time.sleep(0.5)


def _objects(data: Path) -> str:
    files = [p for p in data.rglob("*") if p.is_file()]
    segments = sum(p.suffix == ".kfs" for p in files)
    logs = sum(p.suffix == ".kfl" for p in files)
    return f"{segments} segments" + (f" + {logs} log objects" if logs else "")


def _measure(name: str, command: list[str], env: dict[str, str] | None, tmp: Path) -> dict:
    data = tmp / name / "data"
    data.mkdir(parents=True)
    port = free_port()
    broker = Broker(name, [*command, "--port", str(port), "--http-port", "-1", "--storage", str(data),
                           "--log-level", "WARNING", "--compaction-delay-ms", "1000"], port, tmp / name, env=env)
    with broker:
        produced = _load("produce", broker.bootstrap, "spark-bench", COUNT, 100)
        consumed = _load("consume", broker.bootstrap, "spark-bench", COUNT, 3)
        _settle(data)
    stored = _objects(data)
    read = _spark(env, tmp, data, "4")  # reads with no gateway running (its compaction would compete)
    with Broker(name, broker.command, port, tmp / name, env=env):  # again, for the writes
        read["writes"] = _spark(env, tmp, data, "0", broker.bootstrap)["writes"]
    return {"produced": produced, "consumed": consumed, "seconds": read["seconds"], "stored": stored,
            "connector": read["connector"], "ceiling": read.get("ceiling", []), "writes": read.get("writes", {})}


def _spark(env: dict[str, str] | None, tmp: Path, data: Path, runs: str, *bootstrap: str) -> dict:
    # An earlier commit's connector: its environment (PYTHONPATH) and -S, as its gateway.
    done = subprocess.run([sys.executable, *(["-S"] if env else []), str(ROOT / "bench" / "spark_read.py"),
                           str(data), "spark-bench", str(COUNT), runs, *bootstrap], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError("\n".join(line for line in done.stderr.splitlines()
                                     if not line.lstrip().startswith(("at ", "...")))[-6000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def run() -> None:
    versions = baseline.versions(report.commit())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, command, env in versions:
            measured = _measure(name.split()[1], command, env, Path(tmp))
            print(f"== {name}: {measured}")
            best = min(measured["seconds"])
            consumed = measured["consumed"]
            rows.append([f"{name}: Spark local[2], format kafscale (from storage: {measured['stored']})",
                         f"{COUNT / best:,.0f} records/s", f"{COUNT * 100 / best / 1e6:.1f} MB/s of values",
                         f"best of {len(measured['seconds'])}: {best:.1f} s"
                         + (f"; {min(measured['ceiling']) / best:.2f}x the ceiling" if measured["ceiling"] else "")])
            if measured["ceiling"]:
                ceiling = min(measured["ceiling"])
                rows.append([f"{name}: ceiling, a Python source yielding ready Arrow batches (same session)",
                             f"{COUNT / ceiling:,.0f} records/s", f"{COUNT * 100 / ceiling / 1e6:.1f} MB/s of values",
                             f"best of {len(measured['ceiling'])}: {ceiling:.1f} s"])
            for delivery, seconds in measured["writes"].items():
                rows.append([f"{name}: Spark writes the rows back, format kafscale, {delivery.replace('_', ' ')}",
                             f"{COUNT / seconds:,.0f} records/s", f"{COUNT * 100 / seconds / 1e6:.1f} MB/s of values",
                             f"{seconds:.1f} s"])
            produced = measured["produced"]
            rows.append([f"{name}: confluent-kafka producing the same rows through the gateway",
                         f"{produced['messages'] / produced['seconds']:,.0f} records/s",
                         f"{produced['messages'] * 100 / produced['seconds'] / 1e6:.1f} MB/s of values",
                         f"{produced['seconds']:.1f} s"])
            rows.append([f"{name}: confluent-kafka through the gateway",
                         f"{consumed['messages'] / consumed['seconds']:,.0f} records/s",
                         f"{consumed['messages'] * 100 / consumed['seconds'] / 1e6:.1f} MB/s of values",
                         f"{consumed['seconds']:.1f} s"])
    for row in rows:
        print(" | ".join(row))
    report.save(
        "40-spark",
        "Spark: reading a topic from storage vs through the gateway, and writing it back",
        "KAFSCALE_BENCH_BASELINE=<ref> python -m bench spark",
        f"{COUNT:,} records of 100 B in 3 partitions, produced by confluent-kafka at full speed (gateway with "
        "--compaction-delay-ms 1000), read once compaction has settled (the layout is in the row: segments, "
        "and the log objects left, read as ranged entries); a run read before that varies with how far "
        "compaction got (0.67x the ceiling with 165 log objects left, 0.93x with 57). Each version's gateway writes and its own connector reads (an earlier "
        "commit's connector is run from a git worktree). Spark time includes planning and a full decode of "
        "every record into Arrow (count and sum of value lengths); session start excluded. The ceiling is "
        "any Python data source's: the same rows as ready Arrow batches, in the same Spark session. Targets: "
        ">= 1M records/s and >= 0.8x the ceiling. Writes: the read rows (key, value) produced to a new topic "
        "through the same gateway by df.write.format('kafscale') (3 tasks), next to confluent-kafka producing "
        "the 2M rows of the first load.",
        ["reader", "records/s", "throughput", "time"],
        rows,
    )
