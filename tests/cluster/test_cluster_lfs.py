"""LFS in a cluster: an upload session started at one gateway is completed at another (sessions
live in the shared store), and every gateway checks the pointers produced to the partitions it
owns."""

from __future__ import annotations

import hashlib
import os

import httpx
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafscale.lfs_sdk import LfsClient
from tests.support.kafka_reading import read_to_end

MIB = 1 << 20


def test_a_session_started_at_one_gateway_completes_at_another(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    configs = {"kafscale.lfs.enabled": "true", "kafscale.lfs.require_sdk": "true", "kafscale.lfs.min_bytes": str(MIB)}
    admin.create_topics([NewTopic("shared", 3, 1, config=configs)])["shared"].result(30)
    cluster.wait_owned("shared", 3, {0, 1, 2})
    first, second = (f"http://127.0.0.1:{g.http_port}" for g in cluster.gateways[:2])
    data = os.urandom(5 * MIB)
    session = httpx.post(f"{first}/lfs/uploads", json={"topic": "shared", "size": len(data)}, timeout=30).json()
    assert session["method"] == "put"  # S3: the bytes go to the store, not to a gateway
    assert httpx.put(session["urls"][0], content=data, headers={"Content-Type": "application/octet-stream"},
                     timeout=60).status_code == 200
    completed = httpx.post(f"{second}/lfs/uploads/{session['id']}/complete",
                           json={"checksum": hashlib.sha256(data).hexdigest()}, timeout=30)
    assert completed.status_code == 200, completed.text
    pointer = completed.content
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for partition in range(3):  # each partition's owner checks the pointer (a HEAD) and claims it
        producer.produce("shared", value=pointer, partition=partition)
    assert producer.flush(30) == 0
    values = [message.value() for message in read_to_end(cluster.bootstrap, "shared", 3)]
    assert values == [pointer] * 3
    with LfsClient(f"http://127.0.0.1:{cluster.gateways[2].http_port}") as client:
        assert client.read(pointer) == data
