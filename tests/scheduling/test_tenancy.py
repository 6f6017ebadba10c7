"""A team is a tenant: what the plan's policies, quotas and RBAC let one team do to another and to the platform.

Evaluated on the plan the engine would receive: the NetworkPolicies by a NetworkPolicy evaluator written from
the Kubernetes docs (tests/netpol.py) and checked on the cases of the upstream e2e suite; the admission
policies by a real CEL implementation (cel-python); the quota against the Kueue quotas; and each team
principal's effective rights from the plan's RBAC.
"""

from __future__ import annotations

from typing import Any

import celpy
import pytest

from components.cluster.config import TENANT_NODE_LABEL, managed_labels
from components.scheduling.config import PRIORITY_CLASS_PATHS, TEAM_LABEL
from components.scheduling.tenancy import FRAMEWORK_KINDS, PLATFORM_HOST_KEYS, ceiling
from settings import load
from settings.scheduling import quantity_value
from stacks import engine
from tests.conftest import evaluate, problems, stack_doc
from tests.netpol import Cluster, Endpoint
from tests.upstream import crd_schema

VAP = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
VAPB = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"


# ---------------------------------------------------------------------------------------------
# The network: a NetworkPolicy evaluator and the plan's policies
# ---------------------------------------------------------------------------------------------


def _pod(ns: str, name: str, ip: str, **labels: str) -> Endpoint:
    return Endpoint(name=f"{ns}/{name}", ip=ip, namespace=ns, labels=labels)


# The upstream e2e matrix (kubernetes test/e2e/network/netpol/network_policy.go): namespaces x, y, z labelled
# `ns: <name>`, pods a, b, c labelled `pod: <name>`, each serving TCP 80 and 81 (named serve-80-tcp, serve-81-tcp).
E2E_NAMESPACES = {n: {"ns": n} for n in "xyz"}
E2E_PODS = {
    f"{ns}/{p}": Endpoint(
        name=f"{ns}/{p}",
        ip=f"10.42.{i}.{j + 10}",
        namespace=ns,
        labels={"pod": p},
        ports={"serve-80-tcp": (80, "TCP"), "serve-81-tcp": (81, "TCP")},
    )
    for i, ns in enumerate("xyz")
    for j, p in enumerate("abc")
}


