"""What the queue tests feed Zabbix: Kueue's /metrics text, the Kubernetes API's LocalQueue and Workload
lists, and dcgm-exporter text with pod attribution.

The Kueue text is tests/monitoring/samples/kueue-metrics.prom, in the exact format of Kueue v0.19.2: its
metric families, HELP texts and label names are those of pkg/metrics/metrics.go at that tag (label
`replica_role` "leader" with leader election on, pkg/util/roletracker/tracker.go), written as
client_golang's text exposition writes them (families sorted by name, labels by name, HELP newlines
escaped as `\\n`, +Inf for an unset borrowing or lending limit, floats in Go's shortest 'g' form). The
scenario: the prod teams llm (llm-train, llm-eval), research and vision in cohort ml-platform; llm
uses none of its 64 GPUs while a workload waits, research borrows 24 GPUs above its 16, vision was
evicted 7 times (PodsReadyTimeout) and preempted 3 workloads (InCohortReclamation).
Variants for the triggers are made from it by changing one series' value (`with_value`).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent / "samples"
KUEUE = (SAMPLES / "kueue-metrics.prom").read_text()
H100 = "nvidia-h100-80gb-hbm3"
QUEUES = {"llm-train": "llm", "llm-eval": "llm", "research": "research", "vision": "vision"}  # namespace -> CQ


def with_value(text: str, series: str, value: str) -> str:
    """The exposition with the value of the one series line starting `series{` (labels as in the file) replaced."""
    pattern = re.compile(rf"^({re.escape(series)}) \S+$", re.M)
    new, count = pattern.subn(lambda m: f"{m.group(1)} {value}", text)
    assert count == 1, f"{series}: {count} lines"
    return new


def gpu_usage(cq: str, gpus: int) -> str:
    """The sample with ClusterQueue `cq`'s GPU usage on the H100 flavor set to `gpus`."""
    labels = f'cluster_queue="{cq}",cohort="ml-platform",flavor="{H100}",replica_role="leader",'
    labels += 'resource="nvidia.com/gpu"'
    return with_value(KUEUE, f"kueue_cluster_queue_resource_usage{{{labels}}}", str(gpus))


def evictions(count: int) -> str:
    """The sample with vision's PodsReadyTimeout evictions of class research at `count` (6 in the file)."""
    labels = 'cluster_queue="vision",priority_class="research",reason="PodsReadyTimeout",replica_role="leader",'
    labels += 'underlying_cause=""'
    return with_value(KUEUE, f"kueue_evicted_workloads_total{{{labels}}}", str(count))


def _time(seconds_ago: float) -> str:
    return (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def localqueues() -> str:
    """GET /apis/kueue.x-k8s.io/v1beta2/localqueues: LocalQueue `default` in every team namespace."""
    items = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": ns, "creationTimestamp": _time(86400)},
            "spec": {"clusterQueue": cq},
            "status": {"pendingWorkloads": 0, "admittedWorkloads": 0},
        }
        for ns, cq in QUEUES.items()
    ]
    return json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueueList", "items": items})


def workload(
    namespace: str,
    name: str,
    created_ago: float,
    conditions: list[dict],
    active: bool = True,
    gpus: int = 0,
    count: int = 8,
    priority: int | None = None,
) -> dict:
    """A v1beta2 Workload as the API returns it (fields of apis/kueue/v1beta2/workload_types.go): one pod set
    of `count` pods, each asking `gpus` nvidia.com/gpu; `priority` with its class `p<priority>`."""
    resources = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    spec: dict = {
        "active": active,
        "queueName": "default",
        "podSets": [
            {
                "name": "main",
                "count": count,
                "template": {"spec": {"containers": [{"name": "trainer", "resources": resources}]}},
            }
        ],
    }
    if priority is not None:
        spec.update(
            priority=priority,
            priorityClassRef={"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": f"p{priority}"},
        )
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": _time(created_ago)},
        "spec": spec,
        "status": {"conditions": conditions},
    }


def condition(kind: str, status: str, ago: float, reason: str, message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": _time(ago)}


def workloads(*items: dict) -> str:
    """GET /apis/kueue.x-k8s.io/v1beta2/workloads."""
    return json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadList", "items": list(items)})


def dcgm_pods(
    utilisation: dict[int, float], pods: dict[int, tuple[str, str]], activity: dict[int, float] | None = None
) -> str:
    """dcgm-exporter's DCGM_FI_DEV_GPU_UTIL lines for GPUs `utilisation` (index -> %), with the
    attributes pod, namespace, container on the GPUs a pod holds (`pods`: index -> (namespace, pod)).
    The label layout is the exporter's template (internal/pkg/rendermetrics/render_metrics.go: gpu,
    UUID, pci_bus_id, device, modelName, Hostname, then the labels, then the attributes sorted).
    `activity` (index -> ratio 0-1): DCGM_FI_PROF_GR_ENGINE_ACTIVE and DCGM_FI_PROF_PIPE_TENSOR_ACTIVE lines too
    (the tensor pipe at half the engine's activity), in the families' order the exporter writes."""
    lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    lines += _series("DCGM_FI_DEV_GPU_UTIL", utilisation, pods)
    for family, share, text in (
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1.0, "Ratio of time the graphics engine is active."),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.5, "Ratio of cycles the tensor (HMMA) pipe is active."),
    ):
        if activity is not None:
            lines += [f"# HELP {family} {text}", f"# TYPE {family} gauge"]
            lines += _series(family, {g: v * share for g, v in activity.items()}, pods)
    return "\n".join(lines) + "\n"


def _series(family: str, values: dict[int, float], pods: dict[int, tuple[str, str]]) -> list[str]:
    lines = []
    for gpu, value in values.items():
        labels = (
            f'gpu="{gpu}",UUID="GPU-0000000{gpu}-7953-256e-8f33-1343419b1a1c",'
            f'pci_bus_id="00000000:{18 + gpu:02X}:00.0",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",'
            'Hostname="gpu-01",DCGM_FI_DRIVER_VERSION="580.105.08"'
        )
        if gpu in pods:
            namespace, pod = pods[gpu]
            labels += f',container="trainer",namespace="{namespace}",pod="{pod}"'
        lines.append(f"{family}{{{labels}}} {value:g}")
    return lines


def with_buckets(text: str, cq: str, counts: dict[str, int]) -> str:
    """The exposition with the admission-wait histogram of ClusterQueue `cq`'s first priority class set to
    `counts` (le -> cumulative count; le values as Kueue writes them, "+Inf" included)."""
    first = re.search(
        rf'^kueue_admission_wait_time_seconds_bucket{{cluster_queue="{cq}",priority_class="([^"]+)"', text, re.M
    )
    assert first, cq
    for le, count in counts.items():
        labels = f'cluster_queue="{cq}",priority_class="{first.group(1)}",replica_role="leader",le="{le}"'
        text = with_value(text, f"kueue_admission_wait_time_seconds_bucket{{{labels}}}", str(count))
    return text


def local_queue_active(text: str, namespace: str, active: bool) -> str:
    """The exposition with LocalQueue `namespace`/default reported active (True) or inactive (False)."""
    for status, value in (("True", active), ("False", not active)):
        labels = f'active="{status}",name="default",namespace="{namespace}",replica_role="leader"'
        text = with_value(text, f"kueue_local_queue_status{{{labels}}}", "1" if value else "0")
    return text
