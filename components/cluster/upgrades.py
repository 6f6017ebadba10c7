"""ClusterUpgrades: RKE2 upgrades in the order RKE2 documents, only while one is pending, pool by pool.

A `cluster.rke2Version` bump does not reinstall RKE2 over SSH (rke2-install.sh installs only on a fresh
host, the release the cluster runs: `deployedRke2Version` while an upgrade is pending). While
`deployedRke2Version` is set and differs from `rke2Version` (and only then) this component adds, for
Rancher's system-upgrade-controller (RKE2's documented automated-upgrade path, docs.rke2.io/upgrades/automated):
  1. `<name>-pre-upgrade-snapshot`: a host step on the init server that refuses a downgrade or a skipped
     minor version from the release that server runs, then saves a new etcd snapshot
     `pre-upgrade-<version>-<time>`; every Plan depends on it, so none exists before it succeeded;
  2. `server-plan`: the control-plane nodes, one at a time, cordoned, `postCompleteDelay` between them;
  3. one agent Plan per pool (`gpu-agent-plan`, `storage-agent-plan`, `cpu-agent-plan`, for the pools that
     have nodes), each with its own concurrency, window and drain, waiting (`prepare`) for the server Plan.
A node labelled `ml-platform.io/upgrade-hold` is left out of the agent Plans. With nothing pending there
is no Plan at all: the controller's Jobs cordon and drain a node even when it already runs the target
(they select every node without the Plan's hash label), so an idle Plan would drain every node added
later. Instead `<name>-node-versions` checks on the init server that every node reports `rke2Version`.

The controller comes from the vendored upstream manifest (components/cluster/manifests/system-upgrade-controller/,
the release of `cluster.upgrade.controllerImage`), its Plan CRD from components/crds/.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.ceph.tier import STORAGE_LABEL
from components.cluster.config import GPU_TAINT, ROLE_LABEL, STORAGE_TAINT
from components.common import InCluster
from components.gpu.pool import taint_toleration
from components.hosts.remote import HostAccess, host_script
from settings import ClusterSettings, NodeSettings
from settings.cluster import UpgradePool

SUC_RELEASE = "v0.20.1"
SUC_MANIFESTS = Path(__file__).resolve().parent / "manifests" / "system-upgrade-controller" / SUC_RELEASE
PLAN_CRD_FILE = (
    Path(__file__).resolve().parent
    / "crds"
    / "system-upgrade-controller"
    / SUC_RELEASE
    / "upgrade.cattle.io_plans.yaml"
)
NAMESPACE = "system-upgrade"
SERVICE_ACCOUNT = "system-upgrade"
SERVER_PLAN = "server-plan"
# The agent pools, in the order the review lists them: name -> what selects its nodes besides being an agent.
POOLS: dict[str, list[dict[str, Any]]] = {
    "gpu": [{"key": ROLE_LABEL, "operator": "In", "values": ["gpu"]}],
    "storage": [
        {"key": ROLE_LABEL, "operator": "In", "values": ["cpu"]},
        {"key": STORAGE_LABEL, "operator": "In", "values": ["true"]},
    ],
    "cpu": [
        {"key": ROLE_LABEL, "operator": "In", "values": ["cpu"]},
        {"key": STORAGE_LABEL, "operator": "DoesNotExist"},
    ],
}
# `kubectl label node NODE ml-platform.io/upgrade-hold=<why>` keeps a node out of every agent Plan (not
# out of the server Plan: agents must not run a kubelet newer than a server's API server).
HOLD_LABEL = "ml-platform.io/upgrade-hold"
# pulumi-kubernetes (v4.18+) waits for a resource with this annotation until the condition holds.
WAIT_FOR = "pulumi.com/waitFor"
WAIT_TIMEOUT = "pulumi.com/timeoutSeconds"
NAMESPACE_REASON = (
    "system-upgrade-controller: its upgrade Jobs run privileged with the host's PID, IPC and network "
    "namespaces and the host root mounted (they replace the RKE2 binary and restart it); the controller "
    "mounts the host's CA directories"
)
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
# Nodes this program registered carry the role label (config.yaml's node-label): the Plans touch only them.
MANAGED = {"key": ROLE_LABEL, "operator": "Exists"}
# What the servers may be tainted with (RKE2 docs: CriticalAddonsOnly on dedicated servers); the Job
# must run on the node it upgrades.
SERVER_TOLERATIONS = [
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
    {"key": CONTROL_PLANE_LABEL, "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node-role.kubernetes.io/etcd", "operator": "Exists", "effect": "NoExecute"},
]
# The time an upgrade Job may take beyond its drain: pull the image, replace the binary, restart RKE2.
UPGRADE_SECONDS = 900
_KWARGS = {"roleRef": "role_ref"}
_KINDS = {
    "ServiceAccount": k8s.core.v1.ServiceAccount,
    "ConfigMap": k8s.core.v1.ConfigMap,
    "Deployment": k8s.apps.v1.Deployment,
    "ClusterRole": k8s.rbac.v1.ClusterRole,
    "ClusterRoleBinding": k8s.rbac.v1.ClusterRoleBinding,
    "Role": k8s.rbac.v1.Role,
    "RoleBinding": k8s.rbac.v1.RoleBinding,
}


@dataclass(frozen=True)
class ClusterUpgradesArgs:
    cluster: ClusterSettings
    nodes: Sequence[NodeSettings]
    """Which pools have nodes, and how many servers the agents' `prepare` may wait for."""
    init_host: HostAccess
    init_joined: pulumi.Resource
    """The init server's RKE2 step: the snapshot needs its etcd."""
    in_cluster: InCluster


