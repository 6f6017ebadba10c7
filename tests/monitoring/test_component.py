"""ZabbixMonitoring on the mock engine: chart values against upstream, the agent DaemonSet on every
node, persistence, the NAS agent steps, the API-managed objects, secrets, and bad input."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from benchmarks.inventory import host_key
from components.cluster.config import GPU_TAINT
from components.hosts.remote import script_text
from components.monitoring.config import RELEASE, cron_interval_seconds, severity_mask
from components.monitoring.host_set import expand
from settings import load
from stacks import plan as plan_cli
from tests.conftest import evaluate, problems, run_plan, stack_doc, tolerates
from tests.upstream import unknown_value_paths, upstream_values

ROOT = Path(__file__).resolve().parents[2]
ZABBIX, KSM = "monitoring-zabbix", "monitoring-kube-state-metrics"
CONTROL_PLANE_TAINT = "node-role.kubernetes.io/control-plane=true:NoSchedule"
# Keys the chart's templates read although its values.yaml only has them commented out (checked in
# templates/daemonset-zabbix-agent.yaml, statefulset-postgresql.yaml and ingress.yaml of 7.0.12).
COMMENTED_UPSTREAM = frozenset(
    {"zabbixAgent.ZBX_ACTIVESERVERS", "postgresql.persistence.storageClass", "ingress.ingressClassName"}
)


def values(plan, name: str = ZABBIX) -> dict[str, Any]:
    return plan.named(name)["inputs"]["values"]


def zabbix_objects(plan, kind: str) -> list[dict[str, Any]]:
    return plan.by_type(f"pulumi-python:dynamic/zabbix:{kind}")


def spec_of(plan, name: str) -> dict[str, Any]:
    return plan.named(name)["inputs"]["spec"]


def planned_hosts(plan) -> dict[str, dict[str, Any]]:
    """Every Zabbix host the plan declares, by name: the hosts of the host sets and the cluster's own hosts."""
    hosts = {r["inputs"]["spec"]["host"]: r["inputs"]["spec"] for r in zabbix_objects(plan, "Host")}
    for host_set in zabbix_objects(plan, "HostSet"):
        hosts.update(expand(host_set["inputs"]["spec"]))
    return hosts


def sets_by_host(plan) -> dict[str, str]:
    """Host name -> the name of the host set that holds it."""
    return {host: r["name"] for r in zabbix_objects(plan, "HostSet") for host in r["inputs"]["spec"]["hosts"]}


# ---------------------------------------------------------------------------------------------
# The chart
# ---------------------------------------------------------------------------------------------


def test_chart_values_exist_in_the_pinned_chart(prod_plan):
    version = load(stack_doc("prod")).charts.zabbix.version
    assert version == "7.0.12"
    upstream = upstream_values("zabbix", version)
    assert unknown_value_paths(values(prod_plan), upstream, skip=COMMENTED_UPSTREAM) == []


def test_the_key_check_catches_a_misspelled_key(prod_plan):
    wrong = json.loads(json.dumps(values(prod_plan)))
    wrong["zabbixAgent"]["runAsDaemonset"] = wrong["zabbixAgent"].pop("runAsDaemonSet")
    upstream = upstream_values("zabbix", "7.0.12")
    assert unknown_value_paths(wrong, upstream, skip=COMMENTED_UPSTREAM) == ["zabbixAgent.runAsDaemonset"]


def test_kube_state_metrics_chart_is_pinned_and_named_for_the_template(prod_plan):
    ksm = prod_plan.named(KSM)["inputs"]
    assert (ksm["chart"], ksm["version"], ksm["name"]) == ("kube-state-metrics", "8.4.0", "zabbix-kube-state-metrics")
    assert unknown_value_paths(ksm.get("values", {}), upstream_values("kube-state-metrics", "8.4.0")) == []


def test_release_is_pinned_in_the_monitoring_namespace(prod_plan):
    release = prod_plan.named(ZABBIX)["inputs"]
    assert (release["chart"], release["version"], release["name"], release["namespace"]) == (
        "zabbix",
        "7.0.12",
        RELEASE,
        "monitoring",
    )
    assert values(prod_plan)["zabbixImageTag"] == "ubuntu-7.0.16"


