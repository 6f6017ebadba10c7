"""Where each kind a team may create holds what the classification (`surface.py`) judges: its pod specs, the
containers an operator builds from other fields, environment lists, labels and annotations. Data only; the test
walks the pinned CRDs and compares.
"""

from __future__ import annotations

# Where each kind holds a pod spec (`[]`: every item). Complete pod specs first; a TrainJob's runtime patch holds a
# subset of one (its other fields come from the platform's runtime). The test walks the CRDs for every object with
# `containers` and compares.
POD_SPECS = {
    "pods": ["spec"],
    "jobs": ["spec.template.spec"],
    "cronjobs": ["spec.jobTemplate.spec.template.spec"],
    "jobsets": ["spec.replicatedJobs[].template.spec.template.spec"],
    "rayclusters": ["spec.headGroupSpec.template.spec", "spec.workerGroupSpecs[].template.spec"],
    "rayjobs": [
        "spec.rayClusterSpec.headGroupSpec.template.spec",
        "spec.rayClusterSpec.workerGroupSpecs[].template.spec",
        "spec.submitterPodTemplate.spec",
    ],
    "trainjobs": [
        "spec.runtimePatches[].trainingRuntimeSpec.template.spec.replicatedJobs[].template.spec.template.spec"
    ],
}
# Pod specs that hold only some fields (the schema's own list; the rest come from the platform's runtime).
PARTIAL_POD_SPECS = {
    POD_SPECS["trainjobs"][0]: [
        "affinity", "containers", "imagePullSecrets", "initContainers", "nodeSelector", "schedulingGates",
        "securityContext", "serviceAccountName", "terminationGracePeriodSeconds", "tolerations", "volumes",
    ]
}  # fmt: skip
# Containers an operator builds from fields outside a pod template: their path, and the field that makes the operator
# add them, `== true` when it is a switch (KubeRay v1.7.0: the autoscaler with in-tree autoscaling, the history
# server's collector sidecar).
INJECTED_CONTAINERS = {
    kind: {f"{spec}.autoscalerOptions": f"{spec}.enableInTreeAutoscaling == true",
           f"{spec}.historyServerOptions.collectorOptions": f"{spec}.historyServerOptions"}
    for kind, spec in (("rayclusters", "spec"), ("rayjobs", "spec.rayClusterSpec"))
}  # fmt: skip
EXTRA_ENV = {"trainjobs": ["spec.trainer.env", "spec.initializer.dataset.env", "spec.initializer.model.env"]}
# Where each kind holds metadata (labels and annotations) that lands on an object: its own, its pod templates', the
# templates an operator makes Jobs, Services and claims from. The test walks the CRDs for every one.
_EPHEMERAL = "volumes[].ephemeral.volumeClaimTemplate.metadata"
_RAY = ["headGroupSpec.headService.metadata", "headGroupSpec.template.metadata", "workerGroupSpecs[].template.metadata"]
_RAY += [f"headGroupSpec.template.spec.{_EPHEMERAL}", f"workerGroupSpecs[].template.spec.{_EPHEMERAL}"]
_TRAIN = "spec.runtimePatches[].trainingRuntimeSpec.template"
METADATA_PATHS = {
    "pods": ["metadata", f"spec.{_EPHEMERAL}"],
    "jobs": ["metadata", "spec.template.metadata", f"spec.template.spec.{_EPHEMERAL}"],
    "cronjobs": [
        "metadata",
        "spec.jobTemplate.metadata",
        "spec.jobTemplate.spec.template.metadata",
        f"spec.jobTemplate.spec.template.spec.{_EPHEMERAL}",
    ],
    "jobsets": [
        "metadata",
        "spec.replicatedJobs[].template.metadata",
        "spec.replicatedJobs[].template.spec.template.metadata",
        f"spec.replicatedJobs[].template.spec.template.spec.{_EPHEMERAL}",
        "spec.volumeClaimPolicies[].templates[].metadata",
    ],
    "rayclusters": ["metadata", *(f"spec.{p}" for p in _RAY)],
    "rayjobs": [
        "metadata",
        *(f"spec.rayClusterSpec.{p}" for p in _RAY),
        "spec.submitterPodTemplate.metadata",
        f"spec.submitterPodTemplate.spec.{_EPHEMERAL}",
    ],
    "trainjobs": [
        "metadata",
        f"{_TRAIN}.metadata",
        f"{_TRAIN}.spec.replicatedJobs[].template.metadata",
        f"{_TRAIN}.spec.replicatedJobs[].template.spec.template.metadata",
        f"{_TRAIN}.spec.replicatedJobs[].template.spec.template.spec.{_EPHEMERAL}",
    ],
}
# Annotation maps an operator puts on objects it creates (KubeRay: the head Service), and the other kinds a team
# writes whose own labels and annotations are judged.
ANNOTATION_MAPS = {
    "rayclusters": ["spec.headServiceAnnotations"],
    "rayjobs": ["spec.rayClusterSpec.headServiceAnnotations"],
}
METADATA_ONLY = ["services", "configmaps", "secrets"]
RAY_CLUSTER_SPECS = {"rayclusters": "spec", "rayjobs": "spec.rayClusterSpec"}
