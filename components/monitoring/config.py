"""What ZabbixMonitoring renders from its settings: the chart values, the global, host and Kubernetes
macros, each node's groups, templates and tags, the templates it imports, and the alert channels' user
groups, users and actions. Plain values, no resources: `component.py` and `tracked.py` create those."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import yaml

from components.cluster.upgrades import NAMESPACE as UPGRADE_NAMESPACE
from components.monitoring import queues
from settings import MonitoringSettings, NodeSettings
from settings.monitoring import HOST_GROUPS, SEVERITIES, Channel
from settings.scheduling import Team
from settings.storage import BACKUP_NAMESPACE  # where the backup Jobs write backup-status-<source>

if TYPE_CHECKING:
    from components.monitoring.component import ZabbixMonitoringArgs


RELEASE = "zabbix"  # chart objects are "zabbix-zabbix-server", "zabbix-zabbix-agent", SA "zabbix"
KSM_RELEASE = "zabbix-kube-state-metrics"  # the default {$KUBE.STATE.ENDPOINT.NAME} of the template
SERVICE_ACCOUNT = "zabbix"
TOKEN_SECRET = "zabbix-api-token"
DB_SECRET = "zabbix-db-access"
PSK_SECRET = "zabbix-agent-psk"
WEB_TLS_SECRET = "zabbix-web-tls"  # the web UI's certificate when the program issues it
PSK_IDENTITY = "ml-platform-agent"
PSK_DIR = "/var/lib/zabbix/enc"  # the zabbix-agent2 image's directory for TLS files
AGENT_GROUP = 1995  # the zabbix group of the zabbix/zabbix-agent2 image (its user is uid 1997)
ZABBIX_FILES = Path(__file__).parent
TEMPLATES = ZABBIX_FILES / "templates"
USERPARAMETERS = "zabbix-agent-userparameters"  # ConfigMap with agent2-userparameters.conf (beside this module)
USERPARAMETERS_DIR = "/etc/zabbix/zabbix_agentd.d"  # the directory the image's entrypoint includes
LINUX_TEMPLATE = "Linux by Zabbix agent active"
K8S_STATE_TEMPLATE = "Kubernetes cluster state by HTTP"
GPU_TEMPLATE, IB_TEMPLATE = "ml-platform GPU by DCGM exporter", "ml-platform InfiniBand by sysfs"
CEPH_TEMPLATE, MINIO_TEMPLATE = "ml-platform Ceph by mgr Prometheus", "ml-platform MinIO by HTTP"
KUBE_TEMPLATE, CERT_TEMPLATE = "ml-platform Kubernetes platform state", "ml-platform TLS certificates by agent 2"
RKE2_CERT_TEMPLATE = "ml-platform RKE2 certificate files"
MEDIA_TYPES = {"slack": "Slack", "mattermost": "Mattermost"}


def web_url(mon: MonitoringSettings, api_endpoint: str) -> str:
    """HTTPS, except where the lab-only setting asks for plain HTTP."""
    scheme = "http" if mon.web.insecure_plain_http_lab_only else "https"
    if mon.web.ingress_host:
        return f"{scheme}://{mon.web.ingress_host}"
    return f"{scheme}://{api_endpoint}:{mon.web.node_port}"


def web_endpoint(args: ZabbixMonitoringArgs) -> list[str]:
    """The web UI's TLS endpoint, whose certificate the first control-plane node's agent watches
    (the Kubernetes host has no agent); none with plain HTTP."""
    mon = args.monitoring
    if mon.web.insecure_plain_http_lab_only:
        return []
    if mon.web.ingress_host:
        return [f"{mon.web.ingress_host}:443"]
    return [f"{args.api_endpoint}:{mon.web.node_port}"]


def severity_index(name: str) -> int:
    """Zabbix priority of a severity name (information=1 ... disaster=5)."""
    return SEVERITIES.index(name) + 1


def severity_mask(min_severity: str) -> int:
    """A user media's severity bitmask: every severity from `min_severity` up."""
    return sum(1 << i for i in range(severity_index(min_severity), 6))


def node_groups(node: NodeSettings) -> list[str]:
    groups = ["ml-platform/gpu-nodes" if node.role == "gpu" else "ml-platform/cpu-nodes"]
    if node.control_plane:
        groups.append("ml-platform/control-plane")
    if node.storage_host:
        groups.append("ml-platform/ceph-storage")
    return groups