def test_one_server_replica_without_ha(prod_plan):
    server = values(prod_plan)["zabbixServer"]
    assert "replicaCount" not in server and server["zabbixServerHA"] == {"enabled": False}


def test_database_is_persistent_on_tier2_block_and_not_the_default_password(prod_plan):
    v = values(prod_plan)
    assert v["postgresql"]["persistence"] == {"enabled": True, "storageSize": "50Gi", "storageClass": "tier2-block"}
    assert v["postgresAccess"] == {"existingSecretName": "zabbix-db-access"}
    secret = prod_plan.named("monitoring-db-access")["inputs"]
    assert secret["stringData"] == "[secret]"  # the random DB password makes the whole map secret


def test_the_release_waits_for_the_release_that_creates_the_block_storage_class(prod_plan):
    ceph_cluster = prod_plan.named("ceph-cluster")["urn"]
    assert ceph_cluster in prod_plan.named(ZABBIX)["dependencies"]


@pytest.mark.parametrize("taint", [GPU_TAINT, CONTROL_PLANE_TAINT, "node.kubernetes.io/unschedulable:NoSchedule"])
def test_agent_daemonset_tolerates_every_node(taint, prod_plan):
    agent = values(prod_plan)["zabbixAgent"]
    assert agent["runAsDaemonSet"] is True and agent["runAsSidecar"] is False
    assert any(tolerates(t, taint) for t in agent["extraPodSpecs"]["tolerations"])


def test_tolerations_are_on_the_agent_only(prod_plan):
    v = values(prod_plan)
    assert "tolerations" not in v  # top-level tolerations would put server, web and DB on GPU nodes
    for component in ("zabbixServer", "zabbixWeb", "postgresql"):
        assert "tolerations" not in json.dumps(v.get(component, {}))


def test_agent_uses_psk_from_a_secret_and_active_checks(prod_plan):
    agent = values(prod_plan)["zabbixAgent"]
    env = {e["name"]: e["value"] for e in agent["extraEnv"]}
    assert env["ZBX_TLSCONNECT"] == env["ZBX_TLSACCEPT"] == "psk"
    assert env["ZBX_TLSPSKFILE"].startswith(agent["extraVolumeMounts"][0]["mountPath"])
    assert agent["extraVolumes"][0]["secret"]["secretName"] == "zabbix-agent-psk"
    assert agent["ZBX_ACTIVE_ALLOW"] is True and "ZBX_ACTIVESERVERS" not in agent
    assert prod_plan.named("monitoring-agent-psk-secret")["inputs"]["stringData"] == "[secret]"


def test_service_account_token_secret_for_the_kubernetes_templates(prod_plan):
    secret = prod_plan.named("monitoring-api-token")["inputs"]
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"] == {"kubernetes.io/service-account.name": "zabbix"}


