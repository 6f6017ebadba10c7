"""The vision team's program: a shared datasets volume in its namespace on the ML platform.

It knows the platform only through its team's stack of the platform's `teams/` program
(`<org>/ml-platform-teams/<env>-<team>`), read with a StackReference. That stack holds the platform's
public contract and this team's own credential, and nothing else: never the platform stack, whose
secrets a StackReference would copy into this stack's state.
- `kubeconfig` (secret) is the team's CI credential: valid in the team's namespaces only, never
  cluster-admin. It configures this program's own Kubernetes provider. A StackReference returns
  secret outputs as secrets, so it stays encrypted in this stack's state too.
- `namespaces` names the team's namespaces (the platform creates them, with their queue, quota
  and Pod Security level; the team cannot create namespaces).
- `storageClasses` maps tiers to StorageClass names: datasets go on `tier2Shared` (CephFS,
  ReadWriteMany, shared by every pod of a training job); `tier1` (local NVMe) is for scratch. A
  platform stack without storage hosts has no tier 2: this program then fails its preview, by design.
- `apiEndpoint` is re-exported for the team's scripts.

    pulumi config set teamStack organization/ml-platform-teams/prod-vision
    pulumi preview
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s


def program() -> dict[str, Any]:
    config = pulumi.Config()
    team_stack = pulumi.StackReference("team-stack", stack_name=config.require("teamStack"))
    # require_output: a renamed or removed output fails this preview, instead of a silent None.
    kubeconfig = team_stack.require_output("kubeconfig")
    namespace = team_stack.require_output("namespaces").apply(lambda namespaces: namespaces[0])
    provider = k8s.Provider("platform", kubeconfig=kubeconfig, namespace=namespace)
    in_platform = pulumi.ResourceOptions(provider=provider)

    datasets = k8s.core.v1.PersistentVolumeClaim(
        "datasets",
        metadata={"name": "datasets", "namespace": namespace},
        spec={
            "accessModes": ["ReadWriteMany"],
            "storageClassName": team_stack.require_output("storageClasses").apply(
                lambda classes: classes["tier2Shared"]
            ),
            "resources": {"requests": {"storage": config.require("datasetsSize")}},
        },
        opts=in_platform,
    )
    return {
        "namespace": namespace,
        "datasetsClaim": datasets.metadata["name"],
        "apiEndpoint": team_stack.require_output("apiEndpoint"),
    }


if __name__ == "__main__":
    for name, value in program().items():
        pulumi.export(name, value)
