"""Transactions: transactional produce next to idempotent produce in the same run (one
producer, transactions of 100 ms), commit latency, and what each transaction costs the
metadata store and the object store; on the filesystem and on S3 (SeaweedFS behind the
counting proxy)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from . import report
from .broker_bench import Broker, _load
from .objects_bench import _delta, on_each_store

SECONDS, SIZE, PARTITIONS, TXN_MS = 20, 100, 3, 100
TARGET = 0.8


def measure(broker: Broker, counter) -> dict:
    idempotent = _load("transactions", broker.bootstrap, "idempotent", SECONDS, SIZE, PARTITIONS, 0)
    writes_before = broker.metric("kafscale_transaction_store_writes")
    requests_before = counter.counts()
    transactional = _load("transactions", broker.bootstrap, "transactional", SECONDS, SIZE, PARTITIONS, TXN_MS)
    requests = _delta(counter.counts(), requests_before)
    writes = broker.metric("kafscale_transaction_store_writes") - writes_before
    return {"idempotent": idempotent, "transactional": transactional, "store_writes": writes,
            "requests": requests}


def _row(name: str, backend: str, result: dict) -> list[str]:
    idem, txn = result["idempotent"], result["transactional"]
    idem_rate, txn_rate = idem["messages"] / idem["seconds"], txn["messages"] / txn["seconds"]
    count = max(txn["transactions"], 1)
    per_txn = ", ".join(f"{k} {v / count:.1f}" for k, v in sorted(result["requests"].items()) if v)
    return [name, backend, f"{txn_rate:,.0f} vs {idem_rate:,.0f} msgs/s = {txn_rate / idem_rate:.2f}× "
            f"(target ≥ {TARGET})", f"{txn['transactions']} transactions",
            f"{txn['commit_p50_ms']:.1f} / {txn['commit_p99_ms']:.1f} ms",
            f"{result['store_writes'] / count:.1f}", per_txn or "not counted (filesystem)"]


def run() -> None:
    rows = []
    command = [sys.executable, "-m", "kafscale.gateway.cli"]
    name = f"kafscale {report.commit()}"
    with tempfile.TemporaryDirectory() as tmp:
        for store, result in on_each_store(Path(tmp), "txn", name, command, measure):
            rows.append(_row(name, store, result))
            print(" | ".join(rows[-1]))
    report.save(
        "70-transactions",
        "Transactions: transactional next to idempotent produce, commit latency, cost per transaction",
        "python -m bench transactions",
        f"One confluent-kafka producer, {SIZE} B records round robin over {PARTITIONS} partitions, as fast as it "
        f"goes for {SECONDS} s: idempotent (no transactions), then in transactions of {TXN_MS} ms each "
        "committed (commit_transaction timed: it flushes the transaction's records, then EndTxn, which the gateway "
        "answers once the markers are durable). Metadata-store writes per transaction from "
        "kafscale_transaction_store_writes (alone: objects under ~meta/transactions). S3 requests per transaction "
        "counted by the proxy over the transactional run (GET includes LIST; data included).",
        ["gateway", "store", "transactional vs idempotent", "transactions", "commit p50 / p99",
         "metadata writes per txn", "S3 requests per txn"],
        rows,
    )