class ClusterUpgrades(pulumi.ComponentResource):
    """The system-upgrade-controller; while an upgrade is pending, the pre-upgrade etcd snapshot and the
    RKE2 Plans (servers, then each agent pool); otherwise the check that every node runs `rke2Version`."""

    plans: dict[str, k8s.apiextensions.CustomResource]

    def __init__(self, name: str, args: ClusterUpgradesArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:upgrades:ClusterUpgrades", name, None, opts)
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.in_cluster.provider)
        namespace = args.in_cluster.namespace(
            f"{name}-namespace", NAMESPACE, "privileged", NAMESPACE_REASON, parent=self
        )
        # Retained: deleting the CRD deletes every Plan (and the controller recreates it at start anyway).
        crd_doc = yaml.safe_load(PLAN_CRD_FILE.read_text())
        crd = k8s.apiextensions.v1.CustomResourceDefinition(
            f"{name}-plan-crd",
            metadata={"name": crd_doc["metadata"]["name"], "annotations": crd_doc["metadata"].get("annotations", {})},
            spec=crd_doc["spec"],
            opts=pulumi.ResourceOptions.merge(
                k8s_opts, pulumi.ResourceOptions(depends_on=args.in_cluster.ready, retain_on_delete=True)
            ),
        )
        controller = [
            _KINDS[doc["kind"]](
                f"{name}-{doc['kind'].lower()}-{doc['metadata']['name']}",
                **{_KWARGS.get(k, k): v for k, v in doc.items() if k not in ("apiVersion", "kind")},
                opts=pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(depends_on=[namespace, crd])),
            )
            for doc in controller_objects(args.cluster)
        ]
        self.plans = {}
        if not args.cluster.upgrade_pending:
            # The bookkeeping after an upgrade (or a roll-back): refused unless every node runs the release.
            host_script(
                f"{name}-node-versions",
                args.init_host,
                "rke2-node-versions.sh",
                {"RKE2_VERSION": args.cluster.rke2_version},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[args.init_joined]),
            )
            self.register_outputs({})
            return
        snapshot = host_script(
            f"{name}-pre-upgrade-snapshot",
            args.init_host,
            "pre-upgrade.sh",
            {"RKE2_VERSION": args.cluster.rke2_version},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[args.init_joined]),
        )
        waits: list[pulumi.Resource] = [crd, *controller, snapshot]
        for plan_name, spec in plan_specs(args.cluster, args.nodes).items():
            self.plans[plan_name] = k8s.apiextensions.CustomResource(
                f"{name}-{plan_name}",
                api_version="upgrade.cattle.io/v1",
                kind="Plan",
                metadata=plan_metadata(plan_name, args.cluster),
                spec=spec,
                opts=pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(depends_on=list(waits))),
            )
            if plan_name == SERVER_PLAN:
                # Agent Plans after the server Plan: with a wait, created once every server is upgraded.
                waits.append(self.plans[plan_name])
        self.register_outputs({})


def controller_objects(cluster: ClusterSettings) -> list[dict[str, Any]]:
    """The vendored manifest and RBAC, minus the Namespace (platform_namespace makes it), with the pinned
    images and every namespaced object and subject in the controller's namespace (upstream leaves that
    to kustomize)."""
    docs = [
        doc
        for file in ("system-upgrade-controller.yaml", "clusterrole.yaml", "clusterrolebinding.yaml")
        for doc in yaml.safe_load_all((SUC_MANIFESTS / file).read_text())
        if doc and doc["kind"] != "Namespace"
    ]
    for doc in docs:
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            doc["metadata"]["namespace"] = NAMESPACE
        for subject in doc.get("subjects", []):
            subject["namespace"] = NAMESPACE
        if doc["kind"] == "ConfigMap":
            doc["data"]["SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE"] = cluster.upgrade.kubectl_image
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]
    pod["spec"]["containers"][0]["image"] = cluster.upgrade.controller_image
    # The controller reads its ConfigMap only at start: a changed one rolls the pod.
    digest = hashlib.sha256(yaml.safe_dump(config["data"], sort_keys=True).encode()).hexdigest()[:16]
    pod["metadata"].setdefault("annotations", {})["ml-platform.io/config-digest"] = digest
    return docs


