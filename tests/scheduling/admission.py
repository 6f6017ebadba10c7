"""What the API server and Kueue each make of a container's resources under a namespace's LimitRange.

The two apply the same LimitRange in different orders, and that difference is what the platform's
LimitRange and admission policy are shaped around:
- the API server decodes a Pod, copying a limit into a missing request (pkg/apis/core/v1/defaults.go
  `SetDefaults_Pod`), then the LimitRanger admission plugin fills what is still missing from the
  LimitRange (plugin/pkg/admission/limitranger `mergeContainerResources`);
- Kueue v0.19.2 charges a Workload by its pod templates after `AdjustResources`
  (pkg/workload/resources.go): the LimitRange defaults first, then limits into missing requests.
A LimitRange item as stored carries derived defaults (`SetDefaults_LimitRangeItem`): a `max` without a
`default` gives the `default`, a `default` without a `defaultRequest` gives the `defaultRequest`, and a
`min` without a `defaultRequest` gives it.
"""

from __future__ import annotations

from typing import Any

from settings.scheduling import quantity_value


def stored_item(item: dict[str, Any]) -> dict[str, Any]:
    """A Container LimitRange item as the API server stores it, with its derived defaults."""
    default = {**item.get("max", {}), **item.get("default", {})}
    request = {**item.get("min", {}), **default, **item.get("defaultRequest", {})}
    return {**item, "default": default, "defaultRequest": request}


def _items(limit_range: dict[str, Any]) -> list[dict[str, Any]]:
    return [stored_item(i) for i in limit_range["spec"]["limits"] if i.get("type", "Container") == "Container"]


def _split(container: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    resources = container.get("resources", {})
    return dict(resources.get("limits", {})), dict(resources.get("requests", {}))


def limit_ranged(container: dict[str, Any], limit_range: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The container's resources in the Pod the API server admits: limits copied into missing requests
    when the Pod is decoded, then the LimitRange's `default` and `defaultRequest` for what is missing."""
    limits, requests = _split(container)
    for resource, value in limits.items():
        requests.setdefault(resource, value)
    for item in _items(limit_range):
        for resource, value in item["default"].items():
            limits.setdefault(resource, value)
        for resource, value in item["defaultRequest"].items():
            requests.setdefault(resource, value)
    return {"limits": limits, "requests": requests}


def kueue_charged(container: dict[str, Any], limit_range: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The container's resources as Kueue v0.19.2 charges them: the LimitRange defaults first, then
    limits copied into requests still missing."""
    limits, requests = _split(container)
    for item in _items(limit_range):
        for resource, value in item["default"].items():
            limits.setdefault(resource, value)
        for resource, value in item["defaultRequest"].items():
            requests.setdefault(resource, value)
    for resource, value in limits.items():
        requests.setdefault(resource, value)
    return {"limits": limits, "requests": requests}


def resource_problems(resources: dict[str, dict[str, Any]]) -> list[str]:
    """What the API server's validation refuses: a request above its limit."""
    return [
        f"{r}: request {resources['requests'][r]} > limit {limit}"
        for r, limit in resources["limits"].items()
        if r in resources["requests"] and amount(resources["requests"][r]) > amount(limit)
    ]


def amount(value: Any) -> float:
    return quantity_value(str(value))


def unavailable(requests: dict[str, Any], covered: list[str], excluded: list[str]) -> list[str]:
    """The resources a Workload requests that make it inadmissible in Kueue v0.19.2: not dropped by
    `excludeResourcePrefixes` (pkg/workload `dropExcludedResources`), not zero, and covered by no
    resource group ("resource ... unavailable in ClusterQueue", pkg/scheduler/flavorassigner)."""
    return sorted(
        r
        for r, value in requests.items()
        if not any(r.startswith(prefix) for prefix in excluded) and amount(value) != 0 and r not in covered
    )
