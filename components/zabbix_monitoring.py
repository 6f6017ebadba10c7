"""ZabbixMonitoring: Zabbix server, web, database and agents on every node and NAS host; what it
watches and where it alerts, as tracked state through the Zabbix API.

Three halves:
- cluster: the community `zabbix` chart (server, web, bundled PostgreSQL on the tier-2 block
  class, agent 2 as a DaemonSet on every node: GPU and control-plane nodes included, the
  tolerations on the agent pod only), kube-state-metrics for the Kubernetes templates, and a
  service-account token Secret for them;
- hosts: agent 2 on each NAS host over SSH (`zabbix-agent2-nas.sh`), active checks to the server's
  NodePort, PSK-encrypted;
- API: the chart's default Admin/zabbix is replaced on the first `up`, the program then works as its
  own API user with a token (`components/zabbix_objects.py`), and every host group, macro, template,
  host, media type, alert user/group and action is a Pulumi resource.

Server HA is off on purpose: chart 7.0.12 renders the HA label sidecar only when the agent runs as
a sidecar (helm-zabbix #136), so with the agent DaemonSet the server Service of an HA pair has no
endpoints; HA also needs an external database (it cannot use the bundled PostgreSQL). Turning it on
takes an external PostgreSQL (e.g. CloudNativePG), `zabbixServer.zabbixServerHA.enabled` and the
sidecar added to the server pod (a fixed chart or a Pulumi transform). One replica restarts in
about a minute; the agents buffer their data meanwhile.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
import yaml

from components import pki, queue_dashboards, queue_monitoring
from components import zabbix_objects as zbx
from components.common import Wiring
from components.helm import release
from components.remote import host_script
from components.upgrades import NAMESPACE as UPGRADE_NAMESPACE
from components.zabbix_dashboards import dashboard_references, overview_dashboard, teams_dashboard
from settings import CephfsBackup, EtcdSnapshots, MonitoringSettings, NasHost, NodeSettings
from settings.monitoring import HOST_GROUPS, SEVERITIES, Channel
from settings.scheduling import Team
from settings.storage import BACKUP_NAMESPACE  # where the backup Jobs write backup-status-<source>

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
ZABBIX_FILES = Path(__file__).parent / "zabbix"
TEMPLATES = ZABBIX_FILES / "templates"
USERPARAMETERS = "zabbix-agent-userparameters"  # ConfigMap with components/zabbix/agent2-userparameters.conf
USERPARAMETERS_DIR = "/etc/zabbix/zabbix_agentd.d"  # the directory the image's entrypoint includes
LINUX_TEMPLATE = "Linux by Zabbix agent active"
K8S_STATE_TEMPLATE = "Kubernetes cluster state by HTTP"
GPU_TEMPLATE, IB_TEMPLATE = "ml-platform GPU by DCGM exporter", "ml-platform InfiniBand by sysfs"
CEPH_TEMPLATE, MINIO_TEMPLATE = "ml-platform Ceph by mgr Prometheus", "ml-platform MinIO by HTTP"
KUBE_TEMPLATE, CERT_TEMPLATE = "ml-platform Kubernetes platform state", "ml-platform TLS certificates by agent 2"
RKE2_CERT_TEMPLATE = "ml-platform RKE2 certificate files"
MEDIA_TYPES = {"slack": "Slack", "mattermost": "Mattermost"}


@dataclass(frozen=True)
class ZabbixSecrets:
    """Secrets from the stack config; None = generate (admin password, PSK) or not needed (tokens)."""

    admin_password: Optional[pulumi.Output[str]] = None
    agent_psk: Optional[pulumi.Output[str]] = None
    slack_bot_token: Optional[pulumi.Output[str]] = None
    mattermost_bot_token: Optional[pulumi.Output[str]] = None
    minio_metrics_token: Optional[pulumi.Output[str]] = None  # bearer token of /minio/v2/metrics


@dataclass(frozen=True)
class ZabbixMonitoringArgs:
    monitoring: MonitoringSettings
    cluster_name: str
    api_endpoint: str
    nodes: Sequence[NodeSettings]
    nas_hosts: Sequence[NasHost]
    block_storage_class: Optional[str]
    ceph_namespace: Optional[str]
    wiring: Wiring
    secrets: ZabbixSecrets = ZabbixSecrets()
    storage_ready: Sequence[pulumi.Resource] = ()  # what creates block_storage_class (the database claims it)
    backup: CephfsBackup = CephfsBackup()
    etcd_snapshots: EtcdSnapshots = EtcdSnapshots()
    minio_port: int = 9000
    teams: Sequence[Team] = ()  # the per-team GPU view: a page per team with a GPU quota
    kueue_namespace: str = "kueue-system"  # where Kueue's metrics Service is (the <cluster>-kueue host)


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


def global_macros(mon: MonitoringSettings, url: str) -> dict[str, tuple[str, str]]:
    """Macro -> (value, description): the thresholds the templates' triggers read, and the UI URL the
    Slack and Mattermost webhooks link back to."""
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


class ZabbixMonitoring(pulumi.ComponentResource):
    url: str
    api_user: str
    api_token: pulumi.Output[str]
    admin_password: pulumi.Output[str]
    ca_cert: pulumi.Output[str]  # PEM the web UI's certificate chains to ("" with plain HTTP)
    monitored_hosts: list[str]

    def __init__(self, name: str, args: ZabbixMonitoringArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:monitoring:ZabbixMonitoring", name, None, opts)
        mon = args.monitoring
        self.url = web_url(mon, args.api_endpoint)
        self.api_user = mon.api_user
        child = pulumi.ResourceOptions(parent=self)
        self.admin_password = args.secrets.admin_password or _password(f"{name}-admin-password", child)
        api_password = _password(f"{name}-api-password", child)
        # RandomBytes, not RandomId: its outputs are secret in the state too (RandomId's hex is plain there).
        psk = args.secrets.agent_psk or pulumi.Output.secret(
            random.RandomBytes(f"{name}-agent-psk", length=32, opts=child).hex
        )

        self.ca_cert = pulumi.Output.from_input(mon.web.ca_cert or "")
        chart = self._cluster_half(name, args, psk)
        self._nas_agents(name, args, psk)
        ca = self.ca_cert.apply(lambda pem: pem or None)
        bootstrap = zbx.ZabbixBootstrap(
            f"{name}-api-bootstrap",
            url=f"{self.url}/api_jsonrpc.php",
            api_user=mon.api_user,
            admin_password=self.admin_password,
            api_password=api_password,
            ca=ca,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[chart]),
        )
        self.api_token = bootstrap.token
        connection = pulumi.Output.secret({"url": f"{self.url}/api_jsonrpc.php", "token": bootstrap.token, "ca": ca})
        self.monitored_hosts = self._api_objects(name, args, connection, psk)
        self.register_outputs(
            {"url": self.url, "apiUser": self.api_user, "caCert": self.ca_cert, "monitoredHosts": self.monitored_hosts}
        )

    # ------------------------------------------------------------------------------------------ cluster
    def _cluster_half(self, name: str, args: ZabbixMonitoringArgs, psk: pulumi.Output[str]) -> pulumi.Resource:
        wiring = args.wiring
        mon = args.monitoring
        ns = mon.namespace
        k8s_opts = wiring.in_cluster.options(parent=self)
        namespace = wiring.in_cluster.namespace(
            f"{name}-namespace",
            ns,
            "privileged",
            "the Zabbix agent DaemonSet uses the host network and mounts the host's /proc, /sys and /",
            parent=self,
        )
        in_ns = pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(depends_on=[namespace]))
        db_password = _password(f"{name}-db-password", pulumi.ResourceOptions(parent=self))
        db_secret = k8s.core.v1.Secret(
            f"{name}-db-access",
            metadata={"name": DB_SECRET, "namespace": ns},
            string_data={
                "host": f"{RELEASE}-postgresql",
                "port": "5432",
                "user": "zabbix",
                "password": db_password,
                "dbname": "zabbix",
            },
            opts=in_ns,
        )
        psk_secret = k8s.core.v1.Secret(
            f"{name}-agent-psk-secret",
            metadata={"name": PSK_SECRET, "namespace": ns},
            string_data={"psk": psk},
            opts=in_ns,
        )
        # Both charts install into the Zabbix namespace of this cluster, as children of this component.
        in_namespace = functools.partial(release, namespace=ns, provider=wiring.in_cluster.provider, parent=self)
        ksm = in_namespace(
            f"{name}-kube-state-metrics",
            wiring.charts.kube_state_metrics,
            release_name=KSM_RELEASE,
            values=KSM_VALUES,
            depends_on=[namespace],
        )
        web_tls = self._web_certificate(name, args, in_ns)
        userparameters = k8s.core.v1.ConfigMap(
            f"{name}-agent-userparameters",
            metadata={"name": USERPARAMETERS, "namespace": ns},
            data={"ml-platform.conf": (ZABBIX_FILES / "agent2-userparameters.conf").read_text()},
            opts=in_ns,
        )
        chart = in_namespace(
            f"{name}-zabbix",
            wiring.charts.zabbix,
            release_name=RELEASE,
            values=chart_values(mon, args.block_storage_class),
            depends_on=[namespace, db_secret, psk_secret, userparameters, ksm, *web_tls, *args.storage_ready],
        )
        # The server, web/API and agents (not the per-host API objects): what checks of monitoring wait for.
        self.ready: list[pulumi.Resource] = [ksm, chart]
        # Kubernetes >= 1.24 creates no token for a service account: the K8s templates' {$KUBE.API.TOKEN}
        # comes from this Secret, which the token controller fills in.
        self._token_secret = k8s.core.v1.Secret(
            f"{name}-api-token",
            metadata={
                "name": TOKEN_SECRET,
                "namespace": ns,
                "annotations": {"kubernetes.io/service-account.name": SERVICE_ACCOUNT},
            },
            type="kubernetes.io/service-account-token",
            opts=pulumi.ResourceOptions.merge(in_ns, pulumi.ResourceOptions(depends_on=[chart])),
        )
        return chart

    def _web_certificate(self, name: str, args: ZabbixMonitoringArgs, opts: pulumi.ResourceOptions) -> list:
        """The web UI's certificate, issued by the program's own CA, in the Secret the web pod (NodePort:
        ssl.crt, ssl.key, dhparam.pem) or the Ingress (tls.crt, tls.key) reads. Nothing when the site
        gives its own (tlsSecretName) or the lab runs plain HTTP. Sets `ca_cert`."""
        mon = args.monitoring
        if mon.web.insecure_plain_http_lab_only or mon.web.tls_secret_name:
            return []
        child = pulumi.ResourceOptions(parent=self)
        ca_key, ca = pki.own_ca(f"{name}-web-ca", "ml-platform Zabbix web CA", 10 * 365 * 24, child)
        host = mon.web.ingress_host or args.api_endpoint
        is_ip = all(part.isdigit() for part in host.split("."))
        key, cert = pki.issued_certificate(
            f"{name}-web",
            (ca_key, ca),
            host,
            [] if is_ip else [host],
            [host] if is_ip else [],
            validity_hours=2 * 365 * 24,
            early_renewal_hours=60 * 24,  # a `pulumi up` in the last 60 days renews it
            uses=["digital_signature", "key_encipherment", "server_auth"],
            opts=child,
        )
        self.ca_cert = ca.cert_pem
        if mon.web.ingress_host:
            data: dict[str, Any] = {"tls.crt": cert.cert_pem, "tls.key": key.private_key_pem}
            kind = "kubernetes.io/tls"
        else:
            dhparam = (ZABBIX_FILES / "ffdhe2048.pem").read_text()
            data, kind = {"ssl.crt": cert.cert_pem, "ssl.key": key.private_key_pem, "dhparam.pem": dhparam}, "Opaque"
        secret = k8s.core.v1.Secret(
            f"{name}-web-tls",
            metadata={"name": WEB_TLS_SECRET, "namespace": mon.namespace},
            type=kind,
            string_data=data,
            opts=opts,
        )
        return [secret]

    def _kube_token(self, name: str, args: ZabbixMonitoringArgs) -> pulumi.Output[str]:
        """The token the controller writes into the Secret. It is there when this read runs: when
        pulumi-kubernetes creates a `service-account-token` Secret it waits for the controller to
        fill in its data (its Secret awaiter, up to 5 s; a slower controller fails that create, and
        the next `up` reads the token), so the host macro is never written empty."""
        in_cluster = args.wiring.in_cluster
        token_secret = k8s.core.v1.Secret.get(
            f"{name}-api-token-read",
            f"{args.monitoring.namespace}/{TOKEN_SECRET}",
            opts=pulumi.ResourceOptions(parent=self, provider=in_cluster.provider, depends_on=[self._token_secret]),
        )
        return pulumi.Output.secret(token_secret.data.apply(_decoded_token))

    # -------------------------------------------------------------------------------------------- hosts
    def _nas_agents(self, name: str, args: ZabbixMonitoringArgs, psk: pulumi.Output[str]) -> None:
        host_steps = args.wiring.host_steps
        agent = args.monitoring.nas_agent
        for host in args.nas_hosts:
            host_script(
                f"{host.name}-zabbix-agent2",
                host_steps.hosts[host.name],
                "zabbix-agent2-nas.sh",
                {
                    "APT_REPOSITORY": agent.apt_repository,
                    "APT_SUITE": agent.apt_suite,
                    "APT_KEY_URL": agent.apt_key_url,
                    "AGENT_VERSION": agent.version,
                    "ZBX_HOSTNAME": host.name,
                    # Active checks only (the templates): passive requests are accepted from the
                    # host itself alone, and the step does not change when nodes come and go.
                    "ZBX_SERVER": "127.0.0.1",
                    "ZBX_SERVER_ACTIVE": f"{args.api_endpoint}:{args.monitoring.server_node_port}",
                    "PSK_IDENTITY": PSK_IDENTITY,
                },
                stdin=psk,
                opts=pulumi.ResourceOptions(parent=self),
            )

    # ---------------------------------------------------------------------------------------------- API
    def _api_objects(
        self, name: str, args: ZabbixMonitoringArgs, connection: pulumi.Output, psk: pulumi.Output[str]
    ) -> list[str]:

        def opts(*deps: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, depends_on=list(deps))

        groups = {
            g: zbx.HostGroup(f"{name}-group-{_slug(g)}", {"name": g}, connection, opts=opts()) for g in HOST_GROUPS
        }
        macros = self._global_macros(name, args, connection, opts)
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
        hosts: list[str] = []
        host_objects: list[pulumi.Resource] = []
        web_checker = next((n.name for n in args.nodes if n.control_plane), None)
        for node in args.nodes:
            spec = {
                "host": node.name,
                "ip": node.address,
                "groups": node_groups(node),
                "templates": node_templates(node),
                "tags": node_tags(node),
                "macros": node_macros(node, web_endpoint(args) if node.name == web_checker else ()),
            }
            host_objects.append(
                zbx.Host(f"{node.name}-zabbix-host", spec, connection, psk_secrets, opts=opts(*host_deps(spec)))
            )
            hosts.append(node.name)
        for nas in args.nas_hosts:
            spec = {
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
            host_objects.append(
                zbx.Host(f"{nas.name}-zabbix-host", spec, connection, nas_secrets, opts=opts(*host_deps(spec)))
            )
            hosts.append(nas.name)
        hosts += self._cluster_hosts(name, args, connection, opts, host_deps, host_objects)
        self._alerting(name, args, connection, opts, list(groups.values()))
        named = dict(groups)
        named.update(zip(hosts, host_objects, strict=True))  # same order: nodes, NAS, cluster hosts
        self._dashboards(name, args, connection, opts, named)
        return hosts

    def _dashboards(self, name, args, connection, opts, named: dict[str, pulumi.Resource]) -> None:
        """The platform overview and the per-team GPU view. Each waits for the hosts and groups its
        widgets name, and only those: a node no widget shows changes nothing here."""
        ceph = f"{args.cluster_name}-ceph" if args.ceph_namespace else None
        overview = overview_dashboard(args.nodes, bool(args.nas_hosts), f"{args.cluster_name}-kubernetes", ceph)
        teams = teams_dashboard(args.teams, args.nodes)
        kueue, idle = f"{args.cluster_name}-kueue", args.monitoring.thresholds.gpu_idle_percent
        queues = queue_dashboards.queues_dashboard(kueue, idle)
        team_queues = queue_dashboards.team_queues_dashboard(args.teams, kueue, idle)
        for label, spec in (("overview", overview), ("teams", teams), ("queues", queues), ("team-queues", team_queues)):
            if spec:
                deps = [named[n] for n in sorted(dashboard_references(spec))]
                zbx.Dashboard(f"{name}-dashboard-{label}", spec, connection, opts=opts(*deps))

    def _global_macros(self, name, args, connection, opts) -> list[pulumi.Resource]:
        return [
            zbx.GlobalMacro(
                f"{name}-macro-{_slug(macro)}",
                {"macro": macro, "value": value, "description": f"{text} (ml-platform settings)"},
                connection,
                opts=opts(),
            )
            for macro, (value, text) in global_macros(args.monitoring, self.url).items()
        ]

    def _cluster_hosts(self, name, args, connection, opts, deps, created: list) -> list[str]:
        """Hosts without an agent: the Kubernetes cluster (state template, SA token) and Ceph."""
        token = self._kube_token(name, args)
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
        spec = queue_monitoring.kueue_host_spec(args.cluster_name, args.kueue_namespace)
        reader = queue_monitoring.kueue_reader_token(
            name, args.monitoring.namespace, args.wiring.in_cluster, self, self.ready
        )
        created.append(queue_monitoring.kueue_host(name, spec, reader, connection, opts(*deps(spec))))
        hosts.append(spec["host"])
        return hosts

    def _alerting(self, name, args, connection, opts, groups) -> None:
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
            self._channel(name, channel, connection, opts, [media[channel.type], *groups], args.teams)

    def _channel(self, name: str, channel: Channel, connection, opts, deps, teams: Sequence[Team] = ()) -> None:
        """One channel: a user group that cannot log in, its user with the channel as media, and an
        action sending problems from the channel's host groups at or above its severity."""
        label = f"alerts-{channel.name}"
        group_spec, user_spec, action_spec = channel_specs(channel, teams)
        group = zbx.UserGroup(f"{name}-{label}-group", group_spec, connection, opts=opts(*deps))
        user = zbx.User(f"{name}-{label}-user", user_spec, connection, opts=opts(group, *deps))
        zbx.Action(f"{name}-{label}-action", action_spec, connection, opts=opts(group, user, *deps))


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
        action["event_tags"] = queue_monitoring.team_event_tags(channel.teams, teams)
    return group, user, action


def _password(resource_name: str, opts: pulumi.ResourceOptions) -> pulumi.Output[str]:
    # Zabbix 7.0's default password policy: at least 8 characters, not containing the user name.
    return pulumi.Output.secret(random.RandomPassword(resource_name, length=32, special=False, opts=opts).result)


def _decoded_token(data: Optional[dict]) -> str:
    import base64

    return base64.b64decode((data or {}).get("token", "")).decode()


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-").replace("--", "-")
