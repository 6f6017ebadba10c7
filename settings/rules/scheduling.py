"""Rules about teams and scheduling: namespaces, Pod Security, priority classes, GPU quotas."""

from __future__ import annotations

import ipaddress
from collections import Counter
from typing import TYPE_CHECKING

from settings.rules.base import rule
from settings.scheduling import CPU_FLAVOR, gpu_flavor_name, quantity_value

if TYPE_CHECKING:
    from settings.root import Settings


# Namespaces Kubernetes owns and those the components use without a setting (the Network Operator's,
# Calico's); the rest come from the settings (`platform_namespaces`).
SYSTEM_NAMESPACES = {
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "nvidia-network-operator",
    "tigera-operator",
    "calico-system",
    "calico-apiserver",
}


def team_namespaces(s: Settings) -> set[str]:
    """Every namespace the program creates for the teams (the only ones a team's objects can live in)."""
    return {ns for team in s.scheduling.teams for ns in team.namespace_names}


def not_created(path: str, namespace: str, consequence: str, choices: set[str]) -> str:
    """The problem of a setting naming a namespace the program does not create."""
    listed = ", ".join(sorted(choices)) or "no team has one: add a team"
    return (
        f"{path}: {namespace!r} is not a namespace the program creates, so {consequence}; name one of these ({listed})"
    )


def platform_namespaces(s: Settings) -> set[str]:
    """Every namespace the platform itself uses: the system ones and those the settings give the components."""
    return SYSTEM_NAMESPACES | set(component_namespaces(s).values())


def component_namespaces(s: Settings) -> dict[str, str]:
    """Settings path -> namespace, for each settings field named `namespace` or `...Namespace` outside lists."""
    found: dict[str, str] = {}

    def walk(model, path: str) -> None:
        for name in type(model).model_fields:
            value = getattr(model, name)
            if name == "namespace" or name.endswith("_namespace"):
                if isinstance(value, str):
                    found[f"{path}{name}"] = value
            elif hasattr(type(value), "model_fields"):
                walk(value, f"{path}{name}.")

    walk(s, "")
    return found


def flavor_capacity(s: Settings) -> dict[str, int]:
    """Schedulable `nvidia.com/gpu` per flavor: physical GPUs, times the time-slicing replicas."""
    replicas = s.gpu.time_slicing.replicas if s.gpu.time_slicing.enabled else 1
    capacity: Counter[str] = Counter({CPU_FLAVOR: 0} if s.cpu_nodes else {})
    for node in s.gpu_nodes:
        if node.gpu is not None:
            capacity[gpu_flavor_name(node.gpu.model)] += node.gpu.count * replicas
    return dict(capacity)


def _team_problems(s: Settings, add) -> None:
    sched = s.scheduling
    classes = Counter(c.name for c in sched.priority_classes)
    for i, pc in enumerate(sched.priority_classes):
        if classes[pc.name] > 1:
            add(f"scheduling.priorityClasses[{i}].name: {pc.name!r} is defined more than once; define it once")
    team_names = Counter(t.name for t in sched.teams)
    for i, team in enumerate(sched.teams):
        at = f"scheduling.teams[{i}]"
        if team_names[team.name] > 1:
            add(f"{at}.name: team {team.name!r} is defined more than once; merge the blocks or rename one")
        for flavor, quota in team.quotas.items():
            _lending_problems(f"{at}.quotas.{flavor}", quota, add)
            for limit in ("borrowing_limit", "lending_limit"):
                if getattr(quota, limit) is not None and sched.cohort is None:
                    camel = "borrowingLimit" if limit == "borrowing_limit" else "lendingLimit"
                    add(
                        f"{at}.quotas.{flavor}.{camel}: only applies inside a cohort and scheduling.cohort is null; "
                        f"set scheduling.cohort or remove {camel}"
                    )


def _lending_problems(at: str, quota, add) -> None:
    """Kueue accepts a lendingLimit above the nominal quota and then lends what the team does not have."""
    if quota.lending_limit is None:
        return
    nominal = {"gpus": quota.gpus, "cpu": quota.cpu, "memory": quota.memory}
    for field in ("gpus", "cpu", "memory"):
        limit = getattr(quota.lending_limit, field)
        if limit is None:
            continue
        value, cap = (
            (quantity_value(limit), quantity_value(nominal[field])) if field == "memory" else (limit, nominal[field])
        )
        if value > cap:
            add(
                f"{at}.lendingLimit.{field}: {limit} is above the nominal quota ({nominal[field]}); a team can lend "
                f"at most what it has: lower it to {nominal[field]} or less"
            )


