"""Danger of an RKE2 upgrade: every node restarts once, in the Plans' order."""

from __future__ import annotations

from collections import Counter

from settings.rules import rke2_release
from stacks.diff.core import DangerClass, Sides, command_env

PLAN_TYPE = "kubernetes:upgrade.cattle.io/v1:Plan"


def _release(version: str) -> tuple[int, ...]:
    """A tag's order; a Plan version is the tag with `+` written as `-` (v1.35.7-rke2r1)."""
    return rke2_release(version.replace("-rke2r", "+rke2r"))


def _upgrade_danger(sides: Sides) -> list[str]:
    """A changed `version` of the upgrade Plans: every node restarts once, in the Plans' order."""
    before, after = sides.before, sides.after
    plans = {r["inputs"]["metadata"]["name"]: r for r in after.values() if r["type"] == PLAN_TYPE}
    server = plans.get("server-plan")
    old = before.get(server["urn"]) if server else None
    if old is None or old["inputs"]["spec"]["version"] == server["inputs"]["spec"]["version"]:
        return []
    types = Counter(
        command_env(r["inputs"].get("create")).get("RKE2_TYPE")
        for r in after.values()
        if r["name"].endswith("-rke2") and r["type"] == "command:remote:Command"
    )
    snapshot = next(r for r in after.values() if r["name"].endswith("-pre-upgrade-snapshot"))
    saved = f"etcd snapshot pre-upgrade-{command_env(snapshot['inputs'].get('create')).get('RKE2_VERSION')}, then "
    agents = plans["agent-plan"]["inputs"]["spec"]
    before_version, after_version = old["inputs"]["spec"]["version"], server["inputs"]["spec"]["version"]
    if _release(after_version) < _release(before_version):
        return [
            f"RKE2 DOWNGRADE {before_version} -> {after_version}: RKE2 does not support downgrades (a server started "
            "on etcd data written by the newer release refuses to start); the Plans would drain and restart every "
            "node into the older release. To go back, follow the roll-back section: restore the etcd snapshot taken "
            "before the upgrade on every server (docs/runbook.md §17), not a Plan"
        ]
    return [
        f"RKE2 upgrade {old['inputs']['spec']['version']} -> {server['inputs']['spec']['version']} by the "
        f"system-upgrade-controller: {saved}{types['server']} servers one at a time (cordoned), then "
        f"{types['agent']} agents {agents['concurrency']} at a time (drained, PodDisruptionBudgets honoured); "
        "each node's RKE2 restarts once (watch: kubectl -n system-upgrade get plans,jobs)"
    ]


CLASSES = (
    DangerClass("an RKE2 upgrade or downgrade by the upgrade Plans (every node restarts once)", _upgrade_danger),
)
