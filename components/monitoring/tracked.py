"""What Zabbix watches and where it alerts, as tracked state: host groups, global macros, template
imports, a host set per node group and one for the NAS hosts (`host_set.py`), a host per cluster service, alert
media, channels and dashboards, each a dynamic-provider resource (`objects.py`) that works through the API user the
bootstrap made."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Optional

import pulumi

from components.monitoring import objects as zbx
from components.monitoring.config import (
    CEPH_TEMPLATE,
    CERT_TEMPLATE,
    K8S_STATE_TEMPLATE,
    KUBE_TEMPLATE,
    LINUX_TEMPLATE,
    MINIO_TEMPLATE,
    PSK_IDENTITY,
    channel_specs,
    global_macros,
    kubernetes_macros,
    media_type_spec,
    node_groups,
    node_macros,
    node_tags,
    node_templates,
    slug,
    template_sources,
    web_endpoint,
)
from components.monitoring.dashboards import dashboard_references, overview_dashboard, teams_dashboard
from components.monitoring.host_set import HostClaim, HostSet
from components.monitoring.queue_dashboards import queues_dashboard, team_queues_dashboard
from components.monitoring.queues import kueue_host, kueue_host_spec, kueue_reader_token
from components.monitoring.reader import acceptance_reader
from settings.monitoring import HOST_GROUPS, Channel
from settings.scheduling import Team

if TYPE_CHECKING:
    from components.monitoring.component import ZabbixMonitoringArgs


def api_objects(
    parent: pulumi.Resource,
    name: str,
    args: ZabbixMonitoringArgs,
    url: str,
    connection: pulumi.Output,
    psk: pulumi.Output[str],
    kube_token: Callable[[], pulumi.Output[str]],
    ready: Sequence[pulumi.Resource],
) -> tuple[list[str], Optional[pulumi.Output[str]]]:
    """Every Zabbix object of the platform, children of `parent`; the names of the monitored hosts, and the
    token of the acceptance check's read-only API user (None: not asked for)."""

    def opts(*deps: pulumi.Resource) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=parent, depends_on=list(deps))

    groups = {g: zbx.HostGroup(f"{name}-group-{slug(g)}", {"name": g}, connection, opts=opts()) for g in HOST_GROUPS}
    macros = _global_macros(name, args, url, connection, opts)
    needed = {
        "gpu-dcgm": any(n.role == "gpu" for n in args.nodes),
        "infiniband": any(n.infiniband for n in args.nodes),
        "ceph-mgr": bool(args.ceph_namespace),
        "minio": bool(args.nas_hosts),
        "kubernetes": True,
        "certificates": True,
        "rke2-certificates": True,
        "kueue": True,
        "kueue-details": True,
    }
    # Each host waits for the groups and the platform's own templates it names (not every one of
    # them: each `depends_on` edge costs the SDK a walk of its target's dependencies).
    catalogue: dict[str, pulumi.Resource] = dict(groups)
    for stem, (names, text) in template_sources().items():
        if needed[stem]:
            imported = zbx.TemplateImport(
                f"{name}-template-{stem}", {"templates": names, "source": text}, connection, opts=opts(*macros)
            )
            catalogue.update(dict.fromkeys(names, imported))

    def host_deps(spec: dict) -> list[pulumi.Resource]:
        named = [catalogue[n] for n in (*spec["groups"], *spec["templates"]) if n in catalogue]
        return list(dict.fromkeys(named))

    psk_secrets = pulumi.Output.secret(psk.apply(lambda v: {"tls_psk_identity": PSK_IDENTITY, "tls_psk": v}))
    nas_secrets = pulumi.Output.secret(
        pulumi.Output.all(psk, args.secrets.minio_metrics_token or "").apply(
            lambda v: {
                "tls_psk_identity": PSK_IDENTITY,
                "tls_psk": v[0],
                "macros": [{"macro": "{$MINIO.METRICS.TOKEN}", "value": v[1]}] if v[1] else [],
            }
        )
    )
    # One tracked host set per node group, one for the NAS hosts (host_set.py): a node added changes its group's
    # set only. Every set waits for every set's claim, so a host moving between sets is claimed before the set it
    # leaves looks at it (never deleted and created again: its history stays).
    web_checker = next((n.name for n in args.nodes if n.control_plane), None)
    by_group: dict[str, list[dict]] = {}
    for node in args.nodes:
        by_group.setdefault(node.group_name, []).append(
            {
                "host": node.name,
                "ip": node.address,
                "groups": node_groups(node),
                "templates": node_templates(node),
                "tags": node_tags(node),
                "macros": node_macros(node, web_endpoint(args) if node.name == web_checker else ()),
            }
        )
    declared = [
        (f"{name}-hosts-{group}", f"group:{group}", specs, psk_secrets) for group, specs in sorted(by_group.items())
    ]
    if args.nas_hosts:
        nas_specs = [
            {
                "host": nas.name,
                "ip": nas.address,
                "groups": ["ml-platform/nas"],
                "templates": [LINUX_TEMPLATE, MINIO_TEMPLATE, CERT_TEMPLATE],
                "tags": [{"tag": "role", "value": "nas"}, {"tag": "storage", "value": "minio"}],
                "macros": [
                    {"macro": "{$MINIO.PORT}", "value": str(args.minio_port)},
                    {"macro": "{$CERT.ENDPOINTS}", "value": f"{nas.address}:{args.minio_port}"},
                ],
            }
            for nas in args.nas_hosts
        ]
        declared.append((f"{name}-nas-hosts", "nas", nas_specs, nas_secrets))
    claims = [
        HostClaim(f"{label}-claim", key, [s["host"] for s in specs], connection, opts=opts())
        for label, key, specs, _ in declared
    ]
    set_of: dict[str, pulumi.Resource] = {}
    for label, key, specs, secrets in declared:
        named_deps = list(dict.fromkeys(d for spec in specs for d in host_deps(spec)))
        host_set = HostSet(label, key, specs, connection, secrets, opts=opts(*named_deps, *claims))
        set_of.update(dict.fromkeys((s["host"] for s in specs), host_set))
    hosts = [n.name for n in args.nodes] + [h.name for h in args.nas_hosts]
    host_objects: list[pulumi.Resource] = [set_of[h] for h in hosts]
    hosts += _cluster_hosts(name, args, connection, opts, host_deps, host_objects, kube_token, parent, ready)
    _alerting(name, args, connection, opts, list(groups.values()))
    named = dict(groups)
    named.update(zip(hosts, host_objects, strict=True))  # same order: nodes, NAS, cluster hosts
    _dashboards(name, args, connection, opts, named)
    reader = None
    if args.acceptance_reader:  # the host groups of what the check reads: every node and NAS host
        read_groups = {g for n in args.nodes for g in node_groups(n)} | (
            {"ml-platform/nas"} if args.nas_hosts else set()
        )
        reader = acceptance_reader(name, sorted(read_groups), connection, opts, groups)
    return hosts, reader


