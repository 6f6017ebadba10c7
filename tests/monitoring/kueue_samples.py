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


def workload(namespace: str, name: str, created_ago: float, conditions: list[dict], active: bool = True) -> dict:
    """A v1beta2 Workload as the API returns it (fields of apis/kueue/v1beta2/workload_types.go)."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": _time(created_ago)},
        "spec": {
            "active": active,
            "queueName": "default",
            "podSets": [{"name": "main", "count": 8, "template": {"spec": {"containers": [{"name": "trainer"}]}}}],
        },
        "status": {"conditions": conditions},
    }


def condition(kind: str, status: str, ago: float, reason: str) -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": "", "lastTransitionTime": _time(ago)}


def workloads(*items: dict) -> str:
    """GET /apis/kueue.x-k8s.io/v1beta2/workloads."""
    return json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadList", "items": list(items)})


def dcgm_pods(utilisation: dict[int, float], pods: dict[int, tuple[str, str]]) -> str:
    """dcgm-exporter's DCGM_FI_DEV_GPU_UTIL lines for GPUs `utilisation` (index -> %), with the
    attributes pod, namespace, container on the GPUs a pod holds (`pods`: index -> (namespace, pod)).
    The label layout is the exporter's template (internal/pkg/rendermetrics/render_metrics.go: gpu,
    UUID, pci_bus_id, device, modelName, Hostname, then the labels, then the attributes sorted)."""
    lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for gpu, value in utilisation.items():
        labels = (
            f'gpu="{gpu}",UUID="GPU-0000000{gpu}-7953-256e-8f33-1343419b1a1c",'
            f'pci_bus_id="00000000:{18 + gpu:02X}:00.0",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",'
            'Hostname="gpu-01",DCGM_FI_DRIVER_VERSION="580.105.08"'
        )
        if gpu in pods:
            namespace, pod = pods[gpu]
            labels += f',container="trainer",namespace="{namespace}",pod="{pod}"'
        lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {value:g}")
    return "\n".join(lines) + "\n"