def node_templates(node: NodeSettings) -> list[str]:
    templates = [LINUX_TEMPLATE, CERT_TEMPLATE, RKE2_CERT_TEMPLATE]
    if node.role == "gpu":
        templates.append(GPU_TEMPLATE)
    if node.infiniband:
        templates.append(IB_TEMPLATE)
    return templates


def node_macros(node: NodeSettings, extra_endpoints: Sequence[str] = ()) -> list[dict[str, str]]:
    """Host macros from the inventory: the GPUs the node must have, the certificates it serves
    (kubelet; API server and RKE2 supervisor on control-plane nodes)."""
    endpoints = [f"{node.address}:10250"]
    if node.control_plane:
        endpoints += [f"{node.address}:6443", f"{node.address}:9345"]
    macros = [{"macro": "{$CERT.ENDPOINTS}", "value": ",".join([*endpoints, *extra_endpoints])}]
    if node.gpu:
        macros.append({"macro": "{$GPU.COUNT.EXPECTED}", "value": str(node.gpu.count)})
    return macros


def cron_interval_seconds(expression: str) -> int:
    """The longest gap between two runs of a 5-field cron schedule (minute hour day month weekday,
    with `*`, `*/n`, `a-b`, `a-b/n` and lists), found by walking a leap-free 4-week span minute by
    minute from a Monday: "30 1 * * *" -> 86400, "0 */6 * * *" -> 21600."""
    import datetime as dt

    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(f"not a 5-field cron schedule: {expression!r}")
    ranges = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)]
    allowed = [_cron_field(f, lo, hi) for f, (lo, hi) in zip(fields, ranges, strict=True)]
    start = dt.datetime(2029, 1, 1)  # a Monday
    runs = []
    for minute in range(28 * 24 * 60 + 1):
        t = start + dt.timedelta(minutes=minute)
        dom, dow = t.day in allowed[2], t.isoweekday() % 7 in allowed[4]
        # cron: when both day fields are restricted, either one matching is enough
        day_ok = (dom or dow) if "*" not in (fields[2], fields[4]) else (dom and dow)
        if t.minute in allowed[0] and t.hour in allowed[1] and t.month in allowed[3] and day_ok:
            runs.append(minute)
    if len(runs) < 2:
        raise ValueError(f"cron schedule {expression!r} runs less than twice in four weeks")
    return max(b - a for a, b in zip(runs, runs[1:], strict=False)) * 60


def _cron_field(field: str, lo: int, hi: int) -> set[int]:
    values: set[int] = set()
    for part in field.split(","):
        base, _, step = part.partition("/")
        first, last = (lo, hi) if base == "*" else (int(base.split("-")[0]), int(base.split("-")[-1]))
        values.update(range(first, last + 1, int(step) if step else 1))
    return {0 if hi == 6 and v == 7 else v for v in values}  # weekday 7 is Sunday too


def kubernetes_macros(args: ZabbixMonitoringArgs) -> list[dict[str, str]]:
    """Host macros of the Kubernetes host: where kube-state-metrics is, which backup sources exist and
    how old their last success and RKE2's newest etcd snapshot may be (schedule interval + margin)."""
    mon, backup = args.monitoring, args.backup
    sources = [s.name for s in backup.sources]
    backup_max_age = cron_interval_seconds(backup.schedule) + backup.deadline_seconds
    etcd_margin = 60 * mon.thresholds.etcd_snapshot_margin_minutes
    etcd_max_age = cron_interval_seconds(args.etcd_snapshots.schedule_cron) + etcd_margin
    macros = [
        {"macro": "{$KUBE.STATE.URL}", "value": f"http://{KSM_RELEASE}.{mon.namespace}.svc:8080/metrics"},
        {"macro": "{$KUBE.UPGRADE.NAMESPACE}", "value": UPGRADE_NAMESPACE},
        {"macro": "{$BACKUP.NAMESPACE}", "value": BACKUP_NAMESPACE},
        {"macro": "{$BACKUP.SOURCES}", "value": ",".join(sources)},
        {"macro": "{$ETCD.SNAPSHOT.MAXAGE}", "value": str(etcd_max_age)},
    ]
    macros += [{"macro": f'{{$BACKUP.MAXAGE:"{name}"}}', "value": str(backup_max_age)} for name in sources]
    return macros


