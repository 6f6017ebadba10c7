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

One module per concern: `core` (the model, values, replace rules), `protect` (refusals of protected
resources), `declared` (what each changed settings field declares, the etcd quorum, the cluster's identity),
the danger of each area (`hosts`, `minio`, `releases`, `upgrades`), `render` (text, Markdown).
"""

from __future__ import annotations

from typing import Any

from stacks.diff import declared, effects, hosts, identity, membership, minio, releases, upgrades
from stacks.diff.core import (
    ABSENT,
    REPLACE_ON,
    SECRET,
    Change,
    Entry,
    Result,
    Sides,
    bare_paths,
    classify,
    command_env,
    command_script,
    component_of,
    render_change,
    replace_paths,
    show,
    value_changes,
)
from stacks.diff.minio import env_file_value, pool_size
from stacks.diff.protect import refusal
from stacks.diff.render import by_component, by_host, entry_lines, headline, output_lines, render_markdown, render_text

# Every kind of destructive or disruptive change the review names, by area (docs/safety.md lists them).
DANGER = (
    *hosts.CLASSES,
    *minio.CLASSES,
    *releases.CLASSES,
    *upgrades.CLASSES,
    *membership.CLASSES,
    *identity.CLASSES,
    *effects.CLASSES,
    *declared.CLASSES,
)
# Classes that speak last and leave out what a class above named in detail (their `worded` argument).
LAST = (effects.kind_danger, declared.declared_danger)

__all__ = [
    "ABSENT",
    "REPLACE_ON",
    "SECRET",
    "Change",
    "Entry",
    "Result",
    "bare_paths",
    "by_component",
    "by_host",
    "classify",
    "command_env",
    "command_script",
    "compare",
    "danger",
    "entry_lines",
    "env_file_value",
    "headline",
    "output_lines",
    "pool_size",
    "refusal",
    "render_change",
    "render_markdown",
    "render_text",
    "replace_paths",
    "show",
    "value_changes",
]


def read_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Objects the program starts or stops reading (`Resource.get`; plans without `reads` read nothing)."""
    before = {r["urn"]: r for r in old.get("reads", [])}
    after = {r["urn"]: r for r in new.get("reads", [])}
    lines = []
    for urn in sorted(before.keys() | after.keys()):
        read = after.get(urn) or before[urn]
        sign = "+" if urn not in before else "-" if urn not in after else None
        if sign is None and before[urn]["id"] == after[urn]["id"]:
            continue
        lines.append(f"{sign or '~'} read {read['name']} [{read['type']}] id {read['id']}")
    return lines


def danger(sides: Sides) -> list[str]:
    """Every class's lines; the per-kind effects and the settings-declared ones last, leaving out what a class above
    named in detail."""
    found = {kind: kind.find(sides) for kind in DANGER if kind.find not in LAST}
    worded = frozenset(kind.find.__module__.rsplit(".", 1)[-1] for kind, lines in found.items() if lines)
    return [line for lines in found.values() for line in lines] + [
        line for last in LAST for line in last(sides, worded)
    ]


def compare(old: dict[str, Any], new: dict[str, Any]) -> Result:
    before = {r["urn"]: r for r in old["resources"]}
    after = {r["urn"]: r for r in new["resources"]}
    entries = []
    for urn in sorted(before.keys() | after.keys()):
        owner = component_of(urn, after if urn in after else before)
        entry = classify(before.get(urn), after.get(urn), owner)
        if entry is not None:
            entries.append(entry)
    entries = membership.bound_replacements(entries, before, after)
    outputs = [
        Change(name, old["outputs"].get(name, ABSENT), new["outputs"].get(name, ABSENT))
        for name in sorted(old["outputs"].keys() | new["outputs"].keys())
        if old["outputs"].get(name, ABSENT) != new["outputs"].get(name, ABSENT)
    ]
    result = Result(new.get("project", ""), new.get("stack", ""), entries, outputs, [], [], read_changes(old, new))
    result.danger = danger(Sides(entries, before, after, old, new))
    result.errors = [e for entry in entries for e in refusal(entry, before.get(entry.urn))]
    return result
