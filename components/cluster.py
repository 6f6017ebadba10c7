"""ClusterBootstrap: bare-metal hosts to an HA RKE2 cluster, over SSH, and each Node's labels and
taints through the Kubernetes API.

Per node, three host steps at create, each a separately re-runnable unit:
  1. `<node>-prepare`    on the node: OS preparation (swap, kernel modules, sysctls, time, packages).
  2. `<node>-rke2-certificate-dates` on the node, after 1: a systemd timer (root) that writes the
                         expiry date of each RKE2 certificate file where the Zabbix agent reads it.
                         Delete: stops the timer, removes its files.
  3. `<node>-rke2`       on the node: RKE2 config, join token (stdin, 0600), install (fresh hosts
                         only; upgrades are components/upgrades.py's Plans), start
                         without blocking, wait (bounded, journal on failure) until the node is
                         registered, or Ready again when it was Ready before.
                         Delete: uninstall RKE2, only from a host that still runs this node name.
     `<name>-ca-hash`   once, on the init server after its RKE2 step: the SHA-256 of the cluster CA,
                         which pins the CA in every other node's join token.
Then, per node, through the Kubernetes API (no SSH):
  `<node>-labels-taints` a server-side-apply patch of the Node (`kubernetes.core.v1.NodePatch`): its
                         labels and taints as the settings give them. RKE2 applies node-label and
                         node-taint only at registration (kubernetes#59314); the patch keeps them
                         right afterwards, and server-side apply removes what the settings dropped.
And one guard per node that runs only at delete:
  `<node>-membership`   no command at create or update (no SSH session); its delete, on the init
                         server: cordon, drain (honouring PodDisruptionBudgets, bounded by a
                         timeout), delete the Node.

Least-privilege join (RKE2 token docs, "secure" format): the servers hold the server token and an
agent token (`agent-token-file`); agents get only `K10<CA sha256>::node:<agent token>`, joining
servers `K10<CA sha256>::server:<server token>`; the init server keeps the bare server token (the
first server of a cluster cannot take the secure form: its CA does not exist yet).

Order: the init server starts the cluster; every other node (servers and agents) waits for it and the
CA hash only. The further servers still join one at a time (upstream warns against concurrent server
joins: rancher/rke2#642, #1600), but the order is kept on the hosts: each joining server's step waits
until the servers before it answer (JOIN_AFTER), so the graph does not grow with the number of servers.
The longest chain is prepare -> init -> CA hash -> RKE2 step of any other node -> its Node patch, the
same for 1, 3 or 5 servers and any number of nodes.

The membership's triggers depend on the RKE2 step's id, so the engine replaces the membership
whenever the RKE2 step is replaced, and deletes it first: a replace drains and deletes the Node,
uninstalls and reinstalls, in that order; the Node patch carries the RKE2 step's id in an annotation,
so it is applied again to the re-registered Node. Removing a node runs the same deletes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.remote import HostAccess, expanded, fingerprint, host_script
from settings import ClusterSettings, NetworkSettings, NodeSettings
from settings.cluster import Oidc

API_PORT = 6443
SUPERVISOR_PORT = 9345  # RKE2's registration (supervisor) port
GPU_TAINT = "nvidia.com/gpu=true:NoSchedule"
ROLE_LABEL = "ml-platform.io/role"
CONFIG_DIR = "/etc/rancher/rke2"
TOKEN_FILE = f"{CONFIG_DIR}/join-token"
AGENT_TOKEN_FILE = f"{CONFIG_DIR}/agent-token"
OIDC_CA_FILE = f"{CONFIG_DIR}/oidc-ca.pem"
# libyaml's safe dumper where PyYAML has it (a 1000-node preview renders 1000 configs): the same text.
SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
# On the Node: which install of the node (RKE2 step) its labels and taints were applied for.
INSTALL_ANNOTATION = "ml-platform.io/rke2-install"


@dataclass(frozen=True)
class ClusterBootstrapArgs:
    cluster: ClusterSettings
    network: NetworkSettings
    nodes: Sequence[NodeSettings]
    hosts: Mapping[str, HostAccess]
    token: pulumi.Input[str]
    """The server token (admin-equivalent): only servers receive it."""
    agent_token: pulumi.Input[str]
    """The agent token: all that agents receive (with the CA hash)."""
    # Extra keys for the servers' RKE2 config from other components (e.g. MinioTier's etcd-s3 keys).
    server_config: Mapping[str, Any] = field(default_factory=dict)


class ClusterBootstrap(pulumi.ComponentResource):
    """Prepared hosts, an HA RKE2 cluster, its kubeconfig and a Kubernetes provider."""

    prepared: dict[str, pulumi.Resource]
    """The preparation step of each node, for other host steps on that node to wait for."""
    joined: dict[str, pulumi.Resource]
    """The RKE2 step of each node (done: RKE2 runs and the node is registered)."""
    ready: list[pulumi.Resource]
    """What in-cluster resources wait for: the API answers through the endpoint."""
    kubeconfig: pulumi.Output[str]
    ca_hash: pulumi.Output[str]
    """SHA-256 of the cluster's server CA certificate (public), read from the init server."""
    provider: k8s.Provider
    api_url: str

    def __init__(self, name: str, args: ClusterBootstrapArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:cluster:ClusterBootstrap", name, None, opts)
        cluster = args.cluster
        servers = [n for n in args.nodes if n.control_plane]
        init = next(n for n in servers if n.name == cluster.init_server)
        init_host = args.hosts[init.name]
        self.api_url = f"https://{cluster.api_endpoint}:{API_PORT}"

        self.prepared = {
            node.name: host_script(
                f"{node.name}-prepare",
                args.hosts[node.name],
                "prepare-host.sh",
                prepare_params(node, cluster, args.network),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for node in args.nodes
        }

        # Root-side dates of RKE2's certificate files (readable by root only) for the Zabbix agent:
        # a timer, installed after preparation; it lists the files once RKE2 has written them.
        for node in args.nodes:
            host_script(
                f"{node.name}-rke2-certificate-dates",
                args.hosts[node.name],
                "rke2-certificate-watch.sh",
                {
                    "ACTION": "install",
                    "NODE_NAME": node.name,
                    "OS_FAMILY": cluster.os_family,
                    "DATES_SCRIPT": certificate_dates_script(),
                },
                delete_script="rke2-certificate-watch.sh",
                delete_params={"ACTION": "remove", "NODE_NAME": node.name},
                identity=[node.name, node.address],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.prepared[node.name]]),
            )

        # The init server first; then every other node once it runs and its CA hash is known. The
        # further servers keep their one-at-a-time order on the hosts (JOIN_AFTER), not in the graph.
        self.joined = {}
        self._rke2(init, args, [self.prepared[init.name]], join_stdin(args, None, init), [])
        # Replaced along with the init server's RKE2 step: a rebuilt single server is a new CA.
        ca_read = host_script(
            f"{name}-ca-hash",
            init_host,
            "read-ca-hash.sh",
            replaced_with=self.joined[init.name],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.joined[init.name]]),
        )
        self.ca_hash = ca_read.stdout.apply(parse_ca_hash)
        further_servers = [s for s in servers if s is not init]
        for node in args.nodes:
            if node is not init:
                earlier = further_servers[: further_servers.index(node)] if node.control_plane else []
                waits = [self.prepared[node.name], self.joined[init.name]]
                self._rke2(node, args, waits, join_stdin(args, self.ca_hash, node), earlier)

        read = host_script(
            f"{name}-kubeconfig",
            init_host,
            "read-kubeconfig.sh",
            kubeconfig_params(cluster),
            secret_output=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.joined[init.name]]),
        )
        self.kubeconfig = pulumi.Output.secret(read.stdout)
        self.ready = [read]
        # cluster_identifier: a re-read (rotated) kubeconfig updates the provider in place instead
        # of replacing it, which would replace every Kubernetes object.
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            cluster_identifier=cluster.name,
            opts=pulumi.ResourceOptions(parent=self),
        )

        self.node_patches: dict[str, k8s.core.v1.NodePatch] = {}
        for node in args.nodes:
            self.node_patches[node.name] = self._labels_and_taints(node)
            # Nothing at create (no SSH session); at delete, on the init server: cordon, drain, delete
            # the Node. Its trigger keeps the value it was deployed with when this step also labelled
            # the node, so stacks deployed before see an in-place update, not a drain of every node.
            host_script(
                f"{node.name}-membership",
                init_host,
                None,
                delete_script="node-remove.sh",
                delete_params={
                    "NODE_NAME": node.name,
                    "DRAIN": "true" if cluster.drain_on_remove else "false",
                    "DRAIN_TIMEOUT": str(cluster.drain_timeout_seconds),
                },
                trigger_parts=["node-membership.sh", "node-remove.sh", node.name],
                replaced_with=self.joined[node.name],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.joined[init.name]]),
            )

        self.register_outputs({"apiUrl": self.api_url, "kubeconfig": self.kubeconfig})

    def _rke2(
        self,
        node: NodeSettings,
        args: ClusterBootstrapArgs,
        waits: list[pulumi.Resource],
        stdin: pulumi.Output[str],
        join_after: Sequence[NodeSettings],
    ) -> pulumi.Resource:
        cluster = args.cluster
        is_init = node.name == cluster.init_server
        step = host_script(
            f"{node.name}-rke2",
            args.hosts[node.name],
            "rke2-install.sh",
            rke2_params(node, is_init, cluster, args.network, args.server_config, join_after),
            stdin=stdin,
            delete_script="rke2-uninstall.sh",
            delete_params={"NODE_NAME": node.name},
            identity=[node.name, node.address, "server" if node.control_plane else "agent"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=waits),
        )
        self.joined[node.name] = step
        return step

    def _labels_and_taints(self, node: NodeSettings) -> k8s.core.v1.NodePatch:
        """The Node's labels and taints, server-side applied once its RKE2 step has registered it.

        The taint list of a Node is atomic (kubernetes#128866): applying it replaces the whole list,
        so only nodes whose settings give taints apply one, forced (`pulumi.com/patchForce`), since the
        kubelet registered the list; the node lifecycle controller re-adds its own condition taints.
        `retain_on_delete`: a removed node's Node is deleted by its membership's delete; there is
        nothing to take back. The annotation holds the RKE2 step's id: when that step is replaced
        (the Node deleted and registered again) the patch changes and is applied to the new Node."""
        joined = self.joined[node.name]
        spec = {"taints": [taint_object(t) for t in node_taints(node)]} if node_taints(node) else None
        return k8s.core.v1.NodePatch(
            f"{node.name}-labels-taints",
            metadata=k8s.meta.v1.ObjectMetaPatchArgs(
                name=node.name,
                labels=managed_labels(node),
                annotations={
                    "pulumi.com/patchForce": "true",
                    INSTALL_ANNOTATION: joined.id.apply(lambda step_id: fingerprint(step_id)),
                },
            ),
            spec=spec,
            opts=pulumi.ResourceOptions(
                parent=self, provider=self.provider, depends_on=[joined], retain_on_delete=True
            ),
        )