def node_tags(node: NodeSettings) -> list[dict[str, str]]:
    tags = [{"tag": "role", "value": node.role}]
    if node.control_plane:
        tags.append({"tag": "control-plane", "value": "true"})
    if node.gpu:
        tags += [{"tag": "gpu", "value": node.gpu.model}, {"tag": "gpu-count", "value": str(node.gpu.count)}]
    if node.infiniband:
        tags.append({"tag": "infiniband", "value": node.infiniband.interface})
    if node.storage_host:
        tags.append({"tag": "storage", "value": "ceph-osd"})
    return tags


# CPU and memory requests for every container the chart runs (it sets none); requests only, no limits.
ZABBIX_REQUESTS = {
    "zabbixServer": {"cpu": "250m", "memory": "512Mi"},
    "zabbixWeb": {"cpu": "100m", "memory": "256Mi"},
    "zabbixWebService": {"cpu": "50m", "memory": "128Mi"},
    "zabbixAgent": {"cpu": "50m", "memory": "128Mi"},
    "postgresql": {"cpu": "250m", "memory": "512Mi"},
}
# kube-state-metrics on a cluster of this size (the chart's commented example is 10m / 32Mi for a small one).
KSM_VALUES = {"resources": {"requests": {"cpu": "50m", "memory": "128Mi"}}}


# Global macro -> (threshold setting, description). The templates' triggers read these macros, so a
# threshold change is one object in Zabbix.
THRESHOLD_MACROS = {
    "{$GPU.TEMP.MAX}": ("gpu_temperature_celsius", "GPU temperature threshold (C)"),
    "{$GPU.MEM.PUSED.MAX}": ("gpu_memory_used_percent", "GPU memory use threshold (%)"),
    "{$IB.ERRORS.MAX}": ("ib_port_errors_per_hour", "InfiniBand port errors per hour threshold"),
    "{$CEPH.POOL.PUSED.MAX}": ("ceph_pool_used_percent", "Ceph pool fill threshold (%)"),
    "{$IB.RATE.MIN}": ("ib_min_rate_gbps", "InfiniBand rate below which a link is degraded (Gb/s)"),
    "{$KUBE.NODE.CORDONED.MAX}": ("node_cordoned_max_minutes", "How long a node may stay cordoned"),
    "{$CERT.EXPIRY.WARN}": ("certificate_expiry_days", "Certificate expiry warning (seconds)"),
    "{$KUEUE.PENDING.MAX}": ("queue_pending_max_minutes", "How long a workload may wait while its queue's quota idles"),
    "{$KUEUE.QUOTA.IDLE.PCT}": ("queue_quota_idle_percent", "Quota use (%) under which a ClusterQueue counts as idle"),
    "{$KUEUE.EVICTIONS.MAX}": ("queue_evictions_per_hour", "Evictions per hour of a ClusterQueue that alert"),
    "{$KUEUE.BORROWED.GPUS.MAX}": (
        "queue_borrowed_gpus",
        "GPUs a ClusterQueue may borrow before a long borrowing alerts",
    ),
    "{$KUEUE.BORROWING.PERIOD}": ("queue_borrowing_minutes", "How long a ClusterQueue may borrow that much"),
    "{$GPU.IDLE.UTIL.MAX}": ("gpu_idle_percent", "Utilisation (%) under which an allocated GPU is idle"),
    "{$GPU.IDLE.PERIOD}": ("gpu_idle_minutes", "How long an allocated GPU may stay idle"),
}
# Host macros the platform sets per host from settings -> where their value comes from.
HOST_MACRO_SOURCES = {
    "{$GPU.COUNT.EXPECTED}": "nodes[].gpu.count",
    "{$BACKUP.MAXAGE}": "storage.minio.backup.schedule interval + deadlineSeconds",
    "{$ETCD.SNAPSHOT.MAXAGE}": "cluster.etcdSnapshots.scheduleCron interval + thresholds.etcdSnapshotMarginMinutes",
    "{$CERT.ENDPOINTS}": "node and NAS addresses (kubelet, API server, supervisor, MinIO), the Zabbix web UI",
}


