"""What each acceptance check runs: the GPU node, NCCL, storage, S3, gang and monitoring checks, each a Job
that `AcceptanceChecks.job` creates from the container and pod spec built here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_kubernetes as k8s

from components.cluster.config import GPU_TAINT, taint_object
from components.minio.backup_specs import CA_CONFIGMAP, rclone_secret
from settings import NodeSettings
from settings.acceptance import AcceptanceSettings

if TYPE_CHECKING:
    from components.acceptance.component import AcceptanceChecks, AcceptanceChecksArgs

CHECK_LABEL = "ml-platform.io/acceptance"
# The checks that run in team and backup namespaces meet the `restricted` Pod Security Standard, the
# strictest level a team's namespaces may have (`scheduling.teams[].podSecurity`).
NCCL_VOLUMES = [
    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
    {"name": "home", "emptyDir": {}},
]
RESTRICTED = {
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def gpu_node_check(checks: AcceptanceChecks, node: NodeSettings) -> None:
    settings = checks.args.acceptance
    assert node.gpu is not None
    rdma = node.infiniband is not None and bool(checks.args.rdma_resource_name)
    limits = {"nvidia.com/gpu": str(node.gpu.count)}
    if rdma:
        limits[str(checks.args.rdma_resource_name)] = "1"
    container = {
        "name": "check",
        "image": settings.gpu_image,
        "command": ["sh", "/checks/gpu-node.sh"],
        "env": [
            {"name": "EXPECTED_GPUS", "value": str(node.gpu.count)},
            {"name": "RDMA", "value": "true" if rdma else "false"},
        ],
        "resources": {"limits": limits},
        "volumeMounts": [{"name": "validations", "mountPath": "/run/nvidia/validations", "readOnly": True}],
    }
    checks.job(
        "gpu",
        f"gpu-{node.name}",
        settings.gpu_nodes,
        settings.namespace,
        node.name,
        container,
        # Named after its node, like the node's other resources.
        resource_name=f"{node.name}-{checks.resource_name}-gpu",
        extra={
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "tolerations": [gpu_toleration()],
            "volumes": [{"name": "validations", "hostPath": {"path": "/run/nvidia/validations"}}],
        },
    )


def nccl_check(checks: AcceptanceChecks) -> None:
    settings = checks.args.acceptance
    if not checks.args.team_queues:
        return
    namespace, queue = next(iter(sorted(checks.args.team_queues.values())))
    gpu_nodes = [n for n in checks.args.nodes if n.gpu is not None]
    ib_nodes = [n for n in gpu_nodes if n.infiniband is not None]
    if len(ib_nodes) >= 2 and checks.args.rdma_resource_name:
        gpus = min(n.gpu.count for n in ib_nodes[:2] if n.gpu)
        job_name = "acceptance-nccl-ib"
        checks.job(
            "gpu",
            "nccl-ib",
            settings.nccl,
            namespace,
            "",
            nccl_container(settings, gpus, settings.nccl.ib_floor_gbs, 2, f"{job_name}-0.{job_name}", checks.args),
            pods=2,
            queue=queue,
            extra={
                "subdomain": job_name,
                "tolerations": [gpu_toleration()],
                "affinity": {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {"matchLabels": {"ml-platform.io/check": "nccl-ib"}},
                                "topologyKey": "kubernetes.io/hostname",
                            }
                        ]
                    }
                },
                "volumes": NCCL_VOLUMES,
            },
        )
        k8s.core.v1.Service(
            f"{checks.resource_name}-nccl-ib-rendezvous",
            metadata={"name": job_name, "namespace": namespace, "labels": {CHECK_LABEL: "check"}},
            spec={
                "clusterIP": "None",
                "selector": {"ml-platform.io/check": "nccl-ib"},
                "ports": [{"name": "rendezvous", "port": 29500}],
            },
            opts=pulumi.ResourceOptions(
                parent=checks, provider=checks.args.provider, depends_on=[checks.scripts[namespace]]
            ),
        )
    multi_gpu = [n for n in gpu_nodes if n.gpu and n.gpu.count >= 2]
    if multi_gpu:
        node = multi_gpu[0]
        assert node.gpu is not None
        checks.job(
            "gpu",
            "nccl-nvlink",
            settings.nccl,
            namespace,
            node.name,
            nccl_container(settings, node.gpu.count, settings.nccl.nvlink_floor_gbs, 1, "", checks.args),
            queue=queue,
            extra={
                "nodeSelector": {"kubernetes.io/hostname": node.name},
                "tolerations": [gpu_toleration()],
                "volumes": NCCL_VOLUMES,
            },
        )


def storage_check(checks: AcceptanceChecks) -> None:
    settings = checks.args.acceptance
    check = settings.storage
    size = f"{check.size_mib * 2}Mi"
    for tier, class_name in sorted(checks.args.storage_classes.items()):
        on_gpu = tier == "tier1"  # local NVMe on the GPU nodes
        container = {
            "name": "check",
            "image": settings.tools_image,
            "command": ["sh", "/checks/storage.sh"],
            "env": [
                {"name": "DIR", "value": "/data"},
                {"name": "SIZE_MIB", "value": str(check.size_mib)},
                {"name": "FLOOR_MIB_S", "value": str(check.floor_mib_s)},
            ],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        }
        access = "ReadWriteMany" if tier == "tier2Shared" else "ReadWriteOnce"
        checks.job(
            "storage",
            f"storage-{tier.lower()}",
            check,
            settings.namespace,
            class_name,
            container,
            extra={
                # A generic ephemeral volume: provisioned for this pod, deleted with it.
                "volumes": [
                    {
                        "name": "data",
                        "ephemeral": {
                            "volumeClaimTemplate": {
                                "spec": {
                                    "accessModes": [access],
                                    "storageClassName": class_name,
                                    "resources": {"requests": {"storage": size}},
                                }
                            }
                        },
                    }
                ],
                **(
                    {"tolerations": [gpu_toleration()], "nodeSelector": {"ml-platform.io/role": "gpu"}}
                    if on_gpu
                    else {"nodeSelector": {"ml-platform.io/role": "cpu"}}
                ),
            },
        )
    s3 = checks.args.s3
    if s3 is not None:
        container = {
            "name": "check",
            "image": s3.image,
            "command": ["sh", "/checks/s3.sh"],
            "envFrom": [{"secretRef": {"name": rclone_secret(s3.source)}}],
            "env": [
                {"name": "BUCKET", "value": s3.bucket},
                {"name": "PREFIX", "value": s3.source},
                {"name": "DELETE", "value": "true" if s3.delete else "false"},
                {"name": "SIZE_MIB", "value": str(min(check.size_mib, 256))},
                {"name": "FLOOR_MIB_S", "value": str(check.floor_mib_s)},
                {"name": "WORK", "value": "/work"},
                {"name": "RCLONE_CA_CERT", "value": "/ca/ca.crt"},
                {"name": "HOME", "value": "/work"},
            ],
            "volumeMounts": [
                {"name": "ca", "mountPath": "/ca", "readOnly": True},
                {"name": "work", "mountPath": "/work"},
            ],
            "securityContext": RESTRICTED,
        }
        checks.job(
            "s3",
            "storage-s3",
            check,
            s3.namespace,
            s3.bucket,
            container,
            extra={
                "nodeSelector": {"ml-platform.io/role": "cpu"},
                "volumes": [{"name": "ca", "configMap": {"name": CA_CONFIGMAP}}, {"name": "work", "emptyDir": {}}],
            },
        )


def gang_check(checks: AcceptanceChecks, team: str, namespace: str, queue: str) -> None:
    settings = checks.args.acceptance
    pods = 2
    container = {
        "name": "check",
        "image": settings.tools_image,
        "command": ["sh", "/checks/gang.sh"],
        "env": [{"name": "QUEUE", "value": queue}, {"name": "PODS", "value": str(pods)}],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": RESTRICTED,
    }
    checks.job(
        "scheduling",
        f"gang-{team}",
        settings.scheduling,
        namespace,
        team,
        container,
        pods=pods,
        queue=queue,
        extra={"nodeSelector": {"ml-platform.io/role": "cpu"}},
    )


def zabbix_check(checks: AcceptanceChecks) -> None:
    settings = checks.args.acceptance
    token = k8s.core.v1.Secret(
        f"{checks.resource_name}-zabbix-token",
        metadata={"name": "acceptance-zabbix-token", "namespace": settings.namespace},
        string_data={"token": pulumi.Output.secret(checks.args.zabbix_token)},
        opts=pulumi.ResourceOptions(
            parent=checks, provider=checks.args.provider, depends_on=[checks.scripts[settings.namespace]]
        ),
    )
    checks.extra_deps["monitoring"] = [token, *checks.args.monitoring_ready]
    container = {
        "name": "check",
        "image": settings.tools_image,
        "command": ["sh", "/checks/zabbix.sh"],
        "env": [
            {"name": "ZABBIX_URL", "value": checks.args.zabbix_url},
            {"name": "HOSTS", "value": " ".join(checks.args.monitored_hosts)},
            {"name": "MAX_AGE", "value": str(settings.monitoring.max_age_seconds)},
            # Ask again for hosts without data until a minute before the Job's deadline, so a node
            # that joined in this `up` has time to report, and the check still ends with its result.
            {"name": "WAIT", "value": str(max(0, settings.monitoring.timeout_seconds - 60))},
            {"name": "TOKEN_FILE", "value": "/secret/token"},
        ],
        "volumeMounts": [{"name": "token", "mountPath": "/secret", "readOnly": True}],
    }
    checks.job(
        "monitoring",
        "monitoring",
        settings.monitoring,
        settings.namespace,
        "",
        container,
        extra={
            "nodeSelector": {"ml-platform.io/role": "cpu"},
            "volumes": [{"name": "token", "secret": {"secretName": "acceptance-zabbix-token"}}],
        },
    )


def gpu_toleration() -> dict[str, str]:
    taint = taint_object(GPU_TAINT)
    return {"key": taint["key"], "operator": "Equal", "value": taint["value"], "effect": taint["effect"]}


def nccl_container(
    settings: AcceptanceSettings, gpus: int, floor: float, nodes: int, master: str, args: AcceptanceChecksArgs
) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)}
    if nodes > 1 and args.rdma_resource_name:
        limits[args.rdma_resource_name] = "1"
    return {
        "name": "check",
        "image": settings.gpu_image,
        "command": ["sh", "/checks/nccl.sh"],
        "env": [
            {"name": "FLOOR_GBS", "value": str(floor)},
            {"name": "NPROC", "value": str(gpus)},
            {"name": "NNODES", "value": str(nodes)},
            {"name": "MASTER", "value": master},
            {"name": "MAX_BYTES", "value": settings.nccl.message_size},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "HOME", "value": "/tmp"},
        ],
        "resources": {"limits": limits},
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "home", "mountPath": "/tmp"}],
        "securityContext": RESTRICTED,
    }
