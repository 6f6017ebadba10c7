"""`ml-platform:scheduling`: Kueue (quota and admission) and Volcano (gang placement), and the teams.

Kueue is the only quota owner: every team is a ClusterQueue in one cohort with nominal quotas per
ResourceFlavor. Flavors come from the inventory: `cpu` for the CPU nodes and one per GPU model
present (`gpu_flavor_name`), so teams name flavors here by those names.
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal, Optional

from pydantic import AfterValidator, Field

from settings.declare import Claim, destroys_on_decrease, none, replaces, rerender, restarts, restricts
from settings.quantities import parse_quantity
from settings.types import ByteSize, Image, IPv4Network, Model, Name, Namespace

CPU_FLAVOR = "cpu"


def gpu_flavor_name(model: str) -> str:
    """The ResourceFlavor name of a GPU model: `NVIDIA H100 80GB HBM3` -> `nvidia-h100-80gb-hbm3`."""
    return re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")[:63].rstrip("-")


def quantity_value(value: str) -> float:
    """A validated quantity as a number (bytes for memory), to compare two of them (`settings.quantities`)."""
    return float(parse_quantity(value))


def _groups_prefix(value: str) -> str:
    """Not empty, no whitespace, not starting with `system:`."""
    if not value or value.startswith("system:") or any(c.isspace() for c in value):
        raise ValueError(f"{value!r} cannot prefix group names; write e.g. 'oidc:' (not empty, not system:)")
    return value


# A borrowing or lending limit set where there was none, or lowered: what the cohort may borrow shrinks.
_LIMIT = (
    "borrowing shrinks: a lower lending limit leaves the cohort less to borrow, a lower borrowing limit lets the team "
    "borrow less; workloads running on borrowed quota above it may be preempted, and the namespaces' quota ceilings "
    "(nominal plus borrowable) drop, refusing new pods above them"
)


class ResourceLimit(Model):
    """A borrowing or lending limit per resource; an unset resource has no limit."""

    gpus: Optional[int] = Field(default=None, ge=0)
    """`nvidia.com/gpu` (time-sliced replicas count)"""
    cpu: Optional[int] = Field(default=None, ge=0)
    """CPU cores"""
    memory: Optional[ByteSize] = None
    """memory quantity, e.g. `512Gi`"""

    CHANGES: ClassVar = {
        "gpus": restricts(_LIMIT, narrows="limit"),
        "cpu": restricts(_LIMIT, narrows="limit"),
        "memory": restricts(_LIMIT, narrows="limit"),
    }


class FlavorQuota(Model):
    """A team's nominal quota on one flavor: what it is guaranteed there."""

    gpus: int = Field(default=0, ge=0)
    """nominal `nvidia.com/gpu` on this flavor (time-sliced replicas when time-slicing is on); 0 on the `cpu` flavor"""
    cpu: int = Field(ge=0)
    """nominal CPU cores on this flavor's nodes"""
    memory: ByteSize
    """nominal memory on this flavor's nodes, e.g. `2Ti`"""
    borrowing_limit: Optional[ResourceLimit] = None
    """at most this much above nominal may be borrowed from the cohort (unset: no limit; needs `scheduling.cohort`)"""
    lending_limit: Optional[ResourceLimit] = None
    """at most this much of the nominal quota is lent to the cohort (unset: all of it; needs `scheduling.cohort`)"""

    CHANGES: ClassVar = {
        "gpus": destroys_on_decrease("admitted workloads above the new quota may be preempted (Kueue)"),
        "cpu": destroys_on_decrease("admitted workloads above the new quota may be preempted (Kueue)"),
        "memory": destroys_on_decrease("admitted workloads above the new quota may be preempted (Kueue)"),
        "borrowing_limit": restricts(_LIMIT, narrows="limit"),
        "lending_limit": restricts(_LIMIT, narrows="limit"),
    }


