"""`ml-platform:charts`: every Helm chart at a pinned version, each repository overridable for a mirror."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from settings.declare import none, rerender
from settings.types import ChartVersion, Model, Url


class Chart(Model):
    """A Helm chart at a pinned version. `repository` may point at an internal mirror."""

    name: str = Field(min_length=1)
    """The chart's name in its repository."""
    version: ChartVersion
    """The pinned chart version."""
    repository: Url
    """The Helm repository (`https://...`) or OCI registry path (`oci://...`); point it at an internal mirror for
    air-gapped sites."""

    CHANGES: ClassVar = {
        "name": rerender("the Helm release is upgraded to another chart (the review's rollouts name what restarts)"),
        "version": rerender("the Helm release is upgraded (the review's rollouts name what restarts)"),
        "repository": none("where the same chart and version are fetched from"),
    }


def _chart(name: str, version: str, repository: str) -> Chart:
    """A chart's default release."""
    return Chart(name=name, version=version, repository=repository)


class Charts(Model):
    cilium: Chart = _chart("cilium", "1.19.6", "https://helm.cilium.io")
    """Cilium, the CNI with `network.cni: cilium` (RKE2's Cilium line)."""
    tigera_operator: Chart = _chart("tigera-operator", "v3.31.7", "https://docs.tigera.io/calico/charts")
    """The tigera-operator, which installs Calico with `network.cni: calico`."""
    network_operator: Chart = _chart("network-operator", "26.4.1", "https://helm.ngc.nvidia.com/nvidia")
    """NVIDIA Network Operator (InfiniBand, RDMA device plugin, NFD); its version also tags the NicClusterPolicy's
    component images."""
    gpu_operator: Chart = _chart("gpu-operator", "v26.7.0", "https://helm.ngc.nvidia.com/nvidia")
    """NVIDIA GPU Operator on the GPU nodes."""
    local_static_provisioner: Chart = _chart(
        "local-static-provisioner", "2.9.0", "https://kubernetes-sigs.github.io/sig-storage-local-static-provisioner"
    )
    """The local static provisioner of tier 1 (local NVMe)."""
    # Rook v1.20: the operator chart installs the ceph-csi-operator (subchart); the CSI drivers, their
    # node plugins' tolerations and snapshot policy come from the separate ceph-csi-drivers chart.
    rook_ceph: Chart = _chart("rook-ceph", "v1.20.6", "https://charts.rook.io/release")
    """The Rook operator with the ceph-csi-operator (tier 2); a v1.20 release is required (docs/ceph-tier.md)."""
    # The version Rook v1.20.6 pins for its ceph-csi-operator subchart.
    ceph_csi_drivers: Chart = _chart("ceph-csi-drivers", "1.0.4", "https://ceph.github.io/ceph-csi-operator")
    """The Ceph-CSI Driver resources (RBD, CephFS) for Rook v1.20; the release of Rook's ceph-csi-operator subchart."""
    rook_ceph_cluster: Chart = _chart("rook-ceph-cluster", "v1.20.6", "https://charts.rook.io/release")
    """The Rook Ceph cluster, pools and storage classes (tier 2); the same release as `rookCeph`."""
    volcano: Chart = _chart("volcano", "1.15.1", "https://volcano-sh.github.io/helm-charts")
    """Volcano (gang scheduling)."""
    kueue: Chart = _chart("kueue", "0.19.2", "oci://registry.k8s.io/kueue/charts")
    """Kueue (quota and admission)."""
    # The training operators (`scheduling.trainingOperators`); installed only when enabled there. JobSet
    # 0.12.0 is the version Kueue 0.19.2 pins and the Trainer 2.3.0 chart's own subchart.
    jobset: Chart = _chart("jobset", "0.12.0", "oci://registry.k8s.io/jobset/charts")
    """JobSet (optional)."""
    kubeflow_trainer: Chart = _chart("kubeflow-trainer", "2.3.0", "oci://ghcr.io/kubeflow/charts")
    """Kubeflow Trainer v2, TrainJob (optional)."""
    kuberay_operator: Chart = _chart("kuberay-operator", "1.7.0", "https://ray-project.github.io/kuberay-helm/")
    """KubeRay operator (optional)."""
    zabbix: Chart = _chart("zabbix", "7.0.12", "https://zabbix-community.github.io/helm-zabbix")
    """Zabbix (monitoring)."""
    kube_state_metrics: Chart = _chart(
        "kube-state-metrics", "8.4.0", "https://prometheus-community.github.io/helm-charts"
    )
    """kube-state-metrics, read by Zabbix's "Kubernetes cluster state by HTTP" template (the zabbix chart does not
    bundle it)."""
