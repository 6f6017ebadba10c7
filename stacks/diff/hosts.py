"""Danger on the hosts: steps whose delete drains, uninstalls or wipes; RKE2 restarts, CIDR changes and
join-token rotations across nodes; Ceph OSD devices added, dropped or newly wiped; node renames."""

from __future__ import annotations

from typing import Optional

import yaml

from stacks.diff.core import DangerClass, Entry, Sides, command_env, command_script

# What a host step's delete does on the host, by its delete script (components/cluster/scripts/).
DELETE_EFFECTS = {
    "node-remove.sh": "cordon + drain (PodDisruptionBudgets honoured) + delete the Node object",
    "rke2-uninstall.sh": "uninstall RKE2: removes /var/lib/rancher/rke2 (etcd data, images), /etc/rancher, CNI files",
}
# Deletes that remove only the program's own files from the host (the certificate timer): no danger.
OWN_FILES_ONLY = {"rke2-certificate-watch.sh"}  # the timer's own step, in stacks deployed before RKE2's took it over
# rke2-install.sh restarts the service when the config.yaml or registries.yaml it writes change. Its
# RKE2_VERSION is only what a fresh host installs: the upgrade Plans (components/cluster/upgrades.py) upgrade.
RKE2_RESTART_PARAMS = ("RKE2_CONFIG", "REGISTRIES_YAML")
# RKE2 config keys fixed when the cluster is created: kube-controller-manager, kube-proxy/Cilium and every
# Service's clusterIP are built on them; a running cluster cannot move to other ranges.
FIXED_AT_CREATION = {"cluster-cidr": "network.clusterCidr", "service-cidr": "network.serviceCidr"}


def _is_step(entry: Entry, suffix: str) -> bool:
    return entry.type == "command:remote:Command" and entry.name.endswith(suffix)


def _params(resource: Optional[dict]) -> dict[str, str]:
    return command_env((resource or {}).get("inputs", {}).get("create"))


def renames(entries: list[Entry], after: dict[str, dict]) -> dict[str, str]:
    """OLD -> NEW for nodes renamed with `renamedFrom` in this change (a created NEW-rke2 naming OLD)."""
    found = {}
    for entry in entries:
        if entry.action == "create" and _is_step(entry, "-rke2"):
            old = _params(after.get(entry.urn)).get("RENAMED_FROM")
            if old:
                found[old] = entry.name.removesuffix("-rke2")
    return found


def _rename_danger(sides: Sides) -> list[str]:
    entries, after = sides.entries, sides.after
    return [
        f"node {old} renamed to {new} (renamedFrom), the same machine: {new}-prepare sets the host name, {new}-rke2 "
        f"rewrites RKE2's config under the new name and restarts it (the kubelet registers {new}), {new}-membership "
        f"labels it; then {old}'s deletes run: its Node object is deleted and RKE2 is left installed (the host runs "
        f"as {new}). Drain {old} before the up (docs/runbook.md §15)"
        for old, new in sorted(renames(entries, after).items())
    ]


def _host_step_danger(sides: Sides) -> list[str]:
    entries, before, after = sides.entries, sides.before, sides.after
    renamed = renames(entries, after)
    out = []
    for entry in entries:
        old = before.get(entry.urn)
        if (
            old is None
            or entry.type != "command:remote:Command"
            or entry.action not in ("delete", "delete-before-replace", "replace")
            or (entry.action == "delete" and entry.host in renamed)
        ):
            continue
        verb = "removed" if entry.action == "delete" else "replaced (its delete runs first)"
        script = command_script(old["inputs"].get("delete"))
        if script and script not in OWN_FILES_ONLY:
            effect = DELETE_EFFECTS.get(script, f"runs {script}")
            params = command_env(old["inputs"].get("delete"))
            if params.get("DRAIN") == "false":
                effect = effect.replace(
                    "cordon + drain (PodDisruptionBudgets honoured) + ", "no drain (drainOnRemove: false); "
                )
            out.append(f"{entry.name} [host {entry.host or '?'}] {verb}: {script}: {effect}")
        create = _params(old)
        if command_script(old["inputs"].get("create")) == "ceph-osd-devices.sh" and entry.action == "delete":
            out.append(
                f"{entry.name}: Ceph storage host {create.get('NODE_NAME', '?')} removed with its OSD devices "
                f"{create.get('DEVICES', '?')}: take its OSDs out and let Ceph re-replicate first (docs/runbook.md §3)"
            )
    return out