def _gpu_model_problems(s: Settings, add) -> None:
    """One flavor per GPU model, compared case-insensitively (`gpu_flavor_name`); the flavor selects its
    nodes by the model label, whose value keeps the spelling: every node of a model must spell it alike,
    or the flavor would select only some of them."""
    first: dict[str, str] = {}
    for i, node in enumerate(s.nodes):
        if node.gpu is None:
            continue
        model = first.setdefault(gpu_flavor_name(node.gpu.model), node.gpu.model)
        if node.gpu.model != model:
            add(
                f"nodes[{i}].gpu.model: {node.gpu.model!r} is the GPU model {model!r} of other nodes spelled "
                f"differently; write {model!r} on every node of that model"
            )


def _operator_problems(s: Settings, add) -> None:
    ops = s.scheduling.training_operators
    if ops.trainer and not ops.jobset:
        add(
            "scheduling.trainingOperators.trainer: Kubeflow Trainer runs every TrainJob as a JobSet; "
            "set scheduling.trainingOperators.jobset: true as well"
        )


def _priority_class_problems(s: Settings, add) -> None:
    classes = {c.name for c in s.scheduling.priority_classes}
    for i, team in enumerate(s.scheduling.teams):
        for name in team.priority_classes:
            if name not in classes:
                add(
                    f"scheduling.teams[{i}].priorityClasses: {name!r} is not defined; add it to "
                    f"scheduling.priorityClasses (defined: {', '.join(sorted(classes)) or 'none'})"
                )


def _quota_problems(s: Settings, add) -> None:
    sched = s.scheduling
    capacity = flavor_capacity(s)
    requested: Counter[str] = Counter()
    for i, team in enumerate(sched.teams):
        for flavor, quota in team.quotas.items():
            at = f"scheduling.teams[{i}].quotas.{flavor}"
            if flavor not in capacity:
                add(
                    f"{at}: no node provides flavor {flavor!r}; use one of {', '.join(sorted(capacity))} "
                    "(GPU flavors are named after nodes[].gpu.model)"
                )
            elif flavor == CPU_FLAVOR and quota.gpus:
                add(f"{at}.gpus: the cpu flavor has no GPUs; set 0 and give GPU quota on a GPU flavor")
            requested[flavor] += quota.gpus
    if sched.allow_overcommit:
        return
    for flavor, total in sorted(requested.items()):
        if flavor in capacity and total > capacity[flavor]:
            teams = ", ".join(f"{t.name} {t.quotas[flavor].gpus}" for t in sched.teams if flavor in t.quotas)
            add(
                f"scheduling.teams: nominal GPU quotas on flavor {flavor!r} add up to {total} ({teams}) but "
                f"its nodes offer {capacity[flavor]} schedulable GPUs (time-slicing counted); lower the "
                "quotas or set scheduling.allowOvercommit: true"
            )


def _quota_reach_problems(s: Settings, add) -> None:
    """Quotas Kueue accepts but that can never do what they say: more GPUs than the whole inventory holds
    (overcommit or not), and flavors on which no workload can ever be admitted."""
    capacity = flavor_capacity(s)
    borrowing = s.scheduling.cohort is not None
    for i, team in enumerate(s.scheduling.teams):
        for flavor, quota in team.quotas.items():
            at = f"scheduling.teams[{i}].quotas.{flavor}"
            if flavor in capacity and quota.gpus > capacity[flavor]:
                add(
                    f"{at}.gpus: {quota.gpus} GPUs on {flavor!r}, but the inventory holds {capacity[flavor]} "
                    "schedulable there in all; no overcommit makes more exist: lower it to at most "
                    f"{capacity[flavor]}"
                )
            limit = quota.borrowing_limit
            for resource, empty in (("cpu", quota.cpu == 0), ("memory", _quantity_is_zero(quota.memory))):
                cap = getattr(limit, resource) if limit is not None else None
                no_borrowing = cap is not None and (cap == 0 if resource == "cpu" else _quantity_is_zero(cap))
                can_borrow = borrowing and not no_borrowing
                if empty and not can_borrow:
                    add(
                        f"{at}.{resource}: 0 with nothing to borrow; every pod requests CPU and memory, so no "
                        f"workload of team {team.name!r} can ever be admitted on {flavor!r}: give a {resource} "
                        "quota, or a cohort to borrow from"
                    )