def _policy(ns: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": "p"}, "spec": spec}


def _ingress(pod: dict[str, str], peers: list[dict[str, Any]] | None, ports: list[dict[str, Any]] | None = None):
    rule: dict[str, Any] = {}
    if peers is not None:
        rule["from"] = peers
    if ports is not None:
        rule["ports"] = ports
    return {"podSelector": {"matchLabels": pod}, "policyTypes": ["Ingress"], "ingress": [rule]}


A = {"pod": "a"}
NOT_X = {"matchExpressions": [{"key": "ns", "operator": "NotIn", "values": ["x"]}]}
# case: (policies in x, port, protocol, {(from, to) expected to differ from "allowed"} as denied pairs,
# or a predicate over (from, to)); loopback always allowed.
E2E_CASES: dict[str, tuple[list[dict[str, Any]], int, Any]] = {
    "should support a 'default-deny-ingress' policy": (
        [{"podSelector": {}, "policyTypes": ["Ingress"]}],
        80,
        lambda f, t: t.namespace != "x",
    ),
    "should support a 'default-deny-all' policy": (
        [{"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}],
        80,
        lambda f, t: f.namespace != "x" and t.namespace != "x",
    ),
    "should enforce policy to allow traffic from pods within server namespace based on PodSelector": (
        [_ingress(A, [{"podSelector": {"matchLabels": {"pod": "b"}}}])],
        80,
        lambda f, t: t.name != "x/a" or f.name == "x/b",
    ),
    "should enforce policy to allow traffic only from a different namespace, based on NamespaceSelector": (
        [_ingress(A, [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}])],
        80,
        lambda f, t: t.name != "x/a" or f.namespace == "y",
    ),
    "should enforce policy based on PodSelector with MatchExpressions": (
        [_ingress(A, [{"podSelector": {"matchExpressions": [{"key": "pod", "operator": "In", "values": ["b"]}]}}])],
        80,
        lambda f, t: t.name != "x/a" or f.name == "x/b",
    ),
    "should enforce policy based on NamespaceSelector with MatchExpressions": (
        [
            _ingress(
                A, [{"namespaceSelector": {"matchExpressions": [{"key": "ns", "operator": "In", "values": ["y"]}]}}]
            )
        ],
        80,
        lambda f, t: t.name != "x/a" or f.namespace == "y",
    ),
    "should enforce policy based on PodSelector or NamespaceSelector": (
        [_ingress(A, [{"namespaceSelector": NOT_X}, {"podSelector": {"matchLabels": {"pod": "b"}}}])],
        80,
        lambda f, t: t.name != "x/a" or f.namespace != "x" or f.name == "x/b",
    ),
    "should enforce policy based on PodSelector and NamespaceSelector": (
        [_ingress(A, [{"namespaceSelector": NOT_X, "podSelector": {"matchLabels": {"pod": "b"}}}])],
        80,
        lambda f, t: t.name != "x/a" or f.name in ("y/b", "z/b"),
    ),
    "should enforce policy based on Multiple PodSelectors and NamespaceSelectors": (
        [
            _ingress(
                A,
                [
                    {
                        "namespaceSelector": NOT_X,
                        "podSelector": {"matchExpressions": [{"key": "pod", "operator": "In", "values": ["b", "c"]}]},
                    }
                ],
            )
        ],
        80,
        lambda f, t: t.name != "x/a" or (f.namespace != "x" and f.labels["pod"] in ("b", "c")),
    ),
    "should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and "
    "NamespaceSelector": (
        [_ingress(A, [{"namespaceSelector": {"matchLabels": {"ns": "y"}}, "podSelector": {"matchLabels": A}}])],
        80,
        lambda f, t: t.name != "x/a" or f.name == "y/a",
    ),
    "should enforce policy based on Ports (port 81 allowed)": (
        [_ingress(A, [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}], [{"port": 81}])],
        81,
        lambda f, t: t.name != "x/a" or f.namespace == "y",
    ),
    "should enforce policy based on Ports (port 80 denied)": (
        [_ingress(A, [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}], [{"port": 81}])],
        80,
        lambda f, t: t.name != "x/a",
    ),
    "should enforce multiple, stacked policies with overlapping podSelectors": (
        [
            _ingress(A, [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}], [{"port": 81}]),
            _ingress(A, [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}], [{"port": 80}]),
        ],
        80,
        lambda f, t: t.name != "x/a" or f.namespace == "y",
    ),
    "should support allow-all policy": (
        [{"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}],
        80,
        lambda f, t: True,
    ),
    "should allow ingress access on one named port (81 allowed)": (
        [{"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"ports": [{"port": "serve-81-tcp"}]}]}],
        81,
        lambda f, t: True,
    ),
    "should allow ingress access on one named port (80 denied)": (
        [{"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"ports": [{"port": "serve-81-tcp"}]}]}],
        80,
        lambda f, t: t.namespace != "x",
    ),
    "should allow ingress access from namespace on one named port": (
        [_ingress(A, [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}], [{"port": "serve-80-tcp"}])],
        80,
        lambda f, t: t.name != "x/a" or f.namespace == "y",
    ),
    "should allow egress access on one named port": (
        [{"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"ports": [{"port": "serve-80-tcp"}]}]}],
        81,
        lambda f, t: f.namespace != "x",
    ),
    "should deny egress from all pods in a namespace": (
        [{"podSelector": {}, "policyTypes": ["Egress"]}],
        80,
        lambda f, t: f.namespace != "x",
    ),
    "should not allow access by TCP when a policy specifies only UDP": (
        [_ingress(A, None, [{"protocol": "UDP", "port": 81}])],
        81,
        lambda f, t: t.name != "x/a",
    ),
    "should enforce except clause while egress access to server in CIDR block": (
        [
            {
                "podSelector": {"matchLabels": A},
                "policyTypes": ["Egress"],
                "egress": [{"to": [{"ipBlock": {"cidr": "10.42.0.0/16", "except": ["10.42.1.11/32"]}}]}],
            }
        ],
        80,
        lambda f, t: f.name != "x/a" or t.name != "y/b",
    ),
    "endPort: a port range allows every port in it and no other (81 in 80-81)": (
        [_ingress(A, None, [{"port": 80, "endPort": 81}])],
        81,
        lambda f, t: True,
    ),
    "endPort: a port range allows every port in it and no other (81 not in 79-80)": (
        [_ingress(A, None, [{"port": 79, "endPort": 80}])],
        81,
        lambda f, t: t.name != "x/a",
    ),
}


@pytest.mark.parametrize("case", sorted(E2E_CASES))
def test_the_evaluator_agrees_with_the_upstream_netpol_e2e_matrix(case):
    specs, port, allowed = E2E_CASES[case]
    cluster = Cluster(E2E_NAMESPACES, [_policy("x", s) for s in specs])
    for source in E2E_PODS.values():
        for dest in E2E_PODS.values():
            if source is not dest:
                assert cluster.allowed(source, dest, port) == allowed(source, dest), (case, source.name, dest.name)


# The world around the team namespaces: the platform's pods and hosts a team pod could try to reach.
NODE = "10.20.1.20"  # a CPU node (kubelet, NodePorts, Ceph daemons on the host network)
SERVER = "10.20.1.11"  # an RKE2 server: the API server
NAS = "10.20.2.11"  # a NAS host: MinIO
OUTSIDE = "203.0.113.5"
PLATFORM_PODS = [
    _pod("kube-system", "coredns", "10.42.9.2", **{"k8s-app": "kube-dns"}),
    _pod("kube-system", "metrics-server", "10.42.9.3", **{"k8s-app": "metrics-server"}),
    _pod("monitoring", "zabbix-server", "10.42.9.4", app="zabbix-server"),
    _pod("rook-ceph", "mgr", "10.42.9.5", app="rook-ceph-mgr"),
    _pod("kuberay-system", "kuberay-operator", "10.42.9.6", **{"app.kubernetes.io/name": "kuberay-operator"}),
    _pod("kueue-system", "kueue-controller-manager", "10.42.9.7", **{"control-plane": "controller-manager"}),
]
HOSTS = {
    "node": Endpoint(name="node", ip=NODE, node=True, entities=frozenset({"remote-node"})),
    "server": Endpoint(name="server", ip=SERVER, node=True, entities=frozenset({"kube-apiserver", "remote-node"})),
    "nas": Endpoint(name="nas", ip=NAS, entities=frozenset({"world"})),
    "outside": Endpoint(name="outside", ip=OUTSIDE, entities=frozenset({"world"})),
}


def world(plan: engine.Plan, cni: str) -> tuple[Cluster, dict[str, Endpoint]]:
    namespaces = {
        n["inputs"]["metadata"]["name"]: n["inputs"]["metadata"].get("labels", {})
        for n in plan.by_type("kubernetes:core/v1:Namespace")
    }
    namespaces.update({p.namespace: namespaces.get(p.namespace, {}) for p in PLATFORM_PODS})
    policies = [
        {"kind": "NetworkPolicy", **r["inputs"]} for r in plan.by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    ] + [
        {"kind": "CiliumNetworkPolicy", **r["inputs"]}
        for r in plan.by_type("kubernetes:cilium.io/v2:CiliumNetworkPolicy")
    ]
    cluster = Cluster(namespaces, policies, cni=cni)
    endpoints = {p.name: p for p in PLATFORM_PODS} | HOSTS
    for i, ns in enumerate(sorted(n for n, labels in namespaces.items() if TEAM_LABEL in labels)):
        ports = {"dashboard": (8265, "TCP"), "gcs": (6379, "TCP")}
        for role in ("head", "worker"):
            name = f"{ns}/ray-{role}"
            endpoints[name] = Endpoint(
                name=name,
                ip=f"10.42.{100 + i}.{10 if role == 'head' else 11}",
                namespace=ns,
                labels={"ray.io/node-type": role},
                ports=ports,
            )
    return cluster, endpoints


# (from, to, port, protocol, allowed) on prod: team llm has namespaces llm-train and llm-eval.
PROD_MATRIX = [
    ("llm-train/ray-head", "llm-eval/ray-worker", 6379, "TCP", True),  # a team's own namespaces
    ("llm-eval/ray-worker", "llm-train/ray-head", 8265, "TCP", True),
    ("research/ray-worker", "research/ray-head", 6379, "TCP", True),
    ("research/ray-worker", "llm-train/ray-head", 8265, "TCP", False),  # another team's Ray head
    ("vision/ray-head", "research/ray-head", 6379, "TCP", False),
    ("llm-eval/ray-head", "vision/ray-worker", 22, "TCP", False),
    ("vision/ray-worker", "kube-system/coredns", 53, "UDP", True),  # DNS
    ("vision/ray-worker", "kube-system/coredns", 53, "TCP", True),
    ("vision/ray-worker", "kube-system/coredns", 9153, "TCP", False),  # DNS, not CoreDNS's metrics
    ("vision/ray-worker", "kube-system/metrics-server", 10250, "TCP", False),
    ("research/ray-head", "server", 6443, "TCP", True),  # the API server
    ("research/ray-head", "server", 10250, "TCP", False),  # a server's kubelet
    ("research/ray-head", "node", 10250, "TCP", False),  # kubelet
    ("research/ray-head", "node", 31080, "TCP", False),  # Zabbix web NodePort
    ("research/ray-head", "node", 30051, "TCP", False),  # a trapper NodePort
    ("research/ray-head", "node", 6789, "TCP", False),  # Ceph MON on the host network
    ("research/ray-head", "nas", 9000, "TCP", False),  # MinIO on the NAS: no team has a bucket
    ("research/ray-head", "outside", 443, "TCP", False),  # no egressCidrs
    ("llm-train/ray-head", "monitoring/zabbix-server", 10051, "TCP", False),
    ("llm-train/ray-head", "rook-ceph/mgr", 9283, "TCP", False),
    ("llm-train/ray-head", "kueue-system/kueue-controller-manager", 9443, "TCP", False),
    ("monitoring/zabbix-server", "llm-train/ray-head", 8265, "TCP", False),  # platform pods into a team
    ("kuberay-system/kuberay-operator", "llm-train/ray-head", 8265, "TCP", True),  # RayJob status
    ("kuberay-system/kuberay-operator", "llm-train/ray-head", 6379, "TCP", False),
    ("kuberay-system/kuberay-operator", "llm-train/ray-worker", 8265, "TCP", False),
]


@pytest.mark.parametrize("source,dest,port,protocol,allowed", PROD_MATRIX, ids=lambda v: str(v))
def test_prod_team_traffic_matrix(prod_plan, source, dest, port, protocol, allowed):
    cluster, endpoints = world(prod_plan, stack_doc("prod")["network"]["cni"])
    assert cluster.allowed(endpoints[source], endpoints[dest], port, protocol) is allowed


def _research_egress_calico(raw: dict) -> None:
    raw["network"]["cni"] = "calico"
    next(t for t in raw["scheduling"]["teams"] if t["name"] == "research")["egressCidrs"] = ["0.0.0.0/0"]


@pytest.fixture(scope="module")
def calico_plan() -> engine.Plan:
    return evaluate("prod", _research_egress_calico)


CALICO_MATRIX = [
    ("research/ray-head", "server", 6443, "TCP", True),  # the API server, as an ipBlock of the servers
    ("vision/ray-head", "server", 6443, "TCP", True),
    ("research/ray-head", "outside", 443, "TCP", True),  # egressCidrs 0.0.0.0/0
    ("vision/ray-head", "outside", 443, "TCP", False),  # only the team that has them
    ("research/ray-head", "nas", 9000, "TCP", False),  # ... never the NAS,
    ("research/ray-head", "node", 10250, "TCP", False),  # a node,
    ("research/ray-head", "server", 10250, "TCP", False),
    ("research/ray-head", "vision/ray-head", 8265, "TCP", False),  # another team's pod,
    ("research/ray-head", "monitoring/zabbix-server", 10051, "TCP", False),  # or a platform pod
    ("research/ray-worker", "kube-system/coredns", 53, "UDP", True),
]


@pytest.mark.parametrize("source,dest,port,protocol,allowed", CALICO_MATRIX, ids=lambda v: str(v))
def test_calico_and_egress_cidrs_matrix(calico_plan, source, dest, port, protocol, allowed):
    cluster, endpoints = world(calico_plan, "calico")
    assert cluster.allowed(endpoints[source], endpoints[dest], port, protocol) is allowed
    assert not calico_plan.by_type("kubernetes:cilium.io/v2:CiliumNetworkPolicy")


def test_the_api_server_needs_the_cilium_policy_under_cilium(prod_plan, calico_plan):
    """Under Cilium an ipBlock never selects a node: Calico's ipBlock allow would not reach the API server,
    which is why Cilium gets a CiliumNetworkPolicy to the kube-apiserver entity."""
    calico_policies = [
        {"kind": "NetworkPolicy", **r["inputs"]}
        for r in calico_plan.by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    ]
    _, endpoints = world(calico_plan, "calico")
    namespaces = {ns: {TEAM_LABEL: "vision"} for ns in ["vision"]}
    as_cilium = Cluster(namespaces, calico_policies, cni="cilium")
    assert not as_cilium.allowed(endpoints["vision/ray-head"], HOSTS["server"], 6443)
    cilium, _ = world(prod_plan, "cilium")
    assert cilium.allowed(endpoints["vision/ray-head"], HOSTS["server"], 6443)
    for policy in prod_plan.by_type("kubernetes:cilium.io/v2:CiliumNetworkPolicy"):
        assert policy["inputs"]["spec"]["egress"] == [
            {"toEntities": ["kube-apiserver"], "toPorts": [{"ports": [{"port": "6443", "protocol": "TCP"}]}]}
        ]


def test_every_team_namespace_is_isolated_both_ways(prod_plan):
    teams = prod_plan.outputs["teamNamespaces"]
    deny = {
        r["inputs"]["metadata"]["namespace"]
        for r in prod_plan.by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
        if r["inputs"]["metadata"]["name"] == "default-deny"
        and r["inputs"]["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    }
    assert deny == {ns for names in teams.values() for ns in names}


# ---------------------------------------------------------------------------------------------
# Capacity: the namespace quota against the Kueue quotas
# ---------------------------------------------------------------------------------------------


def compute_quotas(plan: engine.Plan) -> dict[str, dict[str, str]]:
    return {
        r["inputs"]["metadata"]["namespace"]: r["inputs"]["spec"]["hard"]
        for r in plan.by_type("kubernetes:core/v1:ResourceQuota")
        if r["inputs"]["metadata"]["name"] == "compute"
    }


# Computed by hand from Pulumi.prod.yaml: nominal + min(borrowingLimit, what the other teams lend).
# GPUs (H100): llm 64 + (40 + 16) = 120; vision 40 + (32 lent by llm + 16) = 88; research 16 + min(32, 32 + 40) = 48.
# CPU: cpu flavor + H100 flavor, each nominal + the others' nominal (no cpu limits): llm (512 + 640) + (1536 + 1344).
PROD_CEILINGS = {
    "llm": {"nvidia.com/gpu": 120, "cpu": 512 + 640 + 1536 + 1344, "memory": (4 + 5 + 15 + 13.125) * 2**40},
    "vision": {"nvidia.com/gpu": 88, "cpu": 384 + 768 + 960 + 1920, "memory": (3 + 6 + 9.375 + 18.75) * 2**40},
    "research": {"nvidia.com/gpu": 48, "cpu": 256 + 896 + 384 + 2496, "memory": (2 + 7 + 3.75 + 24.375) * 2**40},
}


def test_prod_quota_is_each_teams_kueue_ceiling_in_each_of_its_namespaces(prod_plan):
    quotas = compute_quotas(prod_plan)
    teams = prod_plan.outputs["teamNamespaces"]
    assert set(quotas) == {ns for names in teams.values() for ns in names}
    for team, want in PROD_CEILINGS.items():
        for ns in teams[team]:
            hard = quotas[ns]
            assert int(hard["requests.nvidia.com/gpu"]) == want["nvidia.com/gpu"], (team, ns)
            # Limits at the same ceiling: team containers declare limits equal to their requests
            # (tests/scheduling/test_capacity.py), so admitted work has the same sum of both.
            for kind in ("requests", "limits"):
                assert int(hard[f"{kind}.cpu"]) == want["cpu"], (team, ns, kind)
                assert quantity_value(hard[f"{kind}.memory"]) == want["memory"], (team, ns, kind)


def test_what_kueue_can_admit_never_exceeds_the_quota():
    """Whatever the cohort does, a team's admitted usage on a flavor is at most nominal + borrowable; summed
    over flavors it fits the quota. And the quota is no larger: unadmitted pods cannot add to it."""
    settings = load(stack_doc("prod"))
    sched = settings.scheduling
    for team in sched.teams:
        others = [t for t in sched.teams if t.name != team.name]
        for flavor, quota in team.quotas.items():
            lent = sum(
                (
                    t.quotas[flavor].lending_limit.gpus
                    if t.quotas[flavor].lending_limit and t.quotas[flavor].lending_limit.gpus is not None
                    else t.quotas[flavor].gpus
                )
                for t in others
                if flavor in t.quotas
            )
            cap = (
                quota.borrowing_limit.gpus if quota.borrowing_limit and quota.borrowing_limit.gpus is not None else lent
            )
            assert ceiling(team, sched, flavor, "nvidia.com/gpu") == quota.gpus + min(cap, lent)


def test_storage_quota_per_class_and_zero_where_a_team_has_none():
    def no_tier1(raw):
        research = next(t for t in raw["scheduling"]["teams"] if t["name"] == "research")
        research["storage"] = {"tier2-shared": "100Ti"}

    hard = compute_quotas(evaluate("prod", no_tier1))["research"]
    for klass in ("tier1-nvme", "tier2-block"):
        assert hard[f"{klass}.storageclass.storage.k8s.io/requests.storage"] == "0"
        assert hard[f"{klass}.storageclass.storage.k8s.io/persistentvolumeclaims"] == "0"
    assert hard["tier2-shared.storageclass.storage.k8s.io/requests.storage"] == "100Ti"
    assert "tier2-shared.storageclass.storage.k8s.io/persistentvolumeclaims" not in hard
    assert hard["requests.storage"] == "100Ti"  # a class the quota does not name is bounded by the total


BAD_TENANCY = {
    "unknown storage class": (
        lambda raw: raw["scheduling"]["teams"][2].update({"storage": {"fast-nvme": "1Ti"}}),
        "scheduling.teams[2].storage.fast-nvme: not a StorageClass of the platform; name one of tier1-nvme, "
        "tier2-block, tier2-shared",
    ),
    "egress into the pod network": (
        lambda raw: raw["scheduling"]["teams"][1].update({"egressCidrs": ["10.42.3.0/24"]}),
        "scheduling.teams[1].egressCidrs[0]: 10.42.3.0/24 lies inside the cluster network 10.42.0.0/16; egressCidrs "
        "are for addresses outside the cluster (a team reaches its own pods already)",
    ),
    "backup claim above the team's storage": (
        lambda raw: raw["scheduling"]["teams"][0]["storage"].update({"tier2-shared": "100Ti"}),
        "storage.minio.backup.sources[0].size: 200Ti of tier2-shared in llm-train, but team 'llm' may claim 100Ti "
        "there; raise scheduling.teams[0].storage.tier2-shared",
    ),
    "system groups prefix": (
        lambda raw: raw["scheduling"].update({"groupsPrefix": "system:"}),
        "scheduling.groupsPrefix: 'system:' cannot prefix group names; write e.g. 'oidc:' (not empty, not system:)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_TENANCY))
def test_bad_tenancy_settings_name_the_field_and_the_fix(case):
    mutate, message = BAD_TENANCY[case]
    assert any(message in p for p in problems("prod", mutate)), problems("prod", mutate)


# ---------------------------------------------------------------------------------------------
# Admission: CEL evaluated by cel-python as the API server evaluates it
# ---------------------------------------------------------------------------------------------


def policy(plan: engine.Plan, name: str) -> dict[str, Any]:
    return next(p["inputs"]["spec"] for p in plan.by_type(VAP) if p["inputs"]["metadata"]["name"] == name)


def _matches(spec: dict[str, Any], group: str, resource: str) -> bool:
    return any(
        group in rule["apiGroups"] and resource in rule["resources"]
        for rule in spec["matchConstraints"]["resourceRules"]
    )


def denials(
    spec: dict[str, Any],
    obj: dict[str, Any],
    resource: str,
    group: str = "",
    operation: str = "CREATE",
    user: str = "someone",
    groups: tuple[str, ...] = (),
) -> list[str]:
    """The messages of the validations that refuse `obj`; [] when the policy does not match or admits it."""
    if not _matches(spec, group, resource):
        return []
    env = celpy.Environment()
    activation = {
        "object": celpy.json_to_cel(obj),
        "request": celpy.json_to_cel(
            {
                "operation": operation,
                "resource": {"resource": resource, "group": group},
                "userInfo": {"username": user, "groups": list(groups)},
            }
        ),
    }
    for condition in spec.get("matchConditions", []):
        if not env.program(env.compile(condition["expression"])).evaluate(activation):
            return []
    return [
        v["message"] for v in spec["validations"] if not env.program(env.compile(v["expression"])).evaluate(activation)
    ]


def _owned(kind: str, api: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "child",
            "ownerReferences": [{"apiVersion": api, "kind": kind, "name": "parent", "uid": "u", "controller": True}],
        },
        "spec": {},
    }


def test_a_team_cannot_create_children_of_workloads_kueue_manages(prod_plan):
    spec = policy(prod_plan, "research-workload-owners")
    ci = "system:serviceaccount:research:research-ci"
    # Every kind Kueue manages here, as owner of every kind it manages: refused for the team's identities.
    import yaml

    kueue = next(r for r in prod_plan.by_type("kubernetes:helm.sh/v3:Release") if r["inputs"]["name"] == "kueue")
    config = yaml.safe_load(kueue["inputs"]["values"]["managerConfig"]["controllerManagerConfigYaml"])
    frameworks = config["integrations"]["frameworks"]
    assert len(frameworks) == 6
    for owner in frameworks:
        _, _, api, kind = FRAMEWORK_KINDS[owner]
        for child in frameworks:
            group, resource, *_ = FRAMEWORK_KINDS[child]
            for who in (
                {"user": ci},
                {"user": "jane", "groups": ("oidc:ml-researchers",)},
                {"user": "system:serviceaccount:research:default"},
            ):
                assert len(denials(spec, _owned(kind, api), resource, group, **who)) == 1, (owner, child, who)
            # The operators' own controllers make them: not a team identity, not refused.
            assert (
                denials(
                    spec, _owned(kind, api), resource, group, user="system:serviceaccount:kube-system:job-controller"
                )
                == []
            )
            # Another team's identity is not this policy's (its own policy judges it).
            assert (
                denials(spec, _owned(kind, api), resource, group, user="system:serviceaccount:vision:vision-ci") == []
            )
    # An owner Kueue does not manage, or none: admitted.
    assert denials(spec, _owned("ConfigMap", "v1"), "pods", user=ci) == []
    assert denials(spec, {"metadata": {"name": "p"}, "spec": {}}, "pods", user=ci) == []
    # Bound to the team's namespaces only.
    binding = next(
        b["inputs"]["spec"]
        for b in prod_plan.by_type(VAPB)
        if b["inputs"]["metadata"]["name"] == "research-workload-owners"
    )
    assert binding["validationActions"] == ["Deny"]
    assert binding["matchResources"] == {"namespaceSelector": {"matchLabels": {TEAM_LABEL: "research"}}}


def _pod_spec(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], **spec}}


def test_a_team_pod_cannot_be_placed_on_servers_or_storage_hosts(prod_plan):
    spec = policy(prod_plan, "team-placement")
    settings = load(stack_doc("prod"))
    platform_hosts = [n.name for n in settings.nodes if n.control_plane or n.storage_host]
    tenant_host = next(n.name for n in settings.nodes if n.role == "cpu" and not n.control_plane and not n.storage_host)
    gpu_host = next(n.name for n in settings.nodes if n.role == "gpu")
    assert "cpu-01" in platform_hosts and "cpu-04" in platform_hosts
    refused = {
        "nodeName": _pod_spec(nodeName=tenant_host),
        "control-plane toleration": _pod_spec(
            tolerations=[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]
        ),
        "CriticalAddonsOnly toleration": _pod_spec(tolerations=[{"key": "CriticalAddonsOnly", "operator": "Exists"}]),
        "storage toleration": _pod_spec(
            tolerations=[
                {"key": "ml-platform.io/ceph-storage", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
            ]
        ),
        "tolerate everything": _pod_spec(tolerations=[{"operator": "Exists"}]),
        "hostname selector": _pod_spec(nodeSelector={"kubernetes.io/hostname": "cpu-01"}),
        "storage label selector": _pod_spec(nodeSelector={"ml-platform.io/ceph-storage": "true"}),
        "affinity to a storage host": _pod_spec(
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": [tenant_host, "cpu-05"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            }
        ),
        "affinity by field to a server": _pod_spec(
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["cpu-02"]}]}
                        ]
                    }
                }
            }
        ),
        "affinity to the control-plane label": _pod_spec(
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}
                                ]
                            }
                        ]
                    }
                }
            }
        ),
    }
    for case, pod in refused.items():
        assert len(denials(spec, pod, "pods")) == 1, case
    admitted = {
        "plain": _pod_spec(),
        "GPU toleration": _pod_spec(
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        ),
        "tenant hostname": _pod_spec(nodeSelector={"kubernetes.io/hostname": tenant_host}),
        "gpu host affinity": _pod_spec(
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [gpu_host]}
                                ]
                            }
                        ]
                    }
                }
            }
        ),
        "avoiding a server": _pod_spec(
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["cpu-01"]}
                                ]
                            }
                        ]
                    }
                }
            }
        ),
    }
    for case, pod in admitted.items():
        assert denials(spec, pod, "pods") == [], case
    # The scheduler's binding sets nodeName later; an update of a bound pod is not refused for it.
    assert denials(spec, _pod_spec(nodeName=tenant_host), "pods", operation="UPDATE") == []
    binding = next(
        b["inputs"]["spec"] for b in prod_plan.by_type(VAPB) if b["inputs"]["metadata"]["name"] == "team-placement"
    )
    assert binding["matchResources"] == {
        "namespaceSelector": {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]}
    }
    assert set(PLATFORM_HOST_KEYS) >= {"node-role.kubernetes.io/control-plane", "ml-platform.io/ceph-storage"}