def test_web_ui_and_api_are_https_on_the_node_port(prod_plan):
    web = values(prod_plan)["zabbixWeb"]
    assert web["service"] == {"type": "NodePort", "nodePort": 31080}
    # The pod serves TLS on 8443 from the program's certificate; the probes speak HTTPS to it.
    assert web["port"] == 8443 and web["tlsCertsSecretName"] == "zabbix-web-tls"
    assert web["livenessProbe"]["httpGet"]["scheme"] == web["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    secret = prod_plan.named("monitoring-web-tls")["inputs"]
    assert secret["metadata"]["name"] == "zabbix-web-tls" and secret["stringData"] == "[secret]"
    cert = prod_plan.named("monitoring-web-csr")["inputs"]
    assert cert["ipAddresses"] == ["10.20.0.10"]  # the API endpoint the URL names
    assert prod_plan.outputs["zabbixUrl"] == "https://10.20.0.10:31080"
    assert values(prod_plan)["zabbixServer"]["service"] == {"type": "NodePort", "nodePort": 31051}


def test_the_program_verifies_the_web_certificate_with_its_ca(prod_plan):
    bootstrap = prod_plan.by_type("pulumi-python:dynamic/zabbix:Bootstrap")[0]["inputs"]
    assert bootstrap["url"].startswith("https://") and "ca" in bootstrap
    assert prod_plan.named("monitoring-zabbix")["urn"] in prod_plan.named("monitoring-api-bootstrap")["dependencies"]


def test_plain_http_only_with_the_lab_only_setting():
    plan = evaluate(
        "lab", lambda raw: raw.setdefault("monitoring", {}).setdefault("web", {}).update(insecurePlainHttpLabOnly=True)
    )
    assert plan.outputs["zabbixUrl"].startswith("http://")
    assert "tlsCertsSecretName" not in values(plan)["zabbixWeb"]


@pytest.mark.parametrize(
    ("web", "message"),
    [
        ({"tlsSecretName": "site-cert"}, "tlsSecretName: only with ingressHost"),
        ({"nodePort": None, "ingressHost": "zabbix.example.internal", "tlsSecretName": "site-cert"},
         "set both"),
    ],
)  # fmt: skip
def test_incomplete_site_certificate_is_refused(web, message):
    raw = stack_doc("prod")
    raw["monitoring"].setdefault("web", {}).update(web)
    with pytest.raises(Exception) as err:
        load(raw)
    assert message in str(err.value)


def test_ingress_with_the_sites_certificate_is_verified_with_the_sites_ca():
    ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

    def mutate(raw):
        raw["monitoring"]["web"] = {"nodePort": None, "ingressHost": "zabbix.ml.example.internal",
                                    "tlsSecretName": "site-zabbix-cert", "caCert": ca}  # fmt: skip
        raw["cluster"]["bundledIngress"] = True  # an ingress controller to serve it

    plan = evaluate("prod", mutate)
    assert values(plan)["ingress"]["tls"][0]["secretName"] == "site-zabbix-cert"
    assert plan.outputs["zabbixCaCert"] == ca
    assert not plan.by_type("tls:index/selfSignedCert:SelfSignedCert") or all(
        "web-ca" not in r["name"] for r in plan.by_type("tls:index/selfSignedCert:SelfSignedCert")
    )


def test_ingress_instead_of_node_port():
    def mutate(raw):
        raw["monitoring"]["web"] = {"nodePort": None, "ingressHost": "zabbix.ml.example.internal",
                                    "ingressClassName": "nginx"}  # fmt: skip

    plan = evaluate("prod", mutate)
    ingress = values(plan)["ingress"]
    assert ingress["enabled"] and ingress["hosts"][0]["host"] == "zabbix.ml.example.internal"
    assert ingress["ingressClassName"] == "nginx"
    assert ingress["tls"] == [{"hosts": ["zabbix.ml.example.internal"], "secretName": "zabbix-web-tls"}]
    assert plan.named("monitoring-web-tls")["inputs"]["type"] == "kubernetes.io/tls"
    assert plan.named("monitoring-web-csr")["inputs"]["dnsNames"] == ["zabbix.ml.example.internal"]
    assert plan.outputs["zabbixUrl"] == "https://zabbix.ml.example.internal"
    assert unknown_value_paths(values(plan), upstream_values("zabbix", "7.0.12"), skip=COMMENTED_UPSTREAM) == []


# ---------------------------------------------------------------------------------------------
# NAS agents
# ---------------------------------------------------------------------------------------------


def test_agent2_on_every_nas_host_pinned_from_settings_with_psk_on_stdin(prod_plan):
    nas = [h["name"] for h in stack_doc("prod")["nas"]["hosts"]]
    for host in nas:
        step = prod_plan.named(f"{host}-zabbix-agent2")
        create = prod_plan.revealed[step["urn"]]["create"]
        assert "AGENT_VERSION=1:7.0.16-1+debian12" in create
        assert "APT_REPOSITORY=https://repo.zabbix.com/zabbix/7.0/debian" in create
        assert f"ZBX_HOSTNAME={host}" in create and "ZBX_SERVER_ACTIVE=10.20.0.10:31051" in create
        assert step["inputs"]["stdin"] == "[secret]"
        assert "PSK" not in create.split("bash -c")[0].replace("PSK_IDENTITY", "")


def test_nas_script_is_idempotent_and_never_prints_the_psk():
    text = script_text("zabbix-agent2-nas.sh")
    assert "read -r psk" in text and 'echo "$psk"' not in text
    assert "zabbix-agent2=$AGENT_VERSION" in text  # pinned
    # The restart survives a cut between the write and the restart: marked pending before, cleared after it.
    assert "systemctl restart zabbix-agent2" in text and 'apply_pending "$restart"' in text


# ---------------------------------------------------------------------------------------------
# API-managed objects
# ---------------------------------------------------------------------------------------------


def test_every_node_and_nas_host_is_a_zabbix_host(prod_plan):
    doc = stack_doc("prod")
    expected = {n["name"] for n in doc["nodes"]} | {h["name"] for h in doc["nas"]["hosts"]}
    expected |= {"ml-prod-kubernetes", "ml-prod-ceph", "ml-prod-kueue"}
    assert set(planned_hosts(prod_plan)) == expected
    assert set(prod_plan.outputs["monitoredHosts"]) == expected
    # prod names no node group: its nodes are the group `nodes`, in one set; the NAS hosts in their own.
    nas = {h["name"] for h in doc["nas"]["hosts"]}
    assert sets_by_host(prod_plan) == {
        **dict.fromkeys({n["name"] for n in doc["nodes"]}, "monitoring-hosts-nodes"),
        **dict.fromkeys(nas, "monitoring-nas-hosts"),
    }
    assert {r["inputs"]["spec"]["host"] for r in zabbix_objects(prod_plan, "Host")} == {
        "ml-prod-kubernetes", "ml-prod-ceph", "ml-prod-kueue"
    }  # fmt: skip


def test_gpu_node_host_has_gpu_and_ib_templates_and_tags(prod_plan):
    hosts = planned_hosts(prod_plan)
    spec = hosts["gpu-01"]
    assert spec["templates"] == sorted(
        [
            "Linux by Zabbix agent active",
            "ml-platform GPU by DCGM exporter",
            "ml-platform InfiniBand by sysfs",
            "ml-platform RKE2 certificate files",
            "ml-platform TLS certificates by agent 2",
        ]
    )
    macros = {m["macro"]: m["value"] for m in spec["macros"]}
    node = next(n for n in stack_doc("prod")["nodes"] if n["name"] == "gpu-01")
    assert macros["{$GPU.COUNT.EXPECTED}"] == str(node["gpu"]["count"])
    assert macros["{$CERT.ENDPOINTS}"] == f"{node['address']}:10250"
    assert {"tag": "role", "value": "gpu"} in spec["tags"]
    assert any(t["tag"] == "infiniband" for t in spec["tags"]) and any(t["tag"] == "gpu" for t in spec["tags"])
    assert spec["groups"] == ["ml-platform/gpu-nodes"]
    cp = hosts["cpu-01"]
    assert cp["groups"] == ["ml-platform/control-plane", "ml-platform/cpu-nodes"]
    storage = hosts["cpu-04"]
    assert (
        "ml-platform/ceph-storage" in storage["groups"] and {"tag": "storage", "value": "ceph-osd"} in storage["tags"]
    )


def test_kubernetes_host_uses_the_state_template_with_a_secret_token(prod_plan):
    host = prod_plan.named("monitoring-host-kubernetes")
    assert host["inputs"]["spec"]["templates"] == [
        "Kubernetes cluster state by HTTP",
        "ml-platform Kubernetes platform state",
    ]
    assert host["inputs"]["secrets"] == "[secret]"


@pytest.mark.parametrize(
    ("schedule", "seconds"),
    [("30 1 * * *", 86400), ("0 */6 * * *", 21600), ("0 1 * * 1-5", 3 * 86400), ("*/15 * * * *", 900)],
)
def test_cron_interval_is_the_longest_gap_between_runs(schedule, seconds):
    assert cron_interval_seconds(schedule) == seconds


def test_backup_and_etcd_age_limits_follow_the_schedules(prod_plan):
    macros = {m["macro"]: m["value"] for m in spec_of(prod_plan, "monitoring-host-kubernetes")["macros"]}
    settings = load(stack_doc("prod"))
    backup, etcd = settings.storage.minio.backup, settings.cluster.etcd_snapshots
    assert macros["{$BACKUP.SOURCES}"] == ",".join(s.name for s in backup.sources)
    for source in backup.sources:
        assert int(macros[f'{{$BACKUP.MAXAGE:"{source.name}"}}']) == (
            cron_interval_seconds(backup.schedule) + backup.deadline_seconds
        )
    margin = settings.monitoring.thresholds.etcd_snapshot_margin_minutes * 60
    assert int(macros["{$ETCD.SNAPSHOT.MAXAGE}"]) == cron_interval_seconds(etcd.schedule_cron) + margin


def test_platform_templates_are_imported(prod_plan):
    names = sorted(t for r in zabbix_objects(prod_plan, "TemplateImport") for t in r["inputs"]["spec"]["templates"])
    assert names == [
        "ml-platform Ceph by mgr Prometheus",
        "ml-platform GPU by DCGM exporter",
        "ml-platform InfiniBand by sysfs",
        "ml-platform Kubernetes platform state",
        "ml-platform Kueue ClusterQueues by HTTP",
        "ml-platform Kueue queue details by HTTP",
        "ml-platform MinIO by HTTP",
        "ml-platform RKE2 certificate files",
        "ml-platform TLS certificates by agent 2",
    ]


def test_thresholds_are_global_macros(prod_plan):
    macros = {
        r["inputs"]["spec"]["macro"]: r["inputs"]["spec"]["value"] for r in zabbix_objects(prod_plan, "GlobalMacro")
    }
    assert macros["{$GPU.TEMP.MAX}"] == "85" and macros["{$IB.ERRORS.MAX}"] == "10"
    assert macros["{$ZABBIX.URL}"] == "https://10.20.0.10:31080"


def test_threshold_change_is_a_one_resource_update(prod_plan):
    changed = evaluate("prod", lambda raw: raw["monitoring"]["thresholds"].update({"gpuTemperatureCelsius": 80}))
    result = plan_cli.diff(json.loads(prod_plan.to_json()), json.loads(changed.to_json()))
    assert result["added"] == [] and result["removed"] == []
    assert [urn.rsplit("::", 1)[1] for urn in result["changed"]] == ["monitoring-macro-gpu-temp-max"]
    assert list(result["changed"].values()) == [["inputs.spec.value"]]


def test_removed_host_drops_its_zabbix_host(prod_plan):
    def mutate(raw):
        raw["nodes"] = [n for n in raw["nodes"] if n["name"] != "cpu-35"]

    smaller = evaluate("prod", mutate)
    result = plan_cli.diff(json.loads(prod_plan.to_json()), json.loads(smaller.to_json()))
    zabbix = [urn for side in ("added", "removed") for urn in result[side] if "dynamic/zabbix" in urn]
    assert zabbix == []  # no Zabbix object per node: the node leaves its group's set
    changed = {urn.rsplit("::", 1)[1]: paths for urn, paths in result["changed"].items() if "dynamic/zabbix" in urn}
    # The set deletes it in Zabbix by `up` (tests/monitoring/test_host_set.py); its claim drops the name.
    assert changed == {"monitoring-hosts-nodes": ["inputs.spec.hosts.cpu-35"],
                       "monitoring-hosts-nodes-claim": ["inputs.hosts"]}  # fmt: skip
    assert "cpu-35" not in smaller.outputs["monitoredHosts"]


def _grouped(raw):
    """prod with node groups: the servers, the other CPU nodes, the GPU nodes."""
    for n in raw["nodes"]:
        n["group"] = "servers" if n.get("controlPlane") else f"{n['role']}-rack"


@pytest.fixture(scope="module")
def grouped_plan():
    return evaluate("prod", _grouped)


def test_one_host_set_per_node_group_each_waiting_for_what_its_hosts_name(grouped_plan):
    doc = stack_doc("prod")
    groups = {n["name"]: "servers" if n.get("controlPlane") else f"{n['role']}-rack" for n in doc["nodes"]}
    nas = {h["name"]: "monitoring-nas-hosts" for h in doc["nas"]["hosts"]}
    assert sets_by_host(grouped_plan) == {**{h: f"monitoring-hosts-{g}" for h, g in groups.items()}, **nas}
    claims = {r["urn"] for r in zabbix_objects(grouped_plan, "HostClaim")}
    assert len(claims) == 4  # one per set
    gpu_template = grouped_plan.named("monitoring-template-gpu-dcgm")["urn"]
    for host_set in zabbix_objects(grouped_plan, "HostSet"):
        deps = set(host_set["dependencies"])
        assert claims <= deps  # a host moving in is claimed before any set looks at it
        named = {n for h in expand(host_set["inputs"]["spec"]).values() for n in (*h["groups"], *h["templates"])}
        assert (gpu_template in deps) == ("ml-platform GPU by DCGM exporter" in named), host_set["name"]
        others = {r["urn"] for r in zabbix_objects(grouped_plan, "HostSet")}
        assert not deps & others  # no set waits for another set
    # The hosts and their content are what they were as one object per host.
    assert planned_hosts(grouped_plan) == planned_hosts(evaluate("prod"))


def _added_cpu(raw):
    _grouped(raw)
    raw["nodes"].append(
        {"name": "cpu-36", "address": "10.20.1.46", "role": "cpu", "hostKey": host_key("cpu-36"), "group": "cpu-rack"}
    )


def _added_gpu(raw):
    _grouped(raw)
    node = {**copy.deepcopy(next(n for n in raw["nodes"] if n["name"] == "gpu-15")), "name": "gpu-16"}
    node["address"], node["infiniband"]["address"], node["hostKey"] = "10.20.1.99", "10.30.0.99", host_key("gpu-16")
    node["nvme"] = [{**disk, "device": f"{disk['device']}-gpu-16"} for disk in node.get("nvme", [])]
    raw["nodes"].append(node)


def _moved(raw):
    _grouped(raw)
    next(n for n in raw["nodes"] if n["name"] == "cpu-20")["group"] = "servers"


def _removed(raw):
    _grouped(raw)
    raw["nodes"] = [n for n in raw["nodes"] if n["name"] != "cpu-30"]


@pytest.mark.parametrize(
    ("edit", "sets"),
    [
        (_added_cpu, ["cpu-rack"]),
        (_added_gpu, ["gpu-rack"]),
        (_moved, ["cpu-rack", "servers"]),
        (_removed, ["cpu-rack"]),
    ],
)
def test_a_node_added_moved_or_removed_changes_only_the_sets_that_hold_it(grouped_plan, edit, sets):
    result = plan_cli.diff(json.loads(grouped_plan.to_json()), json.loads(evaluate("prod", edit).to_json()))
    zabbix = {
        urn.rsplit("::", 1)[1] for side in ("added", "removed") for urn in result[side] if "dynamic/zabbix" in urn
    }
    assert zabbix == set()
    changed = sorted(urn.rsplit("::", 1)[1] for urn in result["changed"] if "dynamic/zabbix" in urn)
    names = [f"monitoring-hosts-{s}" for s in sets]
    assert changed == sorted([*names, *(f"{n}-claim" for n in names)])


def test_the_set_input_is_compact(prod_plan):
    """Groups, templates and tags are written once per distinct combination, not per host."""
    spec = prod_plan.named("monitoring-hosts-nodes")["inputs"]["spec"]
    per_host = len(json.dumps(spec)) / len(spec["hosts"])
    expanded = len(json.dumps(list(expand(spec).values()))) / len(spec["hosts"])
    assert len(spec["profiles"]) < len(spec["hosts"]) / 5
    assert per_host < expanded / 2, (per_host, expanded)


def test_the_sets_carry_the_psk_as_a_secret_and_their_provider_by_reference(prod_plan):
    import base64
    import pickletools

    for host_set in zabbix_objects(prod_plan, "HostSet"):
        assert host_set["inputs"]["secrets"] == "[secret]" and host_set["inputs"]["connection"] == "[secret]"
        # Pickled by module and class name: a code change is no `__provider` diff on every set.
        ops = [arg for _, arg, _ in pickletools.genops(base64.b64decode(host_set["inputs"]["__provider"]))]
        assert "components.monitoring.host_set" in ops and "HostSetProvider" in ops


def test_channels_become_media_types_users_and_actions(prod_plan):
    media = {r["inputs"]["spec"]["name"]: r for r in zabbix_objects(prod_plan, "MediaType")}
    assert set(media) == {"Slack", "Mattermost"}
    assert all(m["inputs"]["secrets"] == "[secret]" for m in media.values())
    assert media["Mattermost"]["inputs"]["spec"]["parameters"]["mattermost_url"] == "https://chat.dc.example.internal"
    user = spec_of(prod_plan, "monitoring-alerts-platform-oncall-user")
    assert (user["mediatype"], user["send_to"], user["severity"]) == ("Slack", "#ml-platform-alerts", 48)
    action = spec_of(prod_plan, "monitoring-alerts-ml-team-action")
    assert action["min_severity"] == 3 and action["mediatype"] == "Mattermost"
    assert action["host_groups"] == ["ml-platform/ceph-storage", "ml-platform/gpu-nodes", "ml-platform/nas"]


def test_severity_mask_covers_the_minimum_and_above():
    assert severity_mask("high") == 0b110000 and severity_mask("information") == 0b111110


def test_api_objects_wait_for_the_bootstrap_and_carry_a_secret_connection(prod_plan):
    bootstrap = prod_plan.named("monitoring-api-bootstrap")
    assert prod_plan.named(ZABBIX)["urn"] in bootstrap["dependencies"]
    for r in [*zabbix_objects(prod_plan, "HostGroup"), *zabbix_objects(prod_plan, "Host"),
              *zabbix_objects(prod_plan, "HostSet"), *zabbix_objects(prod_plan, "HostClaim")]:  # fmt: skip
        assert r["inputs"]["connection"] == "[secret]"
        assert "__provider" in r["inputs"]


def test_the_diff_page_replaces_the_bootstrap_only_where_its_provider_does():
    """stacks/diff.py flags replaces from its own table: it must match the provider's `diff`
    (a password rotation is an update; tests/monitoring/test_api.py runs it on a real server)."""
    from components.monitoring.objects import BootstrapProvider
    from stacks.diff import REPLACE_ON

    olds = {"url": "u", "api_user": "a", "admin_password": "p", "api_password": "q", "token": "t"}
    replaced = [k for k in olds if BootstrapProvider().diff("1", olds, {**olds, k: "new"}).replaces]
    assert REPLACE_ON["pulumi-python:dynamic/zabbix:Bootstrap"] == tuple(replaced) == ("url", "api_user")


def test_outputs(prod_plan):
    assert prod_plan.outputs["zabbixApiUser"] == "ml-platform-api"
    assert prod_plan.outputs["zabbixApiToken"] == "[secret]"
    assert prod_plan.outputs["zabbixAdminPassword"] == "[secret]"


# ---------------------------------------------------------------------------------------------
# Secrets never in the plan; bad input
# ---------------------------------------------------------------------------------------------


def test_no_secret_in_plain_text_in_the_plan_json(tmp_path):
    def with_secrets(config):
        config["ml-platform:zabbixSlackBotToken"] = {"secure": "v1:c2xhY2s="}
        config["ml-platform:zabbixAdminPassword"] = {"secure": "v1:YWRtaW4="}
        config["ml-platform:zabbixAgentPsk"] = {"secure": "v1:cHNr"}

    proc, out = run_plan(tmp_path, with_secrets)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    # load_stack_config turns `secure:` values into "placeholder-<key>" strings marked secret.
    for leaked in ("placeholder-zabbix", "placeholder-slack", "placeholder-mattermost", "xoxb"):
        assert leaked not in text
    bootstrap = next(r for r in json.loads(text)["resources"] if r["name"] == "monitoring-api-bootstrap")
    assert bootstrap["inputs"]["admin_password"] == bootstrap["inputs"]["api_password"] == "[secret]"
    media = [r for r in json.loads(text)["resources"] if r["type"].endswith("zabbix:MediaType")]
    assert media and all(r["inputs"]["secrets"] == "[secret]" for r in media)


def _run(tmp_path: Path, mutate) -> subprocess.CompletedProcess:
    proc, out = run_plan(tmp_path, mutate)
    assert proc.returncode == 2 and not out.exists(), proc.stderr
    return proc


def _channel(config: dict, index: int) -> dict:
    return config["ml-platform:monitoring"]["alerting"]["channels"][index]


def test_bot_token_as_plain_channel_config_exits_2(tmp_path):
    proc = _run(tmp_path, lambda c: _channel(c, 0).update({"botToken": "xoxb-123"}))
    assert (
        "monitoring.alerting.channels[0] (platform-oncall).botToken: a secret must not be plain config" in proc.stderr
    )
    assert "xoxb-123" not in proc.stderr


def test_bot_token_secret_key_given_as_plain_config_exits_2(tmp_path):
    proc = _run(tmp_path, lambda c: c.update({"ml-platform:zabbixSlackBotToken": "xoxb-123"}))
    assert "ml-platform:zabbixSlackBotToken: a credential set as plain config" in proc.stderr
    assert "`pulumi config set --secret ml-platform:zabbixSlackBotToken`" in proc.stderr
    assert "xoxb-123" not in proc.stderr


def test_unknown_severity_exits_2(tmp_path):
    proc = _run(tmp_path, lambda c: _channel(c, 0).update({"minSeverity": "critical"}))
    assert "monitoring.alerting.channels[0] (platform-oncall).minSeverity: 'critical' is not allowed" in proc.stderr


def test_threshold_out_of_range_exits_2(tmp_path):
    proc = _run(tmp_path, lambda c: c["ml-platform:monitoring"]["thresholds"].update({"gpuTemperatureCelsius": 200}))
    assert "monitoring.thresholds.gpuTemperatureCelsius" in proc.stderr


@pytest.mark.parametrize(
    ("channel", "send_to"), [("[0] (platform-oncall)", "ml-platform-alerts"), ("[1] (ml-team)", "ml#gpu-cluster")]
)
def test_media_channel_not_in_the_required_form_exits_2(channel, send_to, tmp_path):
    proc = _run(tmp_path, lambda c: _channel(c, int(channel[1])).update({"sendTo": send_to}))
    assert f"monitoring.alerting.channels{channel}.sendTo: {send_to!r} is not a" in proc.stderr


def test_missing_bot_token_for_a_channel_exits_2():
    from settings import SettingsError

    with pytest.raises(SettingsError, match="zabbixMattermostBotToken: required by the mattermost"):
        from stacks import engine

        config, secret_keys = engine.load_stack_config("prod")
        del config["ml-platform:zabbixMattermostBotToken"]
        secret_keys.remove("ml-platform:zabbixMattermostBotToken")
        engine.run("prod", config, secret_keys)


def test_web_needs_exactly_one_exposure():
    found = problems("prod", lambda raw: raw["monitoring"]["web"].update({"nodePort": None}))
    assert found == [
        "monitoring.web: give exactly one of nodePort (http://<cluster.apiEndpoint>:<nodePort>) and "
        "ingressHost (https://<ingressHost>); set the other to null"
    ]


def test_channel_host_groups_must_exist():
    found = problems("prod", lambda raw: raw["monitoring"]["alerting"]["channels"][1]["hostGroups"].append("gpu"))
    assert found and found[0].startswith("monitoring.alerting.channels[1].hostGroups[3]: 'gpu' is not a monitored")


def test_dashboards_wait_for_every_host_and_group_their_widgets_name(prod_plan):
    """The API refuses a widget naming a missing host (tests/monitoring/test_dashboards.py): each
    dashboard depends on the Host and HostGroup objects it names."""
    by_name = {r["inputs"]["spec"].get("host") or r["inputs"]["spec"].get("name"): r["urn"] for r in
               zabbix_objects(prod_plan, "Host") + zabbix_objects(prod_plan, "HostGroup")}  # fmt: skip
    dashboards = zabbix_objects(prod_plan, "Dashboard")
    assert {d["inputs"]["spec"]["name"] for d in dashboards} == {
        "ml-platform: platform overview",
        "ml-platform: GPUs by team quota",
        "ml-platform: queues",
        "ml-platform: team queues",
    }
    for d in dashboards:
        fields = [f for p in d["inputs"]["spec"]["pages"] for w in p["widgets"] for f in w["fields"]]
        named = {f["value"] for f in fields if f["type"] in (2, 3)}
        assert named and {by_name[n] for n in named} <= set(d["dependencies"])
    # No widget names a node: a node added to the inventory leaves the dashboards alone (runbook 2).
    nodes = {n["name"] for n in stack_doc("prod")["nodes"]}
    for d in dashboards:
        fields = [f for p in d["inputs"]["spec"]["pages"] for w in p["widgets"] for f in w["fields"]]
        assert not {f["value"] for f in fields} & nodes


def test_the_first_control_plane_node_watches_the_web_ui_certificate(prod_plan):
    """The Kubernetes host has no agent: the web UI's endpoint goes to one node's certificate list."""
    doc = stack_doc("prod")
    first_cp = next(n["name"] for n in doc["nodes"] if n.get("controlPlane"))
    watching = {
        name
        for name, spec in planned_hosts(prod_plan).items()
        for m in spec["macros"]
        if m["macro"] == "{$CERT.ENDPOINTS}" and "10.20.0.10:31080" in m["value"].split(",")
    }
    assert watching == {first_cp}
