"""What the GPU node and NCCL checks run: each a Job that `AcceptanceChecks.job` creates, in the platform namespace,
outside Kueue (components/acceptance/checks.py says why). The Job runs the driver (drivers.py), which looks at
the nodes first (cordoned or GPUs in use: skipped; the ClusterPolicy ready) and then runs the container and
pod spec built here as worker pods pinned to the nodes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.acceptance.drivers import RENDEZVOUS_SERVICE, Driven, dns_name, policy_wait
from components.cluster.config import GPU_TAINT, taint_object
from settings import NodeSettings
from settings.acceptance import AcceptanceSettings

if TYPE_CHECKING:
    from components.acceptance.component import AcceptanceChecks, AcceptanceChecksArgs

CHECK_LABEL = "ml-platform.io/acceptance"
NCCL_VOLUMES = [
    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
    {"name": "home", "emptyDir": {}},
]
# Requests and limits of the GPU check containers (GPUs and RDMA devices are added per check). The NCCL pods
# hold a 16 GiB memory-backed /dev/shm, which counts against their memory limit.
GPU_RESOURCES = {
    "gpu-node": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
    "nccl": {"requests": {"cpu": "8", "memory": "32Gi"}, "limits": {"memory": "64Gi"}},
}
RESTRICTED = {
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def gpu_node_checks(checks: AcceptanceChecks, nodes: list[NodeSettings]) -> None:
    """One driver per node group: it runs the check on each of the group's GPU nodes in turn (as each is free), a
    worker pinned to the node that takes all its GPUs, so no acceptance resource is per node; the report names
    each node's result."""
    settings = checks.args.acceptance
    timeout = settings.gpu_nodes.timeout_seconds
    groups: dict[str, list[NodeSettings]] = {}
    for node in nodes:
        groups.setdefault(node.group_name, []).append(node)
    for group, members in sorted(groups.items()):
        each = []
        for node in members:
            assert node.gpu is not None
            rdma = node.infiniband is not None and bool(checks.args.rdma_resource_name)
            env = (
                ("EXPECTED_GPUS", str(node.gpu.count)),
                ("EXPECTED_MODEL", node.gpu.model),
                ("RDMA", "true" if rdma else "false"),
            )
            limits = ((str(checks.args.rdma_resource_name), "1"),) if rdma else ()
            each.append((node.name, node.gpu.count, env, limits))
        container = {
            "name": "check",
            "image": settings.gpu_image,
            "script": "gpu-node.sh",
            "env": [
                {"name": "EXPECTED_DRIVER", "value": checks.args.driver_version or ""},
                # The validation files: waited for with the time the driver leaves after the ClusterPolicy.
                {"name": "WAIT", "value": str(validation_wait(timeout))},
            ],
            "resources": {
                "requests": GPU_RESOURCES["gpu-node"]["requests"],
                "limits": GPU_RESOURCES["gpu-node"]["limits"],
            },
            "volumeMounts": [{"name": "validations", "mountPath": "/run/nvidia/validations", "readOnly": True}],
        }
        check_id = f"gpu-{group}"
        checks.extra_deps[check_id] = [
            checks.args.node_ready[n.name] for n in members if n.name in checks.args.node_ready
        ]
        checks.job(
            "gpu",
            check_id,
            settings.gpu_nodes,
            settings.namespace,
            ",".join(n.name for n in members),
            container,
            extra={
                "tolerations": [gpu_toleration()],
                "volumes": [{"name": "validations", "hostPath": {"path": "/run/nvidia/validations"}}],
            },
            driven=Driven(each=tuple(each), node_timeout=timeout),
            # Free nodes at once, each within its own time from its admission; then those that were busy.
            timeout=timeout * 2,
            report={"perNode": "true"},
        )


def validation_wait(timeout: int) -> int:
    """How long the GPU node check waits for the validation files: what is left after the driver's wait for the
    ClusterPolicy, less two minutes to schedule the worker and report."""
    return max(0, timeout - policy_wait(timeout) - 120)


def ib_pairs(nodes: list[NodeSettings]) -> list[tuple[NodeSettings, NodeSettings]]:
    """Disjoint pairs of the InfiniBand GPU nodes in inventory order, so that every node's link is measured
    and the pairs run at the same time; with an odd count the last node pairs with the first (that Job
    waits for the first pair's GPUs)."""
    pairs = [(nodes[i], nodes[i + 1]) for i in range(0, len(nodes) - 1, 2)]
    if len(nodes) % 2 and len(nodes) > 1:
        pairs.append((nodes[-1], nodes[0]))
    return pairs


