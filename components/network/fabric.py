"""NetworkFabric: the Ethernet CNI (Cilium or Calico) and InfiniBand for GPU pods.

Ethernet carries everything Kubernetes does; InfiniBand exists only on GPU nodes and stays outside
Kubernetes networking: GPU pods use it directly (RDMA for NCCL), through the NVIDIA Network
Operator's RDMA shared device plugin and, when enabled, a secondary IPoIB network (Multus).

Resources:
- `<name>-cni`: exactly one CNI release, waiting for the cluster. Cilium (kube-system) fits RKE2
  started with `cni: none`: cluster-pool IPAM over `network.clusterCidr`, kube-proxy replacement as
  `network.kubeProxyReplacement` says (RKE2's `disable-kube-proxy` follows the same setting), agents
  tolerating every taint. With `network.cni: calico` the same resource is the tigera-operator release,
  whose chart renders the `Installation` (VXLAN pool over the cluster CIDR). The release is protected
  and replaced when its name or namespace changes, so a settings change that would switch the CNI of
  a running cluster (unsupported upstream) fails at preview instead of tearing pod networking down.
- `<node>-infiniband` on every GPU node (after its prepare step): RDMA user space, the IPoIB
  interface (address, MTU, mode) persisted, the port state reported.
- `<name>-network-operator` (after the CNI, in its own privileged namespace, docs/hardening.md) and its
  custom resources: the `NicClusterPolicy` (RDMA shared device plugin on GPU nodes only; DOCA-OFED
  driver with `hostStack: ofed`; Multus, IPoIB CNI and nv-ipam when the IPoIB network is enabled),
  then the pinned nv-ipam `IPPool` CRD, the `IPPool` and the `IPoIBNetwork`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.cluster.config import API_PORT, GPU_TAINT, ROLE_LABEL
from components.common import Wiring
from components.helm import release
from components.network.team_ipoib import team_networks
from settings import Charts, ClusterSettings, InfinibandSettings, NetworkSettings, NodeSettings
from settings.scheduling import Team

NETWORK_OPERATOR_NAMESPACE = "nvidia-network-operator"
# The operator reconciles only the NicClusterPolicy of this name.
NIC_CLUSTER_POLICY_NAME = "nic-cluster-policy"
# Where the NicClusterPolicy component images live (network-operator hack/release.yaml).
MELLANOX_REPOSITORY = "nvcr.io/nvidia/mellanox"
# How many pods on one node may share the RDMA device (the plugin's rdmaHcaMax).
RDMA_HCA_MAX = 63
# Per-node pod range that RKE2's kube-controller-manager and Cilium's cluster-pool IPAM both use.
NODE_POD_CIDR_MASK = 24
# The nv-ipam IPPool CRD of the nv-ipam build Network Operator v26.4.1 deploys (vendored unmodified from
# Mellanox/nvidia-k8s-ipam tag network-operator-v26.4.1, deploy/crds/). Bump it with charts.networkOperator.
NV_IPAM_RELEASE = "network-operator-v26.4.1"
IPPOOL_CRD_FILE = (
    Path(__file__).resolve().parent / "crds" / "nvidia-k8s-ipam" / NV_IPAM_RELEASE / "nv-ipam.nvidia.com_ippools.yaml"
)
NETWORK_OPERATOR_NAMESPACE_REASON = (
    "Network Operator: NFD workers read host PCI data, the DOCA-OFED driver container loads kernel modules, the "
    "RDMA device plugin, Multus, IPoIB CNI and nv-ipam write to host CNI directories and devices"
)
TIGERA_NAMESPACE_REASON = (
    "tigera-operator runs on the host network before pod networking exists (RKE2's CIS profile exempts it too)"
)


@dataclass(frozen=True)
class NetworkFabricArgs:
    network: NetworkSettings
    cluster: ClusterSettings
    gpu_nodes: list[NodeSettings]
    wiring: Wiring
    # Teams with an IPoIB range of their own (`scheduling.teams[].ipoibRange`): a pool each, a network per namespace.
    teams: Sequence[Team] = ()


class NetworkFabric(pulumi.ComponentResource):
    """The CNI, InfiniBand on the GPU nodes, and the Network Operator that hands RDMA to GPU pods."""

    ready: list[pulumi.Resource]
    """What in-cluster components wait for: the CNI release (pods get networking)."""
    cni: str
    rdma_resource_name: str
    """The extended resource GPU pods request for RDMA; "" when there are no GPU nodes."""
    ib_network_name: str
    """The Multus reference `<namespace>/<name>` of the IPoIB network; "" when it is not enabled."""
    infiniband_hosts: dict[str, pulumi.Resource]

    def __init__(self, name: str, args: NetworkFabricArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:network:NetworkFabric", name, None, opts)
        wiring = args.wiring
        network, ib = args.network, args.network.infiniband
        ipoib_enabled = ib.ipoib_network.enabled and bool(args.gpu_nodes)

        # Cilium goes to kube-system (RKE2's own, exempt from the CIS profile's `restricted`). A layered
        # environment's cluster stack holds it (its platform stack runs once the nodes are Ready).
        self.cni = network.cni
        cni_release = self._cni(name, args, ipoib_enabled) if wiring.scope.cluster_base else None
        self.ready = [cni_release] if cni_release is not None else []

        self.infiniband_hosts = {
            node.name: wiring.host_steps.script(
                f"{node.name}-infiniband",
                node.name,
                "infiniband-host.sh",
                infiniband_params(node, args.cluster, ib),
                parent=self,
            )
            for node in args.gpu_nodes
            if wiring.host_steps.holds(node.name)
        }

        self.rdma_resource_name = ib.rdma_resource_name if args.gpu_nodes else ""
        self.ib_network_name = f"{ib.ipoib_network.namespace}/{ib.ipoib_network.name}" if ipoib_enabled else ""
        if args.gpu_nodes and wiring.scope.platform:
            self._network_operator(name, args, cni_release, ipoib_enabled)

        self.register_outputs(
            {"cni": self.cni, "rdmaResourceName": self.rdma_resource_name, "ibNetworkName": self.ib_network_name}
        )

    def _cni(self, name: str, args: NetworkFabricArgs, ipoib_enabled: bool) -> pulumi.Resource:
        wiring, network = args.wiring, args.network
        cni_chart, cni_release_name, cni_namespace, cni_values = (
            (wiring.charts.cilium, "cilium", "kube-system", cilium_values(network, args.cluster, ipoib_enabled))
            if network.cni == "cilium"
            else (
                wiring.charts.tigera_operator,
                "tigera-operator",
                "tigera-operator",
                calico_values(network, args.cluster),
            )
        )
        cni_waits = list(wiring.in_cluster.ready)
        if network.cni == "calico":
            cni_waits.append(
                wiring.in_cluster.namespace(
                    f"{name}-cni-namespace", cni_namespace, "privileged", TIGERA_NAMESPACE_REASON, parent=self
                )
            )
        cni_release = release(
            f"{name}-cni",
            cni_chart,
            release_name=cni_release_name,
            namespace=cni_namespace,
            values=cni_values,
            provider=wiring.in_cluster.provider,
            parent=self,
            depends_on=cni_waits,
            # Switching the CNI changes the release name and namespace: a replacement, which the
            # protection refuses at preview time. Removing it needs `pulumi state unprotect` first.
            opts=pulumi.ResourceOptions(protect=True, replace_on_changes=["name", "namespace"]),
        )
        return cni_release

    def _network_operator(
        self, name: str, args: NetworkFabricArgs, cni_release: Optional[pulumi.Resource], ipoib_enabled: bool
    ) -> None:
        wiring = args.wiring
        ib = args.network.infiniband
        namespace = wiring.in_cluster.namespace(
            f"{name}-network-operator-namespace",
            NETWORK_OPERATOR_NAMESPACE,
            "privileged",
            NETWORK_OPERATOR_NAMESPACE_REASON,
            parent=self,
        )
        operator = release(
            f"{name}-network-operator",
            wiring.charts.network_operator,
            release_name="network-operator",
            namespace=NETWORK_OPERATOR_NAMESPACE,
            values=network_operator_values(),
            provider=wiring.in_cluster.provider,
            parent=self,
            depends_on=[*wiring.in_cluster.ready, *([cni_release] if cni_release else []), namespace],
        )
        policy = k8s.apiextensions.CustomResource(
            f"{name}-nic-cluster-policy",
            api_version="mellanox.com/v1alpha1",
            kind="NicClusterPolicy",
            metadata={"name": NIC_CLUSTER_POLICY_NAME},
            spec=nic_cluster_policy_spec(ib, wiring.charts, args.gpu_nodes, ipoib_enabled),
            opts=pulumi.ResourceOptions(parent=self, provider=wiring.in_cluster.provider, depends_on=[operator]),
        )
        if not ipoib_enabled:
            return
        # The IPPool CRD is not in the chart: the operator applies it only once it reconciles the policy's
        # nvIpam, so an IPPool created right after the policy can meet no CRD. Apply the pinned CRD first.
        crd = ip_pool_crd(
            f"{name}-ippool-crd", wiring.in_cluster.provider, self, depends_on=list(wiring.in_cluster.ready)
        )
        pool = k8s.apiextensions.CustomResource(
            f"{name}-ipoib-pool",
            api_version="nv-ipam.nvidia.com/v1alpha1",
            kind="IPPool",
            metadata={"name": ib.ipoib_network.name, "namespace": NETWORK_OPERATOR_NAMESPACE},
            spec=ip_pool_spec(ib),
            opts=pulumi.ResourceOptions(
                parent=self, provider=wiring.in_cluster.provider, depends_on=[operator, policy, crd]
            ),
        )
        k8s.apiextensions.CustomResource(
            f"{name}-ipoib-network",
            api_version="mellanox.com/v1alpha1",
            kind="IPoIBNetwork",
            metadata={"name": ib.ipoib_network.name},
            spec=ipoib_network_spec(ib, args.gpu_nodes),
            opts=pulumi.ResourceOptions(
                parent=self, provider=wiring.in_cluster.provider, depends_on=[operator, policy, pool]
            ),
        )
        # One pool per team and one network per team namespace (components/network/team_ipoib.py).
        team_networks(name, self, args.teams, ib, args.gpu_nodes, wiring.in_cluster.provider, [operator, policy, crd])


def ip_pool_crd(
    resource_name: str, provider: k8s.Provider, parent: pulumi.Resource, depends_on: Sequence[pulumi.Resource]
) -> k8s.apiextensions.v1.CustomResourceDefinition:
    """The vendored nv-ipam IPPool CRD. The operator later applies the same CRD (same pinned release), so
    server-side apply sees equal values and no conflict. Retained on delete: deleting a CRD deletes every
    IPPool in the cluster, and the operator still serves nv-ipam."""
    crd = next(d for d in yaml.safe_load_all(IPPOOL_CRD_FILE.read_text()) if d)
    return k8s.apiextensions.v1.CustomResourceDefinition(
        resource_name,
        metadata={"name": crd["metadata"]["name"], "annotations": crd["metadata"].get("annotations", {})},
        spec=crd["spec"],
        opts=pulumi.ResourceOptions(
            parent=parent, provider=provider, depends_on=list(depends_on), retain_on_delete=True
        ),
    )


# ---------------------------------------------------------------------------------------------
# Values and specs (plain functions: the tests check every key against the pinned upstream files)
# ---------------------------------------------------------------------------------------------


def gpu_toleration() -> dict[str, str]:
    """Tolerates the GPU taint that ClusterBootstrap puts on GPU nodes (any value)."""
    key = GPU_TAINT.split("=", 1)[0]
    effect = GPU_TAINT.rsplit(":", 1)[1]
    return {"key": key, "operator": "Exists", "effect": effect}


def gpu_node_selector_terms() -> list[dict[str, Any]]:
    return [{"matchExpressions": [{"key": ROLE_LABEL, "operator": "In", "values": ["gpu"]}]}]


CILIUM_AGENT_REQUESTS = {"cpu": "100m", "memory": "512Mi"}


def cilium_values(network: NetworkSettings, cluster: ClusterSettings, multus: bool) -> dict[str, Any]:
    """Cilium on RKE2 started with `cni: none`."""
    values: dict[str, Any] = {
        "ipam": {
            "mode": "cluster-pool",
            "operator": {
                "clusterPoolIPv4PodCIDRList": [network.cluster_cidr],
                "clusterPoolIPv4MaskSize": NODE_POD_CIDR_MASK,
            },
        },
        "kubeProxyReplacement": network.kube_proxy_replacement,
        # The agent runs on every node, GPU and storage nodes included, whatever their taints.
        "tolerations": [{"operator": "Exists"}],
        "envoy": {"tolerations": [{"operator": "Exists"}], "resources": {"requests": CILIUM_AGENT_REQUESTS}},
        # A changed configuration takes effect: the pods roll when their ConfigMap changes.
        "rollOutCiliumPods": True,
        "operator": {"rollOutPods": True, "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
        # Requests only (no limits: a throttled or OOM-killed CNI agent takes its node's pods down with it);
        # the chart's commented examples (values.yaml `resources`, `operator.resources`).
        "resources": {"requests": CILIUM_AGENT_REQUESTS},
        "initResources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
        # Multus (IPoIB network) writes its own CNI configuration in front of Cilium's; an exclusive
        # Cilium would rename it away.
        "cni": {"exclusive": not multus},
    }
    if network.kube_proxy_replacement:
        # Without kube-proxy nothing serves the `kubernetes` Service until Cilium does: the agents
        # reach the API server directly.
        values["k8sServiceHost"] = cluster.api_endpoint
        values["k8sServicePort"] = API_PORT
    return values


def calico_values(network: NetworkSettings, cluster: ClusterSettings) -> dict[str, Any]:
    """tigera-operator; the chart renders `installation` (minus `enabled`) as the Installation spec."""
    return {
        "installation": {
            "enabled": True,
            "cni": {"type": "Calico"},
            "calicoNetwork": {
                "bgp": "Disabled",
                "ipPools": [
                    {
                        "name": "default-ipv4-ippool",
                        "cidr": network.cluster_cidr,
                        "encapsulation": "VXLAN",
                        "natOutgoing": "Enabled",
                        "nodeSelector": "all()",
                        "blockSize": 26,
                    }
                ],
            },
        },
        # The operator and calico-node talk to the API server directly, not through a Service that
        # needs a working pod network first.
        "kubernetesServiceEndpoint": {"host": cluster.api_endpoint, "port": str(API_PORT)},
    }


def network_operator_values() -> dict[str, Any]:
    """The Network Operator with its NFD (which labels Mellanox NICs and GPUs); NFD workers run on GPU nodes."""
    return {
        "nfd": {"enabled": True, "deployNodeFeatureRules": True},
        "node-feature-discovery": {
            "worker": {
                "tolerations": [
                    {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
                    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
                    gpu_toleration(),
                ]
            }
        },
        "sriovNetworkOperator": {"enabled": False},
        "maintenanceOperator": {"enabled": False},
    }


def rdma_device_plugin_config(ib: InfinibandSettings, gpu_nodes: Sequence[NodeSettings]) -> str:
    """k8s-rdma-shared-dev-plugin configuration: one shared resource over the GPU nodes' IB interfaces."""
    prefix, resource = ib.rdma_resource_name.split("/", 1)
    interfaces = sorted({n.infiniband.interface for n in gpu_nodes if n.infiniband})
    config = {
        "configList": [
            {
                "resourceName": resource,
                "resourcePrefix": prefix,
                "rdmaHcaMax": RDMA_HCA_MAX,
                "selectors": {"ifNames": interfaces},
            }
        ]
    }
    return json.dumps(config, sort_keys=True)


