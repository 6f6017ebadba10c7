"""The queue dashboards, as the 7.0 API stores them (built with the helpers of `dashboards.py`):

- "ml-platform: queues" (the platform team): every ClusterQueue's pending and admitted workloads and
  quota use, GPUs in use against nominal quota per queue, the cohort's borrowing, preemptions and
  evictions by reason, every LocalQueue's oldest wait, and the open queue and idle-GPU problems;
- "ml-platform: team queues" (the teams): a page per team with its ClusterQueue's state, its GPUs in
  use against its quota, how long its queues' oldest workloads wait, the GPUs its pods hold idle, and
  its own open problems.

Widgets name items by the names the Kueue templates give them (`templates/kueue*.yaml`)
on the `<cluster>-kueue` host, and the idle-GPU items by the DCGM template's per-pod prototype on the
GPU nodes' group: a new team, queue, namespace or pod shows up without a change here except a team's
own page.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from components.monitoring.dashboards import GROUP, INT, STR, WIDTH, data_set, honeycomb, widget
from settings.scheduling import Team

QUEUES = "ml-platform: queues"
TEAM_QUEUES = "ml-platform: team queues"
_SUM, _AXIS_RIGHT = 5, 1  # svggraph aggregate_function sum; the right Y axis
_TAG_EXISTS, _TAG_EQUAL, _EVAL_OR = 4, 1, 2  # problems widget tag filter (7.0 TAG_OPERATOR_*, TAG_EVAL_TYPE_OR)
_RED, _GREEN = "E45959", "59DB8F"


def problems(name: str, x: int, y: int, width: int, height: int, tags: Sequence[tuple[str, Optional[str]]]) -> dict:
    """Open problems with any of the tags ((tag, value), or (tag, None): the tag exists), all groups."""
    fields: list[tuple[int, str, Any]] = [(INT, "evaltype", _EVAL_OR)]
    for i, (tag, value) in enumerate(tags):
        fields += [
            (STR, f"tags.{i}.tag", tag),
            (INT, f"tags.{i}.operator", _TAG_EXISTS if value is None else _TAG_EQUAL),
        ]
        fields.append((STR, f"tags.{i}.value", value or ""))
    return widget("problems", name, x, y, width, height, fields)


def idle_gpus(name: str, x: int, y: int, width: int, height: int, items: Sequence[str], idle_percent: int) -> dict:
    """A cell per GPU a pod holds (the GPU nodes' per-pod utilisation items): red under `idle_percent`."""
    fields: list[tuple[int, str, Any]] = [(GROUP, "groupids.0", "ml-platform/gpu-nodes")]
    fields += [(STR, f"items.{i}", pattern) for i, pattern in enumerate(items)]
    fields.append((STR, "primary_label", "{HOST.NAME}\n{ITEM.NAME}"))
    fields += [(STR, "thresholds.0.color", _RED), (STR, "thresholds.0.threshold", "0")]
    fields += [(STR, "thresholds.1.color", _GREEN), (STR, "thresholds.1.threshold", str(idle_percent))]
    return widget("honeycomb", name, x, y, width, height, fields)


def queues_dashboard(kueue_host: str, idle_percent: int) -> dict:
    """The platform's view of every queue, the cohort's borrowing, preemptions and evictions."""
    host = [kueue_host]
    widgets = [
        problems("Queue and idle-GPU problems", 0, 0, 36, 6, [("cluster_queue", None), ("namespace", None)]),
        honeycomb(
            "ClusterQueues: pending (active, inadmissible), admitted, quota in use",
            36,
            0,
            36,
            6,
            [
                "ClusterQueue *: pending workloads (active)",
                "ClusterQueue *: pending workloads (inadmissible)",
                "ClusterQueue *: admitted active workloads",
                "ClusterQueue *: quota in use",
            ],
            hosts=host,
        ),
        widget(
            "svggraph",
            "GPUs in use per ClusterQueue (nominal quota: right axis)",
            0,
            6,
            36,
            6,
            data_set(0, host, ["ClusterQueue *: GPUs in use"])
            + data_set(1, host, ["ClusterQueue *: GPU nominal quota"], axisy=_AXIS_RIGHT),
        ),
        widget(
            "svggraph",
            "Cohort borrowing: GPUs borrowed per ClusterQueue; the cohort's GPUs reserved and quota (right axis)",
            36,
            6,
            36,
            6,
            data_set(0, host, ["ClusterQueue *: GPUs borrowed"])
            + data_set(1, host, ["Cohort *: GPUs reserved", "Cohort *: GPU quota"], axisy=_AXIS_RIGHT),
        ),
        widget(
            "svggraph",
            "Preemptions and evictions by queue and reason (per 5 min)",
            0,
            12,
            36,
            6,
            data_set(0, host, ["ClusterQueue *: preemptions (*)"], aggregate_function=_SUM, aggregate_interval="5m")
            + data_set(1, host, ["ClusterQueue *: evictions (*)"], aggregate_function=_SUM, aggregate_interval="5m"),
        ),
        honeycomb(
            "Oldest pending workload wait per LocalQueue",
            36,
            12,
            36,
            6,
            ["Queue *: oldest pending workload wait"],
            hosts=host,
        ),
        idle_gpus("GPUs held by pods (red: idle)", 0, 18, WIDTH, 5, ["GPU * of pod *: utilization"], idle_percent),
    ]
    return {"name": QUEUES, "display_period": 30, "auto_start": 1, "pages": [{"name": "Queues", "widgets": widgets}]}


def team_queues_dashboard(teams: Sequence[Team], kueue_host: str, idle_percent: int) -> Optional[dict]:
    """A page per team: its queue's state, GPUs against quota, waiting time, idle GPUs and problems."""
    host = [kueue_host]
    pages = []
    for team in teams:
        cq, namespaces = team.name, team.namespace_names
        waits = [f"Queue {ns}/*: oldest pending workload wait" for ns in namespaces]
        widgets = [
            honeycomb(
                f"ClusterQueue {cq}: pending, admitted, quota in use, GPUs borrowed",
                0,
                0,
                36,
                6,
                [
                    f"ClusterQueue {cq}: pending workloads (active)",
                    f"ClusterQueue {cq}: pending workloads (inadmissible)",
                    f"ClusterQueue {cq}: admitted active workloads",
                    f"ClusterQueue {cq}: quota in use",
                    f"ClusterQueue {cq}: GPUs borrowed",
                ],
                hosts=host,
            ),
            problems(
                f"Problems of team {cq}",
                36,
                0,
                36,
                6,
                [("cluster_queue", cq), *(("namespace", ns) for ns in namespaces)],
            ),
            widget(
                "svggraph",
                f"{cq}: GPUs in use and reserved against the nominal quota",
                0,
                6,
                36,
                6,
                data_set(0, host, [f"ClusterQueue {cq}: GPUs in use", f"ClusterQueue {cq}: GPUs reserved"])
                + data_set(1, host, [f"ClusterQueue {cq}: GPU nominal quota"]),
            ),
            widget("svggraph", f"{cq}: oldest pending workload wait per queue", 36, 6, 36, 6, data_set(0, host, waits)),
            idle_gpus(
                f"GPUs held by {cq}'s pods (red: under {idle_percent}%)",
                0,
                12,
                WIDTH,
                5,
                [f"GPU * of pod {ns}/*: utilization" for ns in namespaces],
                idle_percent,
            ),
        ]
        pages.append({"name": f"Team {team.name}", "widgets": widgets})
    if not pages:
        return None
    return {"name": TEAM_QUEUES, "display_period": 30, "auto_start": 1, "pages": pages}
