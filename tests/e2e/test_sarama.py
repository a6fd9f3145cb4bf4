"""sarama 1.22 (Go, Debian's package): sync producer with acks=all under every codec,
then a partition consumer reading it all back."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

GO_DIR = Path(__file__).resolve().parent.parent / "clients" / "go"
SARAMA_SRC = Path("/usr/share/gocode/src/github.com/Shopify/sarama")
pytestmark = pytest.mark.skipif(
    not (shutil.which("go") and SARAMA_SRC.is_dir()) and not os.environ.get("CI"),
    reason="golang-go / golang-github-shopify-sarama-dev missing (scripts/test.sh installs them; "
    "in CI their absence fails)",
)


@pytest.fixture(scope="session")
def sarama_binary(tmp_path_factory):
    binary = GO_DIR / "bin" / "sarama-e2e"
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": f"{GO_DIR}:/usr/share/gocode",
           "GOCACHE": str(tmp_path_factory.mktemp("gocache")), "GOFLAGS": ""}
    done = subprocess.run(["go", "build", "-o", str(binary), "sarama-e2e"], cwd=GO_DIR, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return binary


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_sarama_produce_and_consume(gateway, sarama_binary, codec):
    topic = f"sarama-{codec}"
    done = subprocess.run([str(sarama_binary), gateway.bootstrap, topic, codec, "60"],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["acked"] == list(range(60))
    assert report["records"] == [
        dict(offset=i, key=f"k{i}", value=f"value {i}", header=f"n={i}", timestamp=1_700_000_000_000 + i)
        for i in range(60)
    ]
