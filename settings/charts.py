"""`ml-platform:charts`: every Helm chart at a pinned version, each repository overridable for a mirror."""

from __future__ import annotations

from pydantic import Field

from settings.types import Model, Url, Version


class Chart(Model):
    """A Helm chart at a pinned version. `repository` may point at an internal mirror."""

    name: str = Field(min_length=1)
    version: Version
    repository: Url


class Charts(Model):
    cilium: Chart = Chart(name="cilium", version="1.19.6", repository="https://helm.cilium.io")
    tigera_operator: Chart = Chart(
        name="tigera-operator", version="v3.31.7", repository="https://docs.tigera.io/calico/charts"
    )
    network_operator: Chart = Chart(
        name="network-operator", version="26.4.1", repository="https://helm.ngc.nvidia.com/nvidia"
    )
    gpu_operator: Chart = Chart(name="gpu-operator", version="v26.7.0", repository="https://helm.ngc.nvidia.com/nvidia")
    local_static_provisioner: Chart = Chart(
        name="local-static-provisioner",
        version="2.9.0",
        repository="https://kubernetes-sigs.github.io/sig-storage-local-static-provisioner",
    )
    # Rook v1.19: its operator chart still sets the CSI node plugins' tolerations (csi.pluginTolerations);
    # v1.20 moved them to the separate ceph-csi-drivers chart (components/ceph_tier.py, README "Tier 2").
    rook_ceph: Chart = Chart(name="rook-ceph", version="v1.19.10", repository="https://charts.rook.io/release")
    rook_ceph_cluster: Chart = Chart(
        name="rook-ceph-cluster", version="v1.19.10", repository="https://charts.rook.io/release"
    )
    volcano: Chart = Chart(name="volcano", version="1.15.1", repository="https://volcano-sh.github.io/helm-charts")
    kueue: Chart = Chart(name="kueue", version="0.19.2", repository="oci://registry.k8s.io/kueue/charts")
    zabbix: Chart = Chart(name="zabbix", version="7.0.12", repository="https://zabbix-community.github.io/helm-zabbix")
