"""Checks on what the charts really run (`stacks.render`), for prod and lab with the CIS profile on and off:
API validity, custom resources against their pinned CRDs, Pod Security admission, images under the registry
override, GPU taint tolerations, probes, resource requests and the HA claims of the docs."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from components.monitoring.config import ZABBIX_FILES, template_sources
from components.namespaces import RKE2_CIS_EXEMPT
from settings import load
from stacks import placement, reference, render
from tests import podsecurity
from tests.conftest import ROOT, evaluate, stack_doc
from tests.rendering import VARIANT_IDS, VARIANTS, agent_host_mounts, plan, release, rendered

GPU_TAINT = ("nvidia.com/gpu", "true", "NoSchedule")
variants = pytest.mark.parametrize(("stack", "cis"), VARIANTS, ids=VARIANT_IDS)


def pods(stack: str, cis: bool):
    """(release, object, pod spec, pod template metadata) of every pod a rendered release runs."""
    for result in rendered(stack, cis):
        for obj in result.objects:
            spec = render.pod_spec(obj)
            if spec is not None:
                template = (obj.get("spec") or {}).get("template") or {}
                yield result.release, obj, spec, template.get("metadata") or {}


def name(obj: dict) -> str:
    return f"{obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


# --- API validity -------------------------------------------------------------------------------------------


@cache
def api_problems(document: str, version: str) -> str:
    """kubernetes-validate's strict verdict on one object (unknown fields are errors); "" when valid."""
    try:
        kubernetes_validate.validate(json.loads(document), version, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return "no schema"
    except kubernetes_validate.ValidationError as exc:
        return str(exc).splitlines()[0]
    return ""


@variants
def test_every_object_is_valid_for_the_kubernetes_version_we_deploy(stack, cis):
    version = render.kube_version(plan(stack, cis)).lstrip("v").rsplit(".", 1)[0] + ".0"
    problems, custom = [], 0
    for result in rendered(stack, cis):
        for obj in result.objects:
            verdict = api_problems(json.dumps(obj, sort_keys=True), version)
            if verdict == "no schema":
                custom += 1
                assert "." in obj["apiVersion"].split("/")[0], f"{name(obj)}: a built-in kind without a schema"
            elif verdict:
                problems.append(f"{result.release.resource}: {name(obj)}: {verdict}")
    assert problems == []
    assert custom, "the custom resources are checked against their CRDs below"


LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def crd_file(path) -> tuple[tuple[tuple[str, str], dict[str, Any]], ...]:
    """((apiVersion, kind), openAPIV3Schema) of every CRD version in one YAML file."""
    found = []
    for doc in yaml.load_all(path.read_text(), Loader=LOADER):
        if (doc or {}).get("kind") == "CustomResourceDefinition":
            spec = doc["spec"]
            for version in spec["versions"]:
                found.append(
                    (
                        (f"{spec['group']}/{version['name']}", spec["names"]["kind"]),
                        version["schema"]["openAPIV3Schema"],
                    )
                )  # noqa: E501
    return tuple(found)


def crd_schema(stack: str, cis: bool, api_version: str, kind: str) -> Any:
    """The openAPIV3Schema of a custom resource: from the CRDs the charts install (templates, then `crds/`),
    else the pinned CRDs of the reference location; None when none declares it."""
    for result in rendered(stack, cis):
        for crd in result.of_kind("CustomResourceDefinition"):
            for version in crd["spec"]["versions"]:
                if (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"]) == (api_version, kind):
                    return version["schema"]["openAPIV3Schema"]
    sources = [render.chart_dir(r.release) for r in rendered(stack, cis)] + [reference.reference_dir() / "crds"]
    for source in sources:
        for path in sorted(source.rglob("*.yaml")):
            if "crds" in path.relative_to(source.parent).parts and f"kind: {kind}" in path.read_text():
                for key, schema in crd_file(path):
                    if key == (api_version, kind):
                        return schema
    return None


def unknown_fields(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Fields the CRD's structural schema does not declare: the API server prunes them silently."""
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        found = []
        for key, item in value.items():
            if properties is not None and key in properties:
                found += unknown_fields(item, properties[key], f"{path}.{key}")
            elif isinstance(additional, dict):
                found += unknown_fields(item, additional, f"{path}.{key}")
            elif properties is not None and not additional and key not in ("apiVersion", "kind", "metadata"):
                found.append(f"{path}.{key}".lstrip("."))
        return found
    if isinstance(value, list):
        return [
            f for n, item in enumerate(value) for f in unknown_fields(item, schema.get("items") or {}, f"{path}[{n}]")
        ]  # noqa: E501
    return []


@variants
def test_every_custom_resource_matches_its_pinned_crd(stack, cis):
    checked, problems = 0, []
    for result in rendered(stack, cis):
        for obj in result.objects:
            version = render.kube_version(plan(stack, cis)).lstrip("v").rsplit(".", 1)[0] + ".0"
            if api_problems(json.dumps(obj, sort_keys=True), version) != "no schema":
                continue  # a built-in kind, checked above
            schema = crd_schema(stack, cis, obj["apiVersion"], obj["kind"])
            if schema is None:
                problems.append(f"{name(obj)}: no pinned CRD for {obj['apiVersion']} {obj['kind']}")
                continue
            checked += 1
            for error in jsonschema.Draft7Validator(schema).iter_errors(obj):
                problems.append(f"{name(obj)}: {'.'.join(map(str, error.absolute_path))}: {error.message}")
            problems += [f"{name(obj)}: unknown field {f}" for f in unknown_fields(obj, schema)]
    assert problems == []
    assert checked >= 8  # ClusterPolicy, CephCluster, pools, filesystem, Drivers, OperatorConfig, ...


def test_a_custom_resource_field_the_crd_does_not_know_is_found():
    (policy,) = release("prod", "gpu-operator").of_kind("ClusterPolicy")
    typo = json.loads(json.dumps(policy))
    typo["spec"]["driver"]["verison"] = "595.91.07"
    assert unknown_fields(typo, crd_schema("prod", False, "nvidia.com/v1", "ClusterPolicy")) == ["spec.driver.verison"]


# --- Pod Security -------------------------------------------------------------------------------------------


def namespace_levels(stack: str, cis: bool) -> dict[str, str]:
    """The enforced Pod Security level of each namespace the plan labels (Namespace resources)."""
    levels = {}
    for r in plan(stack, cis).by_type("kubernetes:core/v1:Namespace"):
        metadata = r["inputs"]["metadata"]
        level = (metadata.get("labels") or {}).get("pod-security.kubernetes.io/enforce")
        if level:
            levels[metadata["name"]] = level
    return levels


def level_of(namespace: str, stack: str, cis: bool) -> str:
    """What Pod Security admission enforces in `namespace`: its label, else RKE2's default (restricted under
    the CIS profile except in the namespaces it exempts; privileged without it)."""
    default = "restricted" if cis and namespace not in RKE2_CIS_EXEMPT else "privileged"
    return namespace_levels(stack, cis).get(namespace, default)


@variants
def test_every_pod_is_admitted_by_its_namespaces_pod_security_level(stack, cis):
    refused, judged = [], {"baseline": 0, "restricted": 0}
    for rel, obj, spec, meta in pods(stack, cis):
        level = level_of(obj["metadata"]["namespace"], stack, cis)
        judged[level] = judged.get(level, 0) + 1
        refused += [f"{rel.resource}: {name(obj)} ({level}): {v}" for v in podsecurity.violations(level, spec, meta)]
    assert refused == []
    assert judged["restricted"] and judged["baseline"], "Kueue runs restricted, Volcano baseline"


def test_pod_security_checks_refuse_what_the_standard_refuses():
    (agent,) = [o for o in release("prod", "monitoring-zabbix").of_kind("DaemonSet")]
    spec = agent["spec"]["template"]["spec"]
    baseline = podsecurity.violations("baseline", spec, {})
    assert "host_namespaces: spec.hostNetwork: true" in baseline
    assert any(v.startswith("host_path: volume") for v in baseline)
    (kueue,) = release("prod", "scheduling-kueue").of_kind("Deployment")
    loose = json.loads(json.dumps(kueue["spec"]["template"]["spec"]))
    loose["containers"][0]["securityContext"].pop("allowPrivilegeEscalation", None)
    loose.pop("securityContext", None)
    assert podsecurity.violations("baseline", loose, {}) == []
    refused = podsecurity.violations("restricted", loose, {})
    assert "privilege_escalation: container manager: allowPrivilegeEscalation not false" in refused


def test_every_host_path_the_agent_reads_is_mounted_from_the_host_as_the_templates_assume():
    """Each path under /hostfs in the templates' macros and the user parameters resolves, through the
    rendered agent DaemonSet's volume mounts, to the host path the platform puts there."""
    mounts = agent_host_mounts("prod")

    def on_host(path: str) -> str:
        mount = max((m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")), key=len, default=None)
        assert mount is not None, f"{path}: no host mount of the agent covers it ({sorted(mounts)})"
        return (mounts[mount].rstrip("/") + path[len(mount) :]) or "/"

    read = {}
    for _, text in template_sources().values():
        for template in yaml.safe_load(text)["zabbix_export"]["templates"]:
            macros = {m["macro"]: m.get("value", "") for m in template.get("macros", [])}
            read.update({k: v for k, v in macros.items() if v.startswith("/hostfs")})
    params = (ZABBIX_FILES / "agent2-userparameters.conf").read_text()
    read.update({f"user parameter {i}": p for i, p in enumerate(re.findall(r"(/hostfs/[\w./-]+)", params))})
    assert {k: on_host(v) for k, v in read.items()} == {
        "{$IB.SYSFS}": "/sys/class/infiniband",
        "{$RKE2.CERTS.FILE}": "/var/lib/ml-platform/rke2-certificates.json",  # rke2-certificate-dates.sh's output
        "user parameter 0": "/sys/class/infiniband",
    }


# --- images -------------------------------------------------------------------------------------------------


def mirror_everything(raw: dict, stack: str = "prod") -> None:
    """registryMirrors for every registry the stack's images come from (an air-gapped site)."""
    registries = {render.registry(i) for r in rendered(stack) for i in render.images(r)}
    raw["cluster"]["registryMirrors"] = {reg: [f"https://mirror.example.internal/{reg}"] for reg in sorted(registries)}


def test_every_image_is_under_the_registry_override_of_an_air_gapped_site():
    raw = stack_doc("prod")
    mirror_everything(raw)
    mirrors = load(raw).cluster.registry_mirrors
    assert render.images_outside(rendered("prod"), mirrors) == {}


def test_an_image_escaping_the_registry_override_fails():
    def air_gapped_with_own_ceph(raw):
        mirror_everything(raw)
        raw["storage"]["ceph"]["cephImage"] = "registry.example.internal/ceph/ceph:v20.2.4"

    head = evaluate("prod", air_gapped_with_own_ceph)
    results = render.render_plan(head, only=["ceph-cluster"])
    raw = stack_doc("prod")
    air_gapped_with_own_ceph(raw)
    mirrors = load(raw).cluster.registry_mirrors
    assert render.images_outside(results, mirrors) == {"ceph-cluster": ["registry.example.internal/ceph/ceph:v20.2.4"]}


def test_every_image_is_pinned_by_tag_or_digest():
    floating = [i for r in rendered("prod") for i in render.images(r) if render.tag(i) in ("", "latest")]
    assert floating == []


def test_the_image_list_doc_is_generated_from_prod():
    committed = (ROOT / "docs" / "images.md").read_text()
    assert committed == render.images_markdown({"prod": rendered("prod"), "lab": rendered("lab")}), (
        "docs/images.md is stale: run `make images`"
    )


# --- where DaemonSets run -----------------------------------------------------------------------------------

# Every DaemonSet the charts render, and whether it must run on GPU nodes (the docs say why).
MUST_RUN_ON_GPU_NODES = {
    "cilium": "the CNI on every node (docs/network-fabric.md)",
    "cilium-envoy": "Cilium's L7 proxy, on every node with the agent",
    "zabbix-zabbix-agent": "the monitoring agent on every node (docs/monitoring.md)",
    "network-operator-node-feature-discovery-worker": "NFD labels the GPU nodes' NICs and GPUs",
    "local-static-provisioner": "tier-1 local NVMe volumes are on the GPU nodes",
}


@variants
def test_daemonsets_that_must_run_on_gpu_nodes_tolerate_the_gpu_taint(stack, cis):
    inventory = placement.nodes(plan(stack, cis))
    gpu_nodes = {n.name for n in inventory if GPU_TAINT in n.taints}
    assert gpu_nodes
    missing = []
    for rel, obj, spec, _ in pods(stack, cis):
        if obj["kind"] != "DaemonSet":
            continue
        ds = obj["metadata"]["name"]
        assert ds in MUST_RUN_ON_GPU_NODES, f"{rel.resource}: {name(obj)}: decide whether it must run on GPU nodes"
        absent = gpu_nodes - {n.name for n in placement.runs_on(spec, inventory)}
        if absent:
            missing.append(f"{name(obj)} does not run on {sorted(absent)}")
    assert missing == []
    # The DaemonSets operators make from custom resources: the GPU Operator's and the CSI node plugins.
    (policy,) = release(stack, "gpu-operator", cis).of_kind("ClusterPolicy")
    assert placement.tolerates(policy["spec"]["daemonsets"]["tolerations"], GPU_TAINT)
    drivers = release(stack, "ceph-csi-drivers", cis).of_kind("Driver")
    assert drivers and all(placement.tolerates(d["spec"]["nodePlugin"]["tolerations"], GPU_TAINT) for d in drivers)


@variants
def test_ceph_daemons_do_not_tolerate_the_gpu_taint(stack, cis):
    # docs/ceph-tier.md: MON, MGR, OSD and MDS pods are pinned to the storage hosts; none tolerates the GPU taint.
    found = []
    for obj in release(stack, "ceph-cluster", cis).objects:
        if obj["kind"] not in ("CephCluster", "CephFilesystem"):
            continue
        if obj["kind"] == "CephCluster":
            roles = obj["spec"].get("placement") or {}
        else:
            roles = {"mds": obj["spec"]["metadataServer"].get("placement")}
        for role, where in roles.items():
            if placement.tolerates((where or {}).get("tolerations") or [], GPU_TAINT):
                found.append(f"{name(obj)} placement {role}")
    assert found == []


# Every DaemonSet the charts render, and whether it must run on the RKE2 servers and Ceph storage hosts, which
# carry CONTROL_PLANE_TAINT and STORAGE_TAINT when `scheduling.tenantNodesOnly` (prod): True with the reason,
# or why not.
PLATFORM_HOST_DAEMONSETS = {
    "cilium": (True, "the CNI: without it a node's pods have no network"),
    "cilium-envoy": (True, "Cilium's L7 proxy, with the agent"),
    "zabbix-zabbix-agent": (True, "the monitoring agent on every node (docs/monitoring.md)"),
    "network-operator-node-feature-discovery-worker": (False, "labels GPU nodes' NICs and GPUs; servers have none"),
    "local-static-provisioner": (False, "tier-1 local NVMe is on the GPU nodes only"),
}


@variants
def test_daemonsets_that_must_run_on_servers_and_storage_hosts_tolerate_their_taints(stack, cis):
    inventory = placement.nodes(plan(stack, cis))
    platform_hosts = {n.name for n in inventory if n.taints and GPU_TAINT not in n.taints}
    # prod taints its 3 servers and 12 storage hosts; the lab (tenantNodesOnly: false) none.
    assert len(platform_hosts) == {"prod": 15, "lab": 0}[stack]
    missing = []
    for rel, obj, spec, _ in pods(stack, cis):
        if obj["kind"] != "DaemonSet":
            continue
        ds = obj["metadata"]["name"]
        assert ds in PLATFORM_HOST_DAEMONSETS, f"{rel.resource}: {name(obj)}: decide whether it must run on servers"
        must, _ = PLATFORM_HOST_DAEMONSETS[ds]
        absent = platform_hosts - {n.name for n in placement.runs_on(spec, inventory)}
        if must and absent:
            missing.append(f"{name(obj)} does not run on {sorted(absent)}")
    assert missing == []
    # Rook makes the Ceph daemons from the CephCluster's and CephFilesystem's placements: they tolerate the taint.
    storage = [n for n in inventory if ("ml-platform.io/ceph-storage", "true", "NoSchedule") in n.taints]
    for obj in release(stack, "ceph-cluster", cis).objects:
        if obj["kind"] == "CephCluster":
            where = obj["spec"]["placement"]["all"]
        elif obj["kind"] == "CephFilesystem":
            where = obj["spec"]["metadataServer"]["placement"]
        else:
            continue
        fake = {"tolerations": where.get("tolerations") or [], "containers": [{"name": "c"}]}
        assert {n.name for n in storage} <= {n.name for n in placement.runs_on(fake, storage)}, name(obj)


# --- probes -------------------------------------------------------------------------------------------------


def configured_ports(container: dict, spec: dict, objects: list[dict]) -> str:
    """Text the program reads its listen addresses from: its command, args and env, and the ConfigMaps the
    pod mounts."""
    maps = {v["configMap"]["name"] for v in spec.get("volumes") or [] if v.get("configMap")}
    texts = [json.dumps([container.get("command"), container.get("args"), container.get("env")])]
    texts += [json.dumps(o.get("data")) for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] in maps]
    return "\n".join(texts)


# Operators whose health port is their program's default, not in the chart: `--health-probe-bind-address`
# defaults to ":8081" in NVIDIA/gpu-operator cmd/gpu-operator/main.go, Mellanox/network-operator main.go and
# ceph/ceph-csi-operator cmd/main.go (the kubebuilder scaffold), and the charts do not pass the flag.
PROGRAM_DEFAULTS = {
    "nvcr.io/nvidia/gpu-operator": 8081,
    "nvcr.io/nvidia/cloud-native/network-operator": 8081,
    "quay.io/cephcsi/ceph-csi-operator": 8081,
}


@variants
def test_every_probe_names_a_port_its_container_declares_or_configures(stack, cis):
    problems = []
    for result in rendered(stack, cis):
        for obj in result.objects:
            spec = render.pod_spec(obj)
            for container in render.containers(spec or {}):
                declared = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
                for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
                    handler = container.get(kind) or {}
                    port = next((h["port"] for k, h in handler.items() if k in ("httpGet", "tcpSocket", "grpc")), None)
                    if port is None or port in declared or port in declared.values():
                        continue
                    if isinstance(port, int) and f":{port}" in configured_ports(container, spec, result.objects):
                        continue  # e.g. --health-probe-bind-address=:8081
                    if port == PROGRAM_DEFAULTS.get(container["image"].rsplit(":", 1)[0]) and not any(
                        "health-probe-bind-address" in str(a) for a in container.get("args") or []
                    ):
                        continue
                    problems.append(f"{name(obj)} {container['name']} {kind}: port {port!r} is neither declared "
                                    f"({declared}) nor in its configuration")  # fmt: skip
    assert problems == []


def zabbix_agent_listens(container: dict) -> bool:
    """Whether agent2 listens on its passive port with this container's environment: the image's entrypoint
    removes `Server=` when ZBX_PASSIVE_ALLOW is false, and agent2 7.0 then opens no TCP port (zabbix-docker,
    Dockerfiles/agent2/ubuntu/docker-entrypoint.sh; checked by running agent2 7.0)."""
    env = {e["name"]: e.get("value") for e in container.get("env") or []}
    return str(env.get("ZBX_PASSIVE_ALLOW", "true")).lower() != "false"


# The image's `USER 1997` (zabbix-docker Dockerfiles/agent2/ubuntu/Dockerfile), unless the pod sets another.
ZABBIX_AGENT_UID = 1997


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_zabbix_agent_probes_a_port_it_listens_on_and_can_read_its_psk(stack):
    (agent,) = release(stack, "monitoring-zabbix").of_kind("DaemonSet")
    spec = agent["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "zabbix-agent"]
    probes = {k: container[k] for k in ("livenessProbe", "readinessProbe", "startupProbe") if container.get(k)}
    problems = []
    if not zabbix_agent_listens(container):
        problems += [f"{k} connects to port {p.get('tcpSocket', {}).get('port')} where the agent does not listen "
                     "(passive checks off)" for k, p in probes.items() if "tcpSocket" in p]  # fmt: skip
    uid = (
        (container.get("securityContext") or {}).get("runAsUser")
        or (spec.get("securityContext") or {}).get("runAsUser")
        or ZABBIX_AGENT_UID
    )  # noqa: E501
    fs_group = (spec.get("securityContext") or {}).get("fsGroup")
    env = {e["name"]: e.get("value") for e in container.get("env") or []}
    psk = env.get("ZBX_TLSPSKFILE")
    for mount in container.get("volumeMounts") or []:
        if psk and psk.startswith(mount["mountPath"] + "/"):
            (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
            mode = (volume.get("secret") or {}).get("defaultMode", 0o644)
            # Secret files belong to root, or to the group fsGroup when it is set.
            readable = uid == 0 or mode & 0o004 or (fs_group is not None and mode & 0o040)
            if not readable:
                problems.append(f"PSK file {psk} (mode {mode:o}, root-owned) is unreadable for uid {uid}")
    assert problems == []


# --- resource requests --------------------------------------------------------------------------------------


# Containers whose chart has no values key for resources, with where that is visible.
NO_RESOURCES_KEY = {
    # network-operator 26.4.1 templates/keep-ncp-hook.yaml, upgrade-crd-hook.yaml: install-time hook Jobs.
    ("network-operator-keep-ncp", "keep-ncp"),
    ("network-operator-upgrade-crd", "upgrade-crd"),
}


@variants
def test_every_platform_container_requests_cpu_and_memory(stack, cis):
    missing = []
    for rel, obj, spec, _ in pods(stack, cis):
        for container in render.containers(spec):
            if (obj["metadata"]["name"], container["name"]) in NO_RESOURCES_KEY:
                assert not container.get("resources"), "the chart sets resources now: drop the exception"
                continue
            requests = (container.get("resources") or {}).get("requests") or {}
            if not {"cpu", "memory"} <= set(requests):
                missing.append(f"{rel.resource}: {name(obj)} {container['name']}")
    assert missing == []


# --- the HA claims of the docs ------------------------------------------------------------------------------


def doc_says(page: str, phrase: str) -> None:
    text = " ".join((ROOT / "docs" / page).read_text().split())
    assert phrase in text, f"docs/{page} no longer says {phrase!r}: update this test with it"


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_replicas_match_what_the_docs_claim(stack):
    ceph = load(stack_doc(stack)).storage.ceph
    (cluster,) = release(stack, "ceph-cluster").of_kind("CephCluster")
    doc_says("ceph-tier.md", "`storage.ceph.monCount` MONs and 2 MGRs (active + standby), each on a different host")
    assert cluster["spec"]["mon"] == {"count": ceph.mon_count, "allowMultiplePerNode": False}
    assert cluster["spec"]["mgr"]["count"] == 2 and cluster["spec"]["mgr"]["allowMultiplePerNode"] is False
    doc_says("ceph-tier.md", "One active MDS with a hot standby.")
    (fs,) = release(stack, "ceph-cluster").of_kind("CephFilesystem")
    assert (fs["spec"]["metadataServer"]["activeCount"], fs["spec"]["metadataServer"]["activeStandby"]) == (1, True)
    doc_says("ceph-tier.md", "size 3, `min_size` 2, failure domain `host`")
    for pool in [*release(stack, "ceph-cluster").of_kind("CephBlockPool"), fs]:
        pools = (
            [pool["spec"]]
            if pool["kind"] == "CephBlockPool"
            else [fs["spec"]["metadataPool"], *fs["spec"]["dataPools"]]
        )  # noqa: E501
        assert all((p["replicated"]["size"], p["failureDomain"]) == (3, "host") for p in pools), name(pool)
    doc_says("monitoring.md", "| server (1 replica) |")
    server = [
        d
        for d in release(stack, "monitoring-zabbix").of_kind("Deployment")
        if d["metadata"]["name"].endswith("-server")
    ]  # noqa: E501
    assert [d["spec"]["replicas"] for d in server] == [1]