def test_a_team_service_cannot_capture_an_address(prod_plan):
    """CVE-2020-8554: a Service's externalIPs take that address's traffic from every pod and node."""
    spec = policy(prod_plan, "team-services")
    service = {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 9000}], "selector": {"app": "x"}}}
    assert denials(spec, service, "services") == []
    assert denials(spec, {**service, "spec": {**service["spec"], "externalIPs": []}}, "services") == []
    nas = load(stack_doc("prod")).nas.hosts[0].address
    for operation in ("CREATE", "UPDATE"):
        captured = {**service, "spec": {**service["spec"], "externalIPs": [str(nas)]}}
        assert len(denials(spec, captured, "services", operation=operation)) == 1
    binding = next(
        b["inputs"]["spec"] for b in prod_plan.by_type(VAPB) if b["inputs"]["metadata"]["name"] == "team-services"
    )
    assert binding["validationActions"] == ["Deny"]
    assert binding["matchResources"] == {
        "namespaceSelector": {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]}
    }


def test_kueue_admits_cpu_work_only_onto_tenant_nodes(prod_plan):
    """The cpu flavor's nodeLabels, which Kueue injects into every workload it admits there, select exactly the
    CPU nodes that are neither servers nor storage hosts (as the Node patch labels them)."""
    flavor = next(
        f["inputs"]["spec"]
        for f in prod_plan.by_type("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor")
        if f["inputs"]["metadata"]["name"] == "cpu"
    )
    assert flavor["nodeLabels"][TENANT_NODE_LABEL] == "true"
    settings = load(stack_doc("prod"))
    selected = {n.name for n in settings.nodes if flavor["nodeLabels"].items() <= managed_labels(n).items()}
    tenants = {n.name for n in settings.nodes if n.role == "cpu" and not n.control_plane and not n.storage_host}
    assert selected == tenants and len(tenants) == 20
    patches = {
        p["inputs"]["metadata"]["name"]: p["inputs"]["metadata"]["labels"]
        for p in prod_plan.by_type("kubernetes:core/v1:NodePatch")
    }
    assert {n for n, labels in patches.items() if labels.get(TENANT_NODE_LABEL) == "true"} == tenants


