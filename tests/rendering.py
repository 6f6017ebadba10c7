"""Rendered releases of the real plans (prod and lab, CIS profile on and off), shared by the render tests.

Rendering needs the chart sources of the reference location (`stacks.reference`); without them the
tests skip naming the fetch command (`requires_upstream`), or fail with MLP_REFERENCE_STRICT=1.
"""

from __future__ import annotations

from functools import cache

from stacks import engine, render
from tests.conftest import evaluate, requires_upstream

VARIANTS = [("prod", False), ("prod", True), ("lab", False), ("lab", True)]
VARIANT_IDS = [f"{stack}-cis" if cis else stack for stack, cis in VARIANTS]


@cache
def plan(stack: str, cis: bool = False) -> engine.Plan:
    return evaluate(stack, (lambda raw: raw["cluster"].update({"cisProfile": True})) if cis else None)


@cache
def rendered(stack: str, cis: bool = False) -> tuple[render.Rendered, ...]:
    requires_upstream("charts-src")
    return tuple(render.render_plan(plan(stack, cis)))


def release(stack: str, resource: str, cis: bool = False) -> render.Rendered:
    return next(r for r in rendered(stack, cis) if r.release.resource == resource)


def agent_host_mounts(stack: str = "prod") -> dict[str, str]:
    """The Zabbix agent DaemonSet's host mounts as the chart renders them: mountPath -> host path."""
    (agent,) = release(stack, "monitoring-zabbix").of_kind("DaemonSet")
    pod = agent["spec"]["template"]["spec"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    return {m["mountPath"]: host_paths[m["name"]] for c in pod["containers"] for m in c["volumeMounts"]
            if m["name"] in host_paths}  # fmt: skip
