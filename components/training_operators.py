"""TrainingOperators: the controllers of the distributed-training job kinds teams submit, each optional.

- JobSet (`jobset.x-k8s.io/JobSet`): groups of Jobs started and failed together; Kubeflow Trainer runs
  every TrainJob as one.
- Kubeflow Trainer v2 (`trainer.kubeflow.org/TrainJob`), with the `torch-distributed`
  ClusterTrainingRuntime that TrainJobs name in `spec.runtimeRef` (PyTorch DDP/torchrun). Its chart's
  own JobSet subchart is off: JobSet is the release above (the chart says so: `jobset.install` must be
  false when JobSet is installed separately).
- KubeRay (`ray.io/RayJob`, `RayCluster`), with Volcano as its batch scheduler: KubeRay creates a
  PodGroup for each RayCluster, so Volcano starts the head and all workers together (gang).

Kueue manages exactly the kinds these releases install (`scheduling_stack.kueue_frameworks`), and suspends
each job until it is admitted: a suspended RayJob has no RayCluster, hence no PodGroup holding
Volcano's queue before admission. TrainJobs do not use Trainer's Volcano PodGroup policy: the plugin
makes the PodGroup while the TrainJob is still suspended (kubeflow/trainer#4033), so Kueue's
all-or-nothing admission and `waitForPodsReady` are their gang guard (docs/scheduling.md).

Charts, versions and values are checked against the upstream charts (JobSet 0.12.0, Kubeflow Trainer
2.3.0, KubeRay operator 1.7.0) in the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.common import Wiring
from components.helm import release
from components.namespaces import Level
from settings import Chart
from settings.scheduling import TrainingOperators as TrainingOperatorsSettings

TRAINER_API = "trainer.kubeflow.org/v1alpha1"
TORCH_RUNTIME = "torch-distributed"
# Why each operator's namespace is at its Pod Security level.
JOBSET_NAMESPACE_REASON = (
    "JobSet's chart sets no runAsNonRoot, no seccomp profile on its controller (restricted needs both)"
)
TRAINER_NAMESPACE_REASON = "the Trainer controller runs as non-root, seccomp RuntimeDefault, all capabilities dropped"
KUBERAY_NAMESPACE_REASON = "the KubeRay operator runs as non-root, seccomp RuntimeDefault, all capabilities dropped"


@dataclass(frozen=True)
class TrainingOperatorsArgs:
    operators: TrainingOperatorsSettings
    wiring: Wiring


class TrainingOperators(pulumi.ComponentResource):
    """The enabled operators' namespaces and Helm releases; nothing at all when none is enabled."""

    installed: list[str]
    """The operators installed (`jobset`, `trainer`, `kuberay`)."""

    def __init__(self, name: str, args: TrainingOperatorsArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:scheduling:TrainingOperators", name, None, opts)
        ops, charts = args.operators, args.wiring.charts
        self._name, self._in_cluster = name, args.wiring.in_cluster
        self.installed = [op for op in ("jobset", "trainer", "kuberay") if getattr(ops, op)]
        jobset = None
        if ops.jobset:
            # values {}: the published chart's defaults (registry.k8s.io/jobset/jobset:v0.12.0).
            jobset = self._operator(
                "jobset", charts.jobset, "jobset", ops.jobset_namespace, "baseline", JOBSET_NAMESPACE_REASON, values={}
            )
        if ops.trainer:
            trainer = self._operator(
                "trainer",
                charts.kubeflow_trainer,
                "kubeflow-trainer",
                ops.trainer_namespace,
                "restricted",
                TRAINER_NAMESPACE_REASON,
                values=trainer_values(),
                after=[jobset] if jobset else [],
            )
            k8s.apiextensions.CustomResource(
                f"{name}-trainer-runtime-{TORCH_RUNTIME}",
                api_version=TRAINER_API,
                kind="ClusterTrainingRuntime",
                metadata={"name": TORCH_RUNTIME, "labels": {"trainer.kubeflow.org/framework": "torch"}},
                spec=torch_runtime_spec(ops.trainer_runtime_image),
                opts=pulumi.ResourceOptions(parent=self, provider=self._in_cluster.provider, depends_on=[trainer]),
            )
        if ops.kuberay:
            self._operator(
                "kuberay",
                charts.kuberay_operator,
                "kuberay-operator",
                ops.kuberay_namespace,
                "restricted",
                KUBERAY_NAMESPACE_REASON,
                values=kuberay_values(),
            )
        self.register_outputs({"installed": self.installed})

    def _operator(
        self,
        key: str,
        chart: Chart,
        release_name: str,
        namespace: str,
        level: Level,
        reason: str,
        values: dict[str, Any],
        after: Sequence[pulumi.Resource] = (),
    ) -> k8s.helm.v3.Release:
        """One operator: its namespace (`reason` saying why it is at `level`) and its release, which
        waits for the cluster, the namespace and `after`."""
        resource_name, in_cluster = f"{self._name}-{key}", self._in_cluster
        ns = in_cluster.namespace(f"{resource_name}-namespace", namespace, level, reason, parent=self)
        return release(
            resource_name,
            chart,
            release_name=release_name,
            namespace=namespace,
            values=values,
            provider=in_cluster.provider,
            parent=self,
            depends_on=[*in_cluster.ready, ns, *after],
        )


def trainer_values() -> dict[str, Any]:
    """Values of the kubeflow-trainer chart (2.3.0 values.yaml): JobSet is our own release, and no
    built-in runtimes (their installer Job downloads kubectl at run time): the runtime is ours."""
    return {
        "jobset": {"install": False},
        "runtimes": {"defaultEnabled": False},
        # The chart sets none (its values suggest these): a container without requests escapes scheduling.
        "manager": {"resources": {"requests": {"cpu": "100m", "memory": "300Mi"}, "limits": {"memory": "300Mi"}}},
    }


def kuberay_values() -> dict[str, Any]:
    """Values of the kuberay-operator chart (1.7.0 values.yaml): Volcano places each RayCluster's pods
    as one gang."""
    return {
        "batchScheduler": {"name": "volcano"},
        # The chart's limits, and the requests its values.yaml leaves commented out.
        "resources": {"limits": {"cpu": "100m", "memory": "512Mi"}, "requests": {"cpu": "100m", "memory": "512Mi"}},
    }


def torch_runtime_spec(image: str) -> dict[str, Any]:
    """`torch-distributed` as the Trainer 2.3.0 chart ships it (`files/runtimes/torch-distributed.yaml`):
    torchrun over JobSet, one replicated Job `node`; a TrainJob sets the node count, image and resources."""
    return {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": image}]}}},
                        },
                    }
                ]
            }
        },
    }
