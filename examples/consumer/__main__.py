"""The vision team's program: a namespace and a shared datasets volume on the ML platform.

It knows the platform only through its stack outputs (the contract in the platform's
`stacks/outputs.py`), read with a StackReference:
- `kubeconfig` (secret) configures this program's own Kubernetes provider. A StackReference returns
  the platform's secret outputs as secrets, so the kubeconfig stays encrypted in this stack's state too.
- `storageClasses` maps tiers to StorageClass names: datasets go on `tier2Shared` (CephFS,
  ReadWriteMany, shared by every pod of a training job); `tier1` (local NVMe) is for scratch. A
  platform stack without storage hosts has no tier 2: this program then fails its preview, by design.
- `apiEndpoint` is re-exported for the team's scripts.

    pulumi config set platformStack organization/ml-platform/prod
    pulumi preview
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s


def program() -> dict[str, Any]:
    config = pulumi.Config()
    platform = pulumi.StackReference("platform", stack_name=config.require("platformStack"))
    # require_output: a renamed or removed platform output fails this preview, instead of a silent None.
    provider = k8s.Provider("platform", kubeconfig=platform.require_output("kubeconfig"))
    in_platform = pulumi.ResourceOptions(provider=provider)

    namespace = k8s.core.v1.Namespace(
        "team",
        metadata={"name": config.require("namespace"), "labels": {"ml-platform.io/team": config.require("namespace")}},
        opts=in_platform,
    )
    datasets = k8s.core.v1.PersistentVolumeClaim(
        "datasets",
        metadata={"name": "datasets", "namespace": namespace.metadata["name"]},
        spec={
            "accessModes": ["ReadWriteMany"],
            "storageClassName": platform.require_output("storageClasses").apply(lambda classes: classes["tier2Shared"]),
            "resources": {"requests": {"storage": config.require("datasetsSize")}},
        },
        opts=in_platform,
    )
    return {
        "namespace": namespace.metadata["name"],
        "datasetsClaim": datasets.metadata["name"],
        "apiEndpoint": platform.require_output("apiEndpoint"),
    }


if __name__ == "__main__":
    for name, value in program().items():
        pulumi.export(name, value)
