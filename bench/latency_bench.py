"""Produce-ack latency on the filesystem at a low rate (1,000 msgs/s, acks=all, linger.ms=0);
with ``KAFSCALE_BENCH_BASELINE=<ref>`` an earlier commit's gateway too, runs alternating.

The tail on a VM disk varies from run to run by more than any change we make, so each
run gets a fresh gateway on an empty directory (no earlier run's compaction or page-cache
writeback under it) and the versions take turns; the table gives every run and the
median of the p99s.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from devkit.ports import free_port

from . import baseline, report
from .broker_bench import Broker, _load

RUNS = 6
RATE = 1000
SECONDS = 10


def _run(name: str, command: list[str], env: dict[str, str] | None, tmp: Path, run: int) -> dict:
    work = tmp / f"{name}-{run}"
    data = work / "data"
    data.mkdir(parents=True)
    port = free_port()
    broker = Broker(name, [*command, "--port", str(port), "--http-port", "-1", "--storage", str(data),
                           "--log-level", "WARNING"], port, work, env=env)
    with broker:
        return _load("latency", broker.bootstrap, "bench-latency", RATE, SECONDS)


def run() -> None:
    versions = baseline.versions(report.commit())
    measured: dict[str, list[dict]] = {name: [] for name, _, _ in versions}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(RUNS):
            order = versions if run % 2 == 0 else versions[::-1]
            for name, command, env in order:
                result = _run(name.split()[1], command, env, Path(tmp), run)
                measured[name].append(result)
                print(f"== {name} run {run + 1}: p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms, "
                      f"max {result['max_ms']:.1f} ms")
    rows = []
    for name, results in measured.items():
        p99s = [r["p99_ms"] for r in results]
        rows.append([name, f"{statistics.median(r['p50_ms'] for r in results):.2f} ms",
                     f"{statistics.median(p99s):.2f} ms", ", ".join(f"{p:.1f}" for p in p99s),
                     f"{statistics.median(r['max_ms'] for r in results):.0f} ms"])
    report.save(
        "latency",
        "Produce-ack latency on the filesystem at 1,000 msgs/s, fresh gateway per run",
        "KAFSCALE_BENCH_BASELINE=<ref> python -m bench latency",
        f"confluent-kafka, acks=all, linger.ms=0, 1 partition, {SECONDS} s per run, {RUNS} runs per version "
        "taking turns, each on a new gateway and an empty data directory.",
        ["gateway", "ack p50 (median)", "ack p99 (median)", "ack p99 of each run (ms)", "max (median)"],
        rows,
    )