def _priority_paths(schema: dict[str, Any], path: tuple[str, ...] = ()) -> list[str]:
    """Every path to a `priorityClassName` in a CRD schema, `[]` for each list on the way."""
    found = []
    for key, sub in (schema.get("properties") or {}).items():
        if key == "priorityClassName":
            found.append(".".join((*path, key)))
        elif sub.get("type") == "array" and "items" in sub:
            found += _priority_paths(sub["items"], (*path, f"{key}[]"))
        else:
            found += _priority_paths(sub, (*path, key))
    return found


CRD_KINDS = {
    "jobsets": (("jobset", "v0.12.0", "jobset.x-k8s.io_jobsets.yaml"), "v1alpha2"),
    "rayjobs": (("kuberay", "v1.7.0", "ray.io_rayjobs.yaml"), "v1"),
    "rayclusters": (("kuberay", "v1.7.0", "ray.io_rayclusters.yaml"), "v1"),
    "trainjobs": (("kubeflow-trainer", "v2.3.0", "trainer.kubeflow.org_trainjobs.yaml"), "v1alpha1"),
}


def _set_path(path: str, value: str) -> dict[str, Any]:
    """An object with `value` at `path`, each `[]` list holding a harmless item and then the one that matters."""
    head, _, rest = path.partition(".")
    name = head.removesuffix("[]")
    inner: Any = value if not rest else _set_path(rest, value)
    if head.endswith("[]"):
        return {name: [{} if rest else "", inner]}
    return {name: inner}


