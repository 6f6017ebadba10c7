"""What keeps one team from harming another or the platform: its namespaces' capacity backstop (a
ResourceQuota sized from its Kueue quota, the LimitRange) and the admission policies that close the ways
around Kueue and around the platform's hosts. Plain values, no resources: `stack.py` creates those; the
NetworkPolicies are in `network.py`. docs/teams.md ("What a team cannot do") says the same for people.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from components.cluster.config import CONTROL_PLANE_TAINT, STORAGE_TAINT, taint_key
from components.scheduling.config import (
    GPU_RESOURCE,
    HOSTNAME_LABEL,
    PRIORITY_CLASS_PATHS,
    PRIORITY_LABELLED,
    holds_at,
)
from components.scheduling.surface import SERVICE_SPEC, SERVICE_TYPES, refused_fields
from settings import NodeSettings, SchedulingSettings
from settings.scheduling import FlavorQuota, Team, quantity_value

# Labels and taint keys that mark the platform's own hosts: a team pod may neither select nor tolerate them.
# The taints the Node patch puts on servers and storage hosts; RKE2's role labels on servers (and its
# `master`/`etcd` taints on sites that add them); `CriticalAddonsOnly`, the taint RKE2's docs give for
# dedicated servers; the platform's own role labels. TENANT_NODE_LABEL, on the other CPU nodes, is what the
# cpu ResourceFlavor selects (components/cluster/config.py `managed_labels`).
PLATFORM_HOST_KEYS = [
    taint_key(CONTROL_PLANE_TAINT),
    "node-role.kubernetes.io/master",
    "node-role.kubernetes.io/etcd",
    "CriticalAddonsOnly",
    "ml-platform.io/control-plane",
    taint_key(STORAGE_TAINT),
]

# Kueue v0.19.2 lets through, ungated and uncounted, any object whose controlling owner is of a kind it
# manages (pkg/controller/jobs/pod/pod_webhook.go: "Do not suspend a Pod whose owner is already managed by
# Kueue", via jobframework.FindAncestorJobManagedByKueue in pkg/controller/jobframework/reconciler.go, which
# stops at a UID mismatch but calls "same-namespace ownership spoofing out of scope"; the owner kinds are the
# enabled integrations' exact apiVersion/kind, integrationmanager.go `getJobTypeForOwner`). The apiVersion and
# kind of each framework this platform enables (`kueue_frameworks`).
FRAMEWORK_KINDS = {
    "batch/job": ("batch", "jobs", "batch/v1", "Job"),
    "pod": ("", "pods", "v1", "Pod"),
    "jobset.x-k8s.io/jobset": ("jobset.x-k8s.io", "jobsets", "jobset.x-k8s.io/v1alpha2", "JobSet"),
    "trainer.kubeflow.org/trainjob": ("trainer.kubeflow.org", "trainjobs", "trainer.kubeflow.org/v1alpha1", "TrainJob"),
    "ray.io/rayjob": ("ray.io", "rayjobs", "ray.io/v1", "RayJob"),
    "ray.io/raycluster": ("ray.io", "rayclusters", "ray.io/v1", "RayCluster"),
}


def quantity(value: float) -> str:
    """Bytes in the largest binary unit that divides them exactly (`15Ti`, `28800Gi`)."""
    number = int(round(value))
    for suffix, size in (("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if number and number % size == 0:
            return f"{number // size}{suffix}"
    return str(number)


def _field(resource: str) -> str:
    return {"cpu": "cpu", "memory": "memory", GPU_RESOURCE: "gpus"}[resource]


def _amount(quota: Any, resource: str) -> float:
    value = getattr(quota, _field(resource))
    return quantity_value(value) if resource == "memory" else float(value)


def _limit(limit: Any, resource: str) -> Optional[float]:
    value = getattr(limit, _field(resource)) if limit is not None else None
    if value is None:
        return None
    return quantity_value(value) if resource == "memory" else float(value)


def ceiling(team: Team, sched: SchedulingSettings, flavor: str, resource: str) -> float:
    """The most of `resource` on `flavor` Kueue can ever have admitted for the team: its nominal quota plus
    what it may borrow, which is at most its borrowingLimit and at most what the other teams of the cohort
    lend there (their lendingLimit, or their whole nominal quota)."""
    own: FlavorQuota = team.quotas[flavor]
    nominal = _amount(own, resource)
    if sched.cohort is None:
        return nominal
    lendable = 0.0
    for other in sched.teams:
        if other.name != team.name and flavor in other.quotas:
            theirs = other.quotas[flavor]
            lent = _limit(theirs.lending_limit, resource)
            lendable += lent if lent is not None else _amount(theirs, resource)
    borrowing = _limit(own.borrowing_limit, resource)
    return nominal + (lendable if borrowing is None else min(borrowing, lendable))


def team_ceilings(team: Team, sched: SchedulingSettings) -> dict[str, float]:
    """`ceiling` summed over the team's flavors, per resource Kueue covers."""
    return {r: sum(ceiling(team, sched, f, r) for f in team.quotas) for r in ("cpu", "memory", GPU_RESOURCE)}