def _tenancy_problems(s: Settings, add) -> None:
    """What the team namespaces' quota and network policy are built from: StorageClasses that exist, egress
    that leaves the cluster, and backup claims that fit their team's storage quota."""
    classes = {s.storage.ceph.block_storage_class, s.storage.ceph.shared_storage_class, s.gpu.tier1.storage_class_name}
    inside = [s.network.cluster_cidr, s.network.service_cidr]
    teams = {ns: (i, team) for i, team in enumerate(s.scheduling.teams) for ns in team.namespace_names}
    for i, team in enumerate(s.scheduling.teams):
        for klass in team.storage:
            if klass not in classes:
                add(
                    f"scheduling.teams[{i}].storage.{klass}: not a StorageClass of the platform; name one of "
                    f"{', '.join(sorted(classes))}"
                )
        for j, cidr in enumerate(team.egress_cidrs):
            network = ipaddress.ip_network(cidr)
            for cluster in inside:
                if network.subnet_of(ipaddress.ip_network(cluster)):
                    add(
                        f"scheduling.teams[{i}].egressCidrs[{j}]: {cidr} lies inside the cluster network {cluster}; "
                        "egressCidrs are for addresses outside the cluster (a team reaches its own pods already)"
                    )
    _ipoib_problems(s, add)
    web = s.monitoring.web
    if web.ingress_host and not web.ingress_class_name and not s.cluster.bundled_ingress:
        add(
            "monitoring.web.ingressHost: no ingress controller serves it (RKE2's bundled one is off, "
            "cluster.bundledIngress); set monitoring.web.ingressClassName to the site's own controller, or "
            "cluster.bundledIngress: true"
        )
    tenant_cpu = [n for n in s.nodes if n.role == "cpu" and not n.control_plane and not n.storage_host]
    cpu_teams = [i for i, team in enumerate(s.scheduling.teams) if CPU_FLAVOR in team.quotas]
    if s.scheduling.tenant_nodes_only and cpu_teams and not tenant_cpu:
        add(
            f"scheduling.teams[{cpu_teams[0]}].quotas.cpu: every CPU node is an RKE2 server or a Ceph storage host, "
            "and team workloads run on neither (scheduling.tenantNodesOnly): add CPU nodes without osdDevices, or "
            "set scheduling.tenantNodesOnly: false to let team pods share them"
        )
    for j, source in enumerate(s.storage.minio.backup.sources):
        if source.namespace in teams:
            i, team = teams[source.namespace]
            allowed = team.storage.get(source.storage_class, "0")
            if quantity_value(source.size) > quantity_value(allowed):
                add(
                    f"storage.minio.backup.sources[{j}].size: {source.size} of {source.storage_class} in "
                    f"{source.namespace}, but team {team.name!r} may claim {allowed} there; raise "
                    f"scheduling.teams[{i}].storage.{source.storage_class}"
                )


def _ipoib_problems(s: Settings, add) -> None:
    """A team's IPoIB range is a pool of its own (overlaps are the claims' to report) that must hold one nv-ipam
    per-node block for every GPU node. With the IPoIB network off the ranges are kept, unused."""
    ipoib = s.network.infiniband.ipoib_network
    gpu_nodes = [n for n in s.nodes if n.role == "gpu"]
    for i, team in enumerate(s.scheduling.teams):
        if team.ipoib_range is None or not ipoib.enabled or not gpu_nodes:
            continue
        at = f"scheduling.teams[{i}].ipoibRange"
        size = ipaddress.ip_network(team.ipoib_range).num_addresses
        if size < ipoib.per_node_block_size * len(gpu_nodes):
            add(
                f"{at}: {team.ipoib_range} holds {size} addresses, fewer than one block of "
                f"network.infiniband.ipoibNetwork.perNodeBlockSize ({ipoib.per_node_block_size}) for each of the "
                f"{len(gpu_nodes)} GPU nodes; choose a larger range"
            )


def _quantity_is_zero(quantity: str) -> bool:
    return float(quantity.rstrip("kmMGTPi") or 0) == 0


def _gang_check_problems(s: Settings, problem) -> None:
    """The acceptance gang check goes through Kueue: once admitted, its Job's deadline must end it before
    Kueue's waitForPodsReady timeout could evict it and suspend it again (a suspended Job's deadline stops)."""
    check, wait = s.acceptance.scheduling, s.scheduling.wait_for_pods_ready.timeout_seconds
    if check.enabled and check.timeout_seconds >= wait:
        problem(
            f"acceptance.scheduling.timeoutSeconds: {check.timeout_seconds} s is not shorter than "
            f"scheduling.waitForPodsReady.timeoutSeconds ({wait} s): Kueue could evict the gang check and suspend it "
            "again, and a suspended Job waits past its deadline; lower the check's timeout or raise Kueue's"
        )


RULES = (
    rule(_gang_check_problems, "the gang check's deadline against Kueue's waitForPodsReady", "acceptance scheduling"),
    rule(_team_problems, "each team's names, namespaces and Pod Security", "*"),
    rule(_priority_class_problems, "the teams' priority classes", "scheduling", "scheduling"),
    rule(_operator_problems, "the training operators", "scheduling", "scheduling"),
    rule(_gpu_model_problems, "one spelling per GPU model", "nodes", "nodes"),
    rule(_quota_problems, "the teams' GPU quotas against the GPU nodes", "scheduling nodes gpu", "nodes scheduling"),
    rule(_quota_reach_problems, "what each team's quota can admit", "scheduling nodes gpu", "nodes"),
    rule(
        _tenancy_problems,
        "the teams' storage classes, egress, backup claims and nodes",
        "scheduling storage gpu network nodes monitoring cluster",
        "nodes",
    ),
)
