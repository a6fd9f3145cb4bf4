"""A real S3-compatible server for tests: moto's standalone server on loopback."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from kafscale.storage_backends import S3Options
from tests.support.gateway_process import free_port


class MotoServer:
    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / "moto.log"
        executable = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([executable, "-H", "127.0.0.1", "-p", str(self.port)],
                                            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.endpoint, timeout=1)
                return
            except OSError as exc:
                if getattr(exc, "code", None):  # any HTTP answer means it is up
                    return
                time.sleep(0.1)
        raise RuntimeError(f"moto server did not start:\n{self.log_path.read_text()}")

    def create_bucket(self, name: str | None = None) -> str:
        name = name or f"b-{uuid.uuid4().hex[:12]}"
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
        return name

    def location(self) -> str:
        """A fresh bucket for one test."""
        return f"s3://{self.create_bucket()}/c"

    def options(self) -> S3Options:
        return S3Options(endpoint=self.endpoint, region="us-east-1", access_key_id="test",
                         secret_access_key="test", path_style=True, allow_http=True, timeout_ms=10_000, retries=2)

    def gateway_args(self) -> list[str]:
        return ["--s3-endpoint", self.endpoint, "--s3-region", "us-east-1", "--s3-access-key-id", "test",
                "--s3-secret-access-key", "test", "--s3-path-style", "--s3-allow-http"]

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
