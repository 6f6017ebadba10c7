"""`ml-platform:network`: the CNI, pod and service ranges, and the InfiniBand fabric."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, Field

from settings.declare import Claim, Uses, destroys_on_decrease, rebuilds_cluster, refused, replaces, restarts
from settings.types import HOSTNAME, IPv4Network, Model, Name, Version


class IpoibNetwork(Model):
    """A secondary IPoIB network (Multus) for pods that want an address on the IB fabric."""

    enabled: bool = False
    """Deploy the secondary IPoIB network (Multus, nv-ipam)."""
    name: Name = "ib-net"
    """Name of the IPoIBNetwork and its NetworkAttachmentDefinition."""
    namespace: Annotated[Name, Uses("namespace")] = "default"
    """Namespace of the NetworkAttachmentDefinition."""
    range: Annotated[IPv4Network, Claim("cidr", network="ipoib-pods")] = "192.168.200.0/24"
    """The pods' IPoIB addresses; must not hold host IB addresses (`nodes[].infiniband.address`)."""
    per_node_block_size: int = Field(default=64, ge=2, le=65536)
    """Addresses nv-ipam hands each GPU node from `range` (GPU nodes x block must fit in it)."""

    @property
    def claims_held(self) -> bool:
        """Only a deployed network holds its range and namespace."""
        return self.enabled

    CHANGES: ClassVar = {
        "enabled": destroys_on_decrease("off: the IPoIB network, Multus and nv-ipam go; pods lose it"),
        "name": replaces("the IPoIBNetwork and its NetworkAttachmentDefinition (pods name it in an annotation)"),
        "namespace": replaces("the NetworkAttachmentDefinition, in the other namespace"),
        "range": replaces("the pods' IPoIB pool: pods attached keep their old addresses until restarted"),
        "per_node_block_size": replaces("the nodes' IPoIB address blocks"),
    }


_CNIS = ("cilium", "calico")


def _cni(value: Any) -> Any:
    # Before the Literal check, so that a wrong value gets the whole story, not just the choices.
    if value not in _CNIS:
        raise ValueError(
            f"{value!r} is not allowed; use 'cilium' or 'calico'. Choose it before the cluster's first "
            "`pulumi up`: switching the CNI of a running cluster is unsupported upstream, and the CNI release "
            "is protected, so a preview that would switch it fails (docs/network-fabric.md)"
        )
    return value


def _rdma_resource(value: str) -> str:
    """An extended resource name, `<prefix>/<name>`."""
    prefix, _, name = value.partition("/")
    if not HOSTNAME.match(prefix) or not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", name):
        raise ValueError(
            f"{value!r} is not an extended resource name; give '<prefix>/<name>', e.g. 'rdma/ib' "
            "(the RDMA device plugin's resourcePrefix and resourceName)"
        )
    return value


class InfinibandSettings(Model):
    mode: Literal["datagram", "connected"] = "datagram"
    """IPoIB mode (ConnectX-4 and later run datagram only)."""
    mtu: int = Field(default=2044, ge=576, le=65520)
    """IPoIB MTU; at most 4092 in datagram mode, 65520 in connected mode."""
    host_stack: Literal["inbox", "ofed"] = "inbox"
    """`inbox`: the distribution's rdma-core. `ofed`: NVIDIA's DOCA-OFED driver container, managed by the Network
    Operator (no inbox packages on the host)."""
    doca_driver_version: Version = "doca3.4.1-26.04-1.1.0.0-1"
    """Tag of `nvcr.io/nvidia/mellanox/doca-driver` for `hostStack: ofed` (the Network Operator release's own,
    hack/release.yaml)."""
    rdma_resource_name: Annotated[str, AfterValidator(_rdma_resource)] = "rdma/ib"
    """The extended resource GPU pods request for RDMA, `<prefix>/<name>`."""
    ipoib_network: IpoibNetwork
    """An optional secondary IPoIB network for pods."""

    CHANGES: ClassVar = {
        "mode": restarts("the IPoIB interfaces (RDMA and IPoIB traffic drops)", "GPU nodes"),
        "mtu": restarts("the IPoIB interfaces", "GPU nodes"),
        "host_stack": restarts(
            "the InfiniBand driver stack (inbox <-> DOCA-OFED container: the links go down while it reloads)",
            "GPU nodes",
        ),
        "doca_driver_version": restarts("the DOCA-OFED driver (the links go down while it reloads)", "GPU nodes"),
        "rdma_resource_name": restarts(
            "the RDMA shared device plugin; pods requesting the old resource name no longer schedule", "GPU nodes"
        ),
    }


class NetworkSettings(Model):
    cni: Annotated[Literal["cilium", "calico"], BeforeValidator(_cni)] = "cilium"
    """The one Ethernet CNI. Choose it before the first `up`: switching it on a running cluster is unsupported and
    refused at preview (docs/network-fabric.md)."""
    cluster_cidr: Annotated[IPv4Network, Claim("cidr", network="pod")] = "10.42.0.0/16"
    """Pod network (RKE2 `cluster-cidr`, Cilium's cluster pool, Calico's IP pool); one /24 per node must fit; must not
    overlap the service network or hold host addresses."""
    service_cidr: Annotated[IPv4Network, Claim("cidr", network="service")] = "10.43.0.0/16"
    """Service network (RKE2 `service-cidr`)."""
    kube_proxy_replacement: bool = True
    """With Cilium: RKE2 `disable-kube-proxy` and Cilium's kube-proxy replacement; ignored with Calico."""
    infiniband: InfinibandSettings
    """The GPU nodes' InfiniBand fabric."""

    CHANGES: ClassVar = {
        "cni": refused("switching the CNI of a running cluster is unsupported; the CNI release is protected"),
        "cluster_cidr": rebuilds_cluster("fixed when the cluster is created (RKE2 cluster-cidr)", by="hosts"),
        "service_cidr": rebuilds_cluster("fixed when the cluster is created (RKE2 service-cidr)", by="hosts"),
        "kube_proxy_replacement": restarts("RKE2 (disable-kube-proxy) and the Cilium agents", "every node", by="hosts"),
    }
