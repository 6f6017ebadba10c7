"""The vision team's program: a shared datasets volume in its namespace on the ML platform.

It knows the platform only through its stack outputs (the contract in the platform's
`stacks/outputs.py`), read with a StackReference:
- `teamKubeconfigs` (secret) holds, per team, a kubeconfig for the team's CI ServiceAccount: valid in
  the team's namespaces only, never cluster-admin. It configures this program's own Kubernetes
  provider. A StackReference returns the platform's secret outputs as secrets, so the kubeconfig stays
  encrypted in this stack's state too.
- `teamNamespaces` names the team's namespaces (the platform creates them, with their queue, quota
  and Pod Security level; the team cannot create namespaces).
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
    team = config.require("team")
    # require_output: a renamed or removed platform output fails this preview, instead of a silent None.
    # A team missing from the platform's settings fails here too (KeyError), not at deploy time.
    kubeconfig = platform.require_output("teamKubeconfigs").apply(lambda configs: configs[team])
    namespace = platform.require_output("teamNamespaces").apply(lambda namespaces: namespaces[team][0])
    provider = k8s.Provider("platform", kubeconfig=kubeconfig, namespace=namespace)
    in_platform = pulumi.ResourceOptions(provider=provider)

    datasets = k8s.core.v1.PersistentVolumeClaim(
        "datasets",
        metadata={"name": "datasets", "namespace": namespace},
        spec={
            "accessModes": ["ReadWriteMany"],
            "storageClassName": platform.require_output("storageClasses").apply(lambda classes: classes["tier2Shared"]),
            "resources": {"requests": {"storage": config.require("datasetsSize")}},
        },
        opts=in_platform,
    )
    return {
        "namespace": namespace,
        "datasetsClaim": datasets.metadata["name"],
        "apiEndpoint": platform.require_output("apiEndpoint"),
    }


if __name__ == "__main__":
    for name, value in program().items():
        pulumi.export(name, value)
