"""Danger of an RKE2 upgrade: every node restarts once, in the Plans' order."""

from __future__ import annotations

from collections import Counter

from stacks.diff.core import Entry, command_env

PLAN_TYPE = "kubernetes:upgrade.cattle.io/v1:Plan"


def danger(entries: list[Entry], before: dict[str, dict], after: dict[str, dict]) -> list[str]:
    return _upgrade_danger(before, after)


def _upgrade_danger(before: dict[str, dict], after: dict[str, dict]) -> list[str]:
    """A changed `version` of the upgrade Plans: every node restarts once, in the Plans' order."""
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
    return [
        f"RKE2 upgrade {old['inputs']['spec']['version']} -> {server['inputs']['spec']['version']} by the "
        f"system-upgrade-controller: {saved}{types['server']} servers one at a time (cordoned), then "
        f"{types['agent']} agents {agents['concurrency']} at a time (drained, PodDisruptionBudgets honoured); "
        "each node's RKE2 restarts once (watch: kubectl -n system-upgrade get plans,jobs)"
    ]
