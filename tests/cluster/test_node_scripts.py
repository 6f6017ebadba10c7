"""node-remove.sh against a stub kubectl (tests/stubs/kubectl)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from components.hosts.remote import LIB, script_text

STUB = Path(__file__).parents[1] / "stubs" / "kubectl"


class FakeCluster:
    def __init__(self, tmp_path: Path, nodes: dict):
        self.state = tmp_path / "state.json"
        self.log = tmp_path / "kubectl.log"
        self.state.write_text(json.dumps({"nodes": nodes}))
        self.log.write_text("")

    def run(self, script: str, **params: str) -> subprocess.CompletedProcess:
        env = {
            "PATH": os.environ["PATH"],
            "KUBECTL": str(STUB),
            "ADMIN_KUBECONFIG": "/dev/null",
            "FAKE_STATE": str(self.state),
            "FAKE_LOG": str(self.log),
            **params,
        }
        return subprocess.run(["bash", "-c", script_text(script), script], env=env, capture_output=True, text=True)

    def node(self, name: str) -> dict:
        return json.loads(self.state.read_text())["nodes"].get(name)


def blank_node(**extra) -> dict:
    return {"labels": {}, "annotations": {}, "taints": [], "unschedulable": False, **extra}


@pytest.fixture
def cluster(tmp_path):
    nodes = {
        "gpu-01": blank_node(taints=[{"key": "node.kubernetes.io/not-ready", "value": "", "effect": "NoSchedule"}])
    }
    return FakeCluster(tmp_path, nodes)


def test_remove_drains_then_deletes(cluster):
    result = cluster.run("node-remove.sh", NODE_NAME="gpu-01", DRAIN="true", DRAIN_TIMEOUT="60")
    assert result.returncode == 0, result.stderr
    calls = [line.split()[0] for line in cluster.log.read_text().splitlines()]
    assert calls == ["get", "cordon", "get", "drain", "delete"]  # the second get reads Ready
    drain = cluster.log.read_text().splitlines()[3]
    assert "--ignore-daemonsets" in drain and "--timeout=60s" in drain
    assert "--disable-eviction" not in drain and "--force" not in drain  # PodDisruptionBudgets are honoured
    assert "--skip-wait-for-delete-timeout" not in drain  # a Ready node's pods are waited for
    assert cluster.node("gpu-01") is None
    again = cluster.run("node-remove.sh", NODE_NAME="gpu-01", DRAIN="true", DRAIN_TIMEOUT="60")
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_blocked_drain_fails_and_keeps_the_node(tmp_path):
    cluster = FakeCluster(tmp_path, {"cpu-09": blank_node(annotations={"test/drain-blocked": "true"})})
    result = cluster.run("node-remove.sh", NODE_NAME="cpu-09", DRAIN="true", DRAIN_TIMEOUT="60")
    assert result.returncode != 0
    assert "did not finish in 60s: a PodDisruptionBudget refuses the evictions" in result.stderr
    assert "violate the pod's disruption budget" in result.stderr  # kubectl's own words are shown
    assert cluster.node("cpu-09")["unschedulable"] is True  # cordoned, not deleted


def test_an_unmanaged_pod_is_reported_as_such_not_as_a_budget(tmp_path):
    cluster = FakeCluster(tmp_path, {"cpu-09": blank_node(annotations={"test/unmanaged-pod": "true"})})
    result = cluster.run("node-remove.sh", NODE_NAME="cpu-09", DRAIN="true", DRAIN_TIMEOUT="60")
    assert result.returncode != 0
    assert "pods without a controller run there" in result.stderr and "default/debug-shell" in result.stderr
    assert "PodDisruptionBudget" not in result.stderr
    assert cluster.node("cpu-09") is not None


def test_a_not_ready_node_is_drained_without_waiting_for_its_pods(tmp_path):
    cluster = FakeCluster(tmp_path, {"cpu-09": blank_node(ready=False)})
    result = cluster.run("node-remove.sh", NODE_NAME="cpu-09", DRAIN="true", DRAIN_TIMEOUT="900")
    assert result.returncode == 0, result.stderr
    assert "node cpu-09 is NotReady (Ready=Unknown)" in result.stderr
    drain = next(line for line in cluster.log.read_text().splitlines() if line.startswith("drain"))
    # Evictions (and so budgets) still apply; only the wait for pods that cannot report back is cut.
    assert "--skip-wait-for-delete-timeout=1" in drain and "--disable-eviction" not in drain
    assert cluster.node("cpu-09") is None


def test_teardown_skips_the_drain(cluster):
    result = cluster.run("node-remove.sh", NODE_NAME="gpu-01", DRAIN="false", DRAIN_TIMEOUT="60")
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in cluster.log.read_text().splitlines()] == ["get", "delete"]


RKE2_YAML = """apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0FEQVRB
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
kind: Config
preferences: {}
users:
- name: default
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
"""


def test_read_kubeconfig_points_at_the_endpoint_and_names_the_cluster(tmp_path):
    import yaml

    admin = tmp_path / "rke2.yaml"
    admin.write_text(RKE2_YAML)
    cluster = FakeCluster(tmp_path, {})
    result = cluster.run(
        "read-kubeconfig.sh",
        API_ENDPOINT="10.20.0.10",
        API_PORT="6443",
        CLUSTER_NAME="ml-prod",
        TIMEOUT="5",
        ADMIN_KUBECONFIG=str(admin),
    )
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    assert config["clusters"][0] == {
        "cluster": {"certificate-authority-data": "Q0FEQVRB", "server": "https://10.20.0.10:6443"},
        "name": "ml-prod",
    }
    assert config["contexts"][0] == {"context": {"cluster": "ml-prod", "user": "ml-prod"}, "name": "ml-prod"}
    assert config["current-context"] == "ml-prod"
    assert config["users"][0]["name"] == "ml-prod"
    assert "get --raw=/readyz" in cluster.log.read_text()  # waited for the API through the endpoint


def test_el9_curl_minimal_counts_as_curl(tmp_path):
    # EL9 ships curl-minimal: `rpm -q curl` is false, and `dnf install curl` then conflicts with it.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rpm").write_text(
        '#!/bin/sh\n[ "$2" = --whatprovides ] || exit 1\n'  # only curl-minimal is installed, by that name
        "case $3 in curl | chrony) exit 0 ;; *) exit 1 ;; esac\n"
    )
    (bin_dir / "dnf").write_text(f'#!/bin/sh\necho "dnf $*" >>"{tmp_path}/dnf.log"\n')
    for tool in ("rpm", "dnf"):
        (bin_dir / tool).chmod(0o755)
    program = LIB.read_text() + "ensure_packages rhel curl chrony jq\n"
    result = subprocess.run(
        ["bash", "-c", program], env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "dnf.log").read_text() == "dnf install -y -q jq\n"
