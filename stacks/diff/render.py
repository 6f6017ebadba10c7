"""The diff as text (the terminal, the artifact) and as Markdown (the pull-request comment): danger first."""

from __future__ import annotations

from collections import Counter

from stacks.diff.core import Entry, Result, render_change, show

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
    if result.reads:
        lines += ["", "Reads (objects the program reads and does not manage):"] + [f"  {r}" for r in result.reads]
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
    if result.reads:
        lines += ["", "<details><summary>reads</summary>", "", "```diff", *result.reads, "```", "</details>"]
    if result.outputs:
        lines += ["", "<details><summary>outputs</summary>", "", "```diff", *output_lines(result), "```", "</details>"]
    return "\n".join(lines) + "\n"
