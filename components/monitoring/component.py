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
  own API user with a token (`objects.py`), and every host group, macro, template,
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
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from components import pki
from components.common import Wiring
from components.helm import release
from components.hosts.remote import host_script
from components.monitoring import objects as zbx
from components.monitoring.config import (
    DB_SECRET,
    KSM_RELEASE,
    KSM_VALUES,
    PSK_IDENTITY,
    PSK_SECRET,
    RELEASE,
    SERVICE_ACCOUNT,
    TOKEN_SECRET,
    USERPARAMETERS,
    WEB_TLS_SECRET,
    ZABBIX_FILES,
    chart_values,
    web_url,
)
from components.monitoring.tracked import api_objects
from settings import CephfsBackup, EtcdSnapshots, MonitoringSettings, NasHost, NodeSettings
from settings.scheduling import Team


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
    acceptance_reader: bool = False  # a read-only API user and token for the monitoring acceptance check


class ZabbixMonitoring(pulumi.ComponentResource):
    url: str
    api_user: str
    api_token: pulumi.Output[str]
    admin_password: pulumi.Output[str]
    ca_cert: pulumi.Output[str]  # PEM the web UI's certificate chains to ("" with plain HTTP)
    monitored_hosts: list[str]
    reader_token: Optional[pulumi.Output[str]]
    """The acceptance check's read-only API token (a secret; reader.py), when `acceptance_reader` asked for it."""

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
        self.monitored_hosts, self.reader_token = api_objects(
            self, name, args, self.url, connection, psk, lambda: self._kube_token(name, args), self.ready
        )
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


def _password(resource_name: str, opts: pulumi.ResourceOptions) -> pulumi.Output[str]:
    # Zabbix 7.0's default password policy: at least 8 characters, not containing the user name.
    return pulumi.Output.secret(random.RandomPassword(resource_name, length=32, special=False, opts=opts).result)


def _decoded_token(data: Optional[dict]) -> str:
    import base64

    return base64.b64decode((data or {}).get("token", "")).decode()
