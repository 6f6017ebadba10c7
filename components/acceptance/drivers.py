"""The driver of a check that takes a node's GPUs or a local disk (`checks/driver.py` says what it does): its
container, its pod and its rights. The check's Job runs the driver; the driver runs the check as worker pods
it creates in the platform namespace and deletes when the check ends.

Its rights, bound to the ServiceAccount `acceptance-driver` of the platform namespace: in that namespace only,
create, read and delete pods and read their logs (its workers); cluster-wide, read only what it must look at
before taking GPUs: a Node (`get`), the pods bound to it (`list`: they may be in any namespace) and the GPU
Operator's ClusterPolicies (`list`), and the PersistentVolumes (`list`: whether a tier-1 disk is free). It can change
nothing outside the platform namespace."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_kubernetes as k8s

from components.acceptance.programs import with_program

if TYPE_CHECKING:
    from components.acceptance.component import AcceptanceChecks

SERVICE_ACCOUNT = "acceptance-driver"
DRIVER_RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}
# The driver's own rules: in the platform namespace (a Role) and cluster-wide, read only (a ClusterRole).
NAMESPACE_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "delete"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
]
CLUSTER_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": ["nvidia.com"], "resources": ["clusterpolicies"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["list"]},
]
# Seconds left at the end of the Job for the driver to report and delete its workers.
MARGIN = 30
SCHEDULE_WAIT = 120
# The headless Service under which every NCCL pair's workers get their DNS names (`<job>-<i>.nccl-rendezvous`):
# one for all pairs, selecting the label the driver gives their workers.
RENDEZVOUS_SERVICE = "nccl-rendezvous"


@dataclass(frozen=True)
class Driven:
    """How the driver runs a check: the nodes whose GPUs it takes (one worker pinned to each; none: one
    worker where the scheduler puts it), the GPUs each worker takes, and for an NCCL pair the workers' hostname
    prefix (`rendezvous`: worker i is `<rendezvous>-i`) under the headless Service all pairs share."""

    nodes: tuple[str, ...] = ()
    gpus: int = 0
    rendezvous: str = ""
    storage_class: str = ""
    """The local volumes' class: the driver skips the check when every one of them is claimed."""
    each: tuple[tuple[str, int, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]], ...] = ()
    """(node, GPUs, the worker's environment there, its other resource limits there) for a check run on every node
    of a group in turn."""
    node_timeout: int = 0
    """With `each`: each node's own time, counted from when the driver admits its worker."""


def each_tasks(driven: Driven) -> list[dict[str, Any]]:
    return [
        {"node": node, "gpus": gpus, "env": dict(env), **({"limits": dict(limits)} if limits else {})}
        for node, gpus, env, limits in driven.each
    ]


def dns_name(text: str, limit: int) -> str:
    """`text` as a DNS label of at most `limit` characters: cut, with a digest of the whole name where it had to be
    cut, so two long names that share a prefix never become one (two Jobs, or two rendezvous hostnames, alike)."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 11].rstrip('-')}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def driver_program() -> str:
    """The driver with the verdict rule it applies (checks/evidence.py) before it: one file, one program."""
    checks = Path(__file__).parent / "checks"
    return (checks / "evidence.py").read_text() + "\n\n" + (checks / "driver.py").read_text()


def policy_wait(timeout: int) -> int:
    """How long the driver waits for the ClusterPolicy: a third of the check's time."""
    return timeout // 3


def driver_rights(checks: AcceptanceChecks) -> list[pulumi.Resource]:
    """The driver's ServiceAccount, Role and ClusterRole with their bindings, all of which a driven Job waits for
    (and none for another: they are created together, once the namespace is there)."""
    name, home = checks.resource_name, checks.home
    opts = pulumi.ResourceOptions(parent=checks, provider=checks.args.provider)
    cluster_role_name = f"ml-platform-{SERVICE_ACCOUNT}"
    account = k8s.core.v1.ServiceAccount(
        f"{name}-driver", metadata={"name": SERVICE_ACCOUNT, "namespace": home}, opts=opts
    )
    subject = [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": home}]
    role = k8s.rbac.v1.Role(
        f"{name}-driver-role", metadata={"name": SERVICE_ACCOUNT, "namespace": home}, rules=NAMESPACE_RULES, opts=opts
    )
    binding = k8s.rbac.v1.RoleBinding(
        f"{name}-driver-binding",
        metadata={"name": SERVICE_ACCOUNT, "namespace": home},
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SERVICE_ACCOUNT},
        subjects=subject,
        opts=opts,
    )
    # Cluster-scoped: the namespace's name in an annotation makes them wait for it, as the Jobs do.
    cluster_meta = {"name": cluster_role_name, "annotations": {"ml-platform.io/acceptance-namespace": home}}
    cluster_role = k8s.rbac.v1.ClusterRole(f"{name}-driver-read", metadata=cluster_meta, rules=CLUSTER_RULES, opts=opts)
    cluster_binding = k8s.rbac.v1.ClusterRoleBinding(
        f"{name}-driver-read-binding",
        metadata=cluster_meta,
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role_name},
        subjects=subject,
        opts=opts,
    )
    return [account, role, binding, cluster_role, cluster_binding]


def driver_pod_spec(
    checks: AcceptanceChecks, env: list[dict[str, Any]], worker: dict[str, Any], driven: Driven, timeout: int
) -> dict[str, Any]:
    """The Job's pod: the driver, with the worker pod spec as its parameter (in the pod template, which
    nobody can change once the Job exists). It runs preferably on a GPU node (the image is there already),
    anywhere else when none can take it; it holds no GPU and no volume but its program's (programs.py)."""
    from components.acceptance.gpu_checks import RESTRICTED, gpu_toleration  # gpu_checks imports this module

    program = checks.programs.deliver("driver.py", driver_program())
    container = {
        "name": "driver",
        "image": checks.args.acceptance.gpu_image,
        "env": [
            *env,
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "WORKER", "value": json.dumps(worker, sort_keys=True, separators=(",", ":"))},
            {"name": "NODES", "value": " ".join(driven.nodes)},
            {"name": "GPUS", "value": str(driven.gpus)},
            {"name": "RENDEZVOUS", "value": driven.rendezvous},
            *([{"name": "RENDEZVOUS_SERVICE", "value": RENDEZVOUS_SERVICE}] if driven.rendezvous else []),
            *([{"name": "STORAGE_CLASS", "value": driven.storage_class}] if driven.storage_class else []),
            *(
                [
                    {"name": "EACH", "value": json.dumps(each_tasks(driven), separators=(",", ":"))},
                    {"name": "NODE_TIMEOUT", "value": str(driven.node_timeout)},
                ]
                if driven.each
                else []
            ),
            {"name": "DEADLINE", "value": str(timeout - MARGIN)},
            {"name": "POLICY_WAIT", "value": str(policy_wait(timeout))},
            {"name": "SCHEDULE_WAIT", "value": str(SCHEDULE_WAIT)},
        ],
        "resources": DRIVER_RESOURCES,
        "securityContext": RESTRICTED,
    }
    spec = {
        "restartPolicy": "Never",
        "serviceAccountName": SERVICE_ACCOUNT,
        "automountServiceAccountToken": True,  # the driver's rights (above), not a team's
        "containers": [container],
        "tolerations": [gpu_toleration()],
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {
                            "matchExpressions": [{"key": "ml-platform.io/role", "operator": "In", "values": ["gpu"]}]
                        },
                    }
                ]
            }
        },
    }
    return with_program(spec, program, "python3")
