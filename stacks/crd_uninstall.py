"""What uninstalling a Helm release deletes beyond its own objects: the CustomResourceDefinitions its chart ships as
templates, and with each of them every object of its kind, cluster-wide.

Helm installs a chart's `crds/` directory once and never deletes it; CRDs written as templates are part of the
release's manifest and are deleted with it on uninstall (helm.sh, "Custom Resource Definitions" best practices:
"There is no support at this time for upgrading or deleting CRDs using Helm" for `crds/`). Kubernetes deletes every
custom resource of a CRD that is deleted (kubernetes.io, "Extend the Kubernetes API with CustomResourceDefinitions":
"When you delete a CustomResourceDefinition, the server will uninstall the RESTful API endpoint and delete all
custom objects stored in it"). So the review renders the base
side of every release the change removes or replaces (uninstall, then install: the custom resources do not come
back) and names the kinds, and the program's own objects of those kinds with their namespaces.
"""

from __future__ import annotations

import copy
from typing import Any

from stacks import render


def template_crds(release: render.Release, kube: str) -> list[tuple[str, str]]:
    """(group, kind) of every CRD the release's chart renders from templates (not from `crds/`)."""
    directory = render.chart_dir(release)
    values = render.with_placeholders(copy.deepcopy(dict(release.values)), render._defaults(directory))
    manifests = render.render_chart(
        directory, values, name=release.name, namespace=release.namespace, kube_version=kube
    )
    kinds = []
    for obj in render.parse({source: text for source, text in manifests.items() if "/crds/" not in source}):
        if obj.get("kind") == "CustomResourceDefinition":
            spec = obj.get("spec") or {}
            kinds.append((spec.get("group", ""), (spec.get("names") or {}).get("kind", "")))
    return sorted(set(kinds))


def _instances(plan: Any, group: str, kind: str) -> list[str]:
    prefix = f"kubernetes:{group}/"
    found = []
    for resource in render.resources(plan):
        if resource["type"].startswith(prefix) and resource["type"].endswith(f":{kind}"):
            meta = resource["inputs"].get("metadata") or {}
            where = f"{meta['namespace']}/" if meta.get("namespace") else ""
            found.append(f"{where}{meta.get('name', resource['name'])}")
    return sorted(found)


def uninstalls(base: Any, head: Any) -> tuple[list[str], list[str]]:
    """Danger lines for the releases the change uninstalls (removed, or replaced by a new name or namespace), and
    the releases that could not be rendered (why)."""
    after = {r.resource: r for r in render.releases(head)}
    lines, problems = [], []
    for before in render.releases(base):
        new = after.get(before.resource)
        if new is not None and (new.name, new.namespace) == (before.name, before.namespace):
            continue
        try:
            kinds = template_crds(before, render.kube_version(base))
        except (render.RenderError, render.ReferenceMissingError) as exc:
            problems.append(str(exc))
            continue
        if not kinds:
            continue
        verb = "removed" if new is None else "replaced (uninstalled, then installed again)"
        named = []
        for group, kind in kinds:
            own = _instances(base, group, kind)
            named.append(f"{kind}.{group}" + (f" (the program's: {', '.join(own)})" if own else ""))
        lines.append(
            f"{before.label} {verb}: its chart ships {len(kinds)} CustomResourceDefinition(s) as templates, which Helm "
            "deletes on uninstall, and Kubernetes deletes every object of those kinds in every namespace: "
            + "; ".join(named)
        )
    return lines, problems