def _dashboards(name, args, connection, opts, named: dict[str, pulumi.Resource]) -> None:
    """The platform overview and the per-team GPU view. Each waits for the hosts and groups its
    widgets name, and only those: a node no widget shows changes nothing here."""
    ceph = f"{args.cluster_name}-ceph" if args.ceph_namespace else None
    overview = overview_dashboard(args.nodes, bool(args.nas_hosts), f"{args.cluster_name}-kubernetes", ceph)
    teams = teams_dashboard(args.teams, args.nodes)
    kueue, idle = f"{args.cluster_name}-kueue", args.monitoring.thresholds.gpu_idle_percent
    pending = 60 * args.monitoring.thresholds.queue_pending_max_minutes
    queues = queues_dashboard(kueue, idle, pending)
    team_queues = team_queues_dashboard(args.teams, kueue, idle, pending)
    for label, spec in (("overview", overview), ("teams", teams), ("queues", queues), ("team-queues", team_queues)):
        if spec:
            deps = [named[n] for n in sorted(dashboard_references(spec))]
            zbx.Dashboard(f"{name}-dashboard-{label}", spec, connection, opts=opts(*deps))


def _global_macros(name, args, url, connection, opts) -> list[pulumi.Resource]:
    return [
        zbx.GlobalMacro(
            f"{name}-macro-{slug(macro)}",
            {"macro": macro, "value": value, "description": f"{text} (ml-platform settings)"},
            connection,
            opts=opts(),
        )
        for macro, (value, text) in global_macros(args.monitoring, url, args.teams).items()
    ]


