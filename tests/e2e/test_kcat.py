"""kcat 1.7.1 (librdkafka 2.0.2): a regression client for ApiVersions tagged fields."""

import shutil
import subprocess

import pytest
import trio

from devkit.wire_client import Client, fetch
from kafscale.protocol.records import split_batches

KCAT = shutil.which("kcat")
pytestmark = pytest.mark.skipif(
    KCAT is None and not __import__("os").environ.get("CI"),
    reason="kcat is not installed (scripts/test.sh installs it; in CI its absence fails)",
)


def kcat(*args: str, input: bytes | None = None, timeout: float = 30) -> str:
    assert KCAT is not None, "kcat must be installed in CI (scripts/test.sh installs Debian's kcat)"
    done = subprocess.run([KCAT, *args], input=input, capture_output=True, timeout=timeout)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def test_metadata_listing(gateway):
    out = kcat("-L", "-b", gateway.bootstrap)
    assert "1 brokers:" in out and f"broker 0 at {gateway.bootstrap}" in out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume_each_codec(gateway, codec):
    topic = f"kcat-{codec}"
    lines = b"".join(b"k%d:value %d\n" % (i, i) for i in range(50))
    kcat("-P", "-b", gateway.bootstrap, "-t", topic, "-p", "0", "-K:", "-z", codec,
         "-H", "source=kcat", "-X", "acks=all", "-X", "linger.ms=200", input=lines)
    gateway.restart()
    out = kcat("-C", "-b", gateway.bootstrap, "-t", topic, "-o", "beginning", "-e",
               "-f", "%o|%k|%s|%h\\n")
    rows = [line.split("|") for line in out.splitlines() if line]
    assert rows == [[str(i), f"k{i}", f"value {i}", "source=kcat"] for i in range(50)]
    # librdkafka before 2.10 compresses only if the broker's Produce range starts at v0
    # (else "Broker does not support compression type ...: not compressing batch"). A batch of
    # a few records may go uncompressed when compressing would not make it smaller, so the
    # producer lingers 200 ms (on a loaded machine it sent every record alone, none compressed).
    stored = _stored_batches(gateway.port, topic)
    assert any(c == CODECS[codec] for c, _ in stored), stored
    assert all(c == CODECS[codec] for c, count in stored if count >= 10), stored


CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _stored_batches(port: int, topic: str) -> list[tuple[int, int]]:
    """(codec, records) of each batch a topic's partition 0 holds, as Fetch serves them byte-exact."""
    async def read() -> list[tuple[int, int]]:
        client = await Client.connect(port)
        try:
            body = await client.call(1, 12, fetch(topic, 0, 0))
            data = bytes(body.responses[0].partitions[0].records or b"")
            return [(header.compression, header.records_count) for header in split_batches(data)]
        finally:
            await client.stream.aclose()

    return trio.run(read)


def test_query_offsets(gateway):
    kcat("-P", "-b", gateway.bootstrap, "-t", "q", "-p", "0", input=b"a\nb\nc\n")
    out = kcat("-Q", "-b", gateway.bootstrap, "-t", "q:0:-1")
    assert "q [0] offset 3" in out
