"""Danger of an RKE2 upgrade (components/cluster/upgrades.py): which nodes drain, how many at a time, in which
order and when, computed from the Plans in the plan (their node selectors applied to the labels each
node's membership step sets); what removing the Plans means; a bump that upgrades nothing."""

from __future__ import annotations

from typing import Any

from settings.rules import rke2_release
from stacks.diff.core import DangerClass, Sides, command_env

NODE_PATCH = "kubernetes:core/v1:NodePatch"

PLAN_TYPE = "kubernetes:upgrade.cattle.io/v1:Plan"
# As components/cluster/upgrades.py names them (tests/cluster/test_upgrades.py keeps them equal); the diff reads plans,
# it does not import the program.
SERVER_PLAN = "server-plan"
POOLS = ("gpu", "storage", "cpu")
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
HOLD_LABEL = "ml-platform.io/upgrade-hold"


def agent_plan_name(pool: str) -> str:
    return f"{pool}-agent-plan"


COMMAND = "command:remote:Command"
WATCH = "watch: kubectl -n system-upgrade get plans,jobs; retry a failed one: python -m stacks.upgrade retry PLAN"


DOWNGRADE_FIX = (
    "RKE2 does not support downgrades (a server started on etcd data written by the newer release refuses to "
    "start). To go back, follow docs/runbook.md §16, rolling an RKE2 upgrade back: every node reinstalled at "
    "the old release, then the etcd snapshot taken before the upgrade restored as in docs/runbook.md §17"
)


def _release(version: str) -> tuple[int, ...]:
    """A tag's order (a version written with `-` as the controller tags images is accepted too)."""
    return rke2_release(version.replace("-rke2r", "+rke2r"))


def _upgrade_danger(sides: Sides) -> list[str]:
    """A change that starts, retargets, finishes or abandons an RKE2 upgrade, bumps `rke2Version` without
    one, or goes down. `sides.before`/`sides.after`: the plans' resources by URN."""
    before, after = sides.before, sides.after
    old_plans, new_plans = _plans(before), _plans(after)
    old_version = _plans_version(old_plans)
    new_version = _plans_version(new_plans)
    running = _fresh_host_version(after)
    if new_plans and new_version != old_version:
        if old_plans and _release(new_version) < _release(old_version):
            return [
                f"RKE2 DOWNGRADE {old_version} -> {new_version}: the Plans would drain and restart the nodes already "
                f"at {old_version} into the older release. {DOWNGRADE_FIX}"
            ]
        verb = f"retargeted {old_version} -> {new_version}" if old_plans else f"{running} -> {new_version}"
        return [f"RKE2 upgrade {verb}: {_rollout(after, new_plans)}"]
    if old_plans and not new_plans:
        checked = _checked_version(after)
        if checked == old_version:
            return [
                f"RKE2 upgrade to {old_version} declared done: its Plans are deleted; upgrades-node-versions checks "
                f"on the init server that every node reports {old_version}; the up fails, naming the nodes, when "
                "one does not"
            ]
        return [
            f"RKE2 upgrade to {old_version} abandoned (rke2Version {checked}): its Plans are deleted, and with them "
            "any upgrade Job still running (its node may stay cordoned: kubectl uncordon NODE); nodes already at "
            f"{old_version} stay there: roll them back first (docs/runbook.md §16, rolling an RKE2 upgrade back); "
            f"upgrades-node-versions then refuses until every node reports {checked}"
        ]
    if not new_plans:
        checked_before, checked_after = _checked_version(before), _checked_version(after)
        if checked_before and checked_after and _release(checked_after) < _release(checked_before):
            return [
                f"RKE2 DOWNGRADE {checked_before} -> {checked_after}: no Plan is created, the nodes keep "
                f"{checked_before} and upgrades-node-versions fails the up. {DOWNGRADE_FIX}"
            ]
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


def _fresh_host_version(resources: dict[str, dict]) -> str:
    """The release a fresh host installs (deployedRke2Version while an upgrade is pending)."""
    versions = {
        command_env(r["inputs"].get("create")).get("RKE2_VERSION")
        for r in resources.values()
        if r["type"] == COMMAND and r["name"].endswith("-rke2")
    }
    return ", ".join(sorted(v for v in versions if v))


def _checked_version(resources: dict[str, dict]) -> str:
    step = next((r for r in resources.values() if r["name"].endswith("upgrades-node-versions")), None)
    return command_env(step["inputs"].get("create")).get("RKE2_VERSION", "") if step else ""


def _node_labels(resources: dict[str, dict]) -> dict[str, dict]:
    """Each node's labels as its NodePatch applies them, plus RKE2's control-plane label on servers."""
    servers = {
        command_env(r["inputs"].get("create")).get("NODE_NAME")
        for r in resources.values()
        if r["type"] == COMMAND
        and r["name"].endswith("-rke2")
        and command_env(r["inputs"].get("create")).get("RKE2_TYPE") == "server"
    }
    nodes = {}
    for r in resources.values():
        if r["type"] == NODE_PATCH and r["name"].endswith("-labels-taints"):
            metadata = r["inputs"].get("metadata", {})
            labels = dict(metadata.get("labels") or {})
            if metadata.get("name") in servers:
                labels[CONTROL_PLANE_LABEL] = "true"
            nodes[metadata.get("name")] = labels
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


def _rollout(after: dict[str, dict], plans: dict[str, dict]) -> str:
    nodes = _node_labels(after)

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


def _in_flight_danger(sides: Sides) -> list[str]:
    """The Plans of a running upgrade edited (concurrency, drain, window) without a change of version: the controller
    applies the new spec to the nodes it has not reached; a drain already running keeps the old one."""
    old_plans, new_plans = _plans(sides.before), _plans(sides.after)
    version = _plans_version(new_plans)
    if not old_plans or not new_plans or _plans_version(old_plans) != version:
        return []
    out = []
    for name in sorted(old_plans.keys() & new_plans.keys()):
        old, new = old_plans[name], new_plans[name]
        changed = [
            f"{key} {_brief(old.get(key))} -> {_brief(new.get(key))}"
            for key in ("concurrency", "drain", "window", "postCompleteDelay", "cordon")
            if old.get(key) != new.get(key)
        ]
        if changed:
            out.append(
                f"{name} changed while the RKE2 upgrade to {version} is in flight ({'; '.join(changed)}): the "
                "system-upgrade-controller applies it to the nodes it has not upgraded yet; a node being drained now "
                f"finishes under the old settings. Prefer changing it between upgrades ({WATCH})"
            )
    return out


def _brief(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(value.items())) + "}"
    return "(unset)" if value is None else str(value)


CLASSES = (
    DangerClass("an RKE2 upgrade's Plans edited while it is in flight (concurrency, drain, window)", _in_flight_danger),
    DangerClass(
        "an RKE2 upgrade (servers, then a rolling drain per agent pool), its end or abandonment, a version bump "
        "that upgrades nothing, or a downgrade",
        _upgrade_danger,
    ),
)
