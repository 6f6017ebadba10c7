"""The credential a layered environment's node-group stacks patch their Nodes with: a ServiceAccount that may
get and patch Nodes and nothing else, and a kubeconfig built from its token and the cluster's CA. The cluster
stack creates it and exports the kubeconfig (secret); node-group stacks never hold the admin kubeconfig."""

from __future__ import annotations

import base64
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s
import yaml

NAMESPACE = "kube-system"
ACCOUNT = "ml-platform-node-labeller"
# Server-side apply of a Node patch is a PATCH; the provider reads the Node first (GET).
RULES = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]


def node_kubeconfig(
    name: str, admin_kubeconfig: pulumi.Output[str], provider: k8s.Provider, parent: pulumi.Resource
) -> pulumi.Output[str]:
    """The node labeller's kubeconfig (secret): the admin kubeconfig's cluster entry with the labeller's token."""
    opts = pulumi.ResourceOptions(parent=parent, provider=provider)
    account = k8s.core.v1.ServiceAccount(
        f"{name}-node-labeller", metadata={"name": ACCOUNT, "namespace": NAMESPACE}, opts=opts
    )
    role = k8s.rbac.v1.ClusterRole(f"{name}-node-labeller", metadata={"name": ACCOUNT}, rules=RULES, opts=opts)
    binding = k8s.rbac.v1.ClusterRoleBinding(
        f"{name}-node-labeller",
        metadata={"name": ACCOUNT},
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ACCOUNT},
        subjects=[{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
        opts=opts,
    )
    secret = k8s.core.v1.Secret(
        f"{name}-node-labeller-token",
        metadata={
            "name": f"{ACCOUNT}-token",
            "namespace": NAMESPACE,
            "annotations": {"kubernetes.io/service-account.name": ACCOUNT},
        },
        type="kubernetes.io/service-account-token",
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[account, role, binding])),
    )
    # The controller fills in the token; pulumi-kubernetes waits for it when it creates such a Secret.
    read = k8s.core.v1.Secret.get(
        f"{name}-node-labeller-token-read",
        f"{NAMESPACE}/{ACCOUNT}-token",
        opts=pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=[secret]),
    )
    return pulumi.Output.secret(
        pulumi.Output.all(admin_kubeconfig, read.data).apply(lambda v: labeller_kubeconfig(v[0], v[1]))
    )


def labeller_kubeconfig(admin: str, data: Optional[dict]) -> str:
    """`admin`'s cluster (server and CA) with the token in `data` (a service-account-token Secret's data)."""
    token = base64.b64decode((data or {}).get("token", "")).decode()
    if not admin or not token:
        return ""  # unknown at preview; the cluster stack's up fills it in
    cluster = yaml.safe_load(admin)["clusters"][0]
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [cluster],
            "users": [{"name": ACCOUNT, "user": {"token": token}}],
            "contexts": [{"name": ACCOUNT, "context": {"cluster": cluster["name"], "user": ACCOUNT}}],
            "current-context": ACCOUNT,
        },
        sort_keys=False,
    )
