"""Large File Support: SDK upload throughput next to a plain multipart upload of the same file
(obstore, straight to the store), and 100 MiB payloads produced and consumed through LFS next to
the same payloads as raw Kafka values (max.message.bytes raised); on the filesystem and on S3
(SeaweedFS behind the counting proxy). Gateway peak RSS is reported (VmHWM)."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from . import report
from .broker_bench import Broker
from .objects_bench import on_each_store

MIB = 1 << 20
FILE_MIB, PAYLOAD_MIB, PAYLOADS = 512, 100, 3


def _peak_rss_mib(broker: Broker) -> float:
    assert broker.process is not None
    with open(f"/proc/{broker.process.pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _option(broker: Broker, flag: str) -> str | None:
    return broker.command[broker.command.index(flag) + 1] if flag in broker.command else None


def _plain_upload(broker: Broker, path: Path) -> float:
    """Seconds for obstore's own multipart upload of ``path`` to the gateway's store."""
    import obstore
    from obstore.store import LocalStore, S3Store

    storage = _option(broker, "--storage") or ""
    if storage.startswith("s3://"):
        bucket = storage[len("s3://"):].split("/", 1)[0]
        store = S3Store(bucket, config={"endpoint": _option(broker, "--s3-endpoint"), "region": "us-east-1",
                                        "access_key_id": _option(broker, "--s3-access-key-id") or "",
                                        "secret_access_key": _option(broker, "--s3-secret-access-key") or "",
                                        "virtual_hosted_style_request": False},
                        client_options={"allow_http": True})
    else:
        store = LocalStore(storage)
    started = time.perf_counter()
    with open(path, "rb") as file:
        obstore.put(store, "plain-upload/file", file, chunk_size=16 * MIB, max_concurrency=4)
    return time.perf_counter() - started


def measure(broker: Broker, counter) -> dict:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from kafscale.lfs_sdk import LfsClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    big = str(128 * MIB)
    for topic, configs in (("lfs", {"kafscale.lfs.enabled": "true", "kafscale.lfs.require_sdk": "true",
                                    "max.message.bytes": big}),
                           ("raw", {"max.message.bytes": big})):
        admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)
    workdir = Path(tempfile.mkdtemp())
    source = workdir / "file.bin"
    with open(source, "wb") as file:
        for _ in range(FILE_MIB):
            file.write(os.urandom(MIB))
    client = LfsClient(f"http://127.0.0.1:{broker.http_port}")
    rss_before = _peak_rss_mib(broker)
    started = time.perf_counter()
    client.upload("lfs", source)
    sdk_seconds = time.perf_counter() - started
    sdk_rss = _peak_rss_mib(broker) - rss_before
    plain_seconds = _plain_upload(broker, source)

    payload = os.urandom(PAYLOAD_MIB * MIB)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 128 * MIB + 4096,
                         "linger.ms": 0})
    timings = {}
    for topic in ("lfs", "raw"):
        rss_before = _peak_rss_mib(broker)
        started = time.perf_counter()
        for _ in range(PAYLOADS):
            if topic == "lfs":
                client.produce("lfs", payload, lambda value: producer.produce("lfs", value=value))
            else:
                producer.produce("raw", value=payload)
            producer.flush(120)
        produced = time.perf_counter() - started
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-{topic}",
                             "auto.offset.reset": "earliest", "fetch.max.bytes": 256 * MIB,
                             "max.partition.fetch.bytes": 128 * MIB + 4096, "receive.message.max.bytes": 256 * MIB + 1024})
        consumer.subscribe([topic])
        started, got = time.perf_counter(), 0
        while got < PAYLOADS and time.perf_counter() - started < 300:
            message = consumer.poll(1)
            if message is None or message.error():
                continue
            value = message.value()
            if topic == "lfs":
                value = client.read(value)
            assert len(value) == len(payload)
            got += 1
        consumed = time.perf_counter() - started
        consumer.close()
        timings[topic] = (produced, consumed, _peak_rss_mib(broker) - rss_before)
    heads = broker.metric("kafscale_lfs_head_latency_ms_count")
    head_ms = broker.metric("kafscale_lfs_head_latency_ms_sum") / heads if heads else float("nan")
    client.close()
    for path in workdir.iterdir():
        path.unlink()
    workdir.rmdir()
    return {"sdk": sdk_seconds, "plain": plain_seconds, "sdk_rss": sdk_rss, "timings": timings,
            "head_ms": head_ms, "heads": heads}


def run() -> None:
    rows = []
    # Raw 100 MiB values need frames and in-flight memory above the defaults (100 MiB, 256 MiB).
    command = [sys.executable, "-m", "kafscale.gateway.cli", "--max-frame-bytes", str(256 * MIB),
               "--max-inflight-bytes", str(1024 * MIB)]
    name = f"kafscale {report.commit()}"
    with tempfile.TemporaryDirectory() as tmp:
        for store, result in on_each_store(Path(tmp), "lfs", name, command, measure):
            sdk, plain = FILE_MIB / result["sdk"], FILE_MIB / result["plain"]
            row = [name, store, f"{sdk:,.0f} MiB/s (+{result['sdk_rss']:.0f} MiB peak RSS)",
                   f"{plain:,.0f} MiB/s = {sdk / plain:.2f}×"]
            for topic in ("lfs", "raw"):
                produced, consumed, grown = result["timings"][topic]
                row.append(f"{PAYLOADS * PAYLOAD_MIB / produced:,.0f} / {PAYLOADS * PAYLOAD_MIB / consumed:,.0f} "
                           f"MiB/s (+{grown:.0f} MiB peak RSS)")
            row.append(f"{result['head_ms']:.1f} ms ({result['heads']:.0f} HEADs)")
            rows.append(row)
            print(" | ".join(rows[-1]))
    report.save(
        "75-lfs",
        "Large File Support: SDK uploads, and 100 MiB payloads through LFS next to raw values",
        "python -m bench lfs",
        f"A {FILE_MIB} MiB file uploaded with the SDK (sha256 while streaming; on S3 pre-signed multipart, on the "
        "filesystem through the gateway's endpoint) next to obstore's own multipart upload of the same file to the "
        f"same store. Then {PAYLOADS} payloads of {PAYLOAD_MIB} MiB produced (one confluent-kafka producer, flushed "
        "after each) and consumed: through LFS (SDK produce, SDK read with its check) and as raw values "
        "(max.message.bytes 128 MiB). Peak RSS growth of the gateway (VmHWM) during each step. The LFS topic has "
        "kafscale.lfs.require_sdk=true: each produced pointer costs the gateway one HEAD of its object before the "
        "append; its mean latency is from kafscale_lfs_head_latency_ms.",
        ["gateway", "store", "SDK upload", "plain multipart", "LFS produce / consume", "raw produce / consume",
         "pointer HEAD, mean"],
        rows,
    )
