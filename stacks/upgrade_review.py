"""The review's words for an RKE2 upgrade (components/upgrades.py): which nodes drain, how many at a
time, in which order and when, computed from the Plans in the plan (their node selectors applied to
the labels each node's membership step sets), and what removing the Plans means."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from components.upgrades import CONTROL_PLANE_LABEL, HOLD_LABEL, POOLS, SERVER_PLAN, agent_plan_name

PLAN_TYPE = "kubernetes:upgrade.cattle.io/v1:Plan"
COMMAND = "command:remote:Command"
WATCH = "watch: kubectl -n system-upgrade get plans,jobs; retry a failed one: python -m stacks.upgrade retry PLAN"


def upgrade_danger(
    before: dict[str, dict], after: dict[str, dict], command_env: Callable[[Any], dict[str, str]]
) -> list[str]:
    """Danger lines for a change that starts, retargets, finishes or abandons an RKE2 upgrade, or bumps
    `rke2Version` without one. `before`/`after`: the plans' resources by URN; `command_env`: a host
    step's parameters (stacks.diff)."""
    old_plans, new_plans = _plans(before), _plans(after)
    old_version = _plans_version(old_plans)
    new_version = _plans_version(new_plans)
    running = _fresh_host_version(after, command_env)
    if new_plans and new_version != old_version:
        verb = f"retargeted {old_version} -> {new_version}" if old_plans else f"{running} -> {new_version}"
        return [f"RKE2 upgrade {verb}: {_rollout(after, new_plans, command_env)}"]
    if old_plans and not new_plans:
        checked = _checked_version(after, command_env)
        if checked == old_version:
            return [
                f"RKE2 upgrade to {old_version} declared done: its Plans are deleted; upgrades-node-versions checks "
                f"on the init server that every node reports {old_version}; the up fails, naming the nodes, when "
                "one does not"
            ]
        return [
            f"RKE2 upgrade to {old_version} abandoned (rke2Version {checked}): its Plans are deleted, and with them "
            "any upgrade Job still running (its node may stay cordoned: kubectl uncordon NODE); nodes already at "
            f"{old_version} stay there: roll them back first (docs/runbook.md, rolling an RKE2 upgrade back); "
            f"upgrades-node-versions then refuses until every node reports {checked}"
        ]
    if not new_plans:
        checked_before, checked_after = _checked_version(before, command_env), _checked_version(after, command_env)
        if checked_before and checked_after and checked_before != checked_after:
            return [
                f"rke2Version {checked_before} -> {checked_after} without deployedRke2Version: no upgrade Plan is "
                f"created, running nodes stay at {checked_before} (a fresh host would install {checked_after}) and "
                f"upgrades-node-versions fails; to upgrade, set cluster.deployedRke2Version: {checked_before}"
            ]
    return []


def _plans(resources: dict[str, dict]) -> dict[str, dict]:
    return {r["inputs"]["metadata"]["name"]: r["inputs"]["spec"] for r in resources.values() if r["type"] == PLAN_TYPE}


def _plans_version(plans: dict[str, dict]) -> str:
    return plans[SERVER_PLAN]["version"] if SERVER_PLAN in plans else ""


def _fresh_host_version(resources: dict[str, dict], command_env: Callable[[Any], dict[str, str]]) -> str:
    """The release a fresh host installs (deployedRke2Version while an upgrade is pending)."""
    versions = {
        command_env(r["inputs"].get("create")).get("RKE2_VERSION")
        for r in resources.values()
        if r["type"] == COMMAND and r["name"].endswith("-rke2")
    }
    return ", ".join(sorted(v for v in versions if v))


def _checked_version(resources: dict[str, dict], command_env: Callable[[Any], dict[str, str]]) -> str:
    step = next((r for r in resources.values() if r["name"].endswith("upgrades-node-versions")), None)
    return command_env(step["inputs"].get("create")).get("RKE2_VERSION", "") if step else ""


def _node_labels(resources: dict[str, dict], command_env: Callable[[Any], dict[str, str]]) -> dict[str, dict]:
    """Each node's labels as its membership step sets them, plus RKE2's control-plane label on servers."""
    servers = {
        command_env(r["inputs"].get("create")).get("NODE_NAME")
        for r in resources.values()
        if r["type"] == COMMAND
        and r["name"].endswith("-rke2")
        and command_env(r["inputs"].get("create")).get("RKE2_TYPE") == "server"
    }
    nodes = {}
    for r in resources.values():
        if r["type"] == COMMAND and r["name"].endswith("-membership"):
            env = command_env(r["inputs"].get("create"))
            labels = dict(item.split("=", 1) for item in env.get("LABELS", "").split() if "=" in item)
            if env.get("NODE_NAME") in servers:
                labels[CONTROL_PLANE_LABEL] = "true"
            nodes[env.get("NODE_NAME")] = labels
    return nodes


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    tests = {
        "In": lambda value, values: value in values,
        "NotIn": lambda value, values: value not in values,
        "Exists": lambda value, _: value is not None,
        "DoesNotExist": lambda value, _: value is None,
    }
    return all(
        tests[e["operator"]](labels.get(e["key"]), e.get("values", [])) for e in selector.get("matchExpressions", [])
    )


def _window(spec: dict[str, Any]) -> str:
    window = spec.get("window")
    if not window:
        return "any time"
    return f"only {', '.join(window['days'])} {window['startTime']}-{window['endTime']} {window.get('timeZone', 'UTC')}"


def _rollout(after: dict[str, dict], plans: dict[str, dict], command_env: Callable[[Any], dict[str, str]]) -> str:
    nodes = _node_labels(after, command_env)

    def count(spec: dict[str, Any]) -> int:
        return sum(1 for labels in nodes.values() if _selects(spec["nodeSelector"], labels))

    server = plans[SERVER_PLAN]
    agents = [
        f"{name.removesuffix('-agent-plan')} pool {count(spec)} nodes {spec['concurrency']} at a time "
        f"({_window(spec)}, drain timeout {spec['drain']['timeout']}{', force' if spec['drain'].get('force') else ''})"
        for name, spec in ((agent_plan_name(pool), plans.get(agent_plan_name(pool))) for pool in POOLS)
        if spec is not None
    ]
    return (
        "first the pre-upgrade step on the init server (refuses a downgrade or skipped minor, saves a new etcd "
        f"snapshot pre-upgrade-{server['version'].replace('+', '-')}-<time>); then a rolling upgrade by the "
        f"system-upgrade-controller: servers {count(server)} nodes one at a time (cordoned, not drained, "
        f"{server['postCompleteDelay']} apart); then, once every server runs it, in parallel, a rolling drain of "
        f"{'; '.join(agents)} (PodDisruptionBudgets honoured; nodes labelled {HOLD_LABEL} are skipped); each "
        f"node's RKE2 restarts once ({WATCH})"
    )
