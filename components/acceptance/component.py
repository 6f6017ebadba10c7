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
(components/acceptance/checks/lib.sh) that `python -m stacks.acceptance_report` collects after the `up`.

A check runs again when the settings it exercises change (its pod template carries a hash of them,
`exercised_settings`: a changed Job template replaces the Job) or when `acceptance.run` is raised; a
change elsewhere (a threshold, a node's labels, the RKE2 version, another team) leaves it alone, and an
`up` with unchanged settings re-runs nothing. The check scripts are static files in `checks/` beside this
module (what each check runs: `checks.py`), mounted from a ConfigMap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.acceptance.checks import (
    CHECK_LABEL,
    gang_check,
    gpu_node_check,
    nccl_check,
    storage_check,
    zabbix_check,
)
from components.hosts.remote import fingerprint
from components.namespaces import platform_namespace
from settings import NodeSettings, Settings
from settings.acceptance import AcceptanceSettings, Check

CHECKS = Path(__file__).parent / "checks"
SCRIPTS = ("gpu-node.sh", "nccl.sh", "storage.sh", "s3.sh", "gang.sh", "zabbix.sh", "drift-probe.sh")
CHECKS_CONFIGMAP = "acceptance-checks"
# On each scripts ConfigMap: the checks' home namespace (which waits for the whole platform).
HOME_ANNOTATION = "ml-platform.io/acceptance-namespace"
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


@dataclass(frozen=True)
class S3Target:
    """The backup identity of one backup source: its namespace (where its rclone Secret and the CA
    are), the bucket, the backup image, and the source, whose prefix is all that identity may write."""

    namespace: str
    bucket: str
    image: str
    source: str
    delete: bool = True
    """Whether that identity may delete (not with object locking)."""


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
        self.args = args
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
        self.scripts = {
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
        self.resource_name = name
        self.extra_deps: dict[str, list[pulumi.Resource]] = {
            f"gpu-{node}": [ready] for node, ready in args.node_ready.items()
        }
        if settings.gpu_nodes.enabled:
            for node in [n for n in args.nodes if n.gpu is not None]:
                gpu_node_check(self, node)
        if settings.nccl.enabled:
            nccl_check(self)
        if settings.storage.enabled:
            storage_check(self)
        if settings.scheduling.enabled:
            for team, (ns, queue) in sorted(args.team_queues.items()):
                gang_check(self, team, ns, queue)
        if settings.monitoring.enabled and args.monitored_hosts:
            zabbix_check(self)
        if settings.drift.enabled:
            self._drift_probe()
        self.register_outputs({"results": self.results})

    # -- the checks -------------------------------------------------------------------------------

    def job(
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
                    "annotations": {RUN_ANNOTATION: f"{self.args.exercised[kind]}-{self.args.acceptance.run}"},
                },
                "spec": pod_spec,
            },
        }
        if pods > 1:
            spec.update(completions=pods, parallelism=pods, completionMode="Indexed")
        if queue:
            spec["suspend"] = True  # Kueue starts it once it admitted all its pods
        job = k8s.batch.v1.Job(
            resource_name or f"{self.resource_name}-{check_id}",
            metadata={
                "name": job_name,
                "namespace": namespace,
                "labels": labels,
                "annotations": {"pulumi.com/timeoutSeconds": str(check.timeout_seconds)},
            },
            spec=spec,
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=self.args.provider,
                depends_on=[self.scripts[namespace], *self.extra_deps.get(check_id, [])],
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

    def _drift_probe(self) -> None:
        settings = self.args.acceptance
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
            f"{self.resource_name}-drift-probe",
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
                parent=self, provider=self.args.provider, depends_on=[self.scripts[settings.namespace]]
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
