"""What ClusterBootstrap renders for each node: RKE2's config, registries and kube-vip manifest, the
parameters and stdin of its host steps, the join tokens' forms, the Node's labels and taints. Plain values,
no resources: `bootstrap.py` creates those."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Optional

import yaml

from components.hosts.remote import expanded
from settings import ClusterSettings, NetworkSettings, NodeSettings
from settings.cluster import Oidc

API_PORT = 6443
SUPERVISOR_PORT = 9345  # RKE2's registration (supervisor) port
GPU_TAINT = "nvidia.com/gpu=true:NoSchedule"
ROLE_LABEL = "ml-platform.io/role"
# The platform's own hosts, with `scheduling.tenantNodesOnly`: the Kubernetes control-plane taint on RKE2 servers
# (RKE2 taints no server by default; its packaged charts and the platform's server workloads tolerate this one)
# and a storage taint on Ceph storage hosts. Applied by the Node patch only (not RKE2's `node-taint`, which would
# restart RKE2 to change): team pods cannot tolerate them (the `team-placement` admission policy).
CONTROL_PLANE_TAINT = "node-role.kubernetes.io/control-plane:NoSchedule"
STORAGE_TAINT = "ml-platform.io/ceph-storage=true:NoSchedule"
# On CPU nodes that are neither servers nor storage hosts: the only nodes the cpu ResourceFlavor (so every team
# workload Kueue admits on CPU nodes) selects (components/scheduling/tenancy.py).
TENANT_NODE_LABEL = "ml-platform.io/tenant-workloads"
CONFIG_DIR = "/etc/rancher/rke2"
TOKEN_FILE = f"{CONFIG_DIR}/join-token"
AGENT_TOKEN_FILE = f"{CONFIG_DIR}/agent-token"
OIDC_CA_FILE = f"{CONFIG_DIR}/oidc-ca.pem"
# libyaml's safe dumper where PyYAML has it (a 1000-node preview renders 1000 configs): the same text.
SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
# On the Node: which install of the node (RKE2 step) its labels and taints were applied for.
INSTALL_ANNOTATION = "ml-platform.io/rke2-install"


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
    """What the certificate watch's timer runs on each node (standalone: the shared helpers are not prepended);
    the RKE2 step's program carries it (`# include`)."""
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


def taint_key(taint: str) -> str:
    """The key of `key=value:Effect` or `key:Effect`."""
    return taint.rsplit(":", 1)[0].split("=", 1)[0]


def platform_host_taints(node: NodeSettings) -> list[str]:
    """The taints of a server or storage host (none on other nodes)."""
    return [*([CONTROL_PLANE_TAINT] if node.control_plane else []), *([STORAGE_TAINT] if node.storage_host else [])]


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
        if not cluster.bundled_ingress:
            # RKE2's "Disabling Server Charts" (docs.rke2.io/advanced): neither bundled ingress controller runs.
            config["disable"] = ["rke2-ingress-nginx", "rke2-traefik"]
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
        "OS_FAMILY": cluster.os_family,  # the certificate watch installs openssl with the host's package manager
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
    tenant = node.role == "cpu" and not node.control_plane and not node.storage_host
    # Not a registration label: the Node patch adds or removes it when a node's role changes, with no RKE2 restart.
    return {
        **node_labels(node),
        f"node-role.kubernetes.io/{node.role}": "true",
        **({TENANT_NODE_LABEL: "true"} if tenant else {}),
    }


def taint_object(taint: str) -> dict[str, str]:
    """`key=value:Effect` (RKE2's node-taint form) as a Node spec taint."""
    key_value, _, effect = taint.rpartition(":")
    key, _, value = key_value.partition("=")
    return {"key": key, "value": value, "effect": effect}
