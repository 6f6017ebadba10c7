"""docs/architecture.md is what `make docs` generates from the prod plan, and its diagrams say what the
plan says: hosts prepared first, custom resources after the release that installs their CRDs."""

from __future__ import annotations

from stacks import diagrams
from stacks.engine import evaluate_stack


def test_architecture_page_is_in_sync_with_the_plan():
    assert diagrams.TARGET.read_text() == diagrams.page(evaluate_stack(diagrams.STACK)), (
        "docs/architecture.md is stale: run `make docs` and commit it"
    )


def step_of(steps, component: str, kind: str) -> list[int]:
    return [n for n, content in enumerate(steps, 1) if (component, kind) in content]


def test_bring_up_steps_follow_the_order_rules(prod_plan):
    steps = diagrams.bring_up_steps(prod_plan)
    # Every host gets its copy of the host scripts first (50 nodes, 4 NAS hosts), all at once; then every
    # one of prod's 50 nodes is prepared, all at once.
    assert step_of(steps, "stack", "CopyToRemote") == [1] and steps[0][("stack", "CopyToRemote")] == 54
    assert step_of(steps, "cluster", "SSH prepare") == [2] and steps[1][("cluster", "SSH prepare")] == 50
    # The first server's RKE2 before the other servers' and the agents'.
    assert steps[2][("cluster", "SSH rke2")] == 1 and sum(c[("cluster", "SSH rke2")] for c in steps) == 50
    (policy,) = step_of(steps, "network", "NicClusterPolicy")
    assert max(step_of(steps, "network", "Release")) < policy, "the CR waits for the Network Operator's release"
    (kubernetes,) = step_of(steps, "cluster", "kubernetes")
    assert all(kubernetes < n for n in step_of(steps, "scheduling", "Release")), "charts wait for the provider"


def test_architecture_edges_point_from_what_is_waited_for(prod_plan):
    components, edges = diagrams.component_edges(prod_plan)
    assert set(components) >= {"cluster", "network", "gpu", "ceph", "minio", "scheduling", "monitoring"}
    assert ("network", "cluster") in edges and ("cluster", "network") not in edges
    # The cluster waits for no component; every other component waits for it (its provider, its hosts).
    assert all(waiter != "cluster" for waiter, _ in edges)
    assert {waiter for waiter, waited in edges if waited == "cluster"} == set(components) - {"cluster"}