def plan_metadata(plan_name: str, cluster: ClusterSettings) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": plan_name, "namespace": NAMESPACE}
    if cluster.upgrade.wait_timeout_seconds:
        # The controller sets condition Complete when no selected node lacks the Plan's hash label; a failed
        # Job leaves it False (reason JobFailed), so the wait ends in a timeout naming the Plan.
        metadata["annotations"] = {
            WAIT_FOR: "condition=Complete",
            WAIT_TIMEOUT: str(cluster.upgrade.wait_timeout_seconds),
        }
    return metadata


def plan_specs(cluster: ClusterSettings, nodes: Sequence[NodeSettings]) -> dict[str, dict[str, Any]]:
    """The server Plan, then one agent Plan per pool that has nodes, by Plan name."""
    upgrade = cluster.upgrade
    servers = sum(1 for n in nodes if n.control_plane)
    specs = {SERVER_PLAN: server_plan_spec(cluster)}
    for pool in POOLS:
        if any(pool_of(n) == pool for n in nodes):
            specs[agent_plan_name(pool)] = agent_plan_spec(cluster, pool, getattr(upgrade, pool), servers)
    return specs


def agent_plan_name(pool: str) -> str:
    return f"{pool}-agent-plan"


def pool_of(node: NodeSettings) -> Optional[str]:
    """The agent pool whose Plan upgrades `node`; None for a server (the server Plan's)."""
    if node.control_plane:
        return None
    if node.role == "gpu":
        return "gpu"
    return "storage" if node.storage_host else "cpu"


def _plan_spec(cluster: ClusterSettings, selector: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    # `version` pins the release (no channel polling); the controller tags the image with it, "+" as "-".
    return {
        "concurrency": concurrency,
        "nodeSelector": {"matchExpressions": [*selector, MANAGED]},
        "serviceAccountName": SERVICE_ACCOUNT,
        "upgrade": {"image": cluster.upgrade.upgrade_image},
        "version": cluster.rke2_version,
    }


def server_plan_spec(cluster: ClusterSettings) -> dict[str, Any]:
    """Servers one at a time, cordoned, not drained (RKE2's documented server Plan): etcd keeps quorum.
    `postCompleteDelay`: the next server only after this one's etcd member has had time to catch up."""
    return {
        **_plan_spec(cluster, [{"key": CONTROL_PLANE_LABEL, "operator": "In", "values": ["true"]}], 1),
        "cordon": True,
        "postCompleteDelay": f"{cluster.upgrade.server_post_complete_delay_seconds}s",
        "tolerations": SERVER_TOLERATIONS,
        "jobActiveDeadlineSecs": UPGRADE_SECONDS,
    }


def agent_deadline_seconds(cluster: ClusterSettings, pool: UpgradePool, servers: int) -> int:
    """An agent Job's deadline counts from its creation: the first Jobs of each pool wait in `prepare` for
    the whole server Plan (every server's upgrade and postCompleteDelay), then drain, then upgrade. A
    deadline without that wait would fail those Jobs (and stop the Plan) before they drained anything."""
    prepare = servers * (UPGRADE_SECONDS + cluster.upgrade.server_post_complete_delay_seconds)
    return prepare + pool.drain.timeout_seconds + UPGRADE_SECONDS


def agent_plan_spec(cluster: ClusterSettings, pool_name: str, pool: UpgradePool, servers: int) -> dict[str, Any]:
    """One pool's agents, `concurrency` at a time, drained first, once every server runs the new release."""
    selector = [
        {"key": CONTROL_PLANE_LABEL, "operator": "DoesNotExist"},
        *POOLS[pool_name],
        {"key": HOLD_LABEL, "operator": "DoesNotExist"},
    ]
    drain: dict[str, Any] = {
        # Drain cordons too. Evictions (disableEviction unset) honour PodDisruptionBudgets; emptyDir data
        # (scratch, /dev/shm) is lost as on any drain; DaemonSet pods stay; a pod without a controller
        # stops the drain unless `force` (then it is deleted for good).
        "deleteEmptydirData": True,
        "ignoreDaemonSets": True,
        "force": pool.drain.force,
        "timeout": f"{pool.drain.timeout_seconds}s",
    }
    if pool.drain.grace_period_seconds is not None:
        drain["gracePeriod"] = pool.drain.grace_period_seconds
    spec = {
        **_plan_spec(cluster, selector, pool.concurrency),
        # rke2-upgrade's `prepare <plan>` waits until that Plan has upgraded every node it selects.
        "prepare": {"image": cluster.upgrade.upgrade_image, "args": ["prepare", SERVER_PLAN]},
        "drain": drain,
        # GPU nodes carry the GPU taint, storage hosts the storage taint.
        "tolerations": [taint_toleration(GPU_TAINT), taint_toleration(STORAGE_TAINT)],
        "jobActiveDeadlineSecs": agent_deadline_seconds(cluster, pool, servers),
    }
    if pool.window is not None:
        spec["window"] = {
            "days": list(pool.window.days),
            "startTime": pool.window.start_time,
            "endTime": pool.window.end_time,
            "timeZone": pool.window.time_zone,
        }
    return spec