def join_stdin(
    args: ClusterBootstrapArgs, ca_hash: Optional[pulumi.Output[str]], node: NodeSettings
) -> pulumi.Output[str]:
    """What a node's RKE2 step reads on stdin, built only from the secrets that node may hold: an
    agent's input never depends on the server token."""
    if not node.control_plane:
        return pulumi.Output.secret(
            pulumi.Output.all(ca_hash, args.agent_token).apply(lambda v: agent_stdin(v[0], v[1]))
        )
    return pulumi.Output.secret(
        pulumi.Output.all(ca_hash, args.token, args.agent_token).apply(lambda v: server_stdin(v[0], v[1], v[2]))
    )


def secure_token(ca_hash: str, user: str, password: str) -> str:
    """RKE2's secure token format, `K10<CA hash>::<user>:<password>` (`server` for servers, `node`
    for agents): the joining node checks the CA that `/cacerts` presents against the hash before it
    sends the password."""
    if not re.fullmatch(r"[0-9a-f]{64}", ca_hash):
        raise ValueError(f"not a SHA-256 of the cluster CA: {ca_hash!r}")
    return f"K10{ca_hash}::{user}:{bare(password)}"


def bare(password: str) -> str:
    """A token's password part as given, checked: one line, not already in the K10 form."""
    if not password or "::" in password or "\n" in password:
        raise ValueError(
            "ml-platform:rke2Token must be the bare passphrase, one line, without a K10...:: prefix "
            "(the program adds the CA hash itself)"
        )
    return password


