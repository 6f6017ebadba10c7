"""What a change does, as the engine would apply it: the offline diff of two plans (`stacks.plan --diff`).

Each resource is marked create / update / replace / delete-before-replace / delete from the changed
input paths, the provider's own replace rules (REPLACE_ON, sources named) and the resource options
recorded in the plan (`replaceOnChanges`, `deleteBeforeReplace`, `protect`, `retainOnDelete`,
`ignoreChanges`). Values are shown, not just names: old -> new for scalars, a line diff for
multi-line strings and commands, nested paths for maps and lists (list items matched by `name`).
Secrets stay `[secret]`; a changed secret is reported without its value (by its digest in the plan).

Danger comes first: host steps whose delete drains, uninstalls or wipes, replacements of stateful
releases and storage classes, removed Ceph storage hosts (with their devices), NAS drives that leave
MinIO's server pool, and RKE2 or CNI restarts across many nodes. A protected resource that would be
replaced or deleted is an error, worded as Pulumi words it, with the runbook step that does the change
safely.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

SECRET = "[secret]"
ABSENT = object()

# Input paths whose change makes the provider replace the resource rather than update it, by type.
# Sources (checked by tests/test_diff.py where the installed packages state it):
# - every Kubernetes object: `.metadata.name`, `.metadata.namespace`; StorageClass also `.parameters`,
#   `.provisioner` (pulumi-kubernetes provider/pkg/provider/forcenew.go, `forceNew`).
# - helm.sh/v3 Release: `name`, `namespace` (pulumi-kubernetes provider/pkg/provider/helm_release.go,
#   Diff: `forceNewFields := []string{".name", ".namespace"}`; DeleteBeforeReplace false).
# - command:remote:Command: `triggers` (the pulumi_command SDK itself registers every Command with
#   `replace_on_changes=["triggers[*]"]`, pulumi_command/remote/command.py; so it is in the plan too).
# - random:index/randomPassword:RandomPassword, randomBytes:RandomBytes and randomId:RandomId: every input
#   (terraform-provider-random marks each attribute RequiresReplace;
#   pulumi_random/random_password.py: `keepers` "trigger recreation").
# - core/v1 ConfigMap: also `.data`, `.binaryData` (forcenew.go).
# - tls:index/*: every argument (terraform-provider-tls marks each one RequiresReplace).
K8S_OBJECT = ("metadata.name", "metadata.namespace")
ZABBIX_KINDS = ("HostGroup", "GlobalMacro", "TemplateImport", "Host", "MediaType", "UserGroup", "User", "Action")
TLS_TYPES = ("privateKey:PrivateKey", "selfSignedCert:SelfSignedCert", "certRequest:CertRequest")
REPLACE_ON: dict[str, tuple[str, ...]] = {
    "kubernetes:core/v1:ConfigMap": (*K8S_OBJECT, "data", "binaryData"),
    **{f"tls:index/{t}": ("",) for t in (*TLS_TYPES, "locallySignedCert:LocallySignedCert")},
    "kubernetes:helm.sh/v3:Release": ("name", "namespace"),
    "kubernetes:storage.k8s.io/v1:StorageClass": (*K8S_OBJECT, "parameters", "provisioner"),
    "command:remote:Command": ("triggers",),
    "random:index/randomPassword:RandomPassword": ("",),
    "random:index/randomBytes:RandomBytes": ("",),
    "random:index/randomId:RandomId": ("",),
    # components/zabbix_objects.py, the providers' own `diff`: an object is replaced only when its kind
    # changes (it is adopted by natural key otherwise); the bootstrap when its server or API user
    # changes (a new Admin or API password is an in-place update).
    **{f"pulumi-python:dynamic/zabbix:{kind}": ("kind",) for kind in ZABBIX_KINDS},
    "pulumi-python:dynamic/zabbix:Bootstrap": ("url", "api_user"),
}

# The program's own dynamic providers (components/minio_objects.py, their `diff`), by the input that names
# the kind: the inputs that replace, and whether the old one is deleted first.
DYNAMIC = "pulumi-python:dynamic:Resource"
DYNAMIC_REPLACE = {"bucket": (("bucket",), False), "user": (("user", "policyName"), True)}

# What a host step's delete does on the host, by its delete script (components/scripts/).
DELETE_EFFECTS = {
    "node-remove.sh": "cordon + drain (PodDisruptionBudgets honoured) + delete the Node object",
    "rke2-uninstall.sh": "uninstall RKE2: removes /var/lib/rancher/rke2 (etcd data, images), /etc/rancher, CNI files",
}
# rke2-install.sh restarts the service when the config.yaml or registries.yaml it writes change. Its
# RKE2_VERSION is only what a fresh host installs: the upgrade Plans (components/upgrades.py) upgrade.
RKE2_RESTART_PARAMS = ("RKE2_CONFIG", "REGISTRIES_YAML")
PLAN_TYPE = "kubernetes:upgrade.cattle.io/v1:Plan"
# Releases whose replacement or removal loses data or takes the platform down.
STATEFUL_CHARTS = {
    "rook-ceph-cluster": "the Ceph cluster (tier-2 data)",
    "rook-ceph": "the Ceph operator and CSI (every tier-2 volume's driver)",
    "minio": "MinIO (tier-3 object data)",
    "cilium": "the CNI (pod networking on every node)",
    "tigera-operator": "the CNI (pod networking on every node)",
}
# The runbook step that does a refused change safely, by resource name suffix.
SAFE_STEPS = {
    "-cni": "switching the CNI means rebuilding the cluster: tear it down per docs/runbook.md §8 "
    "(`pulumi state unprotect` the CNI release first), then bring it up with the new `network.cni`",
    "-init-server": "the init server moves only to retire its machine: docs/runbook.md §3 "
    "(`pulumi state unprotect` this record, name another Ready server in `cluster.initServer`, `pulumi up`)",
}
DEFAULT_SAFE_STEP = "`pulumi state unprotect URN` after checking docs/runbook.md for the resource, then `pulumi up`"


@dataclass
class Change:
    path: str
    old: Any
    new: Any


@dataclass
class Entry:
    urn: str
    name: str
    type: str
    action: str  # create / update / replace / delete-before-replace / delete
    component: str
    host: Optional[str]
    changes: list[Change] = field(default_factory=list)
    replace_because: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Result:
    project: str
    stack: str
    entries: list[Entry]
    outputs: list[Change]
    danger: list[str]
    errors: list[str]

    def counts(self) -> Counter[str]:
        return Counter(e.action for e in self.entries)


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------


def value_changes(old: Any, new: Any, path: str) -> list[Change]:
    """Every leaf that differs, by path; list items matched by `name` where every item has one."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [c for k in sorted(old.keys() | new.keys()) for c in _sub(old, new, k, f"{path}.{k}")]
    if isinstance(old, list) and isinstance(new, list):
        keyed_old, keyed_new = _by_name(old), _by_name(new)
        if keyed_old is not None and keyed_new is not None:
            return [
                c
                for k in [*keyed_old, *(k for k in keyed_new if k not in keyed_old)]
                for c in _sub(keyed_old, keyed_new, k, f"{path}[name={k}]")
            ]
        if len(old) == len(new):
            return [c for i in range(len(old)) for c in value_changes(old[i], new[i], f"{path}[{i}]")]
    return [] if old == new else [Change(path, old, new)]


