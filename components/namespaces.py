"""Platform namespaces: created by the program, with the Pod Security level their workloads need.

With `cluster.cisProfile: true` RKE2 enforces the `restricted` Pod Security Standard on every namespace
except `kube-system`, `cis-operator-system` and `tigera-operator` (docs.rke2.io, Default Pod Security
Standards). Node agents (CSI plugins, OSDs, device plugins, driver containers) need host paths, host
networking or privileged containers, so a namespace that Helm creates on the fly (no labels) would
have every one of their pods rejected. Each platform namespace is therefore a Namespace resource with
its level stated (labels) and the reason next to it (an annotation, readable with `kubectl describe ns`),
and every release into it waits for it.

Levels are labels RKE2 without the CIS profile ignores (it admits everything as `privileged`), so they
change nothing there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Optional

import pulumi
import pulumi_kubernetes as k8s

Level = Literal["privileged", "baseline", "restricted"]
# What RKE2's CIS profile exempts from its cluster-wide `restricted` default.
RKE2_CIS_EXEMPT = frozenset({"kube-system", "cis-operator-system", "tigera-operator"})
PSA_PREFIX = "pod-security.kubernetes.io"
REASON_ANNOTATION = "ml-platform.io/pod-security-reason"


def pod_security_labels(level: Level) -> dict[str, str]:
    """Enforce, audit and warn at the same level: what is admitted is also what is reported."""
    return {f"{PSA_PREFIX}/{mode}": level for mode in ("enforce", "audit", "warn")}


def platform_namespace(
    resource_name: str,
    name: str,
    level: Level,
    reason: str,
    *,
    provider: k8s.Provider,
    parent: pulumi.Resource,
    depends_on: Optional[Sequence[pulumi.Resource]] = None,
) -> k8s.core.v1.Namespace:
    """A namespace at Pod Security `level`, `reason` saying which workloads need it.

    Releases into it take it in `depends_on` and keep their namespace as a plain string: a namespace
    from this resource's output is unknown while the resource is new, and the protected releases
    (CNI, Rook) would see an unknown namespace as a possible replacement and fail the preview.

    `retain_on_delete`: deleting a Namespace deletes everything in it (a CephCluster, its pools, the
    GPU Operator's state). Dropping it from the program, or `pulumi destroy`, leaves it in the cluster;
    docs/runbook.md says how to remove one on purpose. A namespace Helm created before this resource
    existed makes the first create fail with AlreadyExists (pulumi-kubernetes >= 4.29 no longer upserts):
    docs/runbook.md has the one-time adoption step (PULUMI_K8S_UPSERT_EXISTING_OBJECTS=true).
    """
    return k8s.core.v1.Namespace(
        resource_name,
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=name, labels=pod_security_labels(level), annotations={REASON_ANNOTATION: reason}
        ),
        opts=pulumi.ResourceOptions(
            parent=parent, provider=provider, depends_on=list(depends_on or []), retain_on_delete=True
        ),
    )