def compute_quota(
    team: Team, sched: SchedulingSettings, storage_classes: Sequence[str], rdma_resource: Optional[str] = None
) -> dict[str, str]:
    """The namespace ResourceQuota `compute`: the backstop for what bypasses Kueue, sized at the team's Kueue
    ceiling, so admitted work always fits and unadmitted pods cannot add to it. Each of a team's namespaces
    gets the whole team's ceiling: Kueue may admit all of it in any one of them.

    CPU and memory are counted twice, as requests and as limits, at the same ceiling: the team's own
    containers declare limits equal to their requests (`resources_policy_spec`), so for the work Kueue
    admits the two sums are the same number Kueue accounted. A quota on limits also makes the API server
    refuse any pod of the namespace without CPU and memory limits: nothing runs uncounted."""
    ceilings = team_ceilings(team, sched)
    cpu, memory = quantity_value_text(ceilings["cpu"]), quantity(ceilings["memory"])
    hard = {
        "requests.cpu": cpu,
        "limits.cpu": cpu,
        "requests.memory": memory,
        "limits.memory": memory,
        f"requests.{GPU_RESOURCE}": quantity_value_text(ceilings[GPU_RESOURCE]),
        "requests.ephemeral-storage": team.ephemeral_storage,
        "requests.storage": quantity(sum(quantity_value(v) for v in team.storage.values())),
    }
    if rdma_resource:
        # The RDMA device plugin's shared slots (rdmaHcaMax per node) are outside Kueue (excludeResourcePrefixes):
        # at most one per GPU the team can hold, none for a team without RDMA; the pod-devices policy allows a
        # container one slot, and only with a GPU.
        hard[f"requests.{rdma_resource}"] = quantity_value_text(ceilings[GPU_RESOURCE]) if team.rdma else "0"
    for klass in sorted({*storage_classes, *team.storage}):
        allowed = team.storage.get(klass, "0")
        hard[f"{klass}.storageclass.storage.k8s.io/requests.storage"] = allowed
        if quantity_value(allowed) == 0:
            hard[f"{klass}.storageclass.storage.k8s.io/persistentvolumeclaims"] = "0"
    return hard


def quantity_value_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{int(value * 1000)}m"


def limit_range(team: Team) -> dict[str, Any]:
    """Per container: an ephemeral-storage request when none is set (the namespace quota counts it), and a
    limit, by default and at most, of the team's whole ephemeral budget.

    No CPU or memory defaults, on purpose. Kueue v0.19.2 fills a container's missing requests from the
    LimitRange's `defaultRequest` *before* it copies limits into missing requests
    (pkg/workload/resources.go `AdjustResources`), while the API server copies limits into requests first
    (Pod defaulting) and the LimitRanger fills only what is still missing. With a `defaultRequest` (or a
    `default` or `max`, from which the API server derives one), a container that sets only limits, say
    96 CPUs, is charged the default, 1 CPU, by Kueue, and requests 96 when it runs
    (kubernetes-sigs/kueue#15020, fixed after v0.19.2). Without them Kueue charges what the pod requests; the admission
    policy requires the limits a default would have given."""
    budget = team.ephemeral_storage
    return {
        "type": "Container",
        "defaultRequest": {"ephemeral-storage": "1Gi"},
        "default": {"ephemeral-storage": budget},
        "max": {"ephemeral-storage": budget},
    }


def _cel_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def managed_kinds(frameworks: Sequence[str]) -> list[tuple[str, str, str, str]]:
    return [FRAMEWORK_KINDS[f] for f in frameworks]


def team_identity(team: Team, groups: Sequence[str]) -> str:
    """CEL: the request comes from one of the team's identities: a member of its groups (as the API server
    sees them, prefixed), or any ServiceAccount of its namespaces (whoever may create pods there may run
    them as any of those accounts)."""
    accounts = " || ".join(
        f"request.userInfo.username.startsWith('system:serviceaccount:{ns}:')" for ns in team.namespace_names
    )
    if not groups:
        return accounts
    return (
        f"{accounts} || (has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in {_cel_list(groups)}))"
    )


