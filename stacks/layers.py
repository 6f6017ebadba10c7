"""Layers of stacks (`layout: layered`): which stack holds what, and what crosses between them.

An environment ENV with `layout: layered` is several stacks of the same program (docs/cluster.md, Running a
fleet), run in this order by `python -m stacks.orchestrate` or the delivery workflow:
  ENV-cluster          the tokens, the init-server record, the servers (their host steps), the kubeconfig, the
                       CA hash, the CNI, the upgrade plans, and the Node-patching credential of the node groups;
  ENV-nodes-<group>    one per node group, in parallel: each agent's host steps (scripts, prepare, RKE2,
                       membership guard, role steps) and its Node patch;
  ENV-platform         everything else: operators, storage, queues, monitoring and its per-group aggregates, the
                       acceptance drivers, the NAS and the public contract (the outputs other teams read).
Each stack's program is `__main__.py`: the stack's name says which part it builds (`scope_of`). The same
components and the same logical resources as `layout: single`, with the same names and parents (so URNs keep
their form); only the stack that holds a resource changes.

What crosses: the platform stack reads the cluster stack's outputs through a StackReference. A node-group stack
does not: a StackReference keeps every output of the stack it reads in the reader's state, the admin kubeconfig
and the server token too. The orchestrator copies the three values a group needs into the group stack's config
instead (`cluster-stack:caHash`, and as secrets `cluster-stack:agentToken` and `cluster-stack:nodeKubeconfig`),
and the group exports a digest of them, so the orchestrator sees a group that ran against older cluster outputs
(stale) and runs it again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Optional

import pulumi

from components.common import Layer, Scope
from settings import Settings, SettingsError

# What the cluster stack exports for the stacks after it. The node groups read the first three only: the CA
# hash and the agent token to join, and a kubeconfig that may only read and patch Nodes.
NODE_INPUTS = ("caHash", "agentToken", "nodeKubeconfig")
PLATFORM_INPUTS = ("kubeconfig", "rke2Token")
CLUSTER_OUTPUTS = ("apiEndpoint", *NODE_INPUTS, *PLATFORM_INPUTS)
DIGEST_OUTPUT = "clusterDigest"


@dataclass(frozen=True)
class StackSpec:
    name: str
    layer: Layer
    group: Optional[str] = None

    @property
    def scope(self) -> Scope:
        return Scope(self.layer, self.group)


def node_stack_groups(settings: Settings) -> list[str]:
    """The groups that have a stack of their own: those with an agent (servers live in the cluster stack)."""
    return sorted({n.group_name for n in settings.nodes if not n.control_plane})


def stack_specs(env: str, settings: Settings) -> list[StackSpec]:
    """The environment's stacks in the order they run (node groups side by side, in name order)."""
    if settings.layout != "layered":
        return [StackSpec(env, "single")]
    groups = [StackSpec(f"{env}-nodes-{g}", "nodes", g) for g in node_stack_groups(settings)]
    return [StackSpec(f"{env}-cluster", "cluster"), *groups, StackSpec(f"{env}-platform", "platform")]


def scope_of(stack: str, settings: Settings) -> tuple[str, Scope]:
    """The environment and the part of it that `stack` holds. With `layout: single`: the stack is the
    environment. Layered: the stack must be one of the environment's (`stack_specs`)."""
    if settings.layout != "layered":
        return stack, Scope()
    for suffix, layer in (("-cluster", "cluster"), ("-platform", "platform")):
        if stack.endswith(suffix):
            return stack[: -len(suffix)], Scope(layer)
    groups = node_stack_groups(settings)
    # The environment's name may hold `-nodes-` too: the group is what follows the last one that names a group.
    at = stack.rfind("-nodes-")
    while at > 0:
        env, group = stack[:at], stack[at + len("-nodes-") :]
        if group in groups:
            return env, Scope("nodes", group)
        at = stack.rfind("-nodes-", 0, at)
    raise SettingsError(
        [
            f"layout: 'layered' runs as the stacks <env>-cluster, <env>-nodes-<group> (groups: {', '.join(groups)}) "
            f"and <env>-platform, not {stack!r}: run `python -m stacks.orchestrate up <env>` (docs/cluster.md, "
            "Running a fleet), or set layout: single"
        ]
    )


