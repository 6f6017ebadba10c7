"""SchedulingStack: Kueue owns quota and admission; Volcano only places gangs; teams get queues and credentials.

Who decides what (docs/scheduling.md):
- Kueue decides *whether and when* a workload runs. Every team is a ClusterQueue in one cohort with
  nominal quotas per ResourceFlavor; fair sharing divides idle quota; a workload is admitted (its Job
  unsuspended) only when it fits. `waitForPodsReady` evicts and requeues (with backoff) an admitted
  workload whose pods do not all start in time, e.g. a gang Volcano cannot place.
- Volcano decides *where*, all pods at once (gang). It has its single permissive `default` queue (the
  scheduler creates it at start, no capability) and a scheduler configuration without the `preempt`
  and `reclaim` actions: it never evicts. A Volcano queue with capacity would be a second quota that
  disagrees with Kueue's (jobs admitted by Kueue stuck Pending in Volcano), so there is none.
- Kueue and Volcano have no supported integration (research wave2 part A.3): jobs that Kueue suspends
  (batch/Job, JobSet, PyTorchJob, RayJob) create no pods and so no Volcano PodGroup until admitted.

Flavors come from the inventory: `cpu` (CPU nodes) first, then one per GPU model present. A GPU flavor
carries the GPU taint in `nodeTaints` and no `tolerations`: Kueue gives it only to workloads that
tolerate the taint, so a CPU-only job can never take GPU-node quota, whatever the order or load. (With
flavor `tolerations` Kueue ignores `nodeTaints` at admission, and a CPU-only job would spill onto the
GPU flavor when the cpu flavor is full.) GPU pods carry the toleration anyway (DESIGN.md).

Per team: namespaces (Pod Security `baseline` for RDMA teams, `restricted` otherwise; team label,
Kueue-managed label), a LocalQueue `default` in each, a Role with RoleBindings for the team's
identity-provider groups (and, on sites without OIDC, its CI ServiceAccount), a LimitRange (ephemeral
storage only, `tenancy.limit_range`), the ResourceQuotas `objects` (counts) and `compute` (the backstop at the
team's Kueue ceiling, `tenancy.compute_quota`), and admission policies: priority, workload owners, resources,
and what the team may set at all (`<team>-tenant-surface` and `<team>-pod-devices`, generated from the
classification in `surface.py` by `admission.py`). No credential is made here: the CI ServiceAccount's token
is created by the team's own stack of the `teams/` program (docs/teams.md), so this stack holds no team secret.


"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.common import Wiring
from components.helm import release
from components.namespaces import REASON_ANNOTATION
from components.scheduling.admission import pod_devices_policy_spec, surface_policy_spec
from components.scheduling.config import (
    KUEUE_API,
    LOCAL_QUEUE,
    OBJECT_QUOTA,
    TEAM_LABEL,
    TEAM_ROLE,
    TEAM_RULES,
    TOPOLOGY,
    ci_account,
    cluster_queue_spec,
    kueue_frameworks,
    kueue_topology,
    kueue_values,
    namespace_labels,
    pod_security_reason,
    priority_policy_spec,
    resource_flavors,
    team_subjects,
    volcano_values,
)
from components.scheduling.network import CILIUM_API, TenantNetwork, cilium_api_policy, team_network_policies
from components.scheduling.tenancy import (
    compute_quota,
    limit_range,
    owner_policy_spec,
    placement_policy_spec,
    resources_policy_spec,
    services_policy_spec,
)
from settings import NodeSettings, SchedulingSettings
from settings.cluster import Oidc
from settings.scheduling import CPU_FLAVOR, Team


@dataclass(frozen=True)
class SchedulingStackArgs:
    scheduling: SchedulingSettings
    nodes: Sequence[NodeSettings]
    # The site's identity provider: team RoleBindings name its (prefixed) groups and no CI
    # ServiceAccount exists. None: teams reach the cluster with their CI ServiceAccount's token.
    oidc: Optional[Oidc]
    # Extended resources Kueue does not account (e.g. `rdma/ib`: a shared device, not a quota).
    unaccounted_resources: Sequence[str]
    # What the team namespaces' NetworkPolicies allow and refuse (components/scheduling/network.py).
    network: TenantNetwork
    # Every StorageClass of the platform: a team gets 0 of each it is not given (`teams[].storage`).
    storage_classes: Sequence[str]
    wiring: Wiring
    # The RDMA device plugin's extended resource (in `unaccounted_resources`); None without GPU nodes.
    rdma_resource: Optional[str] = None
    # The IPoIB networks (NetworkAttachmentDefinition names) each team's pods may attach; none: no IPoIB network.
    team_ib_networks: dict[str, list[str]] = dataclasses.field(default_factory=dict)


class SchedulingStack(pulumi.ComponentResource):
    """Volcano and Kueue releases, flavors, priority classes and every team's queue and credentials."""

    team_namespaces: dict[str, list[str]]
    namespace_resources: dict[str, pulumi.Resource]  # what objects other components put there wait for
    team_local_queues: dict[str, str]
    team_cluster_queues: dict[str, str]
    priority_classes: list[str]

    def __init__(self, name: str, args: SchedulingStackArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:scheduling:SchedulingStack", name, None, opts)
        wiring = args.wiring
        sched = args.scheduling
        self._name, self._args = name, args
        volcano_ns = wiring.in_cluster.namespace(
            f"{name}-volcano-namespace",
            sched.volcano_namespace,
            "baseline",
            "Volcano's containers add DAC_OVERRIDE (chart default_csc), which restricted refuses",
            parent=self,
        )
        kueue_ns = wiring.in_cluster.namespace(
            f"{name}-kueue-namespace",
            sched.kueue_namespace,
            "restricted",
            "Kueue's manager runs as non-root, seccomp RuntimeDefault, all capabilities dropped",
            parent=self,
        )
        volcano = release(
            f"{name}-volcano",
            wiring.charts.volcano,
            release_name="volcano",
            namespace=sched.volcano_namespace,
            values=volcano_values(),
            provider=wiring.in_cluster.provider,
            parent=self,
            depends_on=[*wiring.in_cluster.ready, volcano_ns],
        )
        self._kueue = release(
            f"{name}-kueue",
            wiring.charts.kueue,
            release_name="kueue",
            namespace=sched.kueue_namespace,
            values=kueue_values(sched, args.unaccounted_resources),
            provider=wiring.in_cluster.provider,
            parent=self,
            depends_on=[*wiring.in_cluster.ready, kueue_ns],
        )
        self._crs = pulumi.ResourceOptions(
            parent=self, provider=wiring.in_cluster.provider, depends_on=[self._kueue, volcano]
        )
        topology = kueue_topology(args.nodes)
        if topology is not None:
            self._custom("Topology", TOPOLOGY, topology)
        for flavor in resource_flavors(args.nodes, sched.tenant_nodes_only):
            gpu, tas = flavor["name"] != CPU_FLAVOR, "topologyName" in flavor["spec"]
            # Kueue refuses to remove or change topologyName once set, and with it nodeLabels and
            # tolerations (CRD CEL); a replacement cannot delete a flavor a ClusterQueue lists (its
            # resource-in-use finalizer waits forever). So such a change is a replacement of a protected
            # resource: the preview refuses it, and docs/scheduling.md ("Day 2") has the safe procedure.
            immutable = ["spec.topologyName", *(["spec.nodeLabels", "spec.tolerations"] if tas else [])]
            self._custom(
                "ResourceFlavor",
                flavor["name"],
                flavor["spec"],
                protect=gpu,
                replace_on_changes=immutable if gpu else None,
            )
        for pc in sched.priority_classes:
            WorkloadPriorityClass(
                f"{name}-priority-{pc.name}",
                metadata={"name": pc.name},
                value=pc.value,
                description=pc.description,
                opts=self._crs,
            )

        self.team_namespaces = {t.name: t.namespace_names for t in sched.teams}
        self.team_local_queues = {t.name: LOCAL_QUEUE for t in sched.teams}
        self.team_cluster_queues = {t.name: t.name for t in sched.teams}
        self.priority_classes = [pc.name for pc in sched.priority_classes]
        self.namespace_resources = {}
        for team in sched.teams:
            self._team(team)
        if sched.teams:
            self._placement_policy()
        self.register_outputs({"teamNamespaces": self.team_namespaces, "teamClusterQueues": self.team_cluster_queues})

    def _custom(
        self,
        kind: str,
        name: str,
        spec: dict[str, Any],
        namespace: Optional[str] = None,
        resource_name: Optional[str] = None,
        **opts: Any,
    ):
        metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
        return k8s.apiextensions.CustomResource(
            resource_name or f"{self._name}-{kind.lower()}-{namespace + '-' if namespace else ''}{name}",
            api_version=KUEUE_API,
            kind=kind,
            metadata=metadata,
            spec=spec,
            opts=pulumi.ResourceOptions.merge(self._crs, pulumi.ResourceOptions(**opts)),
        )

    def _team(self, team: Team) -> None:
        """Every object of one team. Per-namespace objects are keyed by the namespace alone, so renaming a
        team that keeps its namespaces keeps them (the aliases carry over the names they had when they
        were keyed by the team); the ClusterQueue, its LocalQueues and the team's policy are replaced."""
        args, prefix = self._args, f"{self._name}-team-{team.name}"
        in_cluster = args.wiring.in_cluster
        k8s_opts = in_cluster.options(parent=self)
        cluster_queue = self._custom(
            "ClusterQueue",
            team.name,
            cluster_queue_spec(team, args.scheduling, args.nodes),
        )
        ci_namespace = team.namespace_names[0]
        account = ci_account(team.name)
        for ns in team.namespace_names:
            key = f"{self._name}-ns-{ns}"

            def aliased(kind: str, ns: str = ns) -> list[pulumi.Alias]:
                return [pulumi.Alias(name=f"{prefix}-{kind}-{ns}")]

            namespace = self.namespace_resources[ns] = k8s.core.v1.Namespace(
                key,
                metadata={
                    "name": ns,
                    "labels": namespace_labels(team),
                    "annotations": {REASON_ANNOTATION: pod_security_reason(team)},
                },
                # Deleting a namespace deletes the team's work in it: dropping a team keeps it (docs/runbook.md).
                opts=pulumi.ResourceOptions.merge(
                    k8s_opts, pulumi.ResourceOptions(retain_on_delete=True, aliases=aliased("ns"))
                ),
            )
            in_ns = pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(depends_on=[namespace]))

            def opts(kind: str, in_ns: pulumi.ResourceOptions = in_ns) -> pulumi.ResourceOptions:
                return pulumi.ResourceOptions.merge(in_ns, pulumi.ResourceOptions(aliases=aliased(kind)))

            self._custom(
                "LocalQueue",
                LOCAL_QUEUE,
                {"clusterQueue": team.name},
                namespace=ns,
                resource_name=f"{key}-localqueue",
                depends_on=[cluster_queue, namespace],
                # `spec.clusterQueue` is immutable (CRD CEL): a team rename replaces the queue, the old one
                # first (same name in the same namespace). Pending workloads wait for the new one.
                replace_on_changes=["spec.clusterQueue"],
                delete_before_replace=True,
                aliases=[pulumi.Alias(name=f"{self._name}-localqueue-{ns}-{LOCAL_QUEUE}")],
            )
            k8s.rbac.v1.Role(
                f"{key}-role", metadata={"name": TEAM_ROLE, "namespace": ns}, rules=TEAM_RULES, opts=opts("role")
            )
            k8s.rbac.v1.RoleBinding(
                f"{key}-binding",
                metadata={"name": TEAM_ROLE, "namespace": ns},
                role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TEAM_ROLE},
                subjects=team_subjects(team, args.oidc, ci_namespace, args.scheduling.groups_prefix),
                opts=opts("binding"),
            )
            k8s.core.v1.LimitRange(
                f"{key}-limits",
                metadata={"name": "defaults", "namespace": ns},
                spec={"limits": [limit_range(team)]},
                opts=opts("limits"),
            )
            k8s.core.v1.ResourceQuota(
                f"{key}-objects",
                metadata={"name": "objects", "namespace": ns},
                spec={"hard": OBJECT_QUOTA},
                opts=opts("objects"),
            )
            k8s.core.v1.ResourceQuota(
                f"{key}-compute",
                metadata={"name": "compute", "namespace": ns},
                spec={"hard": compute_quota(team, args.scheduling, args.storage_classes, args.rdma_resource)},
                opts=in_ns,
            )
            self._network_policies(team, ns, key, in_ns)
            if ns == ci_namespace and args.oidc is None:
                # Its token is made by the team's own `teams/` stack, never here (docs/teams.md).
                k8s.core.v1.ServiceAccount(
                    f"{prefix}-ci",
                    metadata={"name": account, "namespace": ns},
                    opts=in_ns,
                )
        self._priority_policy(team, prefix, k8s_opts)
        groups = [
            s["name"]
            for s in team_subjects(team, args.oidc, ci_namespace, args.scheduling.groups_prefix)
            if s["kind"] == "Group"
        ]
        self._policy(
            f"{prefix}-owner",
            f"{team.name}-workload-owners",
            owner_policy_spec(team, groups, kueue_frameworks(args.scheduling.training_operators)),
            {"namespaceSelector": {"matchLabels": {TEAM_LABEL: team.name}}},
            k8s_opts,
        )
        self._policy(
            f"{prefix}-resources",
            f"{team.name}-workload-resources",
            resources_policy_spec(team, groups),
            {"namespaceSelector": {"matchLabels": {TEAM_LABEL: team.name}}},
            k8s_opts,
        )
        # What the team may set (components/scheduling/surface.py), and every pod's devices and networks.
        self._policy(
            f"{prefix}-surface",
            f"{team.name}-tenant-surface",
            surface_policy_spec(team, groups, args.team_ib_networks.get(team.name, [])),
            {"namespaceSelector": {"matchLabels": {TEAM_LABEL: team.name}}},
            k8s_opts,
        )
        self._policy(
            f"{prefix}-pod-devices",
            f"{team.name}-pod-devices",
            pod_devices_policy_spec(team, args.team_ib_networks.get(team.name, []), args.rdma_resource),
            {"namespaceSelector": {"matchLabels": {TEAM_LABEL: team.name}}},
            k8s_opts,
        )

    def _network_policies(self, team: Team, ns: str, key: str, opts: pulumi.ResourceOptions) -> None:
        net = self._args.network
        for policy, spec in team_network_policies(team, net):
            k8s.networking.v1.NetworkPolicy(
                f"{key}-netpol-{policy}", metadata={"name": policy, "namespace": ns}, spec=spec, opts=opts
            )
        if net.cni == "cilium":
            k8s.apiextensions.CustomResource(
                f"{key}-netpol-api-server",
                api_version=CILIUM_API,
                kind="CiliumNetworkPolicy",
                metadata={"name": "api-server", "namespace": ns},
                spec=cilium_api_policy(),
                opts=opts,
            )

    def _placement_policy(self) -> None:
        teams = {"namespaceSelector": {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]}}
        opts = self._args.wiring.in_cluster.options(parent=self)
        self._policy(
            f"{self._name}-team-placement", "team-placement", placement_policy_spec(self._args.nodes), teams, opts
        )
        self._policy(f"{self._name}-team-services", "team-services", services_policy_spec(), teams, opts)

    def _policy(
        self, resource: str, name: str, spec: dict[str, Any], match: dict[str, Any], opts: pulumi.ResourceOptions
    ) -> None:
        policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{resource}-policy", metadata={"name": name}, spec=spec, opts=opts
        )
        k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{resource}-binding",
            metadata={"name": name},
            spec={"policyName": name, "validationActions": ["Deny"], "matchResources": match},
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[policy])),
        )

    def _priority_policy(self, team: Team, prefix: str, opts: pulumi.ResourceOptions) -> None:
        allowed = team.priority_classes or [pc.name for pc in self._args.scheduling.priority_classes]
        policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{prefix}-priority-policy",
            metadata={"name": f"{team.name}-priority-classes"},
            spec=priority_policy_spec(team.name, allowed),
            opts=opts,
        )
        k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{prefix}-priority-binding",
            metadata={"name": f"{team.name}-priority-classes"},
            spec={
                "policyName": f"{team.name}-priority-classes",
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {TEAM_LABEL: team.name}}},
            },
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[policy])),
        )


class WorkloadPriorityClass(pulumi.CustomResource):
    """Kueue's WorkloadPriorityClass keeps `value` and `description` at the top level, which
    `apiextensions.CustomResource` (only `spec`) cannot express; the provider takes the object as given."""

    def __init__(
        self, name: str, *, metadata: dict[str, Any], value: int, description: str, opts: pulumi.ResourceOptions
    ) -> None:
        props = {
            "apiVersion": KUEUE_API,
            "kind": "WorkloadPriorityClass",
            "metadata": metadata,
            "value": value,
            "description": description,
        }
        super().__init__(f"kubernetes:{KUEUE_API}:WorkloadPriorityClass", name, props, opts)
