"""Rollouts in the review (`stacks.rollouts`, wired into `stacks.review`): a changed Helm release is rendered on
both sides by real Helm; the review lists the objects that change and says what restarts on how many nodes,
node-wide rollouts of node-critical DaemonSets under Danger."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from stacks import diff, placement, review, rollouts
from tests.conftest import ROOT, evaluate, requires_upstream, stack_doc


@pytest.fixture(scope="module")
def prod_base() -> dict:
    requires_upstream("charts-src")
    return json.loads(evaluate("prod").to_json())


def changed(mutate, stack: str = "prod") -> dict:
    return json.loads(evaluate(stack, mutate).to_json())


def counts(plan: dict) -> dict[str, int]:
    roles = [n.labels.get("ml-platform.io/role") for n in placement.nodes(plan)]
    return {"all": len(roles), "gpu": roles.count("gpu")}


def test_inventory_gives_every_node_its_labels_and_taints(prod_base):
    inventory = {n.name: n for n in placement.nodes(prod_base)}
    assert len(inventory) == len(stack_doc("prod")["nodes"])
    gpu, server = inventory["gpu-01"], inventory["cpu-01"]
    assert gpu.taints == (("nvidia.com/gpu", "true", "NoSchedule"),)
    assert gpu.labels["ml-platform.io/role"] == "gpu" and "feature.node.kubernetes.io/pci-15b3.present" in gpu.labels
    # Servers carry the control-plane taint (tenants stay off them; the platform's own pods tolerate it).
    assert server.labels["node-role.kubernetes.io/control-plane"] == "true"
    assert server.taints == (("node-role.kubernetes.io/control-plane", "", "NoSchedule"),)


def test_gpu_driver_bump_names_the_driver_replacement_on_every_gpu_node(prod_base, tmp_path):
    old = stack_doc("prod")["gpu"]["driver"]["version"]
    head = changed(lambda raw: raw["gpu"]["driver"].update({"version": "595.100.01"}))
    report = rollouts.compare(prod_base, head)
    gpus = counts(head)["gpu"]
    assert gpus == 15
    assert report.danger == [
        "gpu-operator: ClusterPolicy driver changes: the GPU Operator replaces the NVIDIA driver (driver pods "
        f"restart; GPU pods on each node are evicted first) on every GPU node, {gpus} nodes (gpu-01 ... gpu-15)"
    ]
    (release,) = report.releases
    bump = f'      spec.driver.version: "{old}" -> "595.100.01"'
    assert release.lines()[-2:] == ["  ~ ClusterPolicy cluster-policy", bump]
    # In the review: the plain diff said "1 to update" and no Danger; now the rollout is in its Danger section.
    text = rollouts.merge_text(diff.render_text(diff.compare(prod_base, head)), report)
    lines = text.splitlines()
    danger = lines[lines.index(rollouts.TEXT_DANGER) + 1 :]
    assert f"  ! {report.danger[0]}" in danger
    # the settings field's own declaration is named there too (the plain diff has nothing else to say about it)
    assert any(line.startswith('  ! settings gpu.driver.version: "') for line in danger)
    assert text.index("DANGER") < text.index("By component") < text.index("ROLLOUTS")


def test_cilium_setting_change_rolls_the_cni_on_every_node(prod_base):
    head = changed(lambda raw: raw["network"].update({"kubeProxyReplacement": False}))
    report = rollouts.compare(prod_base, head)
    nodes = counts(head)["all"]
    assert nodes == 50
    cni = [d for d in report.danger if d.startswith("network-cni:")]
    assert cni == [
        f"network-cni: DaemonSet kube-system/cilium (the CNI) restarts its pods on {nodes} nodes (cpu-01 ... gpu-15), "
        "rolling, 2 node(s) at a time",
        f"network-cni: DaemonSet kube-system/cilium-envoy (the CNI) restarts its pods on {nodes} nodes "
        "(cpu-01 ... gpu-15), rolling, 2 node(s) at a time",
    ]
    (release,) = [r for r in report.releases if r.release.resource == "network-cni"]
    assert "  restarts: network-cni: Deployment kube-system/cilium-operator rolls its 2 replica(s)" in release.lines()
    assert '      data.kube-proxy-replacement: "true" -> "false"' in release.lines()
    markdown = rollouts.merge_markdown(diff.render_markdown(diff.compare(prod_base, head)), report)
    assert f"- :warning: {cni[0]}" in markdown
    assert markdown.index(rollouts.MD_DANGER) < markdown.index(f"- :warning: {cni[0]}") < markdown.index("<details>")


def test_a_daemonset_on_the_gpu_nodes_only_counts_those(prod_base):
    def rename(raw):
        raw["gpu"]["tier1"]["storageClassName"] = "tier1-nvme-b"
        for team in raw["scheduling"]["teams"]:  # the teams' storage quotas name the class
            storage = team.get("storage", {})
            if "tier1-nvme" in storage:
                storage["tier1-nvme-b"] = storage.pop("tier1-nvme")

    head = changed(rename)
    report = rollouts.compare(prod_base, head)
    (release,) = [r for r in report.releases if r.release.resource == "gpu-tier1-provisioner"]
    (restart,) = [line for line in release.restarts if "DaemonSet" in line]
    # The tier-1 provisioner selects the GPU nodes and tolerates their taint: 15 nodes, not 50; not node-critical.
    assert "restarts its pods on 15 nodes (gpu-01 ... gpu-15)" in restart
    assert not release.danger


def test_unchanged_values_roll_nothing(prod_base):
    assert rollouts.compare(prod_base, prod_base).releases == []


def test_secret_data_is_masked():
    old = {"kind": "Secret", "metadata": {"name": "s"}, "data": {"token": "YQ=="}}
    new = {"kind": "Secret", "metadata": {"name": "s"}, "data": {"token": "Yg=="}}
    (change,) = rollouts.compare_objects([old], [new])
    assert rollouts.field_lines(old, new, change.paths) == [f"data.token: {rollouts.MASK}"]
    cm = {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"url": "https://placeholder-secret@host"}}
    changed_cm = {**cm, "data": {"url": "https://placeholder-secret@other"}}
    assert rollouts.field_lines(cm, changed_cm, ["data.url"]) == [f"data.url: {rollouts.MASK}"]


def test_statefulset_volume_template_change_cannot_be_applied():
    release = rollouts.render.Release("db", "zabbix", "7.0.12", "zabbix", "monitoring", {})
    template = {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "50Gi"}}}}
    old = {
        "kind": "StatefulSet",
        "metadata": {"name": "pg", "namespace": "monitoring"},
        "spec": {"volumeClaimTemplates": [template]},
    }  # noqa: E501
    bigger = json.loads(json.dumps(old).replace("50Gi", "100Gi"))
    said, danger = rollouts.restarts(release, rollouts.compare_objects([old], [bigger]), [])
    assert danger == said and len(danger) == 1
    assert danger[0].startswith("db: StatefulSet monitoring/pg changes volumeClaimTemplates, which Kubernetes refuses")


def test_zabbix_storage_size_change_is_named_unappliable(prod_base):
    head = changed(lambda raw: raw["monitoring"]["database"].update({"storageSize": "100Gi"}))
    report = rollouts.compare(prod_base, head)
    assert any("StatefulSet monitoring/zabbix-postgresql changes volumeClaimTemplates" in d for d in report.danger)


def test_a_release_whose_old_chart_is_missing_is_reported_not_fatal(prod_base):
    head = json.loads(json.dumps(prod_base))
    base = json.loads(json.dumps(prod_base))
    (cni,) = [r for r in base["resources"] if r["name"] == "network-cni"]
    cni["inputs"]["version"] = "1.18.0"  # not in the reference location
    report = rollouts.compare(base, head)
    (problem,) = report.problems
    assert problem.startswith("network-cni (chart cilium 1.18.0") and problem.endswith("run `make reference`")
    assert "cannot compare: network-cni" in report.text()


def test_review_writes_the_rollouts_into_its_diff(prod_base, tmp_path: Path):
    head = changed(lambda raw: raw["gpu"]["driver"].update({"version": "595.100.01"}))
    base_json, head_json = tmp_path / "base.json", tmp_path / "head.json"
    base_json.write_text(json.dumps(prod_base))
    head_json.write_text(json.dumps(head))
    report = review.helm_rollouts(base_json, head_json)
    assert [r.release.resource for r in report.releases] == ["gpu-operator"] and len(report.danger) == 1


def test_ofed_driver_bump_replaces_the_driver_on_the_infiniband_nodes():
    def ofed(version):
        def mutate(raw):
            raw["network"]["infiniband"].update({"hostStack": "ofed", "docaDriverVersion": version})

        return mutate

    requires_upstream("charts-src")
    base = changed(ofed("doca3.4.1-26.04-1.1.0.0-1"))
    # A rebuild of the release the chart deploys (another release is refused by the settings: compatibility).
    head = changed(ofed("doca3.4.1-26.04-1.1.0.0-2"))
    report = rollouts.compare(base, head)
    assert report.releases == []  # no chart changes: the NicClusterPolicy is the program's own resource
    assert report.danger == [
        "network-nic-cluster-policy: NicClusterPolicy ofedDriver changes: the Network Operator replaces the "
        "DOCA-OFED driver (the node's InfiniBand links go down while it reloads; RDMA jobs there fail) on 15 nodes "
        "(gpu-01 ... gpu-15)"
    ]
    assert report.text().splitlines()[1] == f"  restarts: {report.danger[0]}"


def test_labels_and_taints_applied_through_the_api_count_too():
    config = "node-name: gpu-09\nnode-label:\n- ml-platform.io/role=gpu\n"
    step = {
        "type": "command:remote:Command",
        "name": "gpu-09-rke2",
        "inputs": {"create": f"sudo -n env NODE_NAME=gpu-09 RKE2_CONFIG={shlex.quote(config)} bash -c 'true'"},
    }
    patch = {
        "type": placement.NODE_PATCH_TYPE,
        "name": "gpu-09-labels-taints",
        "inputs": {
            "metadata": {"name": "gpu-09", "labels": {"team": "vision"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
        },
    }
    (alone,) = placement.nodes({"resources": [step]})
    assert alone.taints == () and alone.labels["ml-platform.io/role"] == "gpu"
    (node,) = placement.nodes({"resources": [step, patch]})
    assert node.taints == (("nvidia.com/gpu", "true", "NoSchedule"),) and node.labels["team"] == "vision"
    assert placement.runs_on({"tolerations": []}, [node]) == []


@pytest.mark.parametrize(
    ("section", "key", "value", "expected"),
    [
        (
            "gpu",
            "driver",
            {"managedBy": "operator", "version": "595.100.01"},
            "gpu-operator: ClusterPolicy driver changes: the GPU Operator replaces the NVIDIA driver (driver pods "
            "restart; GPU pods on each node are evicted first) on every GPU node, 1 node (lab-gpu)",
        ),
        (
            "network",
            "kubeProxyReplacement",
            False,
            "network-cni: DaemonSet kube-system/cilium (the CNI) restarts its pods on 5 nodes (lab-cpu-1, lab-cpu-2, "
            "lab-cpu-3, lab-gpu, lab-server), rolling, 2 node(s) at a time",
        ),
    ],
    ids=["gpu-driver-bump", "cilium-setting"],
)
def test_the_review_names_the_rollout_with_its_node_count_in_danger(tmp_path, section, key, value, expected):
    # `python -m stacks.review` as CI runs it: both sides planned from their trees, then diffed and rendered.
    requires_upstream("charts-src")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    base = review.export(commit.stdout.strip(), tmp_path / "base")
    head = review.Side("head", tmp_path / "head")
    shutil.copytree(base.tree, head.tree)
    doc = yaml.safe_load((head.tree / "Pulumi.lab.yaml").read_text())
    doc["config"][f"ml-platform:{section}"][key] = value
    (head.tree / "Pulumi.lab.yaml").write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    out.mkdir()
    result = review.review_stack("lab", base, head, out)
    assert result.ok, result.note
    text = (out / "diff-lab.txt").read_text().splitlines()
    danger = text[text.index(rollouts.TEXT_DANGER) + 1 :]
    assert f"  ! {expected}" in danger[: danger.index("")]
    assert f"- :warning: {expected}" in (out / "diff-lab.md").read_text()
    assert f"- :warning: {expected}" in review.markdown([result], base, head)
