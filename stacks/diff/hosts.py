"""Danger on the hosts: host steps whose delete drains, uninstalls or wipes; RKE2 and CNI restarts across nodes."""

from __future__ import annotations

from typing import Optional

from stacks.diff.core import Entry, command_env, command_script

# What a host step's delete does on the host, by its delete script (components/scripts/).
DELETE_EFFECTS = {
    "node-remove.sh": "cordon + drain (PodDisruptionBudgets honoured) + delete the Node object",
    "rke2-uninstall.sh": "uninstall RKE2: removes /var/lib/rancher/rke2 (etcd data, images), /etc/rancher, CNI files",
}
# rke2-install.sh restarts the service when the config.yaml or registries.yaml it writes change. Its
# RKE2_VERSION is only what a fresh host installs: the upgrade Plans (components/upgrades.py) upgrade.
RKE2_RESTART_PARAMS = ("RKE2_CONFIG", "REGISTRIES_YAML")


def danger(entries: list[Entry], before: dict[str, dict], after: dict[str, dict]) -> list[str]:
    found = [line for entry in entries for line in _host_step_danger(entry, before.get(entry.urn))]
    return found + _restart_danger(entries, after)


def _host_step_danger(entry: Entry, old: Optional[dict]) -> list[str]:
    if (
        old is None
        or entry.type != "command:remote:Command"
        or entry.action not in ("delete", "delete-before-replace", "replace")
    ):
        return []
    verb = "removed" if entry.action == "delete" else "replaced (its delete runs first)"
    out = []
    script = command_script(old["inputs"].get("delete"))
    if script:
        effect = DELETE_EFFECTS.get(script, f"runs {script}")
        params = command_env(old["inputs"].get("delete"))
        if params.get("DRAIN") == "false":
            effect = effect.replace(
                "cordon + drain (PodDisruptionBudgets honoured) + ", "no drain (drainOnRemove: false); "
            )
        out.append(f"{entry.name} [host {entry.host or '?'}] {verb}: {script}: {effect}")
    create = command_env(old["inputs"].get("create"))
    if command_script(old["inputs"].get("create")) == "ceph-osd-devices.sh" and entry.action == "delete":
        out.append(
            f"{entry.name}: Ceph storage host {create.get('NODE_NAME', '?')} removed with its OSD devices "
            f"{create.get('DEVICES', '?')}: take its OSDs out and let Ceph re-replicate first (docs/runbook.md §3)"
        )
    return out


def _restart_danger(entries: list[Entry], after: dict[str, dict]) -> list[str]:
    restarts = [e for e in entries if e.action != "delete" and _rke2_restart_params(e)]
    out = []
    if restarts:
        params = sorted({p for e in restarts for p in _rke2_restart_params(e)})
        out.append(
            f"RKE2 service restarted on {len(restarts)} nodes ({', '.join(params)} changed): "
            "servers one after another, agents all at once"
        )
    nodes = sum(1 for r in after.values() if r["name"].endswith("-rke2") and r["type"] == "command:remote:Command")
    cni = [e for e in entries if e.name.endswith("-cni") and e.action == "update"]
    if cni:
        out.append(f"{cni[0].name}: the CNI release changes: its agent pods roll on all {nodes} nodes")
    return out


def _rke2_restart_params(entry: Entry) -> set[str]:
    """The parameters whose change makes `rke2-install.sh` restart the RKE2 service (it compares them on the host)."""
    if not entry.name.endswith("-rke2") or entry.type != "command:remote:Command":
        return set()
    create = next((c for c in entry.changes if c.path.startswith("inputs.create")), None)
    if create is None:
        return set()
    old, new = command_env(create.old), command_env(create.new)
    return {p for p in RKE2_RESTART_PARAMS if old.get(p) != new.get(p)}
