"""ClusterUpgrades: RKE2 upgrades in the order RKE2 documents, one node's workloads at a time.

A `cluster.rke2Version` bump does not reinstall RKE2 over SSH (rke2-install.sh installs only on a fresh
host, the release the cluster runs: `deployedRke2Version` while an upgrade is under way). It changes
three things here, the Plans applied by Rancher's system-upgrade-controller (RKE2's documented
automated-upgrade path, docs.rke2.io/upgrades/automated):
  1. `<name>-pre-upgrade-snapshot`: a host step on the init server (re-run when the version changes)
     refuses a downgrade or a skipped minor version from the release that server runs, then saves the
     etcd snapshot `pre-upgrade-<version>`; neither Plan changes before it succeeded;
  2. `server-plan`: the control-plane nodes, one at a time, cordoned;
  3. `agent-plan`: every other node, `cluster.upgrade.agentConcurrency` at a time, drained (evictions,
     so PodDisruptionBudgets hold), after the server Plan is done (its `prepare` container waits for it).
The controller labels each node with the Plan's hash once its Job succeeded; a node that registers
later (added or rebuilt) has no such label, so the Plans bring it to the version too.

The controller comes from the vendored upstream manifest (components/manifests/system-upgrade-controller/,
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

from components.cluster import GPU_TAINT, ROLE_LABEL
from components.gpu_pool import taint_toleration
from components.namespaces import platform_namespace
from components.remote import HostAccess, host_script
from settings import ClusterSettings

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
AGENT_PLAN = "agent-plan"
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
    init_host: HostAccess
    init_joined: pulumi.Resource
    """The init server's RKE2 step: the snapshot needs its etcd."""
    provider: k8s.Provider
    cluster_ready: Sequence[pulumi.Resource]


class ClusterUpgrades(pulumi.ComponentResource):
    """The system-upgrade-controller, the pre-upgrade etcd snapshot and the two RKE2 upgrade Plans."""

    plans: dict[str, k8s.apiextensions.CustomResource]

    def __init__(self, name: str, args: ClusterUpgradesArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:upgrades:ClusterUpgrades", name, None, opts)
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider)
        namespace = platform_namespace(
            f"{name}-namespace",
            NAMESPACE,
            "privileged",
            NAMESPACE_REASON,
            provider=args.provider,
            parent=self,
            depends_on=args.cluster_ready,
        )
        # Retained: deleting the CRD deletes every Plan (and the controller recreates it at start anyway).
        crd_doc = yaml.safe_load(PLAN_CRD_FILE.read_text())
        crd = k8s.apiextensions.v1.CustomResourceDefinition(
            f"{name}-plan-crd",
            metadata={"name": crd_doc["metadata"]["name"], "annotations": crd_doc["metadata"].get("annotations", {})},
            spec=crd_doc["spec"],
            opts=pulumi.ResourceOptions.merge(
                k8s_opts, pulumi.ResourceOptions(depends_on=args.cluster_ready, retain_on_delete=True)
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
        snapshot = host_script(
            f"{name}-pre-upgrade-snapshot",
            args.init_host,
            "pre-upgrade.sh",
            {"RKE2_VERSION": args.cluster.rke2_version},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[args.init_joined]),
        )
        self.plans = {}
        for plan_name, spec, waits in (
            (SERVER_PLAN, server_plan_spec(args.cluster), [snapshot]),
            (AGENT_PLAN, agent_plan_spec(args.cluster), []),
        ):
            self.plans[plan_name] = k8s.apiextensions.CustomResource(
                f"{name}-{plan_name}",
                api_version="upgrade.cattle.io/v1",
                kind="Plan",
                metadata={"name": plan_name, "namespace": NAMESPACE},
                spec=spec,
                opts=pulumi.ResourceOptions.merge(
                    k8s_opts, pulumi.ResourceOptions(depends_on=[crd, *controller, *waits])
                ),
            )
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


def _plan_spec(cluster: ClusterSettings, control_plane: dict[str, Any], concurrency: int) -> dict[str, Any]:
    # `version` pins the release (no channel polling); the controller tags the image with it, "+" as "-".
    return {
        "concurrency": concurrency,
        "nodeSelector": {"matchExpressions": [{"key": CONTROL_PLANE_LABEL, **control_plane}, MANAGED]},
        "serviceAccountName": SERVICE_ACCOUNT,
        "upgrade": {"image": cluster.upgrade.upgrade_image},
        "version": cluster.rke2_version,
    }


def server_plan_spec(cluster: ClusterSettings) -> dict[str, Any]:
    """Servers one at a time, cordoned, not drained (RKE2's documented server Plan): etcd keeps quorum."""
    return {
        **_plan_spec(cluster, {"operator": "In", "values": ["true"]}, 1),
        "cordon": True,
        "tolerations": SERVER_TOLERATIONS,
        "jobActiveDeadlineSecs": UPGRADE_SECONDS,
    }


def agent_plan_spec(cluster: ClusterSettings) -> dict[str, Any]:
    """Agents `agentConcurrency` at a time, drained first, once every server runs the new release."""
    upgrade = cluster.upgrade
    return {
        **_plan_spec(cluster, {"operator": "DoesNotExist"}, upgrade.agent_concurrency),
        # rke2-upgrade's `prepare <plan>` waits until that Plan has upgraded every node it selects.
        "prepare": {"image": upgrade.upgrade_image, "args": ["prepare", SERVER_PLAN]},
        # Drain cordons too. Evictions (disableEviction unset) honour PodDisruptionBudgets; emptyDir data
        # (scratch, /dev/shm) is lost as on any drain; DaemonSet pods stay; a pod without a controller
        # (force unset) stops the drain rather than being deleted for good.
        "drain": {
            "deleteEmptydirData": True,
            "ignoreDaemonSets": True,
            "force": False,
            "timeout": f"{upgrade.drain_timeout_seconds}s",
        },
        # GPU nodes are agents too.
        "tolerations": [taint_toleration(GPU_TAINT)],
        "jobActiveDeadlineSecs": upgrade.drain_timeout_seconds + UPGRADE_SECONDS,
    }
