"""A real S3-compatible server for tests: moto's standalone server on loopback."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from kafscale.storage_backends import S3Options

from .ports import free_port

# moto_server handles requests in threads, and its conditional PUT (If-None-Match: *) is a check
# then a put: two racing creates of one key can both succeed, which S3 never allows and the
# gateways' fencing relies on. One request at a time makes moto's create atomic, as S3's is.
_SERIAL_MOTO = """
import sys
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
run_simple("127.0.0.1", int(sys.argv[1]), DomainDispatcherApplication(create_backend_app), threaded=False)
"""


class MotoServer:
    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / "moto.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([sys.executable, "-c", _SERIAL_MOTO, str(self.port)],
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
