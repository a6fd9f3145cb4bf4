"""Run benchmark sections and rewrite docs/benchmarks.md: ``python -m bench [section ...]``."""

from __future__ import annotations

import sys

from . import (
    billable_bench,
    broker_bench,
    cleaner_bench,
    cluster_bench,
    cpu_bench,
    fetch_sessions_bench,
    group_bench,
    group_protocols_bench,
    latency_bench,
    lfs_bench,
    limits_bench,
    objects_bench,
    protocol_bench,
    report,
    requests_bench,
    security_bench,
    share_bench,
    spark_bench,
    transactions_bench,
    wide_bench,
    workers_bench,
)

SECTIONS = {
    "protocol": protocol_bench.run,
    "limits": limits_bench.run,
    "broker": broker_bench.run,
    "cpu": cpu_bench.run,
    "requests": requests_bench.run,
    "wide": wide_bench.run,
    "latency": latency_bench.run,
    "objects": objects_bench.run,
    "billable": billable_bench.run,
    "groups": group_bench.run,
    "group-protocols": group_protocols_bench.run,
    "fetch-sessions": fetch_sessions_bench.run,
    "spark": spark_bench.run,
    "cluster": cluster_bench.run,
    "security": security_bench.run,
    "cleaner": cleaner_bench.run,
    "transactions": transactions_bench.run,
    "lfs": lfs_bench.run,
    "shares": share_bench.run,
    "workers": workers_bench.run,
}


def main(argv: list[str]) -> int:
    chosen = argv or list(SECTIONS)
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        print(f"unknown section(s): {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
        return 2
    for name in chosen:
        print(f"== {name}")
        SECTIONS[name]()
    report.write_doc()
    print(f"wrote {report.DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
