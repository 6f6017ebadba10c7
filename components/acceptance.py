"""AcceptanceChecks: evidence at the end of every `up` that the platform works, and the drift probe.

Each check is a Kubernetes Job (`batch/v1`) that the engine waits for: pulumi-kubernetes 4.x awaits a
Job until its `Complete` condition and fails it at once on `Failed` ("Job represents the configuration
of a single job. This resource waits until its status is ready...", the Job resource's own docs in
pulumi-kubernetes 4.x), for at most the check's `timeoutSeconds` (the `pulumi.com/timeoutSeconds`
annotation, pulumi/pulumi-kubernetes#457, and the `customTimeouts` option, which takes precedence,
pulumi/pulumi-kubernetes#672). The Job's own `activeDeadlineSeconds` is the same bound, so a pod that is
never scheduled (GPUs not allocatable, a gang never admitted) ends as a failed Job, not a hung `up`.

A failed check fails its Job, so the `up` fails there; the Job is named after the check and the node it
covers (`acceptance-gpu-gpu-07`), and its pod's log says what failed. An advisory check reports the
failure in its result line and succeeds. Every check ends with one line `ACCEPTANCE {json}`
(components/checks/lib.sh) that `python -m stacks.acceptance_report` collects after the `up`.

A check runs again when the settings it exercises change (its pod template carries a hash of them,
`exercised_settings`: a changed Job template replaces the Job) or when `acceptance.run` is raised; a
change elsewhere (a threshold, a node's labels, the RKE2 version, another team) leaves it alone, and an
`up` with unchanged settings re-runs nothing. The check scripts are static files in components/checks/, mounted from a
ConfigMap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.cluster import GPU_TAINT, taint_object
from components.minio_backup import CA_CONFIGMAP, rclone_secret
from components.namespaces import platform_namespace
from components.remote import fingerprint
from settings import NodeSettings, Settings
from settings.acceptance import AcceptanceSettings, Check

CHECKS = Path(__file__).parent / "checks"
SCRIPTS = ("gpu-node.sh", "nccl.sh", "storage.sh", "s3.sh", "gang.sh", "zabbix.sh", "drift-probe.sh")
CHECKS_CONFIGMAP = "acceptance-checks"
# On each scripts ConfigMap: the checks' home namespace (which waits for the whole platform).
HOME_ANNOTATION = "ml-platform.io/acceptance-namespace"
CHECK_LABEL = "ml-platform.io/acceptance"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
RUN_ANNOTATION = "ml-platform.io/acceptance-run"
# Files the host steps write, fingerprinted by the drift probe (tokens and keys are not hashed).
DRIFT_FILES = (
    "/etc/rancher/rke2/config.yaml",
    "/etc/rancher/rke2/registries.yaml",
    "/etc/sysctl.d/90-ml-platform.conf",
    "/etc/modules-load.d/ml-platform.conf",
    "/etc/chrony/sources.d/ml-platform.sources",
    "/etc/NetworkManager/conf.d/ml-platform-cni.conf",
    "/var/lib/rancher/rke2/agent/pod-manifests/kube-vip.yaml",
)
PROBE_NAME = "drift-probe"
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


@dataclass(frozen=True)
class S3Target:
    """The backup identity of one backup source: its namespace (where its rclone Secret and the CA
    are), the bucket, the backup image, and the source, whose prefix is all that identity may write."""

    namespace: str
    bucket: str
    image: str
    source: str


@dataclass(frozen=True)
class AcceptanceChecksArgs:
    acceptance: AcceptanceSettings
    nodes: Sequence[NodeSettings]
    monitored_hosts: Sequence[str]
    """Every inventory host Zabbix must have fresh data from (cluster nodes and NAS hosts)."""
    rdma_resource_name: Optional[str]
    storage_classes: Mapping[str, str]
    """Storage class by tier key (`tier1`, `tier2Block`, `tier2Shared`), as in the stack output."""
    team_queues: Mapping[str, tuple[str, str]]
    """Team -> (its first namespace, its LocalQueue)."""
    s3: Optional[S3Target]
    zabbix_url: str
    zabbix_token: pulumi.Input[str]
    exercised: Mapping[str, str]
    """Check kind -> a hash of the settings that kind exercises (`exercised_settings`): a check runs
    again when its hash changes."""
    provider: k8s.Provider
    platform_ready: Sequence[pulumi.Resource]
    """The cluster-wide parts the checks exercise (releases, buckets, queues; not per-node steps, so
    adding a node does not touch every check): the checks start once they are all in place."""
    node_ready: Mapping[str, pulumi.Resource]
    """Node -> what makes it a labelled, tainted member (its Node patch): its own check waits for it."""
    monitoring_ready: Sequence[pulumi.Resource]
    """Everything that registers the hosts in Zabbix: the monitoring check waits for all of it."""


class AcceptanceChecks(pulumi.ComponentResource):
    """The acceptance Jobs and the drift probe DaemonSet."""

    results: dict[str, dict[str, str]]
    """Check id -> what ran where: Job, namespace, node(s), advisory, timeout (the `acceptance` output)."""

    def __init__(self, name: str, args: AcceptanceChecksArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:acceptance:AcceptanceChecks", name, None, opts)
        self._args = args
        settings = args.acceptance
        self.results = {}
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        namespace = platform_namespace(
            f"{name}-namespace",
            settings.namespace,
            "privileged",
            "the drift probe reads host files (hostPath, read-only) and runs the host's rke2 --version in a "
            "chroot; the GPU node check reads the GPU Operator's validation files (hostPath, read-only)",
            provider=args.provider,
            parent=self,
            depends_on=list(args.platform_ready),
        )
        namespaces = sorted({settings.namespace, *(ns for ns, _ in args.team_queues.values())})
        if args.s3 is not None:
            namespaces = sorted({*namespaces, args.s3.namespace})
        # Everything below waits for the namespace, which waits for the whole platform. That wait is a
        # data dependency (the namespace's name in an annotation), not `depends_on`: the SDK walks every
        # `depends_on` target's own `depends_on` graph to rule out cycles, and from the namespace that is
        # the whole platform, for each of hundreds of checks (a 1000-node preview spent a third of its time there).
        home = namespace.metadata.apply(lambda meta: meta.name)
        scripts = {script: check_program(script) for script in (*SCRIPTS, "allreduce.py")}
        self._scripts = {
            ns: k8s.core.v1.ConfigMap(
                f"{name}-scripts-{ns}",
                metadata={
                    "name": CHECKS_CONFIGMAP,
                    "namespace": ns,
                    "labels": {CHECK_LABEL: "scripts"},
                    "annotations": {HOME_ANNOTATION: home},
                },
                data=scripts,
                opts=child,
            )
            for ns in namespaces
        }
        self._name = name
        self._extra_deps: dict[str, list[pulumi.Resource]] = {
            f"gpu-{node}": [ready] for node, ready in args.node_ready.items()
        }
        if settings.gpu_nodes.enabled:
            for node in [n for n in args.nodes if n.gpu is not None]:
                self._gpu_node(node)
        if settings.nccl.enabled:
            self._nccl()
        if settings.storage.enabled:
            self._storage()
        if settings.scheduling.enabled:
            for team, (ns, queue) in sorted(args.team_queues.items()):
                self._gang(team, ns, queue)
        if settings.monitoring.enabled and args.monitored_hosts:
            self._zabbix()
        if settings.drift.enabled:
            self._drift_probe()
        self.register_outputs({"results": self.results})

    # -- the checks -------------------------------------------------------------------------------

    def _job(
        self,
        kind: str,
        check_id: str,
        check: Check,
        namespace: str,
        node: str,
        containers_spec: dict[str, Any],
        *,
        pods: int = 1,
        queue: Optional[str] = None,
        extra: Optional[dict[str, Any]] = None,
        resource_name: Optional[str] = None,
    ) -> k8s.batch.v1.Job:
        """One check's Job: bounded by the check's timeout, never retried (a failure is the result)."""
        job_name = f"acceptance-{check_id}"[:63].rstrip("-")
        labels = {CHECK_LABEL: "check", **({QUEUE_LABEL: queue} if queue else {})}
        own_env = containers_spec.get("env", [])
        env = [
            {"name": "CHECK", "value": check_id},
            {"name": "ADVISORY", "value": "true" if check.advisory else "false"},
        ]
        if not any(e["name"] == "NODE" for e in own_env):
            env.append({"name": "NODE", "value": node})
        container = {**containers_spec, "env": [*env, *own_env]}
        container["volumeMounts"] = [{"name": "checks", "mountPath": "/checks"}, *container.get("volumeMounts", [])]
        pod_spec = {
            "restartPolicy": "Never",
            "containers": [container],
            **(extra or {}),
        }
        pod_spec["volumes"] = [
            {"name": "checks", "configMap": {"name": CHECKS_CONFIGMAP}},
            *pod_spec.get("volumes", []),
        ]
        spec: dict[str, Any] = {
            "backoffLimit": 0,
            "activeDeadlineSeconds": check.timeout_seconds,
            "template": {
                "metadata": {
                    "labels": {CHECK_LABEL: "check", "ml-platform.io/check": check_id},
                    "annotations": {RUN_ANNOTATION: f"{self._args.exercised[kind]}-{self._args.acceptance.run}"},
                },
                "spec": pod_spec,
            },
        }
        if pods > 1:
            spec.update(completions=pods, parallelism=pods, completionMode="Indexed")
        if queue:
            spec["suspend"] = True  # Kueue starts it once it admitted all its pods
        job = k8s.batch.v1.Job(
            resource_name or f"{self._name}-{check_id}",
            metadata={
                "name": job_name,
                "namespace": namespace,
                "labels": labels,
                "annotations": {"pulumi.com/timeoutSeconds": str(check.timeout_seconds)},
            },
            spec=spec,
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=self._args.provider,
                depends_on=[self._scripts[namespace], *self._extra_deps.get(check_id, [])],
                custom_timeouts=pulumi.CustomTimeouts(
                    create=f"{check.timeout_seconds}s", update=f"{check.timeout_seconds}s"
                ),
                # A Job's template cannot change: a new run is a new Job.
                delete_before_replace=True,
                # Kueue admits a queued Job by clearing `suspend`: not a change to undo on the next up.
                ignore_changes=["spec.suspend"] if queue else None,
            ),
        )
        self.results[check_id] = {
            "job": job_name,
            "namespace": namespace,
            "node": node,
            "advisory": "true" if check.advisory else "false",
            "timeoutSeconds": str(check.timeout_seconds),
        }
        return job

    def _gpu_node(self, node: NodeSettings) -> None:
        settings = self._args.acceptance
        assert node.gpu is not None
        rdma = node.infiniband is not None and bool(self._args.rdma_resource_name)
        limits = {"nvidia.com/gpu": str(node.gpu.count)}
        if rdma:
            limits[str(self._args.rdma_resource_name)] = "1"
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
        self._job(
            "gpu",
            f"gpu-{node.name}",
            settings.gpu_nodes,
            settings.namespace,
            node.name,
            container,
            # Named after its node, like the node's other resources.
            resource_name=f"{node.name}-{self._name}-gpu",
            extra={
                "nodeSelector": {"kubernetes.io/hostname": node.name},
                "tolerations": [gpu_toleration()],
                "volumes": [{"name": "validations", "hostPath": {"path": "/run/nvidia/validations"}}],
            },
        )

    def _nccl(self) -> None:
        settings = self._args.acceptance
        if not self._args.team_queues:
            return
        namespace, queue = next(iter(sorted(self._args.team_queues.values())))
        gpu_nodes = [n for n in self._args.nodes if n.gpu is not None]
        ib_nodes = [n for n in gpu_nodes if n.infiniband is not None]
        if len(ib_nodes) >= 2 and self._args.rdma_resource_name:
            gpus = min(n.gpu.count for n in ib_nodes[:2] if n.gpu)
            job_name = "acceptance-nccl-ib"
            self._job(
                "gpu",
                "nccl-ib",
                settings.nccl,
                namespace,
                "",
                nccl_container(settings, gpus, settings.nccl.ib_floor_gbs, 2, f"{job_name}-0.{job_name}", self._args),
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
                f"{self._name}-nccl-ib-rendezvous",
                metadata={"name": job_name, "namespace": namespace, "labels": {CHECK_LABEL: "check"}},
                spec={
                    "clusterIP": "None",
                    "selector": {"ml-platform.io/check": "nccl-ib"},
                    "ports": [{"name": "rendezvous", "port": 29500}],
                },
                opts=pulumi.ResourceOptions(
                    parent=self, provider=self._args.provider, depends_on=[self._scripts[namespace]]
                ),
            )
        multi_gpu = [n for n in gpu_nodes if n.gpu and n.gpu.count >= 2]
        if multi_gpu:
            node = multi_gpu[0]
            assert node.gpu is not None
            self._job(
                "gpu",
                "nccl-nvlink",
                settings.nccl,
                namespace,
                node.name,
                nccl_container(settings, node.gpu.count, settings.nccl.nvlink_floor_gbs, 1, "", self._args),
                queue=queue,
                extra={
                    "nodeSelector": {"kubernetes.io/hostname": node.name},
                    "tolerations": [gpu_toleration()],
                    "volumes": NCCL_VOLUMES,
                },
            )

    def _storage(self) -> None:
        settings = self._args.acceptance
        check = settings.storage
        size = f"{check.size_mib * 2}Mi"
        for tier, class_name in sorted(self._args.storage_classes.items()):
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
            self._job(
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
        s3 = self._args.s3
        if s3 is not None:
            container = {
                "name": "check",
                "image": s3.image,
                "command": ["sh", "/checks/s3.sh"],
                "envFrom": [{"secretRef": {"name": rclone_secret(s3.source)}}],
                "env": [
                    {"name": "BUCKET", "value": s3.bucket},
                    {"name": "PREFIX", "value": s3.source},
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
            self._job(
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

    def _gang(self, team: str, namespace: str, queue: str) -> None:
        settings = self._args.acceptance
        pods = 2
        container = {
            "name": "check",
            "image": settings.tools_image,
            "command": ["sh", "/checks/gang.sh"],
            "env": [{"name": "QUEUE", "value": queue}, {"name": "PODS", "value": str(pods)}],
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}},
            "securityContext": RESTRICTED,
        }
        self._job(
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

    def _zabbix(self) -> None:
        settings = self._args.acceptance
        token = k8s.core.v1.Secret(
            f"{self._name}-zabbix-token",
            metadata={"name": "acceptance-zabbix-token", "namespace": settings.namespace},
            string_data={"token": pulumi.Output.secret(self._args.zabbix_token)},
            opts=pulumi.ResourceOptions(
                parent=self, provider=self._args.provider, depends_on=[self._scripts[settings.namespace]]
            ),
        )
        self._extra_deps["monitoring"] = [token, *self._args.monitoring_ready]
        container = {
            "name": "check",
            "image": settings.tools_image,
            "command": ["sh", "/checks/zabbix.sh"],
            "env": [
                {"name": "ZABBIX_URL", "value": self._args.zabbix_url},
                {"name": "HOSTS", "value": " ".join(self._args.monitored_hosts)},
                {"name": "MAX_AGE", "value": str(settings.monitoring.max_age_seconds)},
                # Ask again for hosts without data until a minute before the Job's deadline, so a node
                # that joined in this `up` has time to report, and the check still ends with its result.
                {"name": "WAIT", "value": str(max(0, settings.monitoring.timeout_seconds - 60))},
                {"name": "TOKEN_FILE", "value": "/secret/token"},
            ],
            "volumeMounts": [{"name": "token", "mountPath": "/secret", "readOnly": True}],
        }
        self._job(
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

    def _drift_probe(self) -> None:
        settings = self._args.acceptance
        labels = {"app.kubernetes.io/name": PROBE_NAME}
        container = {
            "name": "probe",
            "image": settings.tools_image,
            "command": ["sh", "/checks/drift-probe.sh"],
            "env": [
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "HOST", "value": "/host"},
                {"name": "FILES", "value": " ".join(DRIFT_FILES)},
                {"name": "INTERVAL", "value": str(settings.drift.interval_seconds)},
            ],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
            # Root to read the 0600 RKE2 config and to chroot for `rke2 --version`; nothing else.
            "securityContext": {
                "runAsUser": 0,
                "readOnlyRootFilesystem": True,
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"], "add": ["SYS_CHROOT", "DAC_READ_SEARCH"]},
            },
            "volumeMounts": [
                {"name": "host", "mountPath": "/host", "readOnly": True},
                {"name": "checks", "mountPath": "/checks"},
            ],
        }
        k8s.apps.v1.DaemonSet(
            f"{self._name}-drift-probe",
            metadata={"name": PROBE_NAME, "namespace": settings.namespace, "labels": labels},
            spec={
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [container],
                        # Every node, whatever its taints (GPU, control plane, cordoned).
                        "tolerations": [{"operator": "Exists"}],
                        "volumes": [
                            {"name": "host", "hostPath": {"path": "/"}},
                            {"name": "checks", "configMap": {"name": CHECKS_CONFIGMAP}},
                        ],
                    },
                },
            },
            opts=pulumi.ResourceOptions(
                parent=self, provider=self._args.provider, depends_on=[self._scripts[settings.namespace]]
            ),
        )


def exercised_settings(settings: Settings) -> dict[str, str]:
    """Check kind -> a hash of the settings that kind of check exercises (beyond what its own Job spec
    names: its node, GPU count, storage class, queue, host list). A change there runs those checks again;
    any other change (thresholds, alert channels, node labels, the RKE2 version, which upgrades through
    its own Plans) leaves them alone."""
    charts = settings.charts
    monitoring = settings.monitoring
    parts: dict[str, tuple[Any, ...]] = {
        # GPU nodes and NCCL: the GPU Operator and its driver, the InfiniBand/RDMA stack.
        "gpu": (settings.gpu, settings.network.infiniband, charts.gpu_operator, charts.network_operator),
        # Tiers 1 and 2: local NVMe and Ceph, their provisioners.
        "storage": (
            settings.gpu.tier1,
            settings.storage.ceph,
            charts.local_static_provisioner,
            charts.rook_ceph,
            charts.ceph_csi_drivers,
            charts.rook_ceph_cluster,
        ),
        # Tier 3: MinIO on the NAS hosts and its backup identities.
        "s3": (settings.storage.minio, settings.nas),
        # Gang admission through the teams' queues.
        "scheduling": (settings.scheduling, charts.kueue, charts.volcano),
        # Data reaching Zabbix: the server, web/API, agents; not thresholds or alert channels.
        "monitoring": (
            monitoring.model_dump(mode="json", exclude={"thresholds", "alerting"}),
            charts.zabbix,
            charts.kube_state_metrics,
        ),
    }
    return {
        kind: fingerprint(*(p if isinstance(p, dict) else p.model_dump(mode="json") for p in group))
        for kind, group in parts.items()
    }


def check_program(script: str) -> str:
    """What a check's ConfigMap key holds: the shared lib.sh, then the check (the drift probe, which
    reports no check result, and the Python helper alone)."""
    text = (CHECKS / script).read_text()
    if script in ("drift-probe.sh", "allreduce.py"):
        return text
    return (CHECKS / "lib.sh").read_text() + "\n" + text


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
