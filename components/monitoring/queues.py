"""Kueue's queues in Zabbix: the read-only identity the server scrapes Kueue with, and the `<cluster>-kueue`
host that carries the two Kueue templates (`templates/kueue.yaml`, `kueue-details.yaml`).

Kueue v0.19.2 serves its metrics only over HTTPS, behind controller-runtime's
filters.WithAuthenticationAndAuthorization (cmd/kueue/main.go): the caller's bearer token is checked with
a TokenReview and its right to `get` the non-resource URL /metrics with a SubjectAccessReview (the
chart's own `<release>-metrics-reader` ClusterRole grants exactly that, templates/rbac/
metrics_reader_role.yaml). The server gets its own ServiceAccount for it, not the Kubernetes
templates' one: read /metrics, list LocalQueues and Workloads, read LocalQueues' pending workloads,
nothing else. Its token (a `service-account-token` Secret the token controller fills in) reaches Zabbix
only as the secret host macro {$KUEUE.TOKEN}, as the Kubernetes host's {$KUBE.API.TOKEN} does.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.monitoring import objects as zbx
from settings.scheduling import Team

READER = "zabbix-kueue-reader"  # ServiceAccount, ClusterRole and ClusterRoleBinding
READER_TOKEN = "zabbix-kueue-reader-token"
CQ_TEMPLATE = "ml-platform Kueue ClusterQueues by HTTP"
DETAILS_TEMPLATE = "ml-platform Kueue queue details by HTTP"
# The kueue chart's metrics Service for release "kueue" (components/scheduling/stack.py installs it so):
# `{{ include "kueue.fullname" . }}-controller-manager-metrics-service`, port 8443 named https
# (charts/kueue 0.19.2 templates/manager/auth_proxy_service.yaml, values.yaml `metricsService`).
METRICS_SERVICE, METRICS_PORT = "kueue-controller-manager-metrics-service", 8443
# What the identity may read: Kueue's /metrics, and the two lists the details template fetches.
READER_RULES = [
    {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues", "workloads"], "verbs": ["get", "list"]},
    # Kueue's visibility API: each LocalQueue's pending workloads in admission order (the chart's own
    # pending_workloads_lq_viewer_role.yaml grants the same).
    {"apiGroups": ["visibility.kueue.x-k8s.io"], "resources": ["localqueues/pendingworkloads"], "verbs": ["get"]},
]


def kueue_host_spec(cluster_name: str, kueue_namespace: str) -> dict[str, Any]:
    """The Zabbix host of Kueue's queues (the server polls it; no agent)."""
    url = f"https://{METRICS_SERVICE}.{kueue_namespace}.svc:{METRICS_PORT}/metrics"
    return {
        "host": f"{cluster_name}-kueue",
        "groups": ["ml-platform/kubernetes"],
        "templates": [CQ_TEMPLATE, DETAILS_TEMPLATE],
        "tags": [{"tag": "component", "value": "kueue"}],
        "macros": [{"macro": "{$KUEUE.METRICS.URL}", "value": url}],
    }


def kueue_reader_token(
    name: str, namespace: str, in_cluster: Any, parent: pulumi.Resource, depends_on: list[pulumi.Resource]
) -> pulumi.Output[str]:
    """The read-only ServiceAccount, its ClusterRole and binding, and its token (a Pulumi secret).
    pulumi-kubernetes waits for the token controller to fill a new `service-account-token` Secret
    (up to 5 s), so the token is there when it is read back."""
    opts = pulumi.ResourceOptions.merge(
        in_cluster.options(parent=parent), pulumi.ResourceOptions(depends_on=depends_on)
    )
    account = k8s.core.v1.ServiceAccount(
        f"{name}-kueue-reader", metadata={"name": READER, "namespace": namespace}, opts=opts
    )
    role = k8s.rbac.v1.ClusterRole(
        f"{name}-kueue-reader-role", metadata={"name": READER}, rules=READER_RULES, opts=opts
    )
    k8s.rbac.v1.ClusterRoleBinding(
        f"{name}-kueue-reader-binding",
        metadata={"name": READER},
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER},
        subjects=[{"kind": "ServiceAccount", "name": READER, "namespace": namespace}],
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[role, account])),
    )
    secret = k8s.core.v1.Secret(
        f"{name}-kueue-reader-token",
        metadata={
            "name": READER_TOKEN,
            "namespace": namespace,
            "annotations": {"kubernetes.io/service-account.name": READER},
        },
        type="kubernetes.io/service-account-token",
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[account])),
    )
    read = k8s.core.v1.Secret.get(
        f"{name}-kueue-reader-token-read",
        f"{namespace}/{READER_TOKEN}",
        opts=pulumi.ResourceOptions(parent=parent, provider=in_cluster.provider, depends_on=[secret]),
    )
    return pulumi.Output.secret(read.data.apply(_token))


def kueue_host(
    name: str,
    spec: dict[str, Any],
    token: pulumi.Output[str],
    connection: pulumi.Output,
    opts: pulumi.ResourceOptions,
) -> pulumi.Resource:
    """The host, its token as the secret host macro {$KUEUE.TOKEN}."""
    secrets = pulumi.Output.secret(token.apply(lambda v: {"macros": [{"macro": "{$KUEUE.TOKEN}", "value": v}]}))
    return zbx.Host(f"{name}-host-kueue", spec, connection, secrets, opts=opts)


def _token(data: Optional[dict]) -> str:
    return base64.b64decode((data or {}).get("token", "")).decode()


def team_event_tags(names: Sequence[str], teams: Sequence[Team]) -> list[dict[str, str]]:
    """The event tags of a team's problems: its ClusterQueue (named like the team; the queue templates'
    `cluster_queue` tag) and each of its namespaces (`namespace`: its LocalQueues, its pods' idle GPUs)."""
    tags = []
    for team in teams:
        if team.name in names:
            tags.append({"tag": "cluster_queue", "value": team.name})
            tags += [{"tag": "namespace", "value": ns} for ns in team.namespace_names]
    return tags


def team_macros(teams: Sequence[Team]) -> dict[str, tuple[str, str]]:
    """Macro -> (value, description): the team of each team namespace, {$TEAM:"<namespace>"}, which the
    idle-GPU problems of the DCGM template name (a pod's series carry its namespace, not its team)."""
    return {
        f'{{$TEAM:"{ns}"}}': (team.name, f"Team of namespace {ns}") for team in teams for ns in team.namespace_names
    }