class Team(Model):
    """One team: its namespaces, queue, quota per flavor and the groups that may use it."""

    name: Name
    """team name: ClusterQueue name and default namespace"""
    namespaces: list[Namespace] = []
    """the team's namespaces (default: one named like the team)"""
    groups: list[str] = []
    """identity-provider groups bound to the team's role in its namespaces"""
    quotas: dict[Name, FlavorQuota] = Field(min_length=1)
    """nominal quota per flavor name (`cpu`, or a GPU model's flavor)"""
    fair_sharing_weight: int = Field(default=1, ge=0, le=1000)
    """share of the cohort's unused quota relative to other teams"""
    pod_security: Optional[Literal["restricted", "baseline"]] = None
    """Pod Security Standard enforced on the team's namespaces; unset: `baseline` for an RDMA team, `restricted`
    otherwise (no team namespace is `privileged`)"""
    priority_classes: list[Name] = []
    """the priority classes the team's workloads may name (admission refuses others; default: all)"""
    rdma: bool = False
    """the team runs RDMA pods: `baseline` (they request the RDMA device plugin's resource and pin memory under the
    hosts' unlimited memlock limit, without IPC_LOCK)"""
    storage: dict[Name, ByteSize] = {}
    """requested storage the team may claim per StorageClass, e.g. `{tier2-shared: 50Ti}`; a platform class not listed
    here gets 0 (the namespace quota refuses its claims)"""
    ephemeral_storage: ByteSize = "1Ti"
    """requested ephemeral storage (container writable layers, emptyDir, logs) of all the team's pods in one namespace
    (Kueue does not account it: this namespace quota is its only limit)"""
    ipoib_range: Annotated[Optional[IPv4Network], Claim("cidr", network="ipoib-pods")] = None
    """the team's own IPoIB address pool (with `network.infiniband.ipoibNetwork.enabled`) and a network per namespace,
    `<ipoibNetwork.name>-<namespace>`: its pods attach only those; unset: the team has no IPoIB network (kept,
    unused, while the IPoIB network is off)"""
    egress_cidrs: list[IPv4Network] = []
    """addresses outside the cluster the team's pods may reach (a proxy, a dataset mirror, `0.0.0.0/0`); the cluster's
    pod and service networks, its nodes and the NAS stay unreachable whatever is listed here"""

    CHANGES: ClassVar = {
        "name": replaces(
            "the team's ClusterQueue and queues (a new team); without namespaces, a new namespace of the new name: the "
            "old one is kept with its objects (retainOnDelete), the workloads do not move",
            by="releases",
        ),
        "namespaces": destroys_on_decrease(
            "a namespace taken off the list (an empty list is one named like the team) leaves the team (role "
            "bindings, queue, quota, policies); the namespace itself is kept with its objects (retainOnDelete)",
            empty_means_name=True,
        ),
        "groups": restricts("members of a group taken off lose the team's role in its namespaces (RoleBindings)"),
        "quotas": destroys_on_decrease("a flavor taken off: workloads admitted on it may be evicted"),
        "fair_sharing_weight": rerender("the ClusterQueue's weight"),
        "pod_security": restricts(
            "pods the tighter level forbids are refused when next created (running pods stay; a restarted or "
            "rescheduled one fails)",
            narrows="baseline<restricted",
        ),
        "priority_classes": restricts(
            "the team's jobs naming a class no longer allowed are refused at admission", narrows="allowlist"
        ),
        "rdma": rerender("the namespaces' Pod Security level"),
        "storage": destroys_on_decrease(
            "the namespaces' storage quota: new claims beyond it are refused (existing claims are kept)"
        ),
        "ephemeral_storage": destroys_on_decrease(
            "the namespaces' ResourceQuota: new pods beyond the lower ephemeral-storage quota are refused (running "
            "pods stay)"
        ),
        "ipoib_range": replaces(
            "the team's IPoIB pool and networks: attached pods keep their old addresses until restarted, new pods get "
            "the new range"
        ),
        "egress_cidrs": restricts(
            "the team's pods lose the ranges taken off (egress NetworkPolicy): open connections to them are cut"
        ),
    }

    def extra_claims(self) -> list[tuple[Claim, str, str]]:
        """Without `namespaces`, the team's namespace is its name."""
        return [] if self.namespaces else [(Claim("namespace"), self.name, "name")]

    @property
    def namespace_names(self) -> list[str]:
        return list(self.namespaces) or [self.name]

    @property
    def pod_security_level(self) -> Literal["restricted", "baseline"]:
        """Least privilege that works: RDMA pods need `baseline` (restricted forbids running as root, which
        NCCL/verbs images do), the rest `restricted`."""
        return self.pod_security or ("baseline" if self.rdma else "restricted")


class PriorityClass(Model):
    name: Name
    """WorkloadPriorityClass name (job label `kueue.x-k8s.io/priority-class`)"""
    value: int = Field(ge=-(2**31), le=2**31 - 1)
    """higher is admitted first and may preempt lower"""
    description: str = Field(default="", max_length=2048)
    """what the class is for"""

    CHANGES: ClassVar = {
        "name": replaces("the WorkloadPriorityClass (jobs naming the old one are refused)"),
        "value": restricts(
            "the preemption order: workloads of a class now below another may be preempted by it", narrows="any"
        ),
        "description": rerender("the WorkloadPriorityClass"),
    }


class WaitForPodsReady(Model):
    """Kueue evicts an admitted workload whose pods are not all ready in time (e.g. a gang that
    Volcano cannot place) and requeues it with exponential backoff."""

    timeout_seconds: int = Field(default=900, ge=30)
    """time for all pods to become ready"""
    backoff_base_seconds: int = Field(default=60, ge=1)
    """first requeue delay, doubled per eviction"""
    backoff_max_seconds: int = Field(default=3600, ge=1)
    """longest requeue delay"""
    backoff_limit_count: Optional[int] = Field(default=None, ge=0)
    """requeues before the workload is deactivated (unset: forever)"""

    CHANGES: ClassVar = {
        "timeout_seconds": destroys_on_decrease(
            "admitted workloads whose pods are not all ready within the shorter timeout are evicted and requeued (the "
            "Kueue controller restarts with it)"
        ),
        "backoff_base_seconds": restarts("the Kueue controller (its configuration)", "cluster"),
        "backoff_max_seconds": restarts("the Kueue controller (its configuration)", "cluster"),
        "backoff_limit_count": destroys_on_decrease(
            "workloads that reach the lower requeue count are deactivated (the Kueue controller restarts with it)"
        ),
    }