def global_macros(mon: MonitoringSettings, url: str, teams: Sequence[Team] = ()) -> dict[str, tuple[str, str]]:
    """Macro -> (value, description): the thresholds the templates' triggers read, the UI URL the
    Slack and Mattermost webhooks link back to, and the team of each team namespace."""
    t = mon.thresholds
    values: dict[str, tuple[str, str]] = {}
    for macro, (field, text) in THRESHOLD_MACROS.items():
        value = getattr(t, field)
        if field.endswith("_minutes"):  # a Zabbix time suffix: triggers compare periods and seconds with it
            value = f"{value}m"
        elif field == "certificate_expiry_days":
            value = value * 86400
        values[macro] = (str(value), text)
    values["{$ZABBIX.URL}"] = (url, "Zabbix web UI URL")
    values.update(queues.team_macros(teams))
    return values


def web_tls_secret(mon: MonitoringSettings) -> Optional[str]:
    """The Secret with the web UI's certificate: the site's (ingress), the program's, or none (lab HTTP)."""
    if mon.web.insecure_plain_http_lab_only:
        return None
    return mon.web.tls_secret_name or WEB_TLS_SECRET


def chart_values(mon: MonitoringSettings, block_storage_class: Optional[str]) -> dict[str, Any]:
    """Values for the community zabbix chart (checked against its values.yaml in the tests)."""
    web_service: dict[str, Any] = {"type": "NodePort", "nodePort": mon.web.node_port} if mon.web.node_port else {}
    https_pod = mon.web.node_port is not None and not mon.web.insecure_plain_http_lab_only
    web: dict[str, Any] = {"service": web_service} if web_service else {}
    if https_pod:
        # The NodePort serves HTTPS from the pod: the image's nginx listens on 8443 with TLS when
        # /etc/ssl/nginx holds ssl.crt, ssl.key and dhparam.pem (the chart's tlsCertsSecretName).
        probe = {"httpGet": {"path": "/ping", "port": "zabbix-web", "scheme": "HTTPS"}}
        web.update(port=8443, tlsCertsSecretName=WEB_TLS_SECRET, livenessProbe=probe, readinessProbe=probe)
    values: dict[str, Any] = {
        "zabbixImageTag": mon.image_tag,
        # Credentials from our own Secret (random password), never the chart's literal zabbix/zabbix.
        "postgresAccess": {"existingSecretName": DB_SECRET},
        "postgresql": {
            "enabled": True,
            "persistence": {"enabled": True, "storageSize": mon.database.storage_size},
        },
        "zabbixServer": {
            # One server: the chart ignores `replicaCount` without zabbixServerHA (which needs an external DB).
            "zabbixServerHA": {"enabled": False},
            # Active agents on the NAS hosts reach the trapper port through this NodePort.
            "service": {"type": "NodePort", "nodePort": mon.server_node_port},
        },
        "zabbixWeb": web,
        "zabbixAgent": {
            "runAsSidecar": False,
            "runAsDaemonSet": True,
            "hostNetwork": True,
            "hostRootFsMount": True,
            # The image's entrypoint makes this both `Server` (passive peers) and `ServerActive`
            # (`host:ZBX_SERVER_PORT`); ZBX_ACTIVESERVERS would be appended to the latter, so naming
            # the server there too opens a second session that collects every item twice.
            "ZBX_SERVER_HOST": f"{RELEASE}-zabbix-server.{mon.namespace}.svc",
            "ZBX_SERVER_PORT": 10051,
            # Passive on: without `Server` agent 2 listens on no port, and the chart's liveness and
            # startup probes (tcpSocket on 10050) restart the pod forever. Passive requests are still
            # refused from anyone but the server's Service address and need the PSK; the templates
            # use active checks.
            "ZBX_PASSIVE_ALLOW": True,
            "ZBX_ACTIVE_ALLOW": True,
            "extraEnv": [
                {"name": "ZBX_TLSCONNECT", "value": "psk"},
                {"name": "ZBX_TLSACCEPT", "value": "psk"},
                {"name": "ZBX_TLSPSKIDENTITY", "value": PSK_IDENTITY},
                {"name": "ZBX_TLSPSKFILE", "value": f"{PSK_DIR}/psk"},
            ],
            # The image runs as uid 1997, group 1995 (zabbix-docker's agent2 Dockerfile). A Secret
            # volume is root-owned; with an fsGroup the kubelet gives its files that group and
            # mode|0440, so the agent reads the PSK through its own group and nobody else can.
            "extraVolumes": [
                {"name": "psk", "secret": {"secretName": PSK_SECRET, "defaultMode": 0o440}},
                {"name": "userparameters", "configMap": {"name": USERPARAMETERS}},
            ],
            "extraVolumeMounts": [
                {"name": "psk", "mountPath": PSK_DIR, "readOnly": True},
                {"name": "userparameters", "mountPath": USERPARAMETERS_DIR, "readOnly": True},
            ],
            # Every node, whatever its taints (GPU, control plane, cordoned): on the agent pod only.
            # The chart's top-level `tolerations` would also put server, web and database on GPU nodes.
            "extraPodSpecs": {
                "tolerations": [{"operator": "Exists"}],
                "securityContext": {"fsGroup": AGENT_GROUP},
            },
        },
    }
    # The Kubernetes host's template reads the backup status ConfigMaps and RKE2's etcd snapshot list
    # (read-only; the chart's ClusterRole has neither).
    values["rbac"] = {
        "additionalRulesForClusterRole": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
            {"apiGroups": ["k3s.cattle.io"], "resources": ["etcdsnapshotfiles"], "verbs": ["get", "list"]},
        ]
    }
    if block_storage_class:
        values["postgresql"]["persistence"]["storageClass"] = block_storage_class
    for component, requests in ZABBIX_REQUESTS.items():
        values.setdefault(component, {})["resources"] = {"requests": requests}
    # The nightly CronJob that deletes stale HA node records: there is one server and no HA.
    values["zabbixServer"]["haNodesAutoClean"] = {"enabled": False}
    if mon.web.ingress_host:
        ingress: dict[str, Any] = {
            "enabled": True,
            "hosts": [{"host": mon.web.ingress_host, "paths": [{"path": "/", "pathType": "Prefix"}]}],
        }
        if mon.web.ingress_class_name:
            ingress["ingressClassName"] = mon.web.ingress_class_name
        if web_tls_secret(mon):
            ingress["tls"] = [{"hosts": [mon.web.ingress_host], "secretName": web_tls_secret(mon)}]
        values["ingress"] = ingress
    return values


