"""What SchedulingStack renders from its settings: Kueue's manager configuration and chart values, Volcano's
scheduler configuration, the resource flavors from the inventory, each team's ClusterQueue, the teams'
RBAC subjects and the priority admission policy. Plain values, no resources: `stack.py` creates those."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import yaml

from components.cluster.config import GPU_TAINT, ROLE_LABEL, TENANT_NODE_LABEL, node_labels
from components.namespaces import pod_security_labels
from settings import NodeSettings, SchedulingSettings
from settings.cluster import Oidc
from settings.nodes import TOPOLOGY_LABELS
from settings.scheduling import CPU_FLAVOR, FlavorQuota, ResourceLimit, Team, TrainingOperators, gpu_flavor_name

KUEUE_API = "kueue.x-k8s.io/v1beta2"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_MODEL_LABEL = "ml-platform.io/gpu-model"
TEAM_LABEL = "ml-platform.io/team"
# Kueue manages jobs only in namespaces with this label (opt-in: system namespaces are never managed).
MANAGED_LABEL = "ml-platform.io/kueue-managed"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
LOCAL_QUEUE = "default"  # Kueue's LocalQueueDefaulting: jobs without a queue label land here
TEAM_ROLE = "team-member"
HOSTNAME_LABEL = "kubernetes.io/hostname"
TOPOLOGY = "ib-fabric"
COVERED_RESOURCES = ["cpu", "memory", GPU_RESOURCE]
# Requested by pods but not Kueue's to count: the team namespaces' quota bounds it.
UNACCOUNTED_RESOURCES = ["ephemeral-storage"]

# The chart's own manager configuration (charts/kueue values.yaml at 0.19.2) that an override must keep:
# the probe, metrics and webhook ports the chart's Deployment and Services point at, leader election.
KUEUE_CHART_MANAGER_CONFIG: dict[str, Any] = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "health": {"healthProbeBindAddress": ":8081"},
    "metrics": {"bindAddress": ":8443"},
    "webhook": {"port": 9443},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    "controller": {
        "groupKindConcurrency": {
            "Job.batch": 5,
            "Pod": 5,
            "Workload.kueue.x-k8s.io": 10,
            "LocalQueue.kueue.x-k8s.io": 5,
            "ClusterQueue.kueue.x-k8s.io": 5,
            "ResourceFlavor.kueue.x-k8s.io": 1,
        }
    },
    "clientConnection": {"qps": 300, "burst": 500},
}
# Built into Kubernetes: always managed. The operators' kinds are added only when installed
# (`kueue_frameworks`): Kueue would otherwise wait for CRDs that never come and report them.
KUEUE_BUILTIN_FRAMEWORKS = ["batch/job", "pod"]  # pod: plain pods and pod groups (`kueue.x-k8s.io/pod-group-name`)

# Volcano's scheduler: the chart default (installer/helm/chart/volcano/config/volcano-scheduler.conf at
# v1.15.1) without change but stated here, so that no `preempt` or `reclaim` action can slip in: Volcano
# places, it never evicts. Kueue is the only preemptor.
VOLCANO_SCHEDULER_CONF = {
    "actions": "enqueue, allocate, backfill",
    "tiers": [
        {
            "plugins": [
                {"name": "priority"},
                {"name": "gang", "enablePreemptable": False},
                {"name": "conformance"},
            ]
        },
        {
            "plugins": [
                {"name": "overcommit"},
                {"name": "drf", "enablePreemptable": False},
                {"name": "predicates"},
                {"name": "proportion"},
                {"name": "nodeorder"},
                {"name": "binpack"},
            ]
        },
    ],
}

# What a team may do in its own namespaces: run and inspect its workloads. Nothing cluster-scoped, no
# RBAC, quota, LimitRange or LocalQueue changes (those are the platform's, from the settings).
TEAM_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [""],
        "resources": ["pods", "services", "configmaps", "secrets", "persistentvolumeclaims"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["pods/log", "events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/exec", "pods/portforward"], "verbs": ["create"]},
    {
        "apiGroups": ["batch", "jobset.x-k8s.io", "trainer.kubeflow.org", "ray.io"],
        "resources": ["jobs", "cronjobs", "jobsets", "trainjobs", "rayjobs", "rayclusters"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["kueue.x-k8s.io", "scheduling.volcano.sh"],
        "resources": ["workloads", "localqueues", "podgroups"],
        "verbs": ["get", "list", "watch"],
    },
]
# The kinds whose objects carry Kueue's priority-class label (the job kinds Kueue manages, pods, and the
# CronJobs that make Jobs).
PRIORITY_LABELLED = {
    "batch": ["jobs", "cronjobs"],
    "jobset.x-k8s.io": ["jobsets"],
    "trainer.kubeflow.org": ["trainjobs"],
    "ray.io": ["rayjobs", "rayclusters"],
    "": ["pods"],
}
# Where each of those kinds holds a pod spec's `priorityClassName` (`[]`: every item of a list); Kueue takes
# a workload's priority from it when no priority-class label is set, before any pod exists. From the kinds'
# schemas: Kubernetes' batch/v1 and core/v1, the JobSet v0.12.0 and KubeRay v1.7.0 CRDs (a TrainJob holds
# none: its pods come from the platform's runtime); tests/scheduling/test_tenancy.py walks the CRDs for them.
PRIORITY_CLASS_PATHS = {
    "pods": ["spec.priorityClassName"],
    "jobs": ["spec.template.spec.priorityClassName"],
    "cronjobs": ["spec.jobTemplate.spec.template.spec.priorityClassName"],
    "jobsets": ["spec.replicatedJobs[].template.spec.template.spec.priorityClassName"],
    "rayclusters": [
        "spec.headGroupSpec.template.spec.priorityClassName",
        "spec.workerGroupSpecs[].template.spec.priorityClassName",
    ],
    "rayjobs": [
        "spec.rayClusterSpec.headGroupSpec.template.spec.priorityClassName",
        "spec.rayClusterSpec.workerGroupSpecs[].template.spec.priorityClassName",
        "spec.submitterPodTemplate.spec.priorityClassName",
    ],
}
# Object counts per team namespace (the ResourceQuota `objects`): no load balancer or NodePort, and a ceiling on every
# kind a team or the controllers acting for it can multiply, so that no team fills etcd (each object may be up to
# 1.5 MiB) or the API server's lists. Generous for real work: a Job's Workload and pods are bounded by the Jobs.
OBJECT_QUOTA = {
    "services.loadbalancers": "0",
    "services.nodeports": "0",
    "persistentvolumeclaims": "200",
    # Non-terminal pods, a pod held at Kueue's gate included (stored, and a Volcano PodGroup each): without it one
    # RayCluster of 100000 tiny workers or an Indexed Job of that parallelism would fill etcd before Kueue says no.
    "pods": "2000",
    "count/services": "100",
    "count/configmaps": "200",
    "count/secrets": "200",
    "count/events": "5000",
    "count/jobs.batch": "1000",
    "count/cronjobs.batch": "50",
    "count/jobsets.jobset.x-k8s.io": "500",
    "count/trainjobs.trainer.kubeflow.org": "500",
    "count/rayjobs.ray.io": "200",
    "count/rayclusters.ray.io": "50",
    "count/workloads.kueue.x-k8s.io": "2000",
}


def kueue_manager_config(sched: SchedulingSettings, unaccounted_resources: Sequence[str]) -> dict[str, Any]:
    """Kueue's `Configuration` (config.kueue.x-k8s.io/v1beta2): the chart's own, plus what this platform needs."""
    wait = sched.wait_for_pods_ready
    requeuing: dict[str, Any] = {
        "timestamp": "Eviction",
        "backoffBaseSeconds": wait.backoff_base_seconds,
        "backoffMaxSeconds": wait.backoff_max_seconds,
    }
    if wait.backoff_limit_count is not None:
        requeuing["backoffLimitCount"] = wait.backoff_limit_count
    config = {
        **KUEUE_CHART_MANAGER_CONFIG,
        # Every job in a team namespace is managed, with or without a queue label (it then lands in the
        # namespace's `default` LocalQueue): a job cannot bypass its team's quota by omitting the label.
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": {"matchLabels": {MANAGED_LABEL: "true"}},
        "waitForPodsReady": {
            "timeout": f"{wait.timeout_seconds}s",
            "blockAdmission": False,
            "requeuingStrategy": requeuing,
        },
        "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]},
        "integrations": {"frameworks": kueue_frameworks(sched.training_operators)},
        # Quota, usage and limits per ClusterQueue in the metrics (kueue_cluster_queue_nominal_quota,
        # _resource_usage, _lending_limit, ...; apis/config/v1beta2/configuration_types.go): Zabbix reads them.
        "metrics": {**KUEUE_CHART_MANAGER_CONFIG["metrics"], "enableClusterQueueResources": True},
    }
    # Resources no ClusterQueue covers make a workload that requests them inadmissible ("resource ...
    # unavailable in ClusterQueue", Kueue 0.19.2 pkg/scheduler/flavorassigner): the namespace quota bounds
    # ephemeral storage (every container requests some: the LimitRange's default) and the RDMA device plugin's
    # shared slots (at most the team's GPU ceiling, one per container and only with a GPU: tenancy.compute_quota and
    # the `<team>-pod-devices` policy).
    config["resources"] = {"excludeResourcePrefixes": [*UNACCOUNTED_RESOURCES, *unaccounted_resources]}
    return config


def kueue_frameworks(operators: TrainingOperators) -> list[str]:
    """Kueue's integrations: the built-in kinds, and each installed operator's (framework names from
    Kueue 0.19.2 `apis/config/v1beta2/configuration_types.go`)."""
    frameworks = list(KUEUE_BUILTIN_FRAMEWORKS)
    if operators.jobset:
        frameworks.append("jobset.x-k8s.io/jobset")
    if operators.trainer:
        frameworks.append("trainer.kubeflow.org/trainjob")
    if operators.kuberay:
        frameworks += ["ray.io/rayjob", "ray.io/raycluster"]
    return frameworks


def kueue_values(sched: SchedulingSettings, unaccounted_resources: Sequence[str]) -> dict[str, Any]:
    """Values of the kueue chart; every key exists in its values.yaml at the pinned version."""
    config = yaml.safe_dump(kueue_manager_config(sched, unaccounted_resources), sort_keys=False)
    return {"managerConfig": {"controllerManagerConfigYaml": config}}


def volcano_values() -> dict[str, Any]:
    """Values of the volcano chart; every key exists in its values.yaml at the pinned version."""
    return {
        "custom": {
            "scheduler_config_override": yaml.safe_dump(VOLCANO_SCHEDULER_CONF, sort_keys=False),
            # Requests for every container (the chart sets none); `admission_resources` also sizes the
            # admission-init Job.
            "admission_resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            "scheduler_resources": {"requests": {"cpu": "200m", "memory": "256Mi"}},
            "controller_resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        }
    }


def resource_flavors(nodes: Sequence[NodeSettings], tenant_nodes_only: bool = True) -> list[dict[str, Any]]:
    """`cpu` first, then one flavor per GPU model present (sorted): the order ClusterQueues list them."""
    flavors: list[dict[str, Any]] = []
    if any(n.role == "cpu" for n in nodes):
        # Only CPU nodes that are neither servers nor storage hosts carry the tenant label (components/cluster).
        tenant = {TENANT_NODE_LABEL: "true"} if tenant_nodes_only else {}
        flavors.append({"name": CPU_FLAVOR, "spec": {"nodeLabels": {ROLE_LABEL: "cpu", **tenant}}})
    gpu_nodes = [n for n in nodes if n.role == "gpu" and n.gpu is not None]
    models = sorted({gpu_flavor_name(n.gpu.model): n for n in gpu_nodes}.items())
    for flavor, node in models:
        key, value, effect = _taint_parts(GPU_TAINT)
        spec: dict[str, Any] = {
            # The labels the bootstrap sets on the node (components/cluster/bootstrap.py), injected into admitted pods.
            "nodeLabels": {ROLE_LABEL: "gpu", GPU_MODEL_LABEL: node_labels(node)[GPU_MODEL_LABEL]},
            "nodeTaints": [{"key": key, "value": value, "effect": effect}],
        }
        if all(n.topology is not None for n in gpu_nodes):
            spec["topologyName"] = TOPOLOGY
        flavors.append({"name": flavor, "spec": spec})
    return flavors


def _taint_parts(taint: str) -> tuple[str, str, str]:
    key_value, effect = taint.rsplit(":", 1)
    key, _, value = key_value.partition("=")
    return key, value, effect


def kueue_topology(nodes: Sequence[NodeSettings]) -> Optional[dict[str, Any]]:
    """The IB fabric as a Kueue Topology (block > rack > host) when the GPU nodes carry a topology."""
    gpu_nodes = [n for n in nodes if n.role == "gpu"]
    if not gpu_nodes or any(n.topology is None for n in gpu_nodes):
        return None
    levels = [TOPOLOGY_LABELS["block"], TOPOLOGY_LABELS["rack"], HOSTNAME_LABEL]
    return {"levels": [{"nodeLabel": label} for label in levels]}


def _resource(name: str, nominal: Any, borrowing: Optional[ResourceLimit], lending: Optional[ResourceLimit]):
    field = {"cpu": "cpu", "memory": "memory", GPU_RESOURCE: "gpus"}[name]
    entry: dict[str, Any] = {"name": name, "nominalQuota": str(nominal)}
    for key, limit in (("borrowingLimit", borrowing), ("lendingLimit", lending)):
        value = getattr(limit, field) if limit is not None else None
        if value is not None:
            entry[key] = str(value)
    return entry


def _flavor_quota(flavor: str, quota: FlavorQuota) -> dict[str, Any]:
    nominal = {"cpu": quota.cpu, "memory": quota.memory, GPU_RESOURCE: quota.gpus}
    return {
        "name": flavor,
        "resources": [_resource(r, nominal[r], quota.borrowing_limit, quota.lending_limit) for r in COVERED_RESOURCES],
    }


def cluster_queue_spec(team: Team, sched: SchedulingSettings, nodes: Sequence[NodeSettings]) -> dict[str, Any]:
    """The team's ClusterQueue (v1beta2): its flavors in the platform's order, each with every covered resource."""
    order = [f["name"] for f in resource_flavors(nodes, sched.tenant_nodes_only)]
    flavors = [_flavor_quota(f, team.quotas[f]) for f in order if f in team.quotas]
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {TEAM_LABEL: team.name}},
        "queueingStrategy": "BestEffortFIFO",
        "fairSharing": {"weight": str(team.fair_sharing_weight)},
        # Nominal quota is a guarantee: a team reclaims what others borrowed from it, whatever their
        # priority; inside its own queue, higher priority preempts lower. (borrowWithinCohort is not
        # allowed with fair sharing.)
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        "resourceGroups": [{"coveredResources": list(COVERED_RESOURCES), "flavors": flavors}],
    }
    if sched.cohort is not None:
        spec["cohortName"] = sched.cohort
    return spec


def namespace_labels(team: Team) -> dict[str, str]:
    return {
        TEAM_LABEL: team.name,
        MANAGED_LABEL: "true",
        **pod_security_labels(team.pod_security_level),
        "pod-security.kubernetes.io/enforce-version": "latest",
    }


def pod_security_reason(team: Team) -> str:
    if team.pod_security_level == "baseline" and team.rdma:
        return (
            f"team {team.name} runs RDMA pods: the RDMA device plugin's resource, pinned memory under the hosts' "
            "unlimited memlock limit (no IPC_LOCK), images that run as root (restricted refuses them)"
        )
    return f"team {team.name}'s workloads, at the level scheduling.teams[].podSecurity sets for them"


def ci_account(team: str) -> str:
    """The team's CI ServiceAccount on sites without OIDC; its token comes from the team's `teams/` stack."""
    return f"{team}-ci"


def team_subjects(team: Team, oidc: Optional[Oidc], ci_namespace: str, groups_prefix: str) -> list[dict[str, str]]:
    """The team's groups as the API server sees them (with the OIDC groups prefix, or without OIDC the
    `groups_prefix` of the site's authenticator), and without OIDC its CI ServiceAccount."""
    prefix = oidc.groups_prefix if oidc is not None else groups_prefix
    groups = [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": prefix + g} for g in team.groups]
    if oidc is not None:
        return groups
    return [*groups, {"kind": "ServiceAccount", "name": ci_account(team.name), "namespace": ci_namespace}]


def _cel_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def priority_policy_spec(team: str, allowed: Sequence[str]) -> dict[str, Any]:
    """Admission refuses a workload of the team that asks for a priority it may not have: a Kueue
    priority class outside `allowed` (label `kueue.x-k8s.io/priority-class`), or any pod PriorityClass
    (`system-node-critical` would put a team pod above the platform's own and let it preempt them)."""
    label = f"object.metadata.labels['{PRIORITY_LABEL}']"
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [group],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": resources,
                }
                for group, resources in PRIORITY_LABELLED.items()
            ]
        },
        "validations": [
            {
                "expression": f"!has(object.metadata.labels) || !('{PRIORITY_LABEL}' in object.metadata.labels)"
                f" || {label} in {_cel_list(allowed)}",
                "message": f"team {team} may use the priority classes {', '.join(allowed) or '(none defined)'} only "
                f"(label {PRIORITY_LABEL})",
            },
            *(
                {
                    "expression": f"request.resource.resource != '{resource}' || ({_absent('object', path)})",
                    "message": f"{resource} of team {team} may not name a PriorityClass ({path.replace('[]', '[*]')}); "
                    f"ask for priority with the label {PRIORITY_LABEL}",
                }
                for resource, paths in PRIORITY_CLASS_PATHS.items()
                for path in paths
            ),
        ],
    }


def _absent(expr: str, path: str) -> str:
    """CEL: the field at `path` below `expr` is unset or empty, in every item of each `[]` list on the way."""
    return holds_at(expr, path, lambda field: f"{field} == ''")


def holds_at(expr: str, path: str, body: Callable[[str], str], depth: int = 0) -> str:
    """CEL: `body(field)` holds for the field at `path` below `expr`, in every item of each `[]` list on
    the way; an absent field holds."""
    head, _, rest = path.partition(".")
    name = head.removesuffix("[]")
    field = f"{expr}.{name}"
    if head.endswith("[]"):
        item = f"i{depth}"
        inner = body(item) if not rest else holds_at(item, rest, body, depth + 1)
        return f"!has({field}) || {field}.all({item}, {inner})"
    if not rest:
        return f"!has({field}) || ({body(field)})"
    return f"!has({field}) || ({holds_at(field, rest, body, depth)})"