def nccl_check(checks: AcceptanceChecks) -> None:
    settings = checks.args.acceptance
    namespace = settings.namespace
    gpu_nodes = [n for n in checks.args.nodes if n.gpu is not None]
    ib_nodes = [n for n in gpu_nodes if n.infiniband is not None]
    pairs = ib_pairs(ib_nodes) if checks.args.rdma_resource_name else []
    if pairs:
        # One headless Service for every pair: a pod's `<hostname>.<subdomain>` resolves through any headless
        # Service named like its subdomain that selects it, so the pairs need no Service each. The pairs' Jobs
        # wait for it: their workers' DNS names exist once it does.
        service = k8s.core.v1.Service(
            f"{checks.resource_name}-nccl-rendezvous",
            metadata={"name": RENDEZVOUS_SERVICE, "namespace": checks.home, "labels": {CHECK_LABEL: "check"}},
            spec={
                "clusterIP": "None",
                "selector": {"ml-platform.io/rendezvous": RENDEZVOUS_SERVICE},
                "ports": [{"name": "rendezvous", "port": 29500}],
            },
            opts=pulumi.ResourceOptions(parent=checks, provider=checks.args.provider),
        )
    for first, second in pairs:
        assert first.gpu is not None and second.gpu is not None
        gpus = min(first.gpu.count, second.gpu.count)
        check_id = f"nccl-ib-{first.name}-{second.name}"
        # The workers' hostname prefix: the Job's name, cut so that `<prefix>-<i>` stays a DNS label (63 at most),
        # with a digest of the whole name where it is cut (two pairs of long node names never share one).
        job_name = dns_name(f"acceptance-{check_id}", 61)
        checks.extra_deps[check_id] = [service]
        checks.job(
            "gpu",
            check_id,
            settings.nccl,
            namespace,
            f"{first.name},{second.name}",
            nccl_container(
                settings, gpus, settings.nccl.ib_floor_gbs, 2, f"{job_name}-0.{RENDEZVOUS_SERVICE}", checks.args
            ),
            extra={"tolerations": [gpu_toleration()], "volumes": NCCL_VOLUMES},
            # Worker i on the pair's i-th node, `<job>-i.nccl-rendezvous` in DNS through the Service above.
            driven=Driven(nodes=(first.name, second.name), gpus=gpus, rendezvous=job_name),
        )
    # NVLink: every GPU node with 2+ GPUs, one driver per node group that takes its nodes in turn as each is free.
    groups: dict[str, list[NodeSettings]] = {}
    for node in gpu_nodes:
        if node.gpu and node.gpu.count >= 2:
            groups.setdefault(node.group_name, []).append(node)
    for group, members in sorted(groups.items()):
        each = []
        for node in members:
            assert node.gpu is not None
            floor = settings.nccl.nvlink_floor_gbs(node.gpu.model)
            env = (("NPROC", str(node.gpu.count)), ("FLOOR_GBS", "" if floor is None else str(floor)))
            each.append((node.name, node.gpu.count, env, ()))
        most = max(n.gpu.count for n in members if n.gpu)
        checks.job(
            "gpu",
            f"nccl-nvlink-{group}",
            settings.nccl,
            namespace,
            ",".join(n.name for n in members),
            nccl_container(settings, most, None, 1, "", checks.args),
            extra={"tolerations": [gpu_toleration()], "volumes": NCCL_VOLUMES},
            driven=Driven(each=tuple(each), node_timeout=settings.nccl.timeout_seconds),
            # Free nodes run at once, each within its own time from when the driver admits it; the second half
            # of the Job's time is for nodes that were busy at first (still busy then: skipped, named).
            timeout=settings.nccl.timeout_seconds * 2,
            # The report names each node's result, and fails a node not checked within `nvlinkEveryRuns` runs.
            report={"perNode": "true", "everyRuns": str(settings.nccl.nvlink_every_runs)},
        )


def gpu_toleration() -> dict[str, str]:
    taint = taint_object(GPU_TAINT)
    return {"key": taint["key"], "operator": "Equal", "value": taint["value"], "effect": taint["effect"]}


def nccl_container(
    settings: AcceptanceSettings, gpus: int, floor: Optional[float], nodes: int, master: str, args: AcceptanceChecksArgs
) -> dict[str, Any]:
    limits = {**GPU_RESOURCES["nccl"]["limits"], "nvidia.com/gpu": str(gpus)}
    if nodes > 1 and args.rdma_resource_name:
        limits[args.rdma_resource_name] = "1"
    return {
        "name": "check",
        "image": settings.gpu_image,
        "script": "nccl.sh",
        "env": [
            {"name": "FLOOR_GBS", "value": "" if floor is None else str(floor)},
            {"name": "NPROC", "value": str(gpus)},
            {"name": "NNODES", "value": str(nodes)},
            {"name": "MASTER", "value": master},
            {"name": "MAX_BYTES", "value": settings.nccl.message_size},
            {"name": "PLATEAU_BYTES", "value": settings.nccl.plateau_from},
            {"name": "EXPECT_TRANSPORT", "value": "NET/IB" if nodes > 1 else ""},
            # The ports' physical rate from the hardware table, compared with what each HCA trained at.
            {"name": "IB_RATE_GBPS", "value": f"{settings.nccl.ib_port_gbps:g}" if nodes > 1 else ""},
            {"name": "IB_PORTS", "value": str(settings.nccl.ib_ports)},
            {"name": "HOME", "value": "/tmp"},
        ],
        "resources": {"requests": GPU_RESOURCES["nccl"]["requests"], "limits": limits},
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "home", "mountPath": "/tmp"}],
        "securityContext": RESTRICTED,
    }