def template_sources() -> dict[str, tuple[list[str], str]]:
    """File stem -> (template names, YAML text) of the platform's own templates."""
    out = {}
    for path in sorted(TEMPLATES.glob("*.yaml")):
        text = path.read_text()
        names = [t["template"] for t in yaml.safe_load(text)["zabbix_export"]["templates"]]
        out[path.stem] = (names, text)
    return out


def media_type_spec(kind: str, mattermost_url: Optional[str]) -> dict[str, Any]:
    """The preloaded webhook as the platform configures it (the bot token is a secret, set apart)."""
    if kind == "slack":
        return {"name": "Slack", "enabled": True, "parameters": {"slack_mode": "alarm"}}
    return {
        "name": "Mattermost",
        "enabled": True,
        "parameters": {"mattermost_url": mattermost_url, "send_mode": "alarm"},
    }


def channel_specs(
    channel: Channel, teams: Sequence[Team] = ()
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A channel's user group (no UI login), user (the channel as its media) and action (problems from
    the channel's host groups at or above its severity)."""
    label = f"alerts-{channel.name}"
    host_groups = channel.host_groups or list(HOST_GROUPS)
    mediatype = MEDIA_TYPES[channel.type]
    group = {"name": label, "host_groups": host_groups}
    user = {
        "username": label,
        "role": "User role",
        "group": label,
        "mediatype": mediatype,
        "send_to": channel.send_to,
        "severity": severity_mask(channel.min_severity),
    }
    action = {
        "name": label,
        "min_severity": severity_index(channel.min_severity),
        "host_groups": host_groups,
        "user_group": label,
        "mediatype": mediatype,
    }
    if channel.teams:  # a team's channel: only its queues' and idle GPUs' problems (their event tags)
        action["event_tags"] = queues.team_event_tags(channel.teams, teams)
    return group, user, action


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-").replace("--", "-")