@pytest.mark.parametrize("resource", sorted(CRD_KINDS))
def test_priority_paths_cover_every_pod_template_the_crd_declares(resource):
    parts, version = CRD_KINDS[resource]
    declared = _priority_paths(crd_schema(*parts, crd_version=version))
    assert sorted(declared) == sorted(PRIORITY_CLASS_PATHS.get(resource, [])), resource


def test_priority_class_is_refused_on_every_template_path(prod_plan):
    spec = policy(prod_plan, "llm-priority-classes")
    groups = {
        "jobs": "batch",
        "cronjobs": "batch",
        "jobsets": "jobset.x-k8s.io",
        "rayjobs": "ray.io",
        "rayclusters": "ray.io",
        "pods": "",
    }
    for resource, paths in PRIORITY_CLASS_PATHS.items():
        for path in paths:
            obj = {"metadata": {"name": "w"}, **_set_path(path, "system-node-critical")}
            assert len(denials(spec, obj, resource, groups[resource])) == 1, path
            empty = {"metadata": {"name": "w"}, **_set_path(path, "")}
            assert denials(spec, empty, resource, groups[resource]) == [], path


# ---------------------------------------------------------------------------------------------
# RBAC: each team principal's effective rights, and every Secret they reach
# ---------------------------------------------------------------------------------------------