def _sub(old: dict, new: dict, key: str, path: str) -> list[Change]:
    return value_changes(old.get(key, ABSENT), new.get(key, ABSENT), path)


def _by_name(items: list) -> Optional[dict[str, Any]]:
    names = [i.get("name") if isinstance(i, dict) else None for i in items]
    if not items or not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
        return None
    return dict(zip(names, items, strict=True))


def show(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    return value if value == SECRET else json.dumps(value, sort_keys=True)


def render_change(change: Change) -> list[str]:
    """One change as lines: `path: old -> new`, or a line diff for multi-line strings and commands."""
    old, new = change.old, change.new
    if isinstance(old, str) and isinstance(new, str) and SECRET not in (old, new) and _multiline(old, new):
        diff = difflib.unified_diff(_lines(old), _lines(new), lineterm="", n=1)
        return [f"{change.path}:", *(f"    {line}" for line in list(diff)[2:])]
    if old == SECRET and new == SECRET:
        return [f"{change.path}: [secret] -> [secret] (changed; value not shown)"]
    if change.path == "dependencies" and isinstance(old, list) and isinstance(new, list):
        gone, added = sorted(set(old) - set(new)), sorted(set(new) - set(old))
        return [f"dependencies: {' '.join([*(f'-{_short(u)}' for u in gone), *(f'+{_short(u)}' for u in added)])}"]
    shown_old, shown_new = show(old), show(new)
    if len(shown_old) + len(shown_new) > 120:
        return [f"{change.path}:", f"    - {shown_old}", f"    + {shown_new}"]
    return [f"{change.path}: {shown_old} -> {shown_new}"]


def bare_paths(change: Change) -> list[str]:
    """The input paths of a change (a host step's merged create/update change is both)."""
    if change.path.startswith("inputs.create (and inputs.update"):
        return ["inputs.create", "inputs.update"]
    return [change.path]


def _short(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def _multiline(old: str, new: str) -> bool:
    return "\n" in old or "\n" in new or " bash -c " in old or " bash -c " in new


def _lines(text: str) -> list[str]:
    """A command's `env` assignments one per line (so a changed parameter is its own line), then the rest."""
    head, sep, rest = text.partition(" bash -c ")
    if sep:
        try:
            return [line for token in shlex.split(head) for line in token.splitlines()] + (sep + rest).splitlines()
        except ValueError:  # not shell syntax after all: plain lines
            pass
    return text.splitlines()


def command_env(command: Any) -> dict[str, str]:
    """The `NAME=value` parameters a host step's command passes to its script (components/remote.py)."""
    if not isinstance(command, str) or " bash -c " not in command:
        return {}
    try:
        tokens = shlex.split(command.partition(" bash -c ")[0])
    except ValueError:
        return {}
    return dict(t.split("=", 1) for t in tokens if "=" in t and not t.startswith("-"))


def command_script(command: Any) -> Optional[str]:
    """The script a host step's command runs (its last word, `$0` of `bash -c`)."""
    if not isinstance(command, str) or " bash -c " not in command:
        return None
    try:
        return shlex.split(command)[-1]
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------------------------


def replace_paths(resource: dict[str, Any]) -> tuple[str, ...]:
    """Input paths (without `inputs.`) whose change replaces `resource`: provider rules + replaceOnChanges."""
    type_ = resource["type"]
    provider = REPLACE_ON.get(type_, K8S_OBJECT if type_.startswith("kubernetes:") else ())  # providers: none
    if type_ == DYNAMIC:
        provider = next((paths for key, (paths, _) in DYNAMIC_REPLACE.items() if key in resource["inputs"]), ())
    own = tuple(p.replace("[*]", "") for p in (resource.get("options") or {}).get("replaceOnChanges", []))
    return tuple(dict.fromkeys((*provider, *own)))


def _matches(path: str, prefixes: tuple[str, ...]) -> list[str]:
    bare = path.removeprefix("inputs.")
    return [p for p in prefixes if p == "" or bare == p or bare.startswith((f"{p}.", f"{p}["))]


def _changes(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    changes = value_changes(old["inputs"], new["inputs"], "inputs")
    changes += _changed_secrets(old, new, changes)
    ignored = tuple((new.get("options") or {}).get("ignoreChanges", []))
    changes = [c for c in changes if not _matches(c.path, ignored)]
    for key in ("parent", "provider", "dependencies"):
        if old.get(key) != new.get(key):
            changes.append(Change(key, old.get(key), new.get(key)))
    return _dedupe_update(changes)


def _changed_secrets(old: dict, new: dict, seen: list[Change]) -> list[Change]:
    """Secrets that are `[secret]` on both sides but whose digests differ: changed, value hidden."""
    before, after = old.get("secretDigests") or {}, new.get("secretDigests") or {}
    paths = {c.path for c in seen}
    return [
        Change(path, SECRET, SECRET)
        for path in sorted(before.keys() & after.keys())
        if before[path] != after[path] and path not in paths
    ]


def _dedupe_update(changes: list[Change]) -> list[Change]:
    """A host step's `update` is its `create` (components/remote.py): show the change once."""
    create = next((c for c in changes if c.path == "inputs.create"), None)
    update = next((c for c in changes if c.path == "inputs.update"), None)
    if create and update and (create.old, create.new) == (update.old, update.new):
        changes = [c for c in changes if c is not update]
        create.path = "inputs.create (and inputs.update, the same command)"  # bare_paths() splits it
    return changes


def classify(old: Optional[dict], new: Optional[dict], component: str) -> Optional[Entry]:
    resource = new or old
    assert resource is not None
    host = _host(resource)
    options = (new or old).get("options") or {}
    if old is None:
        return Entry(resource["urn"], resource["name"], resource["type"], "create", component, host, options=options)
    if new is None:
        return Entry(resource["urn"], resource["name"], resource["type"], "delete", component, host, options=options)
    changes = _changes(old, new)
    if not changes:
        return None
    prefixes = replace_paths(new)
    because = sorted({c.path.split(" (")[0] for c in changes if _matches(c.path.split(" (")[0], prefixes)})
    action = "update"
    if because:
        first = options.get("deleteBeforeReplace") or _dynamic_deletes_first(new)
        action = "delete-before-replace" if first else "replace"
    return Entry(new["urn"], new["name"], new["type"], action, component, host, changes, because, options)


def _dynamic_deletes_first(resource: dict[str, Any]) -> bool:
    if resource["type"] != DYNAMIC:
        return False
    return any(first for key, (_, first) in DYNAMIC_REPLACE.items() if key in resource["inputs"])


def _host(resource: dict[str, Any]) -> Optional[str]:
    if resource["type"] != "command:remote:Command":
        return None
    return command_env(resource["inputs"].get("create")).get("NODE_NAME")


# ---------------------------------------------------------------------------------------------
# The whole diff
# ---------------------------------------------------------------------------------------------


def compare(old: dict[str, Any], new: dict[str, Any]) -> Result:
    before = {r["urn"]: r for r in old["resources"]}
    after = {r["urn"]: r for r in new["resources"]}
    entries = []
    for urn in sorted(before.keys() | after.keys()):
        owner = _component(urn, after if urn in after else before)
        entry = classify(before.get(urn), after.get(urn), owner)
        if entry is not None:
            entries.append(entry)
    outputs = [
        Change(name, old["outputs"].get(name, ABSENT), new["outputs"].get(name, ABSENT))
        for name in sorted(old["outputs"].keys() | new["outputs"].keys())
        if old["outputs"].get(name, ABSENT) != new["outputs"].get(name, ABSENT)
    ]
    result = Result(new.get("project", ""), new.get("stack", ""), entries, outputs, [], [])
    result.danger = danger(entries, before, after)
    result.errors = [e for entry in entries for e in refusal(entry, before.get(entry.urn))]
    return result


def _component(urn: str, resources: dict[str, dict]) -> str:
    """The top-level ml-platform component that holds `urn` ("stack" for resources outside them)."""
    owner, current = "stack", resources.get(urn)
    while current is not None:
        if current["type"].startswith("mlplatform:"):
            owner = current["name"]
        current = resources.get(current["parent"]) if current.get("parent") else None
    return owner


def refusal(entry: Entry, old: Optional[dict]) -> list[str]:
    """Pulumi's own error for a protected resource that would be replaced or deleted, and the safe way."""
    # A base plan from before options were recorded: its protection is taken to be the head's.
    recorded = (old or {}).get("options", entry.options)
    protected = bool(recorded.get("protect"))
    if not protected or entry.action in ("create", "update"):
        return []
    urn = entry.urn
    if entry.action == "delete":
        message = (
            f'unable to delete resource "{urn}"\nas it is currently marked for protection. To unprotect the '
            "resource, either remove the `protect` flag from the resource in your Pulumi program and run "
            f"`pulumi up` or use the command:\n`pulumi state unprotect '{urn}'`"
        )
    else:
        if not entry.options.get("protect"):
            return []  # unprotecting and replacing in one update is allowed (the engine checks both)
        message = (
            f'unable to replace resource "{urn}"\nas it is currently marked for protection. To unprotect the '
            "resource, remove the `protect` flag from the resource in your Pulumi program and run `pulumi up`"
        )
    safe = next((step for suffix, step in SAFE_STEPS.items() if entry.name.endswith(suffix)), DEFAULT_SAFE_STEP)
    why = f" (changes {', '.join(entry.replace_because)})" if entry.replace_because else ""
    return [f"error: {message}\n{entry.name}{why}: {safe}"]


def danger(entries: list[Entry], before: dict[str, dict], after: dict[str, dict]) -> list[str]:
    found: list[str] = []
    for entry in entries:
        found += _host_step_danger(entry, before.get(entry.urn))
        found += _nas_drive_danger(entry, before.get(entry.urn), after.get(entry.urn))
        found += _release_danger(entry, before.get(entry.urn) or after.get(entry.urn))
    found += _pool_danger(before, after)
    found += _restart_danger(entries, after)
    found += _upgrade_danger(before, after)
    return found


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


def _nas_drive_danger(entry: Entry, old: Optional[dict], new: Optional[dict]) -> list[str]:
    """NAS drives that leave MinIO's server pool: a whole NAS host removed, drives taken off or replaced."""
    if old is None or command_script(old["inputs"].get("create")) != "minio-nas.sh" or entry.action == "create":
        return []
    old_drives = _drives(command_env(old["inputs"].get("create")))
    new_drives = _drives(command_env(new["inputs"].get("create"))) if new and entry.action != "delete" else []
    gone = [f"drive{slot} {old_drives[slot - 1]}" for slot in _gone_slots(old_drives, new_drives)]
    if not gone:
        return []
    host = f"{entry.name} [NAS host {entry.name.removesuffix('-minio')}]"
    if not new_drives:
        return [
            f"{host}: NAS host removed from MinIO's pool with all its drives: {', '.join(gone)} (the step has "
            "no delete: MinIO keeps running there until stopped by hand)"
        ]
    if len(new_drives) < len(old_drives):
        return [f"{host}: drives removed from MinIO's pool: {', '.join(gone)}"]
    swapped = [
        f"drive{slot} {old_drives[slot - 1]} -> {new_drives[slot - 1]}" for slot in _gone_slots(old_drives, new_drives)
    ]
    return [
        f"{host}: drives replaced in MinIO's pool: {', '.join(swapped)}. MinIO heals each new drive from the "
        "other drives of its erasure set; until then that set survives one drive loss fewer: replace no more "
        "drives of a set than its parity at once (docs/runbook.md §11)"
    ]


def _gone_slots(old_drives: list[str], new_drives: list[str]) -> list[int]:
    return [slot for slot, device in enumerate(old_drives, 1) if device not in new_drives]


def _pool_danger(before: dict[str, dict], after: dict[str, dict]) -> list[str]:
    """A change of MinIO's pool definition (MINIO_VOLUMES, set size, parity), which MinIO fixes at first start."""
    old, new = _pool(before), _pool(after)
    if not old or not new or old == new:
        return []
    (volumes, sets, parity), (new_volumes, new_sets, new_parity) = old, new
    return [
        f"MinIO's server pool changes: {volumes} ({pool_size(volumes)} drives, erasure sets of {sets}, {parity}) -> "
        f"{new_volumes} ({pool_size(new_volumes)} drives, sets of {new_sets}, {new_parity}). MinIO fixes the pool "
        "when it first starts (format.json on every drive) and cannot shrink or re-stripe it: it does not start "
        "with another drive count, and minio-nas.sh refuses the change on every NAS host whose drives hold data "
        "(the up stops at those steps). To change the layout, build a new deployment and copy the data "
        "(docs/minio-tier.md, 'Layout and what it survives')"
    ]


def _pool(resources: dict[str, dict]) -> Optional[tuple[str, str, str]]:
    """MINIO_VOLUMES, set size and parity of the NAS steps' env file (the same on every NAS host)."""
    for resource in resources.values():
        if command_script(resource["inputs"].get("create")) == "minio-nas.sh":
            env = command_env(resource["inputs"]["create"]).get("ENV_FILE", "")
            keys = ("MINIO_VOLUMES", "MINIO_ERASURE_SET_DRIVE_COUNT", "MINIO_STORAGE_CLASS_STANDARD")
            return tuple(env_file_value(env, key) for key in keys)  # type: ignore[return-value]
    return None


def _drives(params: dict[str, str]) -> list[str]:
    """The devices of minio-nas.sh's `DRIVES` (`DEVICE=ACTION ...`, in slot order)."""
    return [entry.rpartition("=")[0] for entry in params.get("DRIVES", "").split()]


def env_file_value(env_file: str, key: str) -> str:
    """One `KEY=value` line of the MinIO env file (quotes removed); '?' when absent."""
    for line in env_file.splitlines():
        name, sep, value = line.partition("=")
        if sep and name == key:
            return value.strip('"')
    return "?"


def pool_size(volumes: str) -> str:
    """Drives in a MINIO_VOLUMES pool: the product of its `{a...b}` ranges."""
    size = 1
    for low, high in re.findall(r"\{(\d+)\.\.\.(\d+)\}", volumes):
        size *= int(high) - int(low) + 1
    return "?" if volumes == "?" else str(size)


def _release_danger(entry: Entry, resource: Optional[dict]) -> list[str]:
    if resource is None or entry.action in ("create", "update"):
        return []
    if entry.type == "kubernetes:helm.sh/v3:Release":
        what = STATEFUL_CHARTS.get(str(resource["inputs"].get("chart")))
        if what:
            return [f"{entry.name}: Helm release of {what} would be {_verb(entry)}"]
    if entry.type == "kubernetes:storage.k8s.io/v1:StorageClass":
        return [f"{entry.name}: StorageClass would be {_verb(entry)}: claims that name it cannot provision meanwhile"]
    return []


def _verb(entry: Entry) -> str:
    return {"delete": "deleted (uninstalled)", "replace": "replaced (a new one is created, then the old deleted)"}.get(
        entry.action, "deleted, then created again"
    )


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


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

SIGNS = {"create": "+", "update": "~", "replace": "+-", "delete-before-replace": "-+", "delete": "-"}
ORDER = ("create", "update", "replace", "delete-before-replace", "delete")


def headline(result: Result) -> str:
    counts = result.counts()
    parts = [f"{counts.get(a, 0)} to {a}" for a in ORDER]
    return f"{', '.join(parts)}; {len(result.outputs)} outputs changed"


def entry_lines(entry: Entry) -> list[str]:
    notes = []
    if entry.host:
        notes.append(f"host {entry.host}")
    if entry.replace_because:
        notes.append(f"replaces because of {', '.join(p.removeprefix('inputs.') for p in entry.replace_because)}")
    if entry.options.get("protect"):
        notes.append("protected")
    if entry.action == "delete" and entry.options.get("retainOnDelete"):
        notes.append("retainOnDelete: left in place, only dropped from the state")
    note = f"  ({'; '.join(notes)})" if notes else ""
    lines = [f"{SIGNS[entry.action]} {entry.action} {entry.name} [{entry.type}]{note}"]
    for change in entry.changes:
        lines += [f"    {line}" for line in render_change(change)]
    return lines


def output_lines(result: Result) -> list[str]:
    return [f"~ output {c.path}: {show(c.old)} -> {show(c.new)}" for c in result.outputs]


def by_component(result: Result) -> dict[str, list[Entry]]:
    groups: dict[str, list[Entry]] = {}
    for entry in result.entries:
        groups.setdefault(entry.component, []).append(entry)
    return groups


def _tally(entries: list[Entry]) -> str:
    counts = Counter(e.action for e in entries)
    return ", ".join(f"{counts[a]} {a}" for a in ORDER if counts.get(a))


def by_host(result: Result) -> dict[str, list[Entry]]:
    groups: dict[str, list[Entry]] = {}
    for entry in result.entries:
        if entry.host:
            groups.setdefault(entry.host, []).append(entry)
    return dict(sorted(groups.items()))


def render_text(result: Result) -> str:
    lines = [f"Offline preview diff of {result.project}/{result.stack}: {headline(result)}"]
    if result.errors:
        lines += ["", "ERRORS: the preview would fail (the same as `pulumi preview`):"]
        lines += [f"  {line}" for error in result.errors for line in error.splitlines()]
    if result.danger:
        lines += ["", "DANGER: steps that destroy or disrupt:"]
        lines += [f"  ! {d}" for d in result.danger]
    groups = by_component(result)
    if groups:
        lines += ["", "By component:"] + [f"  {name}: {_tally(entries)}" for name, entries in groups.items()]
    hosts = by_host(result)
    if hosts:
        same: dict[str, list[str]] = {}
        for host, entries in hosts.items():
            same.setdefault(_tally(entries), []).append(host)
        lines += ["", f"By host ({len(hosts)} hosts):"]
        lines += [f"  {tally}: {', '.join(names)} ({len(names)})" for tally, names in same.items()]
    for name, entries in groups.items():
        lines += ["", f"{name}:"] + [line for e in entries for line in entry_lines(e)]
    if result.outputs:
        lines += ["", "Outputs:"] + [f"  {line}" for line in output_lines(result)]
    return "\n".join(lines)


def render_markdown(result: Result, max_lines: int = 300) -> str:
    lines = [f"**{result.project}/{result.stack}**: {headline(result)}"]
    if result.errors:
        lines += ["", "> [!CAUTION]", "> **The preview fails**: a protected resource would be replaced or deleted.", ""]
        lines += ["```", *[line for error in result.errors for line in error.splitlines()], "```"]
    if result.danger:
        lines += ["", "**Danger: steps that destroy or disrupt**", ""] + [f"- :warning: {d}" for d in result.danger]
    groups, hosts = by_component(result), by_host(result)
    if groups:
        lines += ["", "| component | changes |", "|---|---|"] + [f"| {n} | {_tally(e)} |" for n, e in groups.items()]
    if hosts:
        lines += ["", f"<details><summary>by host ({len(hosts)} hosts)</summary>", ""]
        lines += ["| host | changes |", "|---|---|"] + [f"| {h} | {_tally(e)} |" for h, e in hosts.items()]
        lines += ["", "</details>"]
    budget = max_lines
    for name, entries in groups.items():
        body = [line for e in entries for line in entry_lines(e)]
        shown, budget = body[: max(budget, 0)], budget - len(body)
        lines += ["", f"<details><summary>{name}: {_tally(entries)}</summary>", "", "```diff", *shown, "```"]
        if len(shown) < len(body):
            lines.append(
                f"{len(body) - len(shown)} more lines: see the plain-text diff in the `offline-plans` artifact."
            )
        lines.append("</details>")
    if result.outputs:
        lines += ["", "<details><summary>outputs</summary>", "", "```diff", *output_lines(result), "```", "</details>"]
    return "\n".join(lines) + "\n"
