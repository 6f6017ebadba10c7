"""`ml-platform:monitoring`: Zabbix on the cluster and the NAS, its alert thresholds and channels.

Secrets (bot tokens, the agent PSK, the Admin password) are never part of this model: they are
`SECRET_KEYS` in `settings.secrets`, read as Pulumi secrets.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Optional

from pydantic import Field, model_validator

from settings.declare import Claim, Uses, destroys_on_decrease, none, refused, replaces, rerender, restarts
from settings.scan import PUBLIC
from settings.types import Host, Model, Name, Namespace, Url, Version

# Zabbix trigger severities in ascending order (API `priority` 1..5; 0 "not classified" is never used).
SEVERITIES = ("information", "warning", "average", "high", "disaster")
# The Zabbix host groups the platform's hosts go in (the monitoring creates all of them); channels
# name them in `hostGroups`.
HOST_GROUPS = (
    "ml-platform/control-plane",
    "ml-platform/cpu-nodes",
    "ml-platform/gpu-nodes",
    "ml-platform/ceph-storage",
    "ml-platform/nas",
    "ml-platform/kubernetes",
)
Severity = Literal["information", "warning", "average", "high", "disaster"]


class WebSettings(Model):
    """How operators and this program reach the Zabbix web UI and its API: HTTPS only. A NodePort
    serves HTTPS with a certificate the program issues from its own CA (stack output
    `zabbixCaCert`); an Ingress terminates TLS with that certificate or the site's (`tlsSecretName`,
    verified with `caCert`). The program verifies the certificate on every API call."""

    node_port: Annotated[Optional[int], Claim("port", scope="node-port")] = Field(default=31080, ge=30000, le=32767)
    """HTTPS NodePort of the web Service; the URL is https://<cluster.apiEndpoint>:<nodePort>. Set to null when
    ingressHost is used."""
    ingress_host: Optional[Annotated[Host, Uses("hostname")]] = None
    """Host name of an Ingress to the web UI (https://<ingressHost>); instead of nodePort."""
    ingress_class_name: Optional[Name] = None
    """IngressClass for ingressHost."""
    tls_secret_name: Optional[Name] = None
    """With ingressHost: a kubernetes.io/tls Secret in the monitoring namespace holding the site's certificate for
    ingressHost. Unset: the program issues one from its own CA."""
    ca_cert: Optional[str] = Field(default=None, pattern=r"^-----BEGIN CERTIFICATE-----")
    """PEM of the CA that signed tlsSecretName's certificate; the program verifies the API with it. Required with
    tlsSecretName."""
    insecure_plain_http_lab_only: bool = False
    """Lab only: serve the web UI and API over plain HTTP (the Admin password and the API token cross the network in
    clear text). Never set it for production."""

    CHANGES: ClassVar = {
        "node_port": rerender("the web Service's NodePort (the URL changes)"),
        "ingress_host": rerender("the web Ingress (the URL changes)"),
        "ingress_class_name": rerender("the web Ingress"),
        "tls_secret_name": restarts("the Zabbix web pod (its certificate)", "cluster"),
        "ca_cert": none("how the program verifies the API"),
        "insecure_plain_http_lab_only": restarts("the Zabbix web pod (HTTP instead of HTTPS)", "cluster"),
    }

    @model_validator(mode="after")
    def _tls_source_is_complete(self) -> WebSettings:
        if self.tls_secret_name and not self.ingress_host:
            raise ValueError("tlsSecretName: only with ingressHost (the NodePort serves the program's certificate)")
        if bool(self.tls_secret_name) != bool(self.ca_cert):
            raise ValueError("tlsSecretName and caCert: set both (the site's certificate and the CA that signed it)")
        if self.insecure_plain_http_lab_only and self.tls_secret_name:
            raise ValueError("insecurePlainHttpLabOnly: cannot be combined with tlsSecretName")
        return self


class DatabaseSettings(Model):
    storage_size: str = Field(default="50Gi", pattern=r"^[1-9][0-9]*(Gi|Ti)$")
    """Size of the PostgreSQL volume (tier-2 block storage class), e.g. 50Gi."""

    CHANGES: ClassVar = {
        "storage_size": refused("a StatefulSet's volumeClaimTemplates cannot change; grow the PVC by hand"),
    }


class NasAgentSettings(Model):
    """Zabbix agent 2 on the NAS hosts, installed from an apt repository (point it at a mirror)."""

    apt_repository: Url = "https://repo.zabbix.com/zabbix/7.0/debian"
    """apt repository holding zabbix-agent2 (the official one or an internal mirror of it)."""
    apt_suite: str = Field(default="bookworm", pattern=r"^[a-z0-9-]+$")
    """Suite (codename) of the repo."""
    apt_key_url: Url = "https://repo.zabbix.com/zabbix-official-repo-apr2024.gpg"
    """URL of the repository's signing key (binary or armored OpenPGP key)."""
    version: Version = "1:7.0.16-1+debian12"
    """Exact zabbix-agent2 package version (apt `=VERSION` pin; `apt-cache policy zabbix-agent2`)."""

    CHANGES: ClassVar = {
        "apt_repository": restarts("zabbix-agent2 (the package is installed again)", "NAS hosts"),
        "apt_suite": restarts("zabbix-agent2 (the package is installed again)", "NAS hosts"),
        "apt_key_url": restarts("zabbix-agent2 (the package is installed again)", "NAS hosts"),
        "version": restarts("zabbix-agent2 (the package is installed again)", "NAS hosts"),
    }


class Thresholds(Model):
    """Trigger thresholds. Each becomes a global user macro that the templates' triggers read, so a
    change here updates exactly one object in Zabbix."""

    gpu_temperature_celsius: int = Field(default=85, ge=50, le=110)
    """GPU temperature (5 min minimum) above which a GPU alerts."""
    gpu_memory_used_percent: int = Field(default=95, ge=50, le=100)
    """GPU frame-buffer use above which a GPU alerts."""
    ib_port_errors_per_hour: int = Field(default=10, ge=1, le=1_000_000)
    """InfiniBand port error counters' growth per hour that alerts."""
    ceph_pool_used_percent: int = Field(default=80, ge=50, le=99)
    """Ceph pool fill level above which it alerts."""
    ib_min_rate_gbps: int = Field(default=100, ge=10, le=1600)
    """InfiniBand link rate (Gb/s) below which a port counts as degraded (trained down)."""
    node_cordoned_max_minutes: int = Field(default=120, ge=5, le=10080)
    """How long a node may stay cordoned (spec.unschedulable) before it alerts."""
    certificate_expiry_days: int = Field(default=21, ge=1, le=365)
    """Days before a watched TLS certificate expires that it alerts."""
    etcd_snapshot_margin_minutes: int = Field(default=30, ge=5, le=1440)
    """An etcd snapshot is too old after the schedule's longest interval plus this margin."""
    queue_pending_max_minutes: int = Field(default=60, ge=5, le=10080)
    """How long a queue's oldest pending workload may wait while its ClusterQueue uses under queueQuotaIdlePercent of
    its quota before it alerts (quota is then not the reason: misconfiguration or unschedulable)."""
    queue_quota_idle_percent: int = Field(default=50, ge=1, le=100)
    """A ClusterQueue whose most used flavor and resource is under this share of its nominal quota counts as idle."""
    queue_evictions_per_hour: int = Field(default=5, ge=1, le=10000)
    """Evictions of one ClusterQueue's workloads in an hour (any reason) that alert."""
    queue_borrowed_gpus: int = Field(default=8, ge=0, le=100000)
    """GPUs a ClusterQueue may borrow from its cohort above its nominal quota before a long borrowing alerts."""
    queue_borrowing_minutes: int = Field(default=240, ge=5, le=10080)
    """How long a ClusterQueue may borrow more than queueBorrowedGpus before it alerts."""
    gpu_idle_percent: int = Field(default=5, ge=1, le=100)
    """Utilisation under which a GPU allocated to a pod counts as idle."""
    gpu_idle_minutes: int = Field(default=60, ge=5, le=10080)
    """How long a GPU allocated to a pod may stay idle before its team is told (severity information)."""

    CHANGES: ClassVar = {
        "gpu_temperature_celsius": rerender("one Zabbix global macro"),
        "gpu_memory_used_percent": rerender("one Zabbix global macro"),
        "ib_port_errors_per_hour": rerender("one Zabbix global macro"),
        "ceph_pool_used_percent": rerender("one Zabbix global macro"),
        "ib_min_rate_gbps": rerender("one Zabbix global macro"),
        "node_cordoned_max_minutes": rerender("one Zabbix global macro"),
        "certificate_expiry_days": rerender("one Zabbix global macro"),
        "etcd_snapshot_margin_minutes": rerender("one Zabbix global macro"),
        "queue_pending_max_minutes": rerender("one Zabbix global macro"),
        "queue_quota_idle_percent": rerender("one Zabbix global macro"),
        "queue_evictions_per_hour": rerender("one Zabbix global macro"),
        "queue_borrowed_gpus": rerender("one Zabbix global macro"),
        "queue_borrowing_minutes": rerender("one Zabbix global macro"),
        "gpu_idle_percent": rerender("one Zabbix global macro and the queue dashboards' idle threshold"),
        "gpu_idle_minutes": rerender("one Zabbix global macro"),
    }


class Channel(Model):
    """One alert destination: a Slack or Mattermost channel (or user), the lowest severity it receives
    and, optionally, the host groups it is limited to."""

    name: Name
    """Name of the channel's Zabbix alert user, user group and action."""
    type: Literal["slack", "mattermost"]
    """Media type: slack or mattermost."""
    send_to: Annotated[str, PUBLIC]
    """Slack: '#channel', '@user' or a channel ID; Mattermost: 'team/#channel', 'team/@user' or a 26-character channel
    ID."""
    min_severity: Severity = Field(default="average", description="Lowest severity sent: " + ", ".join(SEVERITIES))
    host_groups: list[str] = []
    """Host groups whose problems are sent (names from docs/monitoring.md); [] = all."""
    teams: list[Name] = []
    """A team's channel: only problems about these teams (scheduling.teams names) are sent: their queues (ClusterQueue
    named like the team, LocalQueues in its namespaces) and GPUs their pods hold idle (docs/teams.md); [] = no such
    limit."""

    CHANGES: ClassVar = {
        "name": replaces("the channel's Zabbix user, user group and action"),
        "type": rerender("the channel's media"),
        "send_to": rerender("the channel's media"),
        "min_severity": rerender("the channel's action"),
        "host_groups": rerender("the channel's action"),
        "teams": rerender("the channel's action (its event-tag conditions)"),
    }


class AlertingSettings(Model):
    mattermost_url: Optional[Url] = None
    """Base URL of the Mattermost server (required with a mattermost channel)."""
    channels: list[Channel] = []
    """Where alerts go."""

    CHANGES: ClassVar = {
        "mattermost_url": rerender("the Mattermost media type"),
        "channels": destroys_on_decrease("a channel taken off the list: its user, user group and action are deleted"),
    }


class MonitoringSettings(Model):
    namespace: Namespace = "monitoring"
    """Namespace of Zabbix and kube-state-metrics."""
    image_tag: Version = "ubuntu-7.0.16"
    """Tag of the zabbix/* images (server, web, agent2): the chart's zabbixImageTag."""
    web: WebSettings
    """Web UI / API exposure."""
    server_node_port: Annotated[int, Claim("port", scope="node-port")] = Field(default=31051, ge=30000, le=32767)
    """NodePort of the server's trapper port (10051), for the NAS hosts' active agents."""
    database: DatabaseSettings
    """The bundled PostgreSQL."""
    nas_agent: NasAgentSettings
    """agent2 on the NAS hosts."""
    api_user: Name = "ml-platform-api"
    """Zabbix user this program works as (token auth)."""
    thresholds: Thresholds
    """Trigger thresholds."""
    alerting: AlertingSettings
    """Alert channels."""

    CHANGES: ClassVar = {
        "namespace": replaces(
            "Zabbix and its PostgreSQL in another namespace: the monitoring history is lost", True, by="releases"
        ),
        "image_tag": restarts("the Zabbix server, web and agent2 pods (agent2 on every node)", "every node"),
        "server_node_port": restarts("the NAS hosts' agents (their server address)", "NAS hosts"),
        "api_user": replaces("the Zabbix user this program works as"),
    }