RBAC = "kubernetes:rbac.authorization.k8s.io/v1"


def _rules(plan: engine.Plan) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    roles = {}
    for kind in ("Role", "ClusterRole"):
        for r in plan.by_type(f"{RBAC}:{kind}"):
            md = r["inputs"]["metadata"]
            roles[(kind, md.get("namespace", ""), md["name"])] = r["inputs"].get("rules", [])
    return roles


def _subject_matches(subject: dict[str, Any], user: str, groups: set[str]) -> bool:
    if subject["kind"] == "Group":
        return subject["name"] in groups
    if subject["kind"] == "User":
        return subject["name"] == user
    return user == f"system:serviceaccount:{subject.get('namespace', '')}:{subject['name']}"


def rights(plan: engine.Plan, user: str, groups: set[str]) -> set[tuple[str, str, str, str]]:
    """(namespace or '*', apiGroup, resource, verb) the identity is granted by the plan's bindings."""
    roles, granted = _rules(plan), set()
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        for b in plan.by_type(f"{RBAC}:{kind}"):
            inputs = b["inputs"]
            if not any(_subject_matches(s, user, groups) for s in inputs.get("subjects") or []):
                continue
            ns = inputs["metadata"].get("namespace", "*") if kind == "RoleBinding" else "*"
            ref = inputs["roleRef"]
            rules = roles.get((ref["kind"], ns if ref["kind"] == "Role" else "", ref["name"]), [])
            for rule in rules:
                for group in rule.get("apiGroups", [""]):
                    for resource in rule.get("resources", []):
                        for verb in rule["verbs"]:
                            granted.add((ns, group, resource, verb))
    return granted