class TrainingOperators(Model):
    """The operators of the job kinds teams submit for distributed training, each optional. Kueue manages
    exactly the kinds enabled in this block (plus batch/Job and plain pods)."""

    jobset: bool = False
    """JobSet (`jobset.x-k8s.io/JobSet`); Kubeflow Trainer needs it"""
    trainer: bool = False
    """Kubeflow Trainer v2 (`trainer.kubeflow.org/TrainJob`) and its `torch-distributed` ClusterTrainingRuntime; needs
    `jobset`"""
    kuberay: bool = False
    """KubeRay (`ray.io/RayJob`, `RayCluster`), gang-placed by Volcano"""
    trainer_runtime_image: Image = "docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
    """Default image of the `torch-distributed` ClusterTrainingRuntime (the Trainer 2.3.0 chart's
    `files/runtimes/torch-distributed.yaml`); a TrainJob sets its own in `spec.trainer.image`"""
    jobset_namespace: Namespace = "jobset-system"
    """Namespace of the JobSet controller."""
    trainer_namespace: Namespace = "kubeflow-system"
    """Namespace of the Trainer controller."""
    kuberay_namespace: Namespace = "kuberay-system"
    """Namespace of the KubeRay operator."""

    CHANGES: ClassVar = {
        "jobset": destroys_on_decrease("off: the JobSet release is uninstalled (see the CRDs it deletes in Danger)"),
        "trainer": destroys_on_decrease("off: the Trainer release is uninstalled (its CRDs with it)"),
        "kuberay": destroys_on_decrease("off: the KubeRay release is uninstalled"),
        "trainer_runtime_image": rerender("the ClusterTrainingRuntime's default image"),
        "jobset_namespace": replaces("the JobSet release in another namespace (uninstall, install)"),
        "trainer_namespace": replaces("the Trainer release in another namespace (uninstall, install)"),
        "kuberay_namespace": replaces("the KubeRay release in another namespace (uninstall, install)"),
    }


class SchedulingSettings(Model):
    volcano_namespace: Namespace = "volcano-system"
    """Namespace of Volcano."""
    kueue_namespace: Namespace = "kueue-system"
    """Namespace of Kueue."""
    cohort: Optional[Name] = "ml-platform"
    """the cohort every team's ClusterQueue joins (borrowing idle quota); null: no borrowing"""
    allow_overcommit: bool = False
    """allow nominal GPU quotas to add up to more than a flavor's schedulable GPUs"""
    wait_for_pods_ready: WaitForPodsReady
    """eviction and requeue of admitted workloads whose pods never start"""
    priority_classes: list[PriorityClass] = []
    """WorkloadPriorityClasses jobs may name in `kueue.x-k8s.io/priority-class`"""
    training_operators: TrainingOperators
    """optional operators for the distributed training job kinds"""
    teams: list[Team] = []
    """the teams sharing the cluster, one block each"""
    tenant_nodes_only: bool = True
    """Team workloads on CPU nodes run only on those that are neither RKE2 servers nor Ceph storage hosts (the cpu
    ResourceFlavor selects them by the label `ml-platform.io/tenant-workloads`); false only on a small cluster whose
    CPU nodes all are one or the other (the lab), where team pods then share the servers and storage hosts"""
    groups_prefix: Annotated[str, AfterValidator(_groups_prefix)] = "oidc:"
    """Prepended to `teams[].groups` in the teams' RoleBindings when `cluster.oidc` is unset (with it,
    `cluster.oidc.groupsPrefix` applies): the prefix your authenticator gives group names, so that a group an
    unprefixed source can claim (a client certificate's O=) never matches a team; never `system:`"""

    CHANGES: ClassVar = {
        "volcano_namespace": replaces("the Volcano release in another namespace (uninstall, install)"),
        "kueue_namespace": replaces("the Kueue release in another namespace (uninstall, install)", by="releases"),
        "cohort": rerender("every ClusterQueue's cohort (borrowing)"),
        "allow_overcommit": none("a guard the settings rules read"),
        "tenant_nodes_only": restricts(
            "where team CPU pods may run (the cpu flavor's node labels, the tenant label on CPU nodes): on, team pods "
            "no longer fit servers and storage hosts; off, they land there",
            narrows="any",
        ),
        "groups_prefix": restricts(
            "every team RoleBinding's group subjects: tokens whose groups carry the old prefix lose the teams' roles",
            narrows="any",
        ),
        "priority_classes": destroys_on_decrease("a class taken off is deleted; jobs naming it are refused"),
        "teams": destroys_on_decrease(
            "a team taken off: its ClusterQueue, LocalQueues, quotas, role bindings and CI account are deleted; its "
            "namespaces are kept with everything in them (retainOnDelete)",
            by="releases",
        ),
    }
