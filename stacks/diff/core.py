"""The diff's model and values: what changed in each resource and whether the provider replaces it
(the rules are described in the package docstring, `stacks/diff/__init__.py`).
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections import Counter
from collections.abc import Iterator
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
#   `replace_on_changes=["triggers[*]"]`, pulumi_command/remote/command.py; so it is in the plan too);
#   CopyToRemote likewise (pulumi_command/remote/copy_to_remote.py), and a new `source` or `remotePath` is
#   an update that copies again (pulumi-command provider/pkg/provider/remote/copyController.go, `Update`).
# - random:index/randomPassword:RandomPassword, randomBytes:RandomBytes and randomId:RandomId: every input
#   (terraform-provider-random marks each attribute RequiresReplace;
#   pulumi_random/random_password.py: `keepers` "trigger recreation").
# - core/v1 ConfigMap: also `.data`, `.binaryData` (forcenew.go).
# - batch/v1 Job: also `.spec.selector`, `.spec.template` (forcenew.go, `var job`; Kubernetes itself
#   refuses a change to a Job's template).
# - tls:index/*: every argument (terraform-provider-tls marks each one RequiresReplace).
K8S_OBJECT = ("metadata.name", "metadata.namespace")
ZABBIX_KINDS = (
    "HostGroup",
    "GlobalMacro",
    "TemplateImport",
    "Host",
    "MediaType",
    "UserGroup",
    "User",
    "Action",
    "Dashboard",
    "UserRole",
)
TLS_TYPES = ("privateKey:PrivateKey", "selfSignedCert:SelfSignedCert", "certRequest:CertRequest")
REPLACE_ON: dict[str, tuple[str, ...]] = {
    "kubernetes:core/v1:ConfigMap": (*K8S_OBJECT, "data", "binaryData"),
    "kubernetes:batch/v1:Job": (*K8S_OBJECT, "spec.selector", "spec.template"),
    **{f"tls:index/{t}": ("",) for t in (*TLS_TYPES, "locallySignedCert:LocallySignedCert")},
    "kubernetes:helm.sh/v3:Release": ("name", "namespace"),
    "kubernetes:storage.k8s.io/v1:StorageClass": (*K8S_OBJECT, "parameters", "provisioner"),
    "command:remote:Command": ("triggers",),
    "command:remote:CopyToRemote": ("triggers",),
    "random:index/randomPassword:RandomPassword": ("",),
    "random:index/randomBytes:RandomBytes": ("",),
    "random:index/randomId:RandomId": ("",),
    # components/zabbix_objects.py, the providers' own `diff`: an object is replaced only when its kind
    # changes (it is adopted by natural key otherwise); the bootstrap when its server or API user
    # changes (a new Admin or API password is an in-place update).
    **{f"pulumi-python:dynamic/zabbix:{kind}": ("kind",) for kind in ZABBIX_KINDS},
    "pulumi-python:dynamic/zabbix:Bootstrap": ("url", "api_user"),
    # components/monitoring/host_set.py, `HostSetProvider.diff` and `HostClaimProvider.diff`: never replaced.
    "pulumi-python:dynamic/zabbix:HostSet": (),
    "pulumi-python:dynamic/zabbix:HostClaim": (),
    # components/monitoring/reader.py, `ApiTokenProvider.diff`: a new user or token name replaces the token,
    # the old one deleted first (Zabbix refuses a second token of one name for a user).
    "pulumi-python:dynamic/zabbix:ApiToken": ("username", "name"),
    # pulumi_kubernetes/provider.py, `cluster_identifier`: "the provider will _only_ be replaced when
    # `clusterIdentifier` changes; all other changes to provider configuration will be treated as updates".
    "pulumi:providers:kubernetes": ("clusterIdentifier",),
}

# The program's own dynamic providers (components/minio/objects.py, their `diff`), by the input that names
# the kind: the inputs that replace, and whether the old one is deleted first.
DYNAMIC = "pulumi-python:dynamic:Resource"
DYNAMIC_REPLACE = {"bucket": (("bucket",), False), "user": (("user", "policyName"), True)}


@dataclass
class Change:
    path: str
    old: Any
    new: Any


@dataclass(frozen=True)
class Sides:
    """What a danger class looks at: the changed entries, the resources of both plans by URN, both plans."""

    entries: list[Entry]
    before: dict[str, dict]
    after: dict[str, dict]
    old: dict[str, Any]
    new: dict[str, Any]

    def pairs(self) -> Iterator[tuple[Entry, Optional[dict], Optional[dict]]]:
        """Each changed entry with its resource before and after (None on the side where it does not exist)."""
        return ((e, self.before.get(e.urn), self.after.get(e.urn)) for e in self.entries)


@dataclass(frozen=True)
class DangerClass:
    """One kind of destructive or disruptive change the review names (docs/safety.md lists them all):
    `find(Sides)` -> plain-words lines, each saying what is lost or
    restarts, in which order, and the runbook section to follow."""

    title: str
    find: Any


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
    reads: list[str] = field(default_factory=list)  # `+ read ...` / `- read ...`: reads added or dropped

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
    """The `NAME=value` parameters a host step's command passes to its script (components/hosts/remote.py)."""
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
    """A host step's `update` is its `create` (components/hosts/remote.py): show the change once."""
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


DELETES_FIRST = ("pulumi-python:dynamic/zabbix:ApiToken",)
"""Dynamic types whose provider replaces with the old one deleted first (their `diff`)."""


def _dynamic_deletes_first(resource: dict[str, Any]) -> bool:
    if resource["type"] in DELETES_FIRST:
        return True
    if resource["type"] != DYNAMIC:
        return False
    return any(first for key, (_, first) in DYNAMIC_REPLACE.items() if key in resource["inputs"])


def _host(resource: dict[str, Any]) -> Optional[str]:
    if resource["type"] != "command:remote:Command":
        return None
    inputs = resource["inputs"]
    # A step that runs only at delete (a node's membership) names its node there.
    return command_env(inputs.get("create") or inputs.get("delete")).get("NODE_NAME")


# ---------------------------------------------------------------------------------------------
# The whole diff
# ---------------------------------------------------------------------------------------------


def component_of(urn: str, resources: dict[str, dict]) -> str:
    """The top-level ml-platform component that holds `urn` ("stack" for resources outside them)."""
    owner, current = "stack", resources.get(urn)
    while current is not None:
        if current["type"].startswith("mlplatform:"):
            owner = current["name"]
        current = resources.get(current["parent"]) if current.get("parent") else None
    return owner
