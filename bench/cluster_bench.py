"""Object storage and cluster benchmarks: one gateway and three gateways (etcd) on an
S3-compatible server (moto; the cluster also on SeaweedFS), beside Tansu on moto.

Measured per setup: produce and consume throughput, produce-ack latency p50/p99,
object PUTs per GiB written (objects in the bucket after the produce runs, per GiB
of payload) and, for the cluster, etcd writes (raft proposals) per second under load.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from devkit.ports import free_port

from . import report
from .broker_bench import ROOT, Broker, _load, tansu_binary

sys.path.insert(0, str(ROOT))
from devkit.etcd_server import EtcdServer  # noqa: E402
from devkit.s3_server import MotoServer  # noqa: E402
from devkit.seaweed_server import SeaweedServer  # noqa: E402
from kafscale.storage_backends import open_store  # noqa: E402

RUNS = [("100 B", 100, 200_000), ("1 KiB", 1024, 100_000)]
PARTITIONS = 6


def _etcd_proposals(etcd: EtcdServer | None) -> float:
    if etcd is None:
        return 0.0
    text = urllib.request.urlopen(etcd.endpoint + "/metrics", timeout=5).read().decode()
    match = re.search(r"^etcd_server_proposals_committed_total (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def _objects(s3, location: str) -> int:
    return sum(1 for _ in open_store(location, s3=s3.options()).list(""))


def _etcd_requests(broker: Broker) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.http_port}/metrics", timeout=5).read().decode()
    match = re.search(r"^kafscale_etcd_requests (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def _idle_etcd_rate(name: str, gateways) -> list:
    """etcd requests per second per gateway while nothing changes (3 topics, 13 partitions,
    16 group slots): lease keepalives; the view is kept by watches, not re-read."""
    before = [_etcd_requests(b) for b in gateways.brokers]
    time.sleep(10)
    after = [_etcd_requests(b) for b in gateways.brokers]
    rate = sum(a - b for a, b in zip(after, before, strict=True)) / len(before) / 10
    row = [name, "idle, 10 s", "", "", "", "", "", f"{rate:.2f} requests/s per gateway"]
    print(" | ".join(row))
    return row


class Gateways:
    """``count`` Kafscale gateways on one bucket (with etcd when more than one)."""

    def __init__(self, workdir: Path, s3, location: str, count: int, etcd: EtcdServer | None) -> None:
        self.brokers = []
        for node in range(count):
            port, http_port = free_port(), free_port()
            command = [sys.executable, "-m", "kafscale.gateway.cli", "--port", str(port), "--http-port",
                       str(http_port), "--storage", location, *s3.gateway_args(),
                       "--node-id", str(node), "--log-level", "WARNING"]
            if etcd is not None:
                command += ["--etcd-endpoints", etcd.endpoint]
            self.brokers.append(Broker(f"kafscale-{node}", command, port, workdir, http_port))

    def __enter__(self) -> Gateways:
        for broker in self.brokers:
            broker.__enter__()
        time.sleep(2)  # let ownership settle
        return self

    def __exit__(self, *exc) -> None:
        for broker in self.brokers:
            broker.__exit__(*exc)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)


def _tansu(workdir: Path, moto: MotoServer, bucket: str):
    binary = tansu_binary()
    if binary is None:
        return None
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    os.environ.update({"AWS_ENDPOINT": moto.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "test",
                       "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"})
    return Broker("tansu", [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                            "--storage-engine", f"s3://{bucket}/"], port, workdir)


def measure(name: str, target, s3, location: str, etcd: EtcdServer | None) -> list[list]:
    rows = []
    bootstrap = target.bootstrap
    # Topics first, then a pause: in a cluster their partitions are claimed on the next
    # refresh, which must not be part of the measurement.
    for topic, partitions in [("bench-latency", 1)] + [(f"bench-{size}", PARTITIONS) for _, size, _ in RUNS]:
        _load("create", bootstrap, topic, partitions)
    time.sleep(3)
    latency = _load("latency", bootstrap, "bench-latency", 500, 10)
    rows.append([name, "500 msgs/s, acks=all", "", "", f"{latency['p50_ms']:.1f} ms", f"{latency['p99_ms']:.1f} ms",
                 "", ""])
    for label, size, count in RUNS:
        topic = f"bench-{size}"
        objects_before, proposals_before = _objects(s3, location), _etcd_proposals(etcd)
        produced = _load("produce", bootstrap, topic, count, size, PARTITIONS)
        proposals = _etcd_proposals(etcd) - proposals_before
        time.sleep(1)  # index objects are written just after the acknowledgements
        objects = _objects(s3, location) - objects_before
        gib = produced["bytes"] / 2**30
        consumed = _load("consume", bootstrap, topic, count, PARTITIONS)
        row = [name, f"{label} x {count:,}",
               f"{produced['messages'] / produced['seconds']:,.0f} msgs/s ({produced['bytes'] / produced['seconds'] / 1e6:.1f} MB/s)"
               + (f", {produced['errors']} errors" if produced["errors"] else ""),
               f"{consumed['messages'] / consumed['seconds']:,.0f} msgs/s ({consumed['messages']:,}/{count:,})",
               "", "", f"{objects / gib:,.0f} ({objects} objects)",
               f"{proposals / produced['seconds']:.1f}" if etcd is not None else ""]
        print(" | ".join(row))
        rows.append(row)
    print(" | ".join(rows[0]))
    return rows


def run() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        moto = MotoServer(workdir)
        seaweed = SeaweedServer(workdir)
        try:
            setups = [("kafscale, 1 gateway", 1, moto), ("kafscale, 3 gateways + etcd", 3, moto),
                      ("kafscale, 3 gateways + etcd, SeaweedFS", 3, seaweed)]
            for number, (name, count, s3) in enumerate(setups):
                location = s3.location()
                etcd = None
                if count > 1:
                    (workdir / f"etcd-{number}").mkdir()
                    etcd = EtcdServer(workdir / f"etcd-{number}").start()
                try:
                    with Gateways(workdir, s3, location, count, etcd) as gateways:
                        print(f"== {name}")
                        rows += measure(name, gateways, s3, location, etcd)
                        if etcd is not None:
                            rows.append(_idle_etcd_rate(name, gateways))
                finally:
                    if etcd is not None:
                        etcd.stop()
            bucket = moto.create_bucket()
            tansu = _tansu(workdir, moto, bucket)
            if tansu is not None:
                try:
                    with tansu:
                        print("== tansu (S3)")
                        rows += measure("tansu 0.6, S3", tansu, moto, f"s3://{bucket}", None)
                except (RuntimeError, subprocess.SubprocessError, json.JSONDecodeError) as exc:
                    print(f"tansu on S3 failed: {exc}")
                    rows.append(["tansu 0.6, S3", "did not run", str(exc)[:120], "", "", "", "", ""])
        finally:
            moto.stop()
            seaweed.stop()
    report.save(
        "50-cluster",
        "Object storage and cluster: S3 (moto, SeaweedFS) throughput, ack latency, PUTs per GiB, etcd",
        "python -m bench cluster",
        f"moto 5 S3 server on loopback (every request is real HTTP + SigV4; moto keeps objects in memory, so "
        f"these figures show the gateway's own cost, not a real S3's latency), and SeaweedFS 4 (`weed mini`, "
        f"objects on the local disk) for the last Kafscale setup. Topics of {PARTITIONS} partitions; "
        "confluent-kafka in a separate process, acks=all, linger.ms=5, uncompressed; consume from offset 0. "
        "Gateways run the default flush policy (linger 0: a flush starts as soon as the previous one ends, "
        "4 MiB flush_bytes, one segment + one index object per flush per partition). "
        "PUTs/GiB = objects created in the bucket during the produce run per GiB of payload. "
        "etcd writes/s = raft proposals committed during the produce run (lease keepalives are not proposals; "
        "topics are created and their partitions claimed before the runs, so this is the steady state); "
        "the idle row is all etcd requests (reads, writes, keepalives) per gateway per second. "
        "The three gateways and the client share the same 2 cores.",
        ["setup", "load", "produce", "consume", "ack p50", "ack p99", "PUTs per GiB", "etcd"],
        rows,
    )