def _can(granted: set[tuple[str, str, str, str]], ns: str, group: str, resource: str, verb: str) -> bool:
    return any(
        n in (ns, "*") and g in (group, "*") and r in (resource, "*") and v in (verb, "*") for n, g, r, v in granted
    )


def account_identity(ns: str, name: str) -> tuple[str, set[str]]:
    return f"system:serviceaccount:{ns}:{name}", {
        "system:serviceaccounts",
        f"system:serviceaccounts:{ns}",
        "system:authenticated",
    }


def effective_rights(plan: engine.Plan, user: str, groups: set[str]) -> set[tuple[str, str, str, str]]:
    """The identity's rights, and those of every ServiceAccount it can run a pod as: whoever may create pods
    in a namespace may name any of its ServiceAccounts (`default` included), to a fixed point."""
    accounts: dict[str, set[str]] = {}
    for a in plan.by_type("kubernetes:core/v1:ServiceAccount"):
        md = a["inputs"]["metadata"]
        accounts.setdefault(md["namespace"], {"default"}).add(md["name"])
    namespaces = {n["inputs"]["metadata"]["name"] for n in plan.by_type("kubernetes:core/v1:Namespace")}
    granted, seen = rights(plan, user, groups), set()
    while True:
        runnable = {
            (ns, account)
            for ns in namespaces | set(accounts)
            if _can(granted, ns, "", "pods", "create")
            for account in accounts.get(ns, {"default"})
        } - seen
        if not runnable:
            return granted
        seen |= runnable
        for ns, account in runnable:
            granted |= rights(plan, *account_identity(ns, account))