def _component(image: str, version: str) -> dict[str, Any]:
    return {"image": image, "repository": MELLANOX_REPOSITORY, "version": version}


def nic_cluster_policy_spec(
    ib: InfinibandSettings, charts: Charts, gpu_nodes: Sequence[NodeSettings], ipoib_enabled: bool
) -> dict[str, Any]:
    """Every DaemonSet of the policy runs on GPU nodes only and tolerates their taint."""
    tag = f"network-operator-v{charts.network_operator.version}"
    spec: dict[str, Any] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": gpu_node_selector_terms()}
        },
        "tolerations": [gpu_toleration()],
        "rdmaSharedDevicePlugin": {
            **_component("k8s-rdma-shared-dev-plugin", tag),
            "config": rdma_device_plugin_config(ib, gpu_nodes),
        },
    }
    if ib.host_stack == "ofed":
        spec["ofedDriver"] = {
            **_component("doca-driver", ib.doca_driver_version),
            # A new driver version rolls over the GPU nodes one at a time, each drained first (training
            # pods use emptyDir for /dev/shm, so the drain may delete emptyDir data).
            "upgradePolicy": {
                "autoUpgrade": True,
                "maxParallelUpgrades": 1,
                "drain": {"enable": True, "force": False, "deleteEmptyDir": True, "timeoutSeconds": 900},
            },
        }
    if ipoib_enabled:
        spec["secondaryNetwork"] = {
            "multus": _component("multus-cni", tag),
            "cniPlugins": _component("plugins", tag),
            "ipoib": _component("ipoib-cni", tag),
        }
        # nv-ipam: cluster-wide allocation (per-node blocks); its webhook would need cert-manager.
        spec["nvIpam"] = {**_component("nvidia-k8s-ipam", tag), "enableWebhook": False}
    return spec


