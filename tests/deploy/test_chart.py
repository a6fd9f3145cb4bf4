"""The Helm chart: lint-clean, valid against the oldest and newest Kubernetes it claims, and
consistent with the gateway it runs (its environment is a valid gateway config; probes,
grace, HPA and PDB agree with the gateway's own settings)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kafscale.gateway.config import GatewayConfig, resolve_config
from tests.support.helm import CHART, helm, render

ROOT = Path(__file__).resolve().parents[2]
OLDEST, NEWEST = "1.27.0", "1.37.0"  # Chart.yaml's kubeVersion, and kubernetes-validate's newest schemas
FEATURES = ("metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true", "tls.existingSecret=kafscale-tls",
            "storage.existingSecret=kafscale-s3", "etcd.existingSecret=kafscale-etcd", "etcd.username=kafscale",
            "sasl.existingSecret=kafscale-sasl", "security.protocol=SASL_SSL", "security.saslBootstrapUser=admin",
            "security.authorizer=acl", "security.superUsers=User:admin")


def _kind(docs: list[dict], kind: str) -> dict:
    (found,) = [doc for doc in docs if doc["kind"] == kind]
    return found


def _env(container: dict) -> dict[str, str]:
    """The container's plain values (secrets stand in as placeholders), $(POD_IP) as a pod's IP."""
    env = {}
    for item in container["env"]:
        value = item.get("value", "from-a-secret")
        env[item["name"]] = value.replace("$(POD_IP)", "10.1.2.3")
    return env


def test_the_chart_lints_clean():
    done = helm("lint", "--strict", str(CHART), *[arg for value in FEATURES for arg in ("--set", value)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
@pytest.mark.parametrize("values", [(), FEATURES, ("autoscaling.enabled=false", "replicaCount=5")],
                         ids=["defaults", "every-feature", "fixed-replicas"])
def test_the_rendered_manifests_are_valid_kubernetes(tmp_path, version, values):
    rendered = tmp_path / "rendered.yaml"
    done = helm("template", "kafscale", str(CHART), "--namespace", "streaming",
                *[arg for value in values for arg in ("--set", value)])
    assert done.returncode == 0, done.stderr
    rendered.write_text(done.stdout)
    checked = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k", version, str(rendered)],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # Only the Prometheus operator's kinds have no schema here (they are CRDs).
    unknown = re.findall(r"Couldn't find schema for kind (\w+)", checked.stdout + checked.stderr)
    assert set(unknown) <= {"ServiceMonitor", "PrometheusRule"}, checked.stdout
    kinds = [doc["kind"] for doc in yaml.safe_load_all(done.stdout) if doc]
    assert checked.stdout.count("passed for resource") == len(set(kinds) - {"ServiceMonitor", "PrometheusRule"}) >= 4


def test_every_pod_is_alike_and_starts_with_a_valid_gateway_config():
    docs = render(*FEATURES)
    pod = _kind(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = _env(container)
    assert env["KAFSCALE_NODE_ID"] == "auto"  # no per-pod identity: etcd hands ids out
    assert env["KAFSCALE_ADVERTISED_HOST"] == "10.1.2.3"  # the pod IP (downward API)
    # Every variable is a gateway option, and together they are a config the gateway accepts.
    options = {"KAFSCALE_" + item.name.upper() for item in GatewayConfig.options()}
    assert {name for name in env if name.startswith("KAFSCALE_")} <= options
    config = resolve_config([], {name: value for name, value in env.items() if name.startswith("KAFSCALE_")}).config
    assert config.cluster.enabled and config.storage.on_s3
    assert config.network.kafka_listeners[0].protocol == "SASL_SSL"
    assert config.tls.ssl_certfile == "/etc/kafscale/tls/tls.crt"
    mounted = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert "/etc/kafscale/tls" in mounted
    secrets = {item["valueFrom"]["secretKeyRef"]["name"] for item in container["env"] if "valueFrom" in item
               and "secretKeyRef" in item["valueFrom"]}
    assert secrets == {"kafscale-s3", "kafscale-etcd", "kafscale-sasl"}


def test_probes_grace_hpa_and_pdb_agree_with_the_gateways_settings():
    docs = render()
    deployment = _kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = _env(container)
    config = resolve_config([], {k: v for k, v in env.items() if k.startswith("KAFSCALE_")}).config
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"kafka": config.network.port, "http": config.network.http_port}
    assert config.network.host == config.network.http_host == "0.0.0.0"
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["startupProbe"]["httpGet"]["path"] == "/readyz"
    # SIGTERM: the drain, then the flush, both inside the grace Kubernetes gives before SIGKILL.
    stop_s = (config.cluster.drain_timeout_ms + config.limits.shutdown_timeout_ms) / 1000
    assert pod["terminationGracePeriodSeconds"] > stop_s
    # A rolling update adds a pod before one drains.
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert "replicas" not in deployment["spec"]  # the HPA decides
    hpa = _kind(docs, "HorizontalPodAutoscaler")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 30)
    assert hpa["metrics"][0]["resource"] == {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}
    assert hpa["behavior"]["scaleDown"]["policies"] == [
        {"type": "Pods", "value": 1, "periodSeconds": pod["terminationGracePeriodSeconds"]}]
    pdb = _kind(docs, "PodDisruptionBudget")["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"]["matchLabels"].items() <= labels.items()
    service = _kind(docs, "Service")["spec"]
    assert service["selector"].items() <= labels.items()
    assert pod["securityContext"]["runAsNonRoot"] is True
    spread = pod["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}


def test_the_alerts_use_metrics_the_gateway_exports():
    rules = _kind(render("metrics.prometheusRule.enabled=true"), "PrometheusRule")["spec"]["groups"][0]["rules"]
    alerts = {rule["alert"] for rule in rules}
    assert {"KafscaleGatewayNotReady", "KafscaleProduceErrors", "KafscaleCompactionBacklog",
            "KafscaleCleanerDirtyRatio", "KafscaleTransactionTimeouts"} <= alerts
    exported = set(re.findall(r'"(kafscale_\w+)"', (ROOT / "gateway" / "metrics.py").read_text()))
    for rule in rules:
        for name in re.findall(r"\bkafscale_\w+", rule["expr"]):
            assert name.removesuffix("_total") in exported or name in exported, (rule["alert"], name)
        assert 'namespace="streaming"' in rule["expr"], rule["expr"]
