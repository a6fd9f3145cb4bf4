"""The gateway image and the compose quickstart, run with podman: the image builds from a
debootstrapped base, a container serves a round trip and stops cleanly on SIGTERM; the
quickstart brings up etcd, SeaweedFS and two gateways, its demo produces, consumes and
reads the bucket with Spark, and with one gateway stopped the other serves every record."""

from __future__ import annotations

import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from devkit.ports import free_port
from tests.support import containers

IMAGE = "localhost/kafscale:test"

_why = containers.unusable()
if _why is not None and containers.REQUIRED:
    raise RuntimeError(f"the container tests must run here but cannot: {_why}")
pytestmark = pytest.mark.skipif(_why is not None, reason=f"podman cannot run containers here: {_why}")


def _ready(http_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _consume_all(bootstrap: str, topic: str, expected: set[bytes], timeout: float = 60, at_least: int = 0) -> set[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time_ns()}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    deadline = time.monotonic() + timeout
    try:
        while not (expected <= seen and len(seen) >= at_least) and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and not message.error():
                seen.add(message.value())
    finally:
        consumer.close()
    return seen


@pytest.fixture(scope="module")
def image():
    started = time.monotonic()
    built = containers.run("deploy/image/build.sh", "--base", "debootstrap", "--tag", IMAGE, timeout=1200)
    print(f"{built.stdout.strip()} ({time.monotonic() - started:.0f} s with the base)")
    yield IMAGE
    # 1.3 GB a build (the image and its build stage): kept, they filled a CI machine's disk.
    containers.run("podman", "rmi", "--force", IMAGE, check=False)
    containers.run("podman", "image", "prune", "--force", "--filter", "label=org.kafscale.stage=build", check=False)


def test_a_container_with_no_arguments_serves_the_embedded_default_and_stops_cleanly(image):
    port, http_port = free_port(), free_port()
    name = f"kafscale-test-{port}"
    containers.run("podman", "run", "--detach", "--name", name, "--publish", f"127.0.0.1:{port}:9092",
                   "--publish", f"127.0.0.1:{http_port}:9094", "--env", "KAFSCALE_ADVERTISED_HOST=127.0.0.1",
                   "--env", f"KAFSCALE_ADVERTISED_PORT={port}", image)
    try:
        started = time.monotonic()
        _wait(lambda: _ready(http_port), 60, "the container's gateway never became ready")
        print(f"container ready {time.monotonic() - started:.2f} s after podman run")
        bootstrap = f"127.0.0.1:{port}"
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        values = {f"v{i}".encode() for i in range(200)}
        for value in values:
            producer.produce("in-a-container", value=value)
        assert producer.flush(30) == 0
        assert _consume_all(bootstrap, "in-a-container", values) == values
        inspected = containers.run("podman", "inspect", name, "--format", "{{.Config.User}} {{.Config.WorkingDir}}")
        assert inspected.stdout.split() == ["10001:10001", "/var/lib/kafscale"]  # not root; ./data under its home
        containers.run("podman", "stop", "--time", "30", name)
        code = containers.run("podman", "inspect", name, "--format", "{{.State.ExitCode}}").stdout.strip()
        assert code == "0"
        logs = containers.run("podman", "logs", name).stderr + containers.run("podman", "logs", name).stdout
        assert "embedded mode" in logs and "stopped" in logs
    finally:
        containers.run("podman", "rm", "--force", name, check=False)


def test_the_compose_quickstart_runs_two_gateways_and_one_serves_everything_when_the_other_stops(image):
    tools = containers.tools_image()
    ports = {name: str(free_port()) for name in ("KAFSCALE_PORT_1", "KAFSCALE_PORT_2", "KAFSCALE_HTTP_PORT_1",
                                                 "KAFSCALE_HTTP_PORT_2", "S3_PORT", "ETCD_PORT")}
    env = {**ports, "KAFSCALE_IMAGE": image, "ETCD_IMAGE": tools, "SEAWEEDFS_IMAGE": tools,
           "DEMO_TOPIC": "quickstart"}
    compose = ["podman-compose", "-f", "deploy/compose/compose.yaml"]
    try:
        started = time.monotonic()
        containers.run("deploy/compose/quickstart.sh", "up", env=env, timeout=600)
        print(f"quickstart up in {time.monotonic() - started:.1f} s")
        first, second = f"127.0.0.1:{ports['KAFSCALE_PORT_1']}", f"127.0.0.1:{ports['KAFSCALE_PORT_2']}"
        brokers = AdminClient({"bootstrap.servers": first}).list_topics(timeout=15).brokers
        assert sorted(f"{b.host}:{b.port}" for b in brokers.values()) == sorted([first, second])
        demo = containers.run("deploy/compose/quickstart.sh", "demo", env=env, timeout=600)
        assert "consumed 1000 of them" in demo.stdout and "Spark read 1000 of them from the bucket" in demo.stdout, \
            demo.stdout
        producer = Producer({"bootstrap.servers": f"{first},{second}", "acks": "all", "enable.idempotence": True})
        values = {f"after-{i}".encode() for i in range(500)}
        for value in values:
            producer.produce("quickstart", value=value)
        assert producer.flush(30) == 0
        # One gateway stops (SIGTERM: it drains); the other now leads every partition.
        containers.run(*compose, "stop", "gateway-1", env=env, timeout=120)
        everything = _consume_all(second, "quickstart", values, timeout=90, at_least=1500)
        assert values <= everything
        assert len([v for v in everything if not v.startswith(b"after-")]) >= 1000  # the demo's records too
    finally:
        containers.run("deploy/compose/quickstart.sh", "down", env=env, timeout=300, check=False)
