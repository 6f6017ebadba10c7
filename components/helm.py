"""Helm releases the way this program installs them: pinned chart, overridable repository."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from settings import Chart


def release(
    resource_name: str,
    chart: Chart,
    *,
    release_name: str,
    namespace: str,
    values: dict[str, Any],
    provider: k8s.Provider,
    parent: pulumi.Resource,
    depends_on: Optional[Sequence[pulumi.Resource]] = None,
    timeout_seconds: int = 900,
    opts: Optional[pulumi.ResourceOptions] = None,
) -> k8s.helm.v3.Release:
    """A `helm.v3.Release` of `chart` at its pinned version.

    `https://` repositories go through `repository_opts` (point them at a mirror in settings);
    `oci://` repositories name the chart by its full reference. `opts` adds resource options
    (e.g. `protect`) to the parent, provider and dependencies given here.
    """
    if chart.repository.startswith("oci://"):
        chart_ref, repository_opts = f"{chart.repository}/{chart.name}", None
    else:
        chart_ref, repository_opts = chart.name, k8s.helm.v3.RepositoryOptsArgs(repo=chart.repository)
    return k8s.helm.v3.Release(
        resource_name,
        name=release_name,
        chart=chart_ref,
        version=chart.version,
        repository_opts=repository_opts,
        namespace=namespace,
        create_namespace=True,
        values=values,
        timeout=timeout_seconds,
        cleanup_on_fail=True,
        opts=pulumi.ResourceOptions.merge(
            pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=list(depends_on or [])), opts
        ),
    )