def _osd_device_danger(sides: Sides) -> list[str]:
    """Devices added to, dropped from or newly wiped on a storage host that stays."""
    entries, before, after = sides.entries, sides.before, sides.after
    out = []
    for entry in entries:
        if entry.action == "delete" or not _is_step(entry, "-ceph-disks") or entry.urn not in before:
            continue
        old, new = _params(before[entry.urn]), _params(after.get(entry.urn))
        old_devices, new_devices = old.get("DEVICES", "").split(), new.get("DEVICES", "").split()
        node = new.get("NODE_NAME", entry.host or "?")
        added = [d for d in new_devices if d not in old_devices]
        dropped = [d for d in old_devices if d not in new_devices]
        wiped = [d for d in new.get("WIPE", "").split() if d not in old.get("WIPE", "").split()]
        if wiped:
            out.append(
                f"{entry.name} [host {node}]: {', '.join(wiped)} will be WIPED (wipe: true): every byte on "
                "them is lost, an OSD already there included; check each path names the disk you mean "
                "(ls -l /dev/disk/by-id on the host)"
            )
        if added:
            out.append(
                f"{entry.name} [host {node}]: new OSD device(s) {', '.join(added)}: Rook creates an OSD on each and "
                "Ceph moves data onto them (backfill I/O on every storage host until it settles; watch `ceph -s`)"
            )
        if dropped:
            out.append(
                f"{entry.name} [host {node}]: {', '.join(dropped)} taken off the OSD list: Rook never removes an "
                "OSD by itself, so the OSD keeps running on it; to retire it take it out, let Ceph re-replicate "
                "and purge it (docs/runbook.md §3) before the disk is reused, or its data copies are lost"
            )
    return out


def _rke2_config(resource: Optional[dict]) -> dict:
    try:
        return yaml.safe_load(_params(resource).get("RKE2_CONFIG", "")) or {}
    except yaml.YAMLError:
        return {}


def _cidr_danger(sides: Sides) -> list[str]:
    """A pod or service range change: RKE2 cannot move a running cluster to other ranges."""
    entries, before, after = sides.entries, sides.before, sides.after
    out = []
    for key, setting in FIXED_AT_CREATION.items():
        changed = [
            e
            for e in entries
            if e.action != "delete" and _is_step(e, "-rke2") and e.urn in before
            if _rke2_config(before[e.urn]).get(key) != _rke2_config(after.get(e.urn)).get(key)
        ]
        if changed:
            old = _rke2_config(before[changed[0].urn]).get(key)
            new = _rke2_config(after.get(changed[0].urn)).get(key)
            out.append(
                f"{setting} changes {old} -> {new} on {len(changed)} nodes: the pod/service ranges are fixed when the "
                "cluster is created (every Service's clusterIP, every node's pod range and the CNI's state are built "
                "on them); RKE2 restarts with the new value and the cluster stops routing. This is a cluster "
                "rebuild: back up, tear down and bring up again (docs/runbook.md §8), or revert the setting"
            )
    return out


def _token_danger(sides: Sides) -> list[str]:
    """The server join token changed: every server restarts with it. The plans record the digest of each
    secret config value (`secretConfig`, from the encrypted value in the stack file), so a rotation shows
    offline too, where the servers' stdin that carries the token is only known at `up`."""
    key = "ml-platform:rke2Token"
    old, new = (sides.old.get("secretConfig") or {}).get(key), (sides.new.get("secretConfig") or {}).get(key)
    if old == new:
        return []
    servers = sorted(
        r["name"].removesuffix("-rke2")
        for r in sides.after.values()
        if r["type"] == "command:remote:Command" and r["name"].endswith("-rke2")
        if _params(r).get("RKE2_TYPE") == "server"
    )
    return [
        f"RKE2 join token rotated: {len(servers)} server(s) ({', '.join(servers)}) get the new token and restart "
        "rke2-server one at a time in join order; the token must first be rotated on the cluster with `rke2 token "
        "rotate`, or the restarted servers refuse to start; agents keep their agent token; snapshots taken before "
        "need the old token to restore (docs/runbook.md §5)"
    ]


def _restart_danger(sides: Sides) -> list[str]:
    entries, after = sides.entries, sides.after
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
    if not _is_step(entry, "-rke2"):
        return set()
    create = next((c for c in entry.changes if c.path.startswith("inputs.create")), None)
    if create is None:
        return set()
    old, new = command_env(create.old), command_env(create.new)
    return {p for p in RKE2_RESTART_PARAMS if old.get(p) != new.get(p)}


CLASSES = (
    DangerClass("a host step whose delete drains, uninstalls or wipes; a Ceph storage host removed", _host_step_danger),
    DangerClass("a node renamed with renamedFrom (shown as the rename it is)", _rename_danger),
    DangerClass("Ceph OSD devices added, taken off the list or newly marked wipe: true", _osd_device_danger),
    DangerClass("the pod or service CIDR changed (a cluster rebuild)", _cidr_danger),
    DangerClass("the RKE2 join token rotated (every server restarts)", _token_danger),
    DangerClass("RKE2 restarted on many nodes; the CNI rolling on every node", _restart_danger),
)