def _cluster_hosts(name, args, connection, opts, deps, created: list, kube_token, parent, ready) -> list[str]:
    """Hosts without an agent: the Kubernetes cluster (state template, SA token) and Ceph."""
    token = kube_token()
    kube = f"{args.cluster_name}-kubernetes"
    spec = {
        "host": kube,
        "groups": ["ml-platform/kubernetes"],
        "templates": [K8S_STATE_TEMPLATE, KUBE_TEMPLATE],
        "tags": [],
        "macros": kubernetes_macros(args),
    }
    kube_host = zbx.Host(
        f"{name}-host-kubernetes",
        spec,
        connection,
        pulumi.Output.secret(token.apply(lambda v: {"macros": [{"macro": "{$KUBE.API.TOKEN}", "value": v}]})),
        opts=opts(*deps(spec)),
    )
    created.append(kube_host)
    hosts = [kube]
    if args.ceph_namespace:
        ceph = f"{args.cluster_name}-ceph"
        url = f"http://rook-ceph-mgr.{args.ceph_namespace}.svc:9283/metrics"
        spec = {
            "host": ceph,
            "groups": ["ml-platform/ceph-storage"],
            "templates": [CEPH_TEMPLATE],
            "tags": [{"tag": "storage", "value": "ceph"}],
            "macros": [{"macro": "{$CEPH.METRICS.URL}", "value": url}],
        }
        created.append(zbx.Host(f"{name}-host-ceph", spec, connection, opts=opts(*deps(spec))))
        hosts.append(ceph)
    spec = kueue_host_spec(args.cluster_name, args.kueue_namespace)
    reader = kueue_reader_token(name, args.monitoring.namespace, args.wiring.in_cluster, parent, ready)
    created.append(kueue_host(name, spec, reader, connection, opts(*deps(spec))))
    hosts.append(spec["host"])
    return hosts


def _alerting(name, args, connection, opts, groups) -> None:
    alerting = args.monitoring.alerting
    kinds = {c.type for c in alerting.channels}
    tokens = {"slack": args.secrets.slack_bot_token, "mattermost": args.secrets.mattermost_bot_token}
    media: dict[str, pulumi.Resource] = {
        kind: zbx.MediaType(
            f"{name}-media-{kind}",
            media_type_spec(kind, alerting.mattermost_url),
            connection,
            pulumi.Output.secret(pulumi.Output.from_input(tokens[kind]).apply(lambda v: {"bot_token": v})),
            opts=opts(),
        )
        for kind in ("slack", "mattermost")
        if kind in kinds
    }
    for channel in alerting.channels:
        _channel(name, channel, connection, opts, [media[channel.type], *groups], args.teams)


def _channel(name: str, channel: Channel, connection, opts, deps, teams: Sequence[Team] = ()) -> None:
    """One channel: a user group that cannot log in, its user with the channel as media, and an
    action sending problems from the channel's host groups at or above its severity."""
    label = f"alerts-{channel.name}"
    group_spec, user_spec, action_spec = channel_specs(channel, teams)
    group = zbx.UserGroup(f"{name}-{label}-group", group_spec, connection, opts=opts(*deps))
    user = zbx.User(f"{name}-{label}-user", user_spec, connection, opts=opts(group, *deps))
    zbx.Action(f"{name}-{label}-action", action_spec, connection, opts=opts(group, user, *deps))
