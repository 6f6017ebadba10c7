"""What the storage, S3, gang and monitoring checks run (the GPU and NCCL checks: `gpu_checks.py`), each a Job
that `AcceptanceChecks.job` creates from the container and pod spec built here. Every check runs in the
platform namespace `acceptance.namespace`, which Kueue does not manage (no team label): a Job there starts
at once and its `activeDeadlineSeconds` counts from its creation, pending pods included. The gang check
alone goes through Kueue, in a ClusterQueue of its own (below)."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import pulumi
import pulumi_kubernetes as k8s

from components.acceptance.drivers import Driven
from components.acceptance.gpu_checks import RESTRICTED, gpu_toleration
from components.scheduling.config import KUEUE_API
from settings.scheduling import CPU_FLAVOR

if TYPE_CHECKING:
    from components.acceptance.component import AcceptanceChecks, S3Target

# Requests and limits of each check container (the GPU checks': gpu_checks.GPU_RESOURCES).
RESOURCES = {
    "storage": {"requests": {"cpu": "500m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
    "s3": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
    "gang": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}},
    "monitoring": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
}
GANG_PODS = 2
# Volcano: the pod annotation that names a pod's PodGroup (volcano-sh/apis pkg/apis/scheduling/v1beta1/
# labels.go, KubeGroupNameAnnotationKey) and the PodGroup API (crds/volcano/v1.15.1).
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
GANG_QUEUE = "acceptance"
GANG_JOB = "acceptance-gang"


def storage_check(checks: AcceptanceChecks) -> None:
    settings = checks.args.acceptance
    check = settings.storage
    size = f"{check.size_mib * 2}Mi"
    for tier, class_name in sorted(checks.args.storage_classes.items()):
        on_gpu = tier == "tier1"  # local NVMe on the GPU nodes
        container = {
            "name": "check",
            "image": settings.tools_image,
            "script": "storage.sh",
            "env": [
                {"name": "DIR", "value": "/data"},
                {"name": "SIZE_MIB", "value": str(check.size_mib)},
                {"name": "FLOOR_MIB_S", "value": str(check.floor_mib_s)},
            ],
            "resources": RESOURCES["storage"],
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
            # Tier 1: a driver runs the check as a worker pod and deletes it at the end, so the whole NVMe its
            # ephemeral volume claims is released then (a finished Job keeps its pod, and the pod its claim).
            driven=Driven(storage_class=class_name) if on_gpu else None,
        )
    s3 = checks.args.s3
    if s3 is not None:
        s3_check(checks, s3)


def s3_check(checks: AcceptanceChecks, s3: S3Target) -> None:
    """The S3 round trip with one backup identity, from the platform namespace: its rclone remote and the
    MinIO CA are copied there (a team's namespace is the team's to change)."""
    settings = checks.args.acceptance
    opts = pulumi.ResourceOptions(parent=checks, provider=checks.args.provider)
    remote = k8s.core.v1.Secret(
        f"{checks.resource_name}-s3-rclone",
        metadata={"name": "acceptance-s3-rclone", "namespace": checks.home},
        string_data=pulumi.Output.secret(s3.rclone_env),
        opts=opts,
    )
    ca = k8s.core.v1.ConfigMap(
        f"{checks.resource_name}-s3-ca",
        metadata={"name": "acceptance-s3-ca", "namespace": checks.home},
        data={"ca.crt": s3.ca_cert},
        opts=opts,
    )
    checks.extra_deps["storage-s3"] = [remote, ca]
    container = {
        "name": "check",
        "image": s3.image,
        "script": "s3.sh",
        "envFrom": [{"secretRef": {"name": "acceptance-s3-rclone"}}],
        "env": [
            {"name": "BUCKET", "value": s3.bucket},
            {"name": "PREFIX", "value": s3.source},
            {"name": "DELETE", "value": "true" if s3.delete else "false"},
            {"name": "SIZE_MIB", "value": str(min(settings.storage.size_mib, 256))},
            {"name": "FLOOR_MIB_S", "value": str(settings.storage.floor_mib_s)},
            {"name": "WORK", "value": "/work"},
            {"name": "RCLONE_CA_CERT", "value": "/ca/ca.crt"},
            {"name": "HOME", "value": "/work"},
        ],
        "resources": RESOURCES["s3"],
        "volumeMounts": [
            {"name": "ca", "mountPath": "/ca", "readOnly": True},
            {"name": "work", "mountPath": "/work"},
        ],
        "securityContext": RESTRICTED,
    }
    checks.job(
        "s3",
        "storage-s3",
        settings.storage,
        settings.namespace,
        s3.bucket,
        container,
        extra={
            "nodeSelector": {"ml-platform.io/role": "cpu"},
            "volumes": [
                {"name": "ca", "configMap": {"name": "acceptance-s3-ca"}},
                {"name": "work", "emptyDir": {}},
            ],
        },
    )


def gang_check(checks: AcceptanceChecks) -> None:
    """A gang of GANG_PODS pods admitted together by Kueue and placed together by Volcano.

    Kueue: the Job is queued in a LocalQueue of the platform namespace whose ClusterQueue is this check's
    alone: its nominal quota is the gang's requests, it is in no cohort (it neither borrows nor lends,
    so it never reclaims a team's borrowed capacity), so the Job is admitted as soon as Kueue sees it.
    Once admitted, the Job's deadline counts, and it is shorter than Kueue's waitForPodsReady timeout
    (validated), so the Job fails before Kueue could evict it and suspend it again.
    Volcano: the pods name the scheduler and a PodGroup with minMember GANG_PODS in Volcano's `default`
    queue; Volcano binds none of them until it can bind all.
    """
    settings = checks.args.acceptance
    # A PodGroup per run (its name from the run's hash), replaced with the Job: a run never reuses the
    # PodGroup a finished run left in a terminal phase.
    run = f"{checks.args.exercised['scheduling']}-{settings.run}"
    name = f"acceptance-gang-{hashlib.sha256(run.encode()).hexdigest()[:10]}"
    requests = RESOURCES["gang"]["requests"]
    opts = pulumi.ResourceOptions(parent=checks, provider=checks.args.provider)
    cluster_queue = k8s.apiextensions.CustomResource(
        f"{checks.resource_name}-gang-clusterqueue",
        api_version=KUEUE_API,
        kind="ClusterQueue",
        metadata={"name": settings.namespace},
        spec={
            # The namespace's name (a data dependency: the queue waits for the namespace, so for Kueue).
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": checks.home}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": CPU_FLAVOR,
                            "resources": [
                                {"name": "cpu", "nominalQuota": gang_quota(requests["cpu"])},
                                {"name": "memory", "nominalQuota": gang_quota(requests["memory"])},
                            ],
                        }
                    ],
                }
            ],
        },
        opts=opts,
    )
    local_queue = k8s.apiextensions.CustomResource(
        f"{checks.resource_name}-gang-localqueue",
        api_version=KUEUE_API,
        kind="LocalQueue",
        metadata={"name": GANG_QUEUE, "namespace": checks.home},
        spec={"clusterQueue": settings.namespace},
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[cluster_queue])),
    )
    group = k8s.apiextensions.CustomResource(
        f"{checks.resource_name}-gang-podgroup",
        api_version=VOLCANO_API,
        kind="PodGroup",
        metadata={"name": name, "namespace": checks.home},
        spec={"minMember": GANG_PODS, "queue": "default"},
        opts=opts,
    )
    # The gang's pods see each other placed through this headless Service: a pod's `<job>-<i>.<service>` name
    # exists as soon as it has an address (publishNotReadyAddresses), which is the evidence gang.sh looks for.
    service = k8s.core.v1.Service(
        f"{checks.resource_name}-gang-peers",
        metadata={"name": GANG_JOB, "namespace": checks.home},
        spec={
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"ml-platform.io/check": "gang"},
            "ports": [{"name": "peers", "port": 9}],
        },
        opts=opts,
    )
    checks.extra_deps["gang"] = [local_queue, group, service]
    container = {
        "name": "check",
        "image": settings.tools_image,
        "script": "gang.sh",
        "env": [
            {"name": "QUEUE", "value": GANG_QUEUE},
            {"name": "PODS", "value": str(GANG_PODS)},
            {"name": "SCHEDULER", "value": "volcano"},
            {"name": "POD_GROUP", "value": name},
            {"name": "JOB_NAME", "value": GANG_JOB},
            {"name": "SUBDOMAIN", "value": GANG_JOB},
            # Peers wait until two minutes before the Job's deadline, so the pod still reports.
            {"name": "WAIT", "value": str(max(30, settings.scheduling.timeout_seconds - 120))},
        ],
        "resources": RESOURCES["gang"],
        "securityContext": RESTRICTED,
    }
    checks.job(
        "scheduling",
        "gang",
        settings.scheduling,
        settings.namespace,
        "",
        container,
        pods=GANG_PODS,
        queue=GANG_QUEUE,
        pod_annotations={VOLCANO_GROUP_ANNOTATION: name},
        report={"podGroup": name},  # the report shows its phase
        extra={
            "schedulerName": "volcano",
            "subdomain": GANG_JOB,
            "nodeSelector": {"ml-platform.io/role": "cpu"},
            # One pod per node: the gang needs GANG_PODS nodes at once, and Volcano places none of its pods until
            # it can place all (a scheduler without gangs would place one and leave the other pending).
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"ml-platform.io/check": "gang"}},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            },
        },
    )


def gang_quota(quantity: str) -> str:
    """GANG_PODS times a per-pod request (`100m`, `64Mi`)."""
    digits = "".join(c for c in quantity if c.isdigit())
    return f"{int(digits) * GANG_PODS}{quantity[len(digits) :]}"


def zabbix_check(checks: AcceptanceChecks) -> None:
    settings = checks.args.acceptance
    opts = pulumi.ResourceOptions(parent=checks, provider=checks.args.provider)
    token = k8s.core.v1.Secret(
        f"{checks.resource_name}-zabbix-token",
        metadata={"name": "acceptance-zabbix-token", "namespace": checks.home},
        string_data={"token": pulumi.Output.secret(checks.args.zabbix_token)},
        opts=opts,
    )
    ca = k8s.core.v1.ConfigMap(
        f"{checks.resource_name}-zabbix-ca",
        metadata={"name": "acceptance-zabbix-ca", "namespace": checks.home},
        data={"ca.crt": checks.args.zabbix_ca},
        opts=opts,
    )
    checks.extra_deps["monitoring"] = [token, ca, *checks.args.monitoring_ready]
    container = {
        "name": "check",
        "image": settings.api_image,
        "script": "zabbix.sh",
        "env": [
            {"name": "ZABBIX_URL", "value": checks.args.zabbix_url},
            {"name": "MAX_AGE", "value": str(settings.monitoring.max_age_seconds)},
            # Ask again for hosts without data until a minute before the Job's deadline, so a node
            # that joined in this `up` has time to report, and the check still ends with its result.
            {"name": "WAIT", "value": str(max(0, settings.monitoring.timeout_seconds - 60))},
            {"name": "TOKEN_FILE", "value": "/secret/token"},
            {"name": "CA_FILE", "value": "/ca/ca.crt"},
        ],
        "resources": RESOURCES["monitoring"],
        "securityContext": RESTRICTED,
        "volumeMounts": [
            {"name": "token", "mountPath": "/secret", "readOnly": True},
            {"name": "ca", "mountPath": "/ca", "readOnly": True},
        ],
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
            "volumes": [
                {"name": "token", "secret": {"secretName": "acceptance-zabbix-token"}},
                {"name": "ca", "configMap": {"name": "acceptance-zabbix-ca"}},
            ],
        },
    )
