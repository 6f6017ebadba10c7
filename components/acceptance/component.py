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
`up` with unchanged settings re-runs nothing. A check that failed, or that an `up` stopped waiting for,
runs again on the next `up`: every Job carries `pulumi.com/replaceUnready: "true"`, with which the provider
reads the live Job and replaces it when it is not ready (pulumi/pulumi-kubernetes#1575, #1578), instead of
waiting on the old failed Job for ever (pulumi/pulumi-kubernetes#856).

Where the checks run: the platform namespace `acceptance.namespace`, never a team's (a team could edit an
object there); the check programs (static files in `checks/` beside this module; what each check runs:
`checks.py`) reach the pods in immutable ConfigMaps named by their SHA-256, each checked against the digest
in the Job's pod template, which the API server does not let anyone change (`programs.py`).
No check object outlives the `up` that created it: a Job's `activeDeadlineSeconds` counts only while the
Job is not suspended (kubernetes.io/docs/concepts/workloads/controllers/job, "Suspending a Job": the timer
is stopped and reset while suspended), so only the gang check goes through Kueue, in a platform queue of
its own (see `checks.py`), and every other check is a plain Job in a namespace Kueue does not manage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.acceptance.checks import GANG_PODS, gang_check, storage_check, zabbix_check
from components.acceptance.drift import probe_environment
from components.acceptance.drivers import Driven, dns_name, driver_pod_spec, driver_program, driver_rights
from components.acceptance.gpu_checks import CHECK_LABEL, gpu_node_checks, nccl_check
from components.acceptance.programs import Programs, with_program
from components.hosts.remote import fingerprint
from components.namespaces import platform_namespace
from settings import NodeSettings, Settings
from settings.acceptance import AcceptanceSettings, Check

CHECKS = Path(__file__).parent / "checks"
SCRIPTS = ("gpu-node.sh", "nccl.sh", "storage.sh", "s3.sh", "gang.sh", "zabbix.sh", "drift-probe.sh")
# On each check Job: the checks' home namespace (which waits for the whole platform).
HOME_ANNOTATION = "ml-platform.io/acceptance-namespace"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
RUN_ANNOTATION = "ml-platform.io/acceptance-run"
REPLACE_UNREADY = "pulumi.com/replaceUnready"
PROBE_NAME = "drift-probe"


@dataclass(frozen=True)
class S3Target:
    """The backup identity of one backup source: the bucket, the backup image, the source (whose prefix
    is all that identity may write), the identity's rclone remote (environment) and the MinIO CA. The
    check copies the remote and the CA into the platform namespace it runs in."""

    bucket: str
    image: str
    source: str
    rclone_env: pulumi.Input[dict]
    ca_cert: pulumi.Input[str]
    delete: bool = True
    """False where the bucket locks objects: the identity may not delete, the check keeps one fixed key."""


@dataclass(frozen=True)
class AcceptanceChecksArgs:
    acceptance: AcceptanceSettings
    nodes: Sequence[NodeSettings]
    monitored_hosts: Sequence[str]
    """Every inventory host Zabbix must have fresh data from (cluster nodes and NAS hosts)."""
    rdma_resource_name: Optional[str]
    driver_version: Optional[str]
    """The NVIDIA driver version the GPU Operator installs (None: drivers preinstalled on the hosts)."""
    storage_classes: Mapping[str, str]
    """Storage class by tier key (`tier1`, `tier2Block`, `tier2Shared`), as in the stack output."""
    s3: Optional[S3Target]
    zabbix_url: str
    zabbix_token: Optional[pulumi.Input[str]]
    """The token of the read-only API user the monitoring component made for this check (None: no check)."""
    zabbix_ca: pulumi.Input[str]
    """PEM of the CA the Zabbix web certificate chains to ("" with plain HTTP)."""
    kueue_wait_seconds: Optional[int]
    """Kueue's waitForPodsReady timeout (None: Kueue not installed): the queued check must end first."""
    exercised: Mapping[str, str]
    """Check kind -> a hash of the settings that kind exercises (`exercised_settings`): a check runs
    again when its hash changes."""
    provider: k8s.Provider
    platform_ready: Sequence[pulumi.Resource]
    """The cluster-wide parts the checks exercise (releases, buckets, queues; not per-node steps, so
    adding a node does not touch every check): the checks start once they are all in place."""
    node_ready: Mapping[str, pulumi.Resource]
    """Node -> what makes it a labelled, tainted member (its Node patch): its group's GPU node check waits for it."""
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
        pulumi.ResourceOptions(parent=self, provider=args.provider)
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
        # Everything below waits for the namespace, which waits for the whole platform. That wait is a
        # data dependency (the namespace's name in an annotation on each Job), not `depends_on`: the SDK walks
        # every `depends_on` target's own `depends_on` graph to rule out cycles, and from the namespace that is
        # the whole platform, for each of hundreds of checks (a 1000-node preview spent a third of its time there).
        self.namespace = namespace
        self.home = namespace.metadata.apply(lambda meta: meta.name)
        self.resource_name = name
        self._driver_rights: Optional[list[pulumi.Resource]] = None
        self.programs = Programs(name, self.home, pulumi.ResourceOptions(parent=self, provider=args.provider))
        self.extra_deps: dict[str, list[pulumi.Resource]] = {}
        if settings.gpu_nodes.enabled and any(n.gpu is not None for n in args.nodes):
            gpu_node_checks(self, [n for n in args.nodes if n.gpu is not None])
        if settings.nccl.enabled:
            nccl_check(self)
        if settings.storage.enabled:
            storage_check(self)
        # The gang needs GANG_PODS CPU nodes at once (one pod per node): a smaller cluster cannot place it.
        if settings.scheduling.enabled and sum(n.gpu is None for n in args.nodes) >= GANG_PODS:
            gang_check(self)
        if settings.monitoring.enabled and args.monitored_hosts:
            if args.zabbix_token is None:
                raise ValueError("acceptance.monitoring: the check needs the read-only Zabbix token (none given)")
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
        pod_labels: Optional[dict[str, str]] = None,
        pod_annotations: Optional[dict[str, str]] = None,
        driven: Optional[Driven] = None,
        timeout: Optional[int] = None,
        report: Optional[dict[str, str]] = None,
    ) -> k8s.batch.v1.Job:
        """One check's Job: bounded by the check's timeout, never retried (a failure is the result), replaced
        on the next `up` when it is not ready (it failed, or an `up` stopped waiting for it). With `driven`,
        the Job runs the driver (drivers.py), and the container and `extra` are its worker pod's."""
        job_name = dns_name(f"acceptance-{check_id}", 63)
        seconds = timeout or check.timeout_seconds
        labels = {CHECK_LABEL: "check", **({QUEUE_LABEL: queue} if queue else {})}
        requests = containers_spec.get("resources", {}).get("requests", {})
        if not {"cpu", "memory"} <= set(requests):
            raise ValueError(f"acceptance check {check_id}: its container must request cpu and memory")
        own_env = containers_spec.get("env", [])
        env = [
            {"name": "CHECK", "value": check_id},
            {"name": "ADVISORY", "value": "true" if check.advisory else "false"},
        ]
        if not any(e["name"] == "NODE" for e in own_env):
            env.append({"name": "NODE", "value": node})
        container_in = dict(containers_spec)
        script = container_in.pop("script")
        # The program from its ConfigMap, checked against the digest in the pod template (programs.py).
        program = self.programs.deliver(script, check_program(script))
        pod_spec = {
            "restartPolicy": "Never",
            # No check talks to the Kubernetes API with the pod's identity (a driver, with its own, does).
            "automountServiceAccountToken": False,
            "containers": [{**container_in, "env": [*env, *own_env]}],
            **(extra or {}),
        }
        pod_spec = with_program(pod_spec, program, "sh")
        depends_on = [*self.extra_deps.get(check_id, []), program.config_map]
        if driven is not None:
            driver_env = [*env[:2], {"name": "NODE", "value": node}]  # what the driver's own result line names
            pod_spec = driver_pod_spec(self, driver_env, pod_spec, driven, seconds)
            depends_on += [*self.driver_rights(), self.programs.deliver("driver.py", driver_program()).config_map]
        spec: dict[str, Any] = {
            "backoffLimit": 0,
            "activeDeadlineSeconds": seconds,
            "template": {
                "metadata": {
                    "labels": {CHECK_LABEL: "check", "ml-platform.io/check": check_id, **(pod_labels or {})},
                    "annotations": {
                        RUN_ANNOTATION: f"{self.args.exercised[kind]}-{self.args.acceptance.run}",
                        **(pod_annotations or {}),
                    },
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
                "annotations": {
                    "pulumi.com/timeoutSeconds": str(seconds),
                    REPLACE_UNREADY: "true",
                    HOME_ANNOTATION: self.home,
                },
            },
            spec=spec,
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=self.args.provider,
                depends_on=depends_on or None,
                custom_timeouts=pulumi.CustomTimeouts(create=f"{seconds}s", update=f"{seconds}s"),
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
            "timeoutSeconds": str(seconds),
            "run": str(self.args.acceptance.run),
            **(report or {}),
        }
        return job

    def driver_rights(self) -> list[pulumi.Resource]:
        """The drivers' ServiceAccount and rights, created with the first driven check."""
        if self._driver_rights is None:
            self._driver_rights = driver_rights(self)
        return self._driver_rights

    def _drift_probe(self) -> None:
        settings = self.args.acceptance
        labels = {"app.kubernetes.io/name": PROBE_NAME}
        container = {
            "name": "probe",
            "image": settings.tools_image,
            "command": ["sh", "-c", check_program("drift-probe.sh"), "drift-probe"],
            "env": [
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "HOST", "value": "/host"},
                *({"name": k, "value": v} for k, v in probe_environment().items()),
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
            "volumeMounts": [{"name": "host", "mountPath": "/host", "readOnly": True}],
        }
        k8s.apps.v1.DaemonSet(
            f"{self.resource_name}-drift-probe",
            metadata={"name": PROBE_NAME, "namespace": self.home, "labels": labels},
            spec={
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [container],
                        # Every node, whatever its taints (GPU, control plane, cordoned).
                        "tolerations": [{"operator": "Exists"}],
                        # The host's network namespace: the `net.*` sysctls it reads are the host's (in its own
                        # pod's namespace they are the pod's: a host's bridge-nf-call-iptables=0 read back as 1).
                        "hostNetwork": True,
                        "automountServiceAccountToken": False,
                        "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
                    },
                },
            },
            opts=pulumi.ResourceOptions(parent=self, provider=self.args.provider),
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
        # Gang admission through Kueue and placement through Volcano.
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
    """What a check's container runs (`sh -c`): the shared lib.sh, then the check; the NCCL check also
    writes its Python helper (allreduce.py) to a temporary file first. The drift probe, which reports no
    check result, runs alone."""
    text = (CHECKS / script).read_text()
    if script == "drift-probe.sh":
        return text
    program = (CHECKS / "lib.sh").read_text() + "\n"
    if script == "nccl.sh":
        helper = (CHECKS / "allreduce.py").read_text()
        assert "\nALLREDUCE_PY\n" not in helper
        program += "ALLREDUCE_PY=$(mktemp -d)/allreduce.py\n"
        program += f"cat >\"$ALLREDUCE_PY\" <<'ALLREDUCE_PY'\n{helper}ALLREDUCE_PY\n"
    return program + text