def server_stdin(ca_hash: Optional[str], server_token: str, agent_token: str) -> str:
    """A server's stdin: its join token, then the agent token (`agent-token-file`). The init server
    (no CA hash yet on the first start) gets the bare server token."""
    join = bare(server_token) if ca_hash is None else secure_token(ca_hash, "server", server_token)
    return f"{join}\n{agent_token}\n"


def agent_stdin(ca_hash: str, agent_token: str) -> str:
    """An agent's stdin: only the CA-pinned agent token."""
    return secure_token(ca_hash, "node", agent_token) + "\n"


def parse_ca_hash(stdout: str) -> str:
    """The hash that read-ca-hash.sh printed."""
    value = stdout.strip()
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError(f"read-ca-hash.sh printed {value[:80]!r}, not a SHA-256 hex digest")
    return value


@functools.cache
def certificate_dates_script() -> str:
    """What the certificate timer runs on each node (standalone: the shared helpers are not prepended)."""
    return expanded("rke2-certificate-dates.sh")


def prepare_params(node: NodeSettings, cluster: ClusterSettings, network: NetworkSettings) -> dict[str, str]:
    return {
        "NODE_NAME": node.name,
        "OS_FAMILY": cluster.os_family,
        "TIME_SERVERS": " ".join(cluster.time_servers),
        "CIS_PROFILE": "true" if cluster.cis_profile else "false",
        "CNI": network.cni,
    }


