"""Team namespaces against every namespace the program itself creates, computed from the plan.

A team given a platform namespace would get its Role there (pods, secrets, exec) and could escalate.
The settings rule (`settings.rules.scheduling`) refuses the namespaces settings name and Kubernetes'
own before anything runs; this check covers the rest, whatever component adds them: it reads the
evaluated program (the offline preview every change goes through, `python -m stacks.plan`) and
refuses a team namespace that a non-team resource creates: a Namespace without the team label, or a
Helm release's namespace (which Helm creates). Namespaces added later by any component are covered
without a list to keep up to date.
"""

from __future__ import annotations

from typing import Any

from settings.scheduling import Team

TEAM_LABEL = "ml-platform.io/team"  # components/scheduling/stack.py labels the teams' namespaces with it


def platform_created(resources: list[dict[str, Any]]) -> dict[str, str]:
    """Namespace -> the resource (by name) that creates it, for every namespace no team owns."""
    created: dict[str, str] = {}
    for r in resources:
        inputs = r["inputs"]
        if r["type"] == "kubernetes:core/v1:Namespace":
            metadata = inputs.get("metadata") or {}
            if TEAM_LABEL not in (metadata.get("labels") or {}) and isinstance(metadata.get("name"), str):
                created.setdefault(metadata["name"], r["name"])
        elif r["type"].startswith("kubernetes:helm.sh/") and isinstance(inputs.get("namespace"), str):
            created.setdefault(inputs["namespace"], r["name"])
    return created


def team_namespace_problems(resources: list[dict[str, Any]], teams: list[Team]) -> list[str]:
    created = platform_created(resources)
    problems = []
    for i, team in enumerate(teams):
        for j, ns in enumerate(team.namespace_names):
            if ns in created:
                field = f"scheduling.teams[{i}].namespaces[{j}]" if team.namespaces else f"scheduling.teams[{i}].name"
                problems.append(
                    f"{field}: namespace {ns!r} is a platform namespace (created by {created[ns]}); give the team "
                    "another namespace"
                )
    return problems
