"""`Pulumi.<stack>.yaml` as a file: its YAML read strictly, its keys checked, problems placed at file:line.

Settings see parsed values; people edit a file. This module turns a file's mistakes into the same kind of
message the settings give (path, problem, fix), with the file and line in front:
- a YAML syntax error (the parser stops there: it is the one problem such a file gets);
- a key given twice in one mapping (YAML keeps the last silently; Pulumi's CLI refuses the file);
- a key under a misspelt project prefix (`ml-platfrom:nodes`): Pulumi passes it on as another project's
  config and the program would never read it, so the setting would silently fall back to its default;
- an alias (`*name`) or merge key (`<<:`) that copies an entry carrying a destructive flag (`wipe`, `format`,
  `force`: the flags whose change the settings declare as destroying data): a copy would silently mark another
  disk for destruction, so such entries are written out in full;
- every settings problem (`load`), placed at the line of the path it names.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Optional

import yaml

# What is checked in the file itself (docs/safety.md lists these).
FILE_CHECKS = (
    "YAML syntax: the file and line of the error (the parser stops there)",
    "a key given twice in one mapping (YAML would keep only the last)",
    "a key under a misspelt project prefix (`ml-platfrom:nodes`), which would silently be another project's config",
    "a YAML alias or merge key (`*disk`, `<<: *disk`) copying an entry that carries a destructive flag "
    "(wipe, format, force)",
    "every settings problem placed at the file and line of the path it names",
)
# The stack file a run reads (set by `__main__.py` and the offline preview), for placing problems at lines.
STACK_FILE_ENV = "ML_PLATFORM_STACK_FILE"
# Namespaces whose config is legitimately in a stack file next to ours (Pulumi itself, providers we use).
OTHER_NAMESPACES = frozenset({"pulumi", "kubernetes", "command", "random", "tls"})


class Located:
    """Parsed YAML plus where each config path starts (`nodes[3].address` -> line)."""

    def __init__(self, doc: Any, lines: dict[str, int]):
        self.doc = doc
        self.lines = lines


def read(path: Path, namespace: str) -> tuple[Optional[Located], list[str]]:
    """The stack file parsed, and its problems (file:line first, the fix last)."""
    text = path.read_text()
    # libyaml where PyYAML has it (a 1000-node file parses several times faster); its error is reported
    # as the pure-Python parser words it.
    fast = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        try:
            root = yaml.compose(text, Loader=fast)
        except yaml.MarkedYAMLError:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path.name}:{mark.line + 1}" if mark else path.name
        problem = exc.problem or exc.context or "not YAML"
        return None, [
            f"{where}: YAML syntax error: {problem}; fix the indentation or quoting there "
            "(values with ': ' or ' #' in them need quotes)"
        ]
    problems: list[str] = []
    _duplicates(root, path.name, problems)
    problems += copy_problems(text, path.name)
    doc = yaml.load(text, Loader=fast) or {}
    lines: dict[str, int] = {}
    config = _child(root, "config")
    if config is not None:
        for key_node, value_node in config.value:
            key = str(key_node.value)
            prefix, sep, rest = key.partition(":")
            if sep and prefix != namespace:
                problems += _prefix_problem(path.name, key_node.start_mark.line + 1, key, prefix, rest, namespace)
            if prefix == namespace and sep:
                _index(value_node, rest, lines)
    return Located(doc, lines), problems


def _events(text: str) -> list[yaml.Event]:
    """The YAML events of `text` (libyaml's parser where PyYAML has it: ten times faster on a 1000-node file, the
    same events and marks); the pure-Python parser's, or its error, where libyaml's fails."""
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            return list(yaml.parse(text, Loader=fast))
        except yaml.YAMLError:
            pass
    return list(yaml.parse(text, Loader=yaml.SafeLoader))


def copy_problems(text: str, file_name: str) -> list[str]:
    """Aliases and merge keys that copy a destructive flag (`destructive_flags`) into another entry."""
    from settings.declare import destructive_flags  # the declarations, read once the models exist

    flags = destructive_flags()
    anchored: dict[str, tuple[int, set[str]]] = {}
    frames: list[dict[str, Any]] = []
    problems: list[str] = []

    def value_done(keys: set[str]) -> None:
        if frames:
            frames[-1]["keys"] |= keys
            frames[-1]["key_next"] = frames[-1]["map"]

    for event in _events(text):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            merged = bool(frames) and frames[-1].get("merge", False)
            line = event.start_mark.line + 1
            map_ = isinstance(event, yaml.MappingStartEvent)
            frames.append({"map": map_, "anchor": event.anchor, "line": line, "keys": set(), "key_next": map_})
            frames[-1]["merged"] = merged
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            frame = frames.pop()
            if frame["anchor"]:
                anchored[frame["anchor"]] = (frame["line"], frame["keys"])
            if frame["merged"] and frame["keys"] & flags:
                problems.append(_copy_problem(file_name, frame["line"], "this merge key", frame["keys"] & flags))
            value_done(frame["keys"])
        elif isinstance(event, yaml.ScalarEvent):
            if frames and frames[-1]["key_next"]:
                frames[-1]["keys"].add(event.value)
                frames[-1]["merge"] = event.value == "<<" and event.implicit[0]
                frames[-1]["key_next"] = False
            else:
                value_done(set())
        elif isinstance(event, yaml.AliasEvent):
            line, keys = anchored.get(event.anchor, (0, set()))
            if keys & flags:
                what = f"`*{event.anchor}` (the entry at line {line})"
                problems.append(_copy_problem(file_name, event.start_mark.line + 1, what, keys & flags))
            value_done(keys)
    return problems


def _copy_problem(file_name: str, line: int, what: str, flags: set[str]) -> str:
    return (
        f"{file_name}:{line}: {what} copies {', '.join(sorted(flags))}, which destroy(s) data, into another entry; "
        "a copied destructive flag marks another disk without anyone writing it there: write each entry out in full"
    )


def namespace_problems(keys: list[str], namespace: str, where: str = "") -> list[str]:
    """Config keys under a namespace that is nearly ours (what the program sees of a stack file at `up`)."""
    return [
        problem
        for key in keys
        for problem in _prefix_problem(where, None, key, *key.partition(":")[::2], namespace)
        if key.partition(":")[1]
    ]


def place(problems: list[str], located: Located, file_name: str) -> list[str]:
    """Each settings problem with `file:line: ` in front, at the deepest path of it the file holds."""
    return [_place(p, located.lines, file_name) for p in problems]


def _place(problem: str, lines: dict[str, int], file_name: str) -> str:
    path = problem.split(": ", 1)[0].split(" ", 1)[0]
    path = re.sub(r"\[(\d+)\] \([^)]*\)", r"[\1]", path)
    while path:
        if path in lines:
            return f"{file_name}:{lines[path]}: {problem}"
        path = re.sub(r"(\.[^.\[]+|\[\d+\])$", "", path) if re.search(r"(\.[^.\[]+|\[\d+\])$", path) else ""
    return problem


def _prefix_problem(file_name: str, line: Optional[int], key: str, prefix: str, rest: str, namespace: str) -> list[str]:
    if prefix == namespace or prefix in OTHER_NAMESPACES:
        return []
    close = difflib.get_close_matches(prefix, [namespace], n=1, cutoff=0.75) or (
        [namespace] if prefix.replace("_", "-").lower() == namespace else []
    )
    if not close:
        return []
    where = f"{file_name}:{line}: " if line else ""
    return [
        f"{where}{key}: unknown project prefix {prefix!r} (did you mean '{namespace}:{rest}'?); this key would "
        f"be another project's config and the setting would silently keep its default: rename it to "
        f"'{namespace}:{rest}'"
    ]


def _duplicates(node: yaml.Node, file_name: str, problems: list[str]) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key, line = str(key_node.value), key_node.start_mark.line + 1
            if key in seen:
                problems.append(
                    f"{file_name}:{line}: key {key!r} is given twice in this mapping (first at line {seen[key]}); "
                    "YAML would keep only the last one: merge them into one"
                )
            seen.setdefault(key, line)
            _duplicates(value_node, file_name, problems)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _duplicates(item, file_name, problems)


def _child(node: yaml.Node, key: str) -> Optional[yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        return None
    return next((value for k, value in node.value if k.value == key), None)


def _index(node: yaml.Node, path: str, lines: dict[str, int]) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            lines.setdefault(f"{path}.{key_node.value}", key_node.start_mark.line + 1)
            _index(value_node, f"{path}.{key_node.value}", lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines.setdefault(f"{path}[{i}]", item.start_mark.line + 1)
            _index(item, f"{path}[{i}]", lines)