def registration_labels(node: NodeSettings) -> dict[str, str]:
    """The labels a node registers with (config.yaml): what the program derives from its role and
    hardware, so that workloads find it from its first moment. `nodes[].labels` are not among them:
    the Node patch reconciles them without touching config.yaml (no RKE2 restart)."""
    labels = {ROLE_LABEL: node.role}
    if node.control_plane:
        labels["ml-platform.io/control-plane"] = "true"
    if node.gpu is not None:
        labels["ml-platform.io/gpu-model"] = _label_value(node.gpu.model)
        labels["ml-platform.io/gpu-count"] = str(node.gpu.count)
    if node.storage_host:
        labels["ml-platform.io/ceph-storage"] = "true"
    return labels


def node_labels(node: NodeSettings) -> dict[str, str]:
    """Every label from settings and the node's role and hardware (see also `managed_labels`)."""
    return {**registration_labels(node), **node.labels}


def node_taints(node: NodeSettings) -> list[str]:
    return [GPU_TAINT] if node.role == "gpu" else []


def _label_value(text: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip("-_.")
    return cleaned[:63].rstrip("-_.")


def rke2_config(
    node: NodeSettings,
    is_init: bool,
    cluster: ClusterSettings,
    network: NetworkSettings,
    server_config: Mapping[str, Any] = MappingProxyType({}),
) -> dict:
    """`/etc/rancher/rke2/config.yaml` for one node; every key is an `rke2 server`/`rke2 agent` flag."""
    config: dict = {
        "token-file": TOKEN_FILE,
        "node-name": node.name,
        "node-ip": node.address,
        # The role label is also reconciled after registration (the Node patch); RKE2 only
        # applies node-label/node-taint when the node first registers (kubernetes#59314).
        "node-label": [f"{k}={v}" for k, v in sorted(registration_labels(node).items())],
    }
    if node_taints(node):
        config["node-taint"] = node_taints(node)
    if not is_init:
        config["server"] = f"https://{cluster.api_endpoint}:{SUPERVISOR_PORT}"
    if node.control_plane:
        # The only token agents receive: they can join, never act as a server (RKE2 token docs).
        config["agent-token-file"] = AGENT_TOKEN_FILE
    if cluster.cis_profile:
        config["profile"] = "cis"
    if node.control_plane:
        config.update(
            {
                "advertise-address": node.address,
                "tls-san": [cluster.api_endpoint],
                "cni": "none",  # NetworkFabric installs the CNI from its pinned chart
                "cluster-cidr": network.cluster_cidr,
                "service-cidr": network.service_cidr,
                "disable-kube-proxy": network.kube_proxy_replacement and network.cni == "cilium",
                "etcd-snapshot-schedule-cron": cluster.etcd_snapshots.schedule_cron,
                "etcd-snapshot-retention": cluster.etcd_snapshots.retention,
                "write-kubeconfig-mode": "0600",
            }
        )
        if cluster.system_default_registry:
            config["system-default-registry"] = cluster.system_default_registry
        if cluster.oidc is not None:
            config["kube-apiserver-arg"] = oidc_apiserver_args(cluster.oidc)
        config.update(server_config)
    return config


def oidc_apiserver_args(oidc: Oidc) -> list[str]:
    """kube-apiserver flags (RKE2 `kube-apiserver-arg`) that make it trust the site's OIDC provider."""
    args = [
        f"oidc-issuer-url={oidc.issuer_url}",
        f"oidc-client-id={oidc.client_id}",
        f"oidc-username-claim={oidc.username_claim}",
        f"oidc-username-prefix={oidc.username_prefix}",
        f"oidc-groups-claim={oidc.groups_claim}",
        f"oidc-groups-prefix={oidc.groups_prefix}",
    ]
    if oidc.ca_pem is not None:
        args.append(f"oidc-ca-file={OIDC_CA_FILE}")
    return args


def registries_yaml(cluster: ClusterSettings) -> str:
    """`/etc/rancher/rke2/registries.yaml`: containerd mirrors for air-gapped sites."""
    if not cluster.registry_mirrors:
        return ""
    mirrors = {
        registry: {"endpoint": list(endpoints)} for registry, endpoints in sorted(cluster.registry_mirrors.items())
    }
    return yaml.safe_dump({"mirrors": mirrors}, sort_keys=True)


def kube_vip_manifest(cluster: ClusterSettings) -> str:
    """A kube-vip static pod that holds the API/registration virtual IP on the servers (ARP,
    leader election through the local API server)."""
    vip = cluster.virtual_ip
    if vip is None:
        return ""
    env = {
        "address": cluster.api_endpoint,
        "port": str(API_PORT),
        "vip_interface": vip.interface,
        "vip_arp": "true",
        "vip_cidr": "32",
        "cp_enable": "true",
        "cp_namespace": "kube-system",
        "vip_leaderelection": "true",
        "vip_leasename": "plndr-cp-lock",
        "vip_leaseduration": "5",
        "vip_renewdeadline": "3",
        "vip_retryperiod": "1",
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kube-vip", "namespace": "kube-system"},
        "spec": {
            "hostNetwork": True,
            "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["kubernetes"]}],
            "containers": [
                {
                    "name": "kube-vip",
                    "image": vip.kube_vip_image,
                    "args": ["manager"],
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}},
                    "volumeMounts": [{"name": "kubeconfig", "mountPath": "/etc/kubernetes/admin.conf"}],
                }
            ],
            "volumes": [{"name": "kubeconfig", "hostPath": {"path": f"{CONFIG_DIR}/rke2.yaml"}}],
        },
    }
    return yaml.safe_dump(pod, sort_keys=False)


