"""The queue dashboards, as the 7.0 API stores them (built with the helpers of `dashboards.py`):

- "ml-platform: queues" (the on-call person): the queue and idle-GPU alerts; who waits, why and for how
  long (one line per waiting workload: team, queue, GPUs, priority, Kueue's reason, its wait); every
  ClusterQueue's quota use, oldest wait per LocalQueue and admission-wait p95, coloured by threshold;
  GPUs in use, reserved and nominal quota per ClusterQueue on one axis; the pods holding GPUs idle;
- "ml-platform: team queues" (the teams): a page per team with the same, for its own queue and pods.

Each honeycomb shows one measure (its title), one cell per queue or pod labelled by that alone, the value
as an integer with its unit, green, yellow or red by threshold; cells come in name order.

Widgets name items by the names the Kueue templates give them (`templates/kueue*.yaml`)
on the `<cluster>-kueue` host, and the idle-GPU items by the DCGM template's per-pod prototype on the
GPU nodes' group: a new team, queue, namespace or pod shows up without a change here except a team's
own page.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from components.monitoring.dashboards import GROUP, HOST, INT, STR, WIDTH, data_set, widget
from settings.scheduling import Team

QUEUES = "ml-platform: queues"
TEAM_QUEUES = "ml-platform: team queues"
_SUM = 5  # svggraph aggregate_function sum
_TAG_EXISTS, _TAG_EQUAL, _EVAL_OR = 4, 1, 2  # problems widget tag filter (7.0 TAG_OPERATOR_*, TAG_EVAL_TYPE_OR)
_OPDATA_SEPARATELY = 1  # problems widget show_opdata
_RED, _YELLOW, _GREEN = "E45959", "FFD54F", "59DB8F"
_NOT_CLASSIFIED, _ALERT_SEVERITIES = 0, range(1, 6)


def problems(
    name: str,
    x: int,
    y: int,
    width: int,
    height: int,
    tags: Sequence[tuple[str, Optional[str]]],
    severities: Sequence[int] = (),
) -> dict:
    """Open problems with any of the tags ((tag, value), or (tag, None): the tag exists), all groups, their
    operational data in a column of its own; only `severities` when given."""
    fields: list[tuple[int, str, Any]] = [(INT, "evaltype", _EVAL_OR), (INT, "show_opdata", _OPDATA_SEPARATELY)]
    for i, (tag, value) in enumerate(tags):
        fields += [
            (STR, f"tags.{i}.tag", tag),
            (INT, f"tags.{i}.operator", _TAG_EXISTS if value is None else _TAG_EQUAL),
        ]
        fields.append((STR, f"tags.{i}.value", value or ""))
    fields += [(INT, f"severities.{i}", s) for i, s in enumerate(severities)]
    return widget("problems", name, x, y, width, height, fields)


def measure(
    name: str,
    x: int,
    y: int,
    width: int,
    height: int,
    items: Sequence[str],
    label: str,
    warn: float,
    alarm: float,
    hosts: Sequence[str] = (),
    groups: Sequence[str] = (),
) -> dict:
    """A honeycomb of one measure: a cell per item, labelled `label` (a macro expression naming the queue or
    pod) over the value as an integer with its unit; green under
    `warn`, yellow from it, red from `alarm` (no yellow when they are equal)."""
    fields: list[tuple[int, str, Any]] = [(GROUP, f"groupids.{i}", g) for i, g in enumerate(groups)]
    fields += [(HOST, f"hostids.{i}", h) for i, h in enumerate(hosts)]
    fields += [(STR, f"items.{i}", pattern) for i, pattern in enumerate(items)]
    fields += [(STR, "primary_label", label), (INT, "secondary_label_type", 1)]  # 1: the value
    fields += [(INT, "secondary_label_decimal_places", 0)]
    steps = [(_GREEN, 0), (_YELLOW, warn), (_RED, alarm)] if warn < alarm else [(_GREEN, 0), (_RED, alarm)]
    for i, (color, at) in enumerate(steps):
        fields += [(STR, f"thresholds.{i}.color", color), (STR, f"thresholds.{i}.threshold", f"{at:g}")]
    return widget("honeycomb", name, x, y, width, height, fields)


def _queue_label(prefix: str) -> str:
    """The part of an item name after `prefix` and before the colon: the queue's or pod's name."""
    return '{{ITEM.NAME}.regsub("^' + prefix + ' ([^:]+):", "\\1")}'


def _page(
    host: list[str],
    cq_items: str,
    lq_items: Sequence[str],
    pod_items: Sequence[str],
    who: str,
    alert_tags,
    waiting_tags,
    idle_percent: int,
    pending_max_seconds: int,
    churn: tuple[str, str, str],
) -> list[dict]:
    """The widgets of one page: alerts and who waits on top, then the measures, GPUs on one axis, idle pods."""
    return [
        problems(f"{who}: queue and idle-GPU alerts", 0, 0, WIDTH, 5, alert_tags, _ALERT_SEVERITIES),
        problems(
            f"{who}: who waits, why (Kueue's reason) and for how long", 0, 5, WIDTH, 6, waiting_tags, [_NOT_CLASSIFIED]
        ),
        measure(
            "Quota in use (%)",
            0,
            11,
            18,
            5,
            [f"ClusterQueue {cq_items}: quota in use"],
            _queue_label("ClusterQueue"),
            80,
            100,
            hosts=host,
        ),
        measure(
            "Oldest wait per LocalQueue",
            18,
            11,
            18,
            5,
            [f"Queue {q}: oldest pending workload wait" for q in lq_items],
            _queue_label("Queue"),
            pending_max_seconds / 2,
            pending_max_seconds,
            hosts=host,
        ),
        measure(
            "Admission wait p95, last hour",
            36,
            11,
            18,
            5,
            [f"ClusterQueue {cq_items}: admission wait, p95"],
            _queue_label("ClusterQueue"),
            pending_max_seconds / 2,
            pending_max_seconds,
            hosts=host,
        ),
        measure(
            "GPUs asked, pending",
            54,
            11,
            18,
            5,
            [f"ClusterQueue {cq_items}: GPUs asked by pending workloads"],
            _queue_label("ClusterQueue"),
            1,
            16,
            hosts=host,
        ),
        widget(
            "svggraph",
            "GPUs: in use, reserved, nominal quota",
            0,
            16,
            36,
            6,
            data_set(0, host, [f"ClusterQueue {cq_items}: GPUs in use"])
            + data_set(1, host, [f"ClusterQueue {cq_items}: GPUs reserved"])
            + data_set(2, host, [f"ClusterQueue {cq_items}: GPU nominal quota"]),
        ),
        widget(
            "svggraph",
            f"{churn[0]} (per 5 min)",
            36,
            16,
            36,
            6,
            data_set(0, host, [churn[1]], aggregate_function=_SUM, aggregate_interval="5m")
            + data_set(1, host, [churn[2]], aggregate_function=_SUM, aggregate_interval="5m"),
        ),
        measure(
            f"Idle GPUs per pod (activity under {idle_percent}%)",
            0,
            22,
            WIDTH,
            5,
            pod_items,
            _queue_label("Pod"),
            1,
            1,
            groups=["ml-platform/gpu-nodes"],
        ),
    ]


def queues_dashboard(kueue_host: str, idle_percent: int, pending_max_seconds: int = 3600) -> dict:
    """The on-call view of every queue, every waiting workload and every idle pod."""
    widgets = _page(
        [kueue_host],
        "*",
        ["*"],
        ["Pod *: GPUs under * activity"],
        "All teams",
        [("cluster_queue", None), ("team", None), ("cohort", None), ("idle-gpu", None)],
        [("waiting", None)],
        idle_percent,
        pending_max_seconds,
        (
            "Evictions and preemptions by queue and reason",
            "ClusterQueue *: evictions (*)",
            "ClusterQueue *: preemptions (*)",
        ),
    )
    return {"name": QUEUES, "display_period": 30, "auto_start": 1, "pages": [{"name": "Queues", "widgets": widgets}]}


def team_queues_dashboard(
    teams: Sequence[Team], kueue_host: str, idle_percent: int, pending_max_seconds: int = 3600
) -> Optional[dict]:
    """A page per team: its alerts, its waiting workloads, its queue's measures and its idle pods."""
    pages = []
    for team in teams:
        namespaces = team.namespace_names
        widgets = _page(
            [kueue_host],
            team.name,
            [f"{ns}/*" for ns in namespaces],
            [f"Pod {ns}/*: GPUs under * activity" for ns in namespaces],
            f"Team {team.name}",
            [("team", team.name), ("cluster_queue", team.name), *(("namespace", ns) for ns in namespaces)],
            [("namespace", ns) for ns in namespaces],
            idle_percent,
            pending_max_seconds,
            (
                f"Admissions and evictions of {team.name}",
                f"ClusterQueue {team.name}: admissions",
                f"ClusterQueue {team.name}: evictions",
            ),
        )
        pages.append({"name": f"Team {team.name}", "widgets": widgets})
    if not pages:
        return None
    return {"name": TEAM_QUEUES, "display_period": 30, "auto_start": 1, "pages": pages}
