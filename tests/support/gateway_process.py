"""Start a real gateway process for end-to-end tests."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from devkit.ports import free_port


class GatewayProcess:
    def __init__(self, data_dir: Path, *extra_args: str, port: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.env = env or {}  # added to the test's environment (secrets go here, not on the command line)
        self.port = port or free_port()
        self.http_port = free_port()
        self.extra_args = list(extra_args)
        self.log_path = data_dir.parent / f"gateway-{self.port}.log"
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20) -> GatewayProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kafscale.gateway.cli", "--port", str(self.port),
             "--http-port", str(self.http_port), "--storage", str(self.data_dir), *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.process.returncode}:\n{self.logs()}")
            try:
                with urllib.request.urlopen(self._readyz, timeout=1, context=self._probe_tls) as response:
                    if response.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"gateway not ready after {timeout}s:\n{self.logs()}")

    @property
    def _readyz(self) -> str:
        scheme = "https" if "--http-ssl" in self.extra_args else "http"
        return f"{scheme}://127.0.0.1:{self.http_port}/readyz"

    @property
    def _probe_tls(self) -> ssl.SSLContext | None:
        """The readiness probe does not check the test certificate (the tests that need it do)."""
        if "--http-ssl" not in self.extra_args:
            return None
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"gateway did not stop within {timeout}s on signal {sig}") from None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> GatewayProcess:
        self.stop()
        return self.start()

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=5) as response:
            return response.read().decode()

    def metric(self, series: str) -> float:
        """One series' value, named as /metrics writes it (with its labels, if any); 0 while
        absent (a labelled counter appears on its first increment)."""
        for line in self.metrics().splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
        return 0.0