def owner_policy_spec(team: Team, groups: Sequence[str], frameworks: Sequence[str]) -> dict[str, Any]:
    """Admission refuses a team identity's workload object that names an owner of a kind Kueue manages
    (see FRAMEWORK_KINDS): only the operators' controllers create such children, and Kueue skips them."""
    kinds = managed_kinds(frameworks)
    owners = _cel_list([f"{api}/{kind}" for _, _, api, kind in kinds])
    groups_of = sorted({group for group, *_ in kinds})
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [group],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": sorted(r for g, r, *_ in kinds if g == group),
                }
                for group in groups_of
            ]
        },
        "matchConditions": [{"name": "team-identity", "expression": team_identity(team, groups)}],
        "validations": [
            {
                "expression": "!has(object.metadata.ownerReferences) || !object.metadata.ownerReferences.exists(r, "
                f"r.apiVersion + '/' + r.kind in {owners})",
                "message": f"team {team.name} may not create workloads owned by a workload (ownerReferences to "
                f"{', '.join(f'{api}/{kind}' for _, _, api, kind in kinds)}): Kueue would neither queue nor count "
                "them; submit the workload itself",
            }
        ],
    }


# Where each kind a team submits holds its pod specs (PRIORITY_CLASS_PATHS less the field), and where a
# TrainJob holds the resources of its trainer container: its other containers come from the platform's
# runtime, and its runtime patches cannot carry resources (Trainer v2.3.0 CRD).
POD_SPEC_PATHS = {
    kind: [path.removesuffix("priorityClassName").removesuffix(".") for path in paths]
    for kind, paths in PRIORITY_CLASS_PATHS.items()
}
TRAINER_RESOURCES = "spec.trainer.resourcesPerNode"
COUNTED = ("cpu", "memory")


def _declared(resources: str) -> str:
    """CEL: `resources` (a ResourceRequirements) sets CPU and memory limits, and a request of either, if
    set, is written as its limit (a request left out defaults to the limit)."""
    return f"has({resources}.limits) && {_cel_list(COUNTED)}.all(k, k in {resources}.limits) && {_equal(resources)}"


def _equal(resources: str) -> str:
    """CEL: a CPU or memory request in `resources` is written as its limit."""
    return (
        f"(!has({resources}.requests) || {_cel_list(COUNTED)}.all(k, !(k in {resources}.requests) || "
        f"(has({resources}.limits) && k in {resources}.limits && "
        f"string({resources}.requests[k]) == string({resources}.limits[k]))))"
    )


def _pod_spec_declared(spec: str) -> str:
    """CEL: every container and init container declares its resources, and the pod's own resources
    (`spec.resources`, pod-level, on by default since Kubernetes 1.34), if set, request what they limit:
    Kueue and the quota then count the pod-level figures, and they agree."""
    containers = [
        f"(!has({spec}.{field}) || {spec}.{field}.all(c, has(c.resources) && {_declared('c.resources')}))"
        for field in ("initContainers", "containers")
    ]
    return " && ".join([*containers, f"(!has({spec}.resources) || {_equal(f'{spec}.resources')})"])


def resources_policy_spec(team: Team, groups: Sequence[str]) -> dict[str, Any]:
    """Admission refuses a team identity's pod or workload whose containers do not declare their CPU and
    memory limits with any request equal to them. That is what makes Kueue's accounting, the pods' real
    requests and the namespace quota's two counts one number (see `compute_quota`, `limit_range`), and
    it refuses at submission what would otherwise be admitted by Kueue and then refused pod by pod by the
    quota. A RayJob that runs its submitter as a Job names the submitter's template, and SidecarMode is
    refused: KubeRay's own submitter container (ray-operator `GetDefaultSubmitterContainer`, also what
    SidecarMode adds to the head pod whatever the template says) requests 500m/200Mi under limits of
    1 CPU/1Gi."""
    rule = (
        "every container and init container must set resources.limits.cpu and .memory, and any request of "
        "them equal to the limit (or none: it defaults to the limit); pod-level resources, if set, likewise"
    )
    validations = [
        {
            # A pod only when created: a team may label a pod an operator made with requests of its own.
            "expression": f"request.resource.resource != '{kind}' || "
            + ("request.operation != 'CREATE' || " if kind == "pods" else "")
            + f"({holds_at('object', path, _pod_spec_declared)})",
            "message": f"{kind} of team {team.name}, at {path.replace('[]', '[*]')}: {rule}",
        }
        for kind, paths in POD_SPEC_PATHS.items()
        for path in paths
    ]
    trainer = "object.spec.trainer"
    validations += [
        {
            "expression": f"request.resource.resource != 'trainjobs' || (has({trainer}) && "
            f"has({trainer}.resourcesPerNode) && {_declared(f'{trainer}.resourcesPerNode')})",
            "message": f"trainjobs of team {team.name}: {TRAINER_RESOURCES} must set limits.cpu and .memory, and any "
            "request of them equal to the limit",
        },
        {
            "expression": "request.resource.resource != 'rayjobs' || (has(object.spec.submissionMode) && "
            "object.spec.submissionMode in ['HTTPMode', 'InteractiveMode']) || ((!has(object.spec.submissionMode) "
            "|| object.spec.submissionMode == 'K8sJobMode') && has(object.spec.submitterPodTemplate))",
            "message": f"rayjobs of team {team.name}: in K8sJobMode (the default) set spec.submitterPodTemplate, its "
            "container with limits; SidecarMode is refused. KubeRay's own submitter requests 500m CPU/200Mi under "
            "limits of 1 CPU/1Gi",
        },
    ]
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": kinds}
                for group, kinds in PRIORITY_LABELLED.items()
            ]
        },
        "matchConditions": [{"name": "team-identity", "expression": team_identity(team, groups)}],
        "validations": validations,
    }


