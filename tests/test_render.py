"""Every Helm release of the real plans rendered by real Helm (`stacks.render`): exactly the chart, version,
release name, namespace and values the plan carries, as an install; what fails names the release."""

from __future__ import annotations

import dataclasses

import pytest

from stacks import reference, render
from tests.conftest import evaluate, stack_doc
from tests.rendering import VARIANT_IDS, VARIANTS, plan, release, rendered


@pytest.mark.parametrize(("stack", "cis"), VARIANTS, ids=VARIANT_IDS)
def test_every_release_renders_as_the_plan_registers_it(stack, cis):
    planned = render.releases(plan(stack, cis))
    assert planned and [r.release for r in rendered(stack, cis)] == planned
    for result in rendered(stack, cis):
        rel = result.release
        assert result.objects, f"{rel.label} renders no object"
        for obj in result.objects:
            labels = obj["metadata"].get("labels") or {}
            # Charts label what they create with the chart and release they come from (Helm's conventions).
            if labels.get("app.kubernetes.io/instance"):
                assert labels["app.kubernetes.io/instance"] == rel.name, (rel.label, obj["metadata"]["name"])
            if labels.get("helm.sh/chart", "").startswith(rel.chart + "-"):
                assert labels["helm.sh/chart"] == f"{rel.chart}-{rel.version}", rel.label
            if obj["kind"] in ("Deployment", "DaemonSet", "ServiceAccount"):
                assert obj["metadata"]["namespace"] == rel.namespace, (rel.label, obj["metadata"]["name"])


def test_the_plans_values_are_what_helm_renders():
    gpu = stack_doc("prod")["gpu"]
    (policy,) = release("prod", "gpu-operator").of_kind("ClusterPolicy")
    assert policy["spec"]["driver"]["version"] == gpu["driver"]["version"]
    (config,) = [
        o for o in release("prod", "network-cni").of_kind("ConfigMap") if o["metadata"]["name"] == "cilium-config"
    ]
    assert config["data"]["cluster-pool-ipv4-cidr"] == stack_doc("prod")["network"]["clusterCidr"]
    assert config["data"]["kube-proxy-replacement"] == "true"


def test_kubernetes_version_is_the_one_rke2_deploys():
    version = stack_doc("prod")["cluster"]["rke2Version"]
    assert render.kube_version(plan("prod")) == version.split("+")[0]
    # While an upgrade is pending the cluster still runs the deployed release.
    upgrading = evaluate(
        "lab", lambda raw: raw["cluster"].update({"rke2Version": "v1.35.8+rke2r1", "deployedRke2Version": version})
    )
    assert render.kube_version(upgrading) == version.split("+")[0]


def test_install_hooks_only():
    zabbix = {o["metadata"]["name"] for o in release("prod", "monitoring-zabbix").objects}
    assert "zabbix-zabbix-agent" in zabbix
    assert not {n for n in zabbix if n.startswith("zabbix-test-")}, "test hooks do not run on an install"
    gpu = {o["metadata"]["name"] for o in release("prod", "gpu-operator").objects}
    assert "gpu-operator-upgrade-crd" not in gpu and "gpu-operator-cleanup-gpucluster" not in gpu  # upgrade, delete
    volcano = {o["metadata"]["name"] for o in release("prod", "scheduling-volcano").objects}
    assert "volcano-admission-init" in volcano  # pre-install


def test_secrets_and_unknowns_become_typed_placeholders():
    defaults = {"port": 6443, "enabled": True, "host": "", "extra": {"a": 1}}
    values = {"port": "[unknown]", "enabled": "[secret]", "host": "[unknown]", "token": "[secret]", "extra": "[secret]"}
    assert render.with_placeholders(values, defaults) == {
        "port": 6443,
        "enabled": True,
        "host": "placeholder-unknown",
        "token": "placeholder-secret",
        "extra": {},
    }
    # Rendered: the operator's replica count (an integer in cilium's values.schema.json, which Helm checks)
    # stays a number; the API host a string.
    operator = {**_cni().values["operator"], "replicas": "[unknown]"}
    unknown = dataclasses.replace(_cni(), values={**_cni().values, "operator": operator, "k8sServiceHost": "[secret]"})
    objects = render.render_release(unknown, "v1.35.7").objects
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 2
    (agent,) = [o for o in objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "cilium"]
    env = {e["name"]: e.get("value") for e in agent["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["KUBERNETES_SERVICE_HOST"] == "placeholder-secret"


def _cni() -> render.Release:
    return next(r for r in render.releases(plan("prod")) if r.resource == "network-cni")


def test_a_template_failure_names_the_release():
    broken = dataclasses.replace(
        _cni(), values={**_cni().values, "routingMode": "native", "enableIPv4Masquerade": True}
    )
    with pytest.raises(render.RenderError) as failure:
        render.render_release(broken, "v1.35.7")
    message = str(failure.value)
    assert message.startswith("network-cni (chart cilium 1.19.6, release kube-system/cilium) does not render:")
    assert "ipv4NativeRoutingCIDR must be set when routingMode is native" in message


def test_a_values_type_the_charts_schema_refuses_names_the_release():
    broken = dataclasses.replace(_cni(), values={**_cni().values, "rollOutCiliumPods": "yes"})
    with pytest.raises(
        render.RenderError,
        match=r"(?s)^network-cni \(chart cilium 1\.19\.6.*rollOutCiliumPods': got string, want boolean",
    ):
        render.render_release(broken, "v1.35.7")


def test_a_chart_missing_from_the_reference_names_the_fetch_command(monkeypatch, tmp_path):
    monkeypatch.setenv("MLP_REFERENCE_DIR", str(tmp_path))
    with pytest.raises(reference.ReferenceMissingError) as failure:
        render.render_plan(plan("lab"))
    message = str(failure.value)
    assert "\n" not in message
    assert message.endswith(f"is missing; run `{reference.FETCH_COMMAND}`")
    assert str(tmp_path / "charts-src") in message


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_every_values_key_we_set_is_read_by_the_charts_templates(stack):
    rendered(stack)  # skips without the chart sources
    kube = render.kube_version(plan(stack))
    unread = {r.label: render.unread_keys(r, kube) for r in render.releases(plan(stack))}
    assert {label: keys for label, keys in unread.items() if keys} == {}


def test_a_key_no_template_reads_is_reported():
    rendered("prod")
    zabbix = next(r for r in render.releases(plan("prod")) if r.resource == "monitoring-zabbix")
    agent = {**zabbix.values["zabbixAgent"], "ZBX_PASIVE_ALLOW": True}  # misspelt
    server = {**zabbix.values["zabbixServer"], "replicaCount": 3}  # ignored without zabbixServerHA
    typo = dataclasses.replace(zabbix, values={**zabbix.values, "zabbixAgent": agent, "zabbixServer": server})
    assert sorted(render.unread_keys(typo, "v1.35.7")) == ["zabbixAgent.ZBX_PASIVE_ALLOW", "zabbixServer.replicaCount"]
