"""`ml-platform:network`: the CNI, pod and service ranges, and the InfiniBand fabric."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field

from settings.types import HOSTNAME, IPv4Network, Model, Name, Version


class IpoibNetwork(Model):
    """A secondary IPoIB network (Multus) for pods that want an address on the IB fabric."""

    enabled: bool = False
    name: Name = "ib-net"
    namespace: Name = "default"
    range: IPv4Network = "192.168.200.0/24"
    # nv-ipam hands each GPU node a block of this many addresses from `range`.
    per_node_block_size: int = Field(default=64, ge=2, le=65536)


_CNIS = ("cilium", "calico")


def _cni(value: Any) -> Any:
    # Before the Literal check, so that a wrong value gets the whole story, not just the choices.
    if value not in _CNIS:
        raise ValueError(
            f"{value!r} is not allowed; use 'cilium' or 'calico'. Choose it before the cluster's first "
            "`pulumi up`: switching the CNI of a running cluster is unsupported upstream, and the CNI release "
            "is protected, so a preview that would switch it fails (README: Network fabric)"
        )
    return value


def _rdma_resource(value: str) -> str:
    prefix, _, name = value.partition("/")
    if not HOSTNAME.match(prefix) or not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", name):
        raise ValueError(
            f"{value!r} is not an extended resource name; give '<prefix>/<name>', e.g. 'rdma/ib' "
            "(the RDMA device plugin's resourcePrefix and resourceName)"
        )
    return value


class InfinibandSettings(Model):
    mode: Literal["datagram", "connected"] = "datagram"
    mtu: int = Field(default=2044, ge=576, le=65520)
    # `inbox`: the distribution's rdma-core. `ofed`: NVIDIA's DOCA-OFED driver container, managed
    # by the Network Operator.
    host_stack: Literal["inbox", "ofed"] = "inbox"
    # Tag of nvcr.io/nvidia/mellanox/doca-driver for host_stack `ofed` (the release's own, hack/release.yaml).
    doca_driver_version: Version = "doca3.4.1-26.04-1.1.0.0-1"
    rdma_resource_name: Annotated[str, AfterValidator(_rdma_resource)] = "rdma/ib"
    ipoib_network: IpoibNetwork = IpoibNetwork()


class NetworkSettings(Model):
    cni: Annotated[Literal["cilium", "calico"], BeforeValidator(_cni)] = "cilium"
    cluster_cidr: IPv4Network = "10.42.0.0/16"
    service_cidr: IPv4Network = "10.43.0.0/16"
    kube_proxy_replacement: bool = True
    infiniband: InfinibandSettings = InfinibandSettings()