def script_hosts(settings: Settings, scope: Scope) -> Optional[set[str]]:
    """The hosts whose host-script bundle this stack copies (None: every host): those it runs steps on. The
    cluster stack's include the init server, where node groups' membership guards run their drain at delete."""
    if scope.layer == "single":
        return None
    held = {n.name for n in settings.nodes if scope.holds_host(n)}
    if scope.cluster_base:
        held.add(settings.cluster.init_server)
    if scope.platform:
        held |= {h.name for h in settings.nas.hosts}
    return held


def cluster_stack_name(env: str) -> str:
    # The mock engine of the offline preview names no organization; a self-managed backend's is `organization`.
    return f"{pulumi.get_organization() or 'organization'}/{pulumi.get_project()}/{env}-cluster"


# The config namespace of the cluster stack's values in a node-group stack (set by the orchestrator).
CLUSTER_CONFIG = "cluster-stack"
SECRET_NODE_INPUTS = frozenset({"agentToken", "nodeKubeconfig"})


def read_cluster(env: str, names: tuple[str, ...]) -> dict[str, pulumi.Output[Any]]:
    """The platform stack's: the cluster stack's outputs (secret ones stay secret)."""
    ref = pulumi.StackReference("cluster-stack", stack_name=cluster_stack_name(env))
    return {name: ref.require_output(name) for name in names}


def node_inputs(env: str) -> dict[str, pulumi.Output[Any]]:
    """A node-group stack's: the cluster stack's values it needs, from its own config."""
    config = pulumi.Config(CLUSTER_CONFIG)
    missing = [name for name in NODE_INPUTS if config.get(name) is None]
    if missing:
        keys = ", ".join(f"{CLUSTER_CONFIG}:{name}" for name in missing)
        raise SettingsError(
            [
                f"{keys}: not set; a node-group stack gets them from {env}-cluster's outputs: run "
                f"`python -m stacks.orchestrate up {env}` (docs/cluster.md, Running a fleet)"
            ]
        )
    return {
        name: config.require_secret(name)
        if name in SECRET_NODE_INPUTS
        else pulumi.Output.from_input(config.require(name))
        for name in NODE_INPUTS
    }


def digest(values: dict[str, pulumi.Output[Any]]) -> pulumi.Output[str]:
    """A digest of the consumed cluster outputs, as the orchestrator computes it from the cluster stack's
    outputs (`digest_of`): not secret (a SHA-256 of random tokens reveals nothing of them)."""
    names = sorted(values)
    return pulumi.Output.unsecret(
        pulumi.Output.all(*[values[n] for n in names]).apply(lambda v: digest_of(dict(zip(names, v, strict=True))))
    )


def digest_of(values: dict[str, Any]) -> str:
    text = "\n".join(f"{k}={values[k]}" for k in sorted(values))
    return hashlib.sha256(text.encode()).hexdigest()


def assign(plans: dict[str, list[dict[str, Any]]]) -> dict[str, list[str]]:
    """Stack name -> the single-layout URNs it holds, from the layered stacks' own plans (`stacks.plan
    --layered`): a URN's form is the same in both layouts but for its stack. Components and providers appear in
    every stack that creates children under them; each custom resource in exactly one."""
    held: dict[str, list[str]] = {}
    for stack, resources in plans.items():
        held[stack] = sorted(strip_stack(r["urn"]) for r in resources)
    return held


def strip_stack(urn: str) -> str:
    """`urn:pulumi:STACK::project::type::name` -> `project::type::name` (what stays the same across stacks)."""
    return urn.split("::", 1)[1]