def placement_policy_spec(nodes: Sequence[NodeSettings]) -> dict[str, Any]:
    """Admission refuses a pod in a team namespace that names a node, tolerates the platform hosts' taints
    (or every taint) or selects a server or storage host by label or name. Every pod, whoever creates it:
    a Job's pods are made by the job controller from the team's template."""
    hosts = sorted(n.name for n in nodes if n.control_plane or n.storage_host)
    keys, names = _cel_list(PLATFORM_HOST_KEYS), _cel_list(hosts)
    required = "object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    terms = (
        f"!has(object.spec.affinity) || !has(object.spec.affinity.nodeAffinity) || !has({required}) || "
        f"{required}.nodeSelectorTerms.all(t, "
        f"(!has(t.matchExpressions) || t.matchExpressions.all(e, !(e.key in {keys}) && !(e.key == '{HOSTNAME_LABEL}' "
        f"&& e.operator == 'In' && has(e.values) && e.values.exists(v, v in {names})))) && "
        "(!has(t.matchFields) || t.matchFields.all(e, !(e.key == 'metadata.name' && e.operator == 'In' "
        f"&& has(e.values) && e.values.exists(v, v in {names})))))"
    )
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}
            ]
        },
        "validations": [
            {
                "expression": "request.operation != 'CREATE' || !has(object.spec.nodeName) "
                "|| object.spec.nodeName == ''",
                "message": "a team pod may not name its node (spec.nodeName): the scheduler places it",
            },
            {
                "expression": "!has(object.spec.tolerations) || !object.spec.tolerations.exists(t, "
                f"(has(t.key) && t.key in {keys}) || ((!has(t.key) || t.key == '') && has(t.operator) "
                "&& t.operator == 'Exists'))",
                "message": "a team pod may not tolerate the taints of the platform's servers and storage hosts "
                f"({', '.join(PLATFORM_HOST_KEYS)}), nor every taint (a toleration without a key)",
            },
            {
                "expression": "!has(object.spec.nodeSelector) || object.spec.nodeSelector.all(k, !(k in "
                f"{keys}) && !(k == '{HOSTNAME_LABEL}' && object.spec.nodeSelector[k] in {names}))",
                "message": "a team pod may not select the platform's servers or storage hosts (spec.nodeSelector)",
            },
            {
                "expression": terms,
                "message": "a team pod may not require the platform's servers or storage hosts "
                "(spec.affinity.nodeAffinity)",
            },
        ],
    }


def services_validations() -> list[dict[str, str]]:
    """The Service fields the classification refuses (surface.SERVICE_SPEC), besides externalIPs."""
    fields = [f for f in refused_fields(SERVICE_SPEC) if f != "externalIPs"]
    return [
        {
            "expression": " && ".join(f"!has(object.spec.{f})" for f in fields)
            + f" && (!has(object.spec.type) || object.spec.type in {_cel_list(SERVICE_TYPES)})",
            "message": "a Service in a team namespace must be of type ClusterIP (or headless) without "
            f"{', '.join(fields)}: rule services (an ExternalName Service points cluster DNS, and any proxy that "
            "follows it, at a name outside the team; NodePorts and load balancers open it to the network)",
        }
    ]


def services_policy_spec() -> dict[str, Any]:
    """Admission refuses a Service in a team namespace that sets `spec.externalIPs` (and what `services_validations`
    refuses). kube-proxy (and
    Cilium's replacement of it) sends traffic for such an address, from every pod and every node, to the
    Service's endpoints, whoever created it (CVE-2020-8554): a team could draw the NAS's, a proxy's or an
    upstream DNS server's traffic to its own pods, or drop it there."""
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["services"],
                }
            ]
        },
        "validations": [
            {
                "expression": "!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0",
                "message": "a Service in a team namespace may not set spec.externalIPs: the address's traffic from "
                "every pod and node would reach this Service (CVE-2020-8554)",
            },
            *services_validations(),
        ],
    }