def ip_pool_spec(ib: InfinibandSettings) -> dict[str, Any]:
    """nv-ipam pool for the IPoIB network: per-node blocks of the range, GPU nodes only, no gateway."""
    return {
        "subnet": ib.ipoib_network.range,
        "perNodeBlockSize": ib.ipoib_network.per_node_block_size,
        "nodeSelector": {"nodeSelectorTerms": gpu_node_selector_terms()},
    }


def ipoib_network_spec(ib: InfinibandSettings, gpu_nodes: Sequence[NodeSettings]) -> dict[str, Any]:
    """The IPoIB secondary network; settings guarantee one IB interface name on every GPU node."""
    master = next(n.infiniband.interface for n in gpu_nodes if n.infiniband)
    return {
        "networkNamespace": ib.ipoib_network.namespace,
        "master": master,
        "ipam": json.dumps({"type": "nv-ipam", "poolName": ib.ipoib_network.name}, sort_keys=True),
    }


def infiniband_params(node: NodeSettings, cluster: ClusterSettings, ib: InfinibandSettings) -> dict[str, str]:
    """Parameters of `infiniband-host.sh` for one GPU node."""
    if node.infiniband is None:  # settings require it on GPU nodes
        raise ValueError(f"GPU node {node.name} has no infiniband settings")
    return {
        "NODE_NAME": node.name,
        "OS_FAMILY": cluster.os_family,
        "HOST_STACK": ib.host_stack,
        "IB_INTERFACE": node.infiniband.interface,
        "IB_ADDRESS": node.infiniband.address,
        "IB_PREFIX": str(node.infiniband.prefix_length),
        "IB_MTU": str(ib.mtu),
        "IB_MODE": ib.mode,
        # NetworkManager keyfiles carry a UUID; a fixed one per node keeps re-runs unchanged.
        "NM_UUID": str(uuid.uuid5(uuid.NAMESPACE_URL, f"ml-platform:{node.name}:infiniband")),
    }