def rke2_params(
    node: NodeSettings,
    is_init: bool,
    cluster: ClusterSettings,
    network: NetworkSettings,
    server_config: Mapping[str, Any] = MappingProxyType({}),
    join_after: Sequence[NodeSettings] = (),
) -> dict[str, str]:
    params = {
        "NODE_NAME": node.name,
        "RKE2_TYPE": "server" if node.control_plane else "agent",
        # What a fresh host installs: the release the cluster runs, so that a version bump leaves this
        # step alone and a node added mid-upgrade matches the cluster; the upgrade Plans take it further.
        "RKE2_VERSION": cluster.deployed_rke2_version or cluster.rke2_version,
        "INSTALLER_URL": cluster.install.installer_url,
        "ARTIFACT_URL": cluster.install.artifact_url or "",
        "INSTALL_METHOD": cluster.install.method,
        "RKE2_CONFIG": yaml.dump(
            rke2_config(node, is_init, cluster, network, server_config), Dumper=SAFE_DUMPER, sort_keys=True
        ),
        "REGISTRIES_YAML": registries_yaml(cluster),
        "KUBE_VIP_MANIFEST": kube_vip_manifest(cluster) if node.control_plane else "",
        # Joiners wait until the registration address answers before they start. The init server
        # reports done only once it answers (the VIP is up), and joins instead of initialising a
        # second cluster when it already answers and the host has no etcd data (a rebuild).
        "REGISTRATION_ADDRESS": f"{cluster.api_endpoint}:{SUPERVISOR_PORT}",
        "JOIN_TIMEOUT": str(cluster.join_timeout_seconds),
        "RENAMED_FROM": node.renamed_from or "",
        # Only when set: stacks without OIDC keep their step's trigger unchanged.
        **({"OIDC_CA_PEM": cluster.oidc.ca_pem} if node.control_plane and cluster.oidc and cluster.oidc.ca_pem else {}),
    }
    if join_after:
        # A joining server starts a fresh join only after the servers before it answer, one at a time
        # (each within JOIN_TIMEOUT). Absent when empty: the steps of the init server, the second
        # server and the agents keep the parameters they were deployed with.
        params["JOIN_AFTER"] = " ".join(f"{s.address}:{API_PORT}" for s in join_after)
    return params


def kubeconfig_params(cluster: ClusterSettings) -> dict[str, str]:
    params = {"API_ENDPOINT": cluster.api_endpoint, "API_PORT": str(API_PORT), "CLUSTER_NAME": cluster.name}
    # A changed parameter re-runs the step (its trigger is their hash): raising the counter re-reads the
    # kubeconfig after a certificate rotation. Absent at 0, so stacks deployed before keep their step.
    if cluster.certificate_rotation:
        params["CERTIFICATE_ROTATION"] = str(cluster.certificate_rotation)
    return params


def managed_labels(node: NodeSettings) -> dict[str, str]:
    """Every label the Node patch keeps on the Node. Admin-side labels may use the
    node-role.kubernetes.io prefix, which kubelets may not set."""
    return {**node_labels(node), f"node-role.kubernetes.io/{node.role}": "true"}


def taint_object(taint: str) -> dict[str, str]:
    """`key=value:Effect` (RKE2's node-taint form) as a Node spec taint."""
    key_value, _, effect = taint.rpartition(":")
    key, _, value = key_value.partition("=")
    return {"key": key, "value": value, "effect": effect}