def reachable_secrets(plan: engine.Plan, granted: set[tuple[str, str, str, str]]) -> set[tuple[str, str]]:
    """Secrets the rights read (get/list/watch) or mount into a pod they may create in the Secret's namespace."""
    found = set()
    for s in plan.by_type("kubernetes:core/v1:Secret"):
        md = s["inputs"]["metadata"]
        ns = md.get("namespace", "default")
        if any(_can(granted, ns, "", "secrets", v) for v in ("get", "list", "watch")) or _can(
            granted, ns, "", "pods", "create"
        ):
            found.add((ns, md["name"]))
    return found


def team_principals(plan: engine.Plan) -> dict[str, list[tuple[str, set[str]]]]:
    """Each team's identities: a member of each of its groups (as bound, prefixed) and its CI ServiceAccount."""
    found: dict[str, list[tuple[str, set[str]]]] = {}
    for b in plan.by_type(f"{RBAC}:RoleBinding"):
        ns = b["inputs"]["metadata"]["namespace"]
        team = next((t for t, names in plan.outputs["teamNamespaces"].items() if ns in names), None)
        if team is None or b["inputs"]["metadata"]["name"] != "team-member":
            continue
        for s in b["inputs"]["subjects"]:
            identity = (
                ("member", {s["name"], "system:authenticated"})
                if s["kind"] == "Group"
                else account_identity(s["namespace"], s["name"])
            )
            if identity not in found.setdefault(team, []):
                found[team].append(identity)
    return found


def test_the_rights_computation_finds_what_a_pod_creator_can_mount(prod_plan):
    """The computation can fail: a team that may create pods in a namespace holding a backup key reaches it."""
    principals = team_principals(prod_plan)
    granted = effective_rights(prod_plan, *principals["llm"][0])
    assert _can(granted, "llm-train", "", "pods", "create") and not _can(granted, "vision", "", "pods", "create")
    fake = engine.Plan(
        project="p",
        stack="s",
        resources=[
            *prod_plan.resources,
            {
                "type": "kubernetes:core/v1:Secret",
                "name": "x",
                "urn": "x",
                "inputs": {"metadata": {"name": "zabbix-db", "namespace": "llm-eval"}},
            },
        ],
        outputs=prod_plan.outputs,
    )
    assert ("llm-eval", "zabbix-db") in reachable_secrets(fake, granted)


def test_no_team_principal_reaches_a_platform_secret(prod_plan):
    principals = team_principals(prod_plan)
    assert set(principals) == set(prod_plan.outputs["teamNamespaces"])
    for team, identities in principals.items():
        assert len(identities) == 2  # one group (prefixed) and the CI ServiceAccount in prod
        for identity in identities:
            granted = effective_rights(prod_plan, *identity)
            own = set(prod_plan.outputs["teamNamespaces"][team])
            # Outside its namespaces: reading the public contract only; nothing cluster-wide, nothing of another team.
            outside = {g for g in granted if g[0] not in own}
            assert all(
                ns == "kube-public" and resource == "configmaps" and verb in ("get", "list", "watch")
                for ns, _, resource, verb in outside
            ), (team, identity, outside)
            # Every Secret in the plan is the platform's (backup, MinIO, Zabbix, cluster credentials): none reachable.
            assert reachable_secrets(prod_plan, granted) == set(), (team, identity)


def test_a_cluster_without_tenant_cpu_nodes_must_say_teams_share_them(lab_plan):
    def dedicated(raw):
        raw["scheduling"]["tenantNodesOnly"] = True

    assert problems("lab", dedicated) == [
        "scheduling.teams[0].quotas.cpu: every CPU node is an RKE2 server or a Ceph storage host, and team workloads "
        "run on neither (scheduling.tenantNodesOnly): add CPU nodes without osdDevices, or set "
        "scheduling.tenantNodesOnly: false to let team pods share them"
    ]
    # The lab says so: its cpu flavor selects every CPU node, and the placement policy still refuses explicit targeting.
    flavor = next(
        f["inputs"]["spec"]
        for f in lab_plan.by_type("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor")
        if f["inputs"]["metadata"]["name"] == "cpu"
    )
    assert flavor["nodeLabels"] == {"ml-platform.io/role": "cpu"}
    assert len(denials(policy(lab_plan, "team-placement"), _pod_spec(nodeName="lab-server"), "pods")) == 1
