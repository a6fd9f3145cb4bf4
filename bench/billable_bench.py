"""What S3 bills at steady state: PUT + POST + LIST requests per second (the $0.005 per
1,000 tier), by kind, over 6 and then 120 partitions at 2,400 msgs/s of 100 B, counted by
a proxy in front of SeaweedFS over a window longer than the compaction delay, so log
objects, compaction, merging, listings and batch deletes are all in it. Target of issue 20:
at most 4 per second per gateway, flat from 6 to 120 partitions.

``KAFSCALE_BENCH_SECONDS`` sets the window (default 660 s: past the 10 min S3 compaction
delay); ``KAFSCALE_BENCH_BASELINE=<ref>`` runs an earlier commit's gateway in the same session.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from . import report
from .broker_bench import _load
from .objects_bench import PROXY, ProxyCounter, _delta, _versions, counted_s3_gateway

RATE, SIZE = 2400, 100
SETTLE_S = 20.0
BILLABLE = ("PUT", "POST", "LIST")


def _window() -> float:
    return float(os.environ.get("KAFSCALE_BENCH_SECONDS", "660"))


def measure(bootstrap: str, counter: ProxyCounter, partitions: int, seconds: float) -> dict:
    before = counter.counts()
    started = time.monotonic()
    try:
        load = _load("steady", bootstrap, f"billable-{partitions}", partitions, RATE, seconds, SIZE)
    except RuntimeError as exc:  # the gateway fell behind the load (the client's queue filled)
        reason = str(exc).strip().splitlines()[-1][:120]
        return {"failed": f"fell behind after {time.monotonic() - started:.0f} s: {reason}"}
    time.sleep(SETTLE_S)
    requests = _delta(counter.counts(), before)
    window = load["seconds"] + SETTLE_S
    return {"load": load, "per_s": {k: v / window for k, v in requests.items() if v}, "window": window}


def run() -> None:
    if not PROXY.exists():
        print(f"no {PROXY}: section skipped")
        return
    seconds = _window()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for name, command, env in _versions():
            tag = name.split()[1]
            with counted_s3_gateway(workdir, tag, name, command, env) as (broker, counter):
                for partitions in (6, 120):
                    item = measure(broker.bootstrap, counter, partitions, seconds)
                    if "failed" in item:
                        rows.append([name, f"{partitions}", f"{seconds:.0f} s", "—", item["failed"], "—"])
                        print(" | ".join(rows[-1]), flush=True)
                        continue
                    rates = item["per_s"]
                    billable = sum(rates.get(kind, 0) for kind in BILLABLE)
                    kinds = ", ".join(f"{k} {v:.2f}" for k, v in sorted(rates.items()))
                    load = item["load"]
                    rows.append([name, f"{partitions}", f"{item['window']:.0f} s", f"{billable:.2f}/s", kinds,
                                 f"{load['p50_ms']:.0f} / {load['p99_ms']:.0f} ms"
                                 + (f", {load['errors']} errors" if load.get("errors") else "")])
                    print(" | ".join(rows[-1]), flush=True)
    report.save(
        "26-billable",
        "What S3 bills at steady state: requests per second by kind",
        "KAFSCALE_BENCH_SECONDS=660 KAFSCALE_BENCH_BASELINE=<ref> python -m bench billable",
        f"One gateway on its S3 defaults (linger, flush size, compaction delay and sizes as configured by default), "
        f"SeaweedFS 4 (`weed mini`) behind the counting proxy (`shared/tools/s3_count_proxy.py`). confluent-kafka "
        f"at {RATE:,} msgs/s of {SIZE} B spread evenly over the topic's partitions, acks=all, linger.ms=5, for the "
        f"window minus {SETTLE_S:.0f} s, counted {SETTLE_S:.0f} s more; the 6-partition topic stays loaded during the "
        "120-partition run. Billable = PUT + POST + LIST (S3's $0.005 per 1,000 tier); GET, HEAD and DELETE are "
        "shown beside. Target (issue 20): at most 4/s per gateway, flat from 6 to 120 partitions.",
        ["gateway", "partitions", "window", "billable", "requests/s by kind", "ack p50 / p99"],
        rows,
    )
