"""CephTier: tier 2, Rook-Ceph on the CPU nodes' disks; block (RBD) and shared (CephFS) storage classes.

Two halves:
- host: on every storage host, `ceph-osd-devices.sh` checks the devices settings list (Rook silently
  skips a device that holds partitions or a filesystem) and wipes only those marked `wipe: true`,
  never one that is already a Ceph OSD or in use;
- cluster: the Rook operator chart (`rook-ceph`, with the Ceph-CSI drivers) and the cluster chart
  (`rook-ceph-cluster`: CephCluster, one replicated block pool, one filesystem, both storage classes).

Placement is explicit: OSDs only on the storage hosts and only on their listed devices
(`useAllNodes`/`useAllDevices` off, or Rook would also take the GPU nodes' NVMe); MON, MGR, OSD and
MDS pods only on nodes labelled `ml-platform.io/ceph-storage=true` (set by ClusterBootstrap on exactly
those hosts); MONs and MGRs on distinct hosts.

Rook v1.20: the operator chart installs the ceph-csi-operator (subchart); the Ceph-CSI `Driver`
resources come from the separate `ceph-csi-drivers` chart, released here with Rook's recommended
values plus the GPU taint toleration on the node plugins (GPU pods mount tier 2) and RBD snapshots on
(`snapshotPolicy: volumeSnapshot`; the chart's default `none` silently drops the snapshotter).

Tier 2 is hard to delete by accident: the namespace is created by the program (privileged, kept on
delete), the three Rook releases are `protect`ed and replaced (so refused) on a name or namespace
change, and settings refuse to drop every storage host while `storage.ceph.deployed` is true.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import pulumi

from components.cluster.config import GPU_TAINT, STORAGE_TAINT
from components.common import Wiring
from components.helm import release
from settings import CephSettings, NodeSettings

STORAGE_LABEL = "ml-platform.io/ceph-storage"  # set by ClusterBootstrap on every node with osdDevices
OPERATOR_RELEASE = "rook-ceph"
CLUSTER_RELEASE = "rook-ceph-cluster"
CSI_DRIVERS_RELEASE = "ceph-csi-drivers"
# The image set ConfigMap Rook v1.20 writes from its `csi.*` image values (Rook's ceph-csi-drivers values).
CSI_IMAGE_SET = "rook-csi-operator-image-set-configmap"
NAMESPACE_REASON = (
    "Rook-Ceph: OSDs are privileged and use host devices, MONs and OSDs use host paths (and the host network "
    "with storage.ceph.network.provider host), the CSI node plugins mount volumes on every node"
)
# A change of release name or namespace would be a second CephCluster aimed at the same disks, or an
# uninstall of the first: a replacement, which `protect` refuses at preview time.
PROTECTED = pulumi.ResourceOptions(protect=True, replace_on_changes=["name", "namespace"])
# The RBD pool behind the block storage class. A fixed name: renaming the storage class in settings
# must not create a new, empty pool.
BLOCK_POOL = "tier2-rbd"
DATA_POOL = "data0"  # the CephFS data pool; the chart names it "<filesystem>-data0"
REPLICAS = 3
MIN_SIZE = 2
MGR_COUNT = 2
DATA_DIR = "/var/lib/rook"


@dataclass(frozen=True)
class CephTierArgs:
    ceph: CephSettings
    storage_hosts: list[NodeSettings]
    wiring: Wiring


class CephTier(pulumi.ComponentResource):
    storage_classes: dict[str, str]
    """`tier2Block` and `tier2Shared` -> StorageClass name (empty without storage hosts)."""
    namespace: str
    fault_tolerance: str
    disk_steps: dict[str, pulumi.Resource]

    def __init__(self, name: str, args: CephTierArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:storage:CephTier", name, None, opts)
        ceph, hosts, wiring = args.ceph, args.storage_hosts, args.wiring
        self.fault_tolerance = fault_tolerance(len(hosts), ceph.mon_count)
        self.disk_steps = {}
        if not hosts:
            # No node has osdDevices: this environment has no tier 2 (settings allow that).
            self.storage_classes, self.namespace = {}, ""
            self.storage_class_release: Optional[pulumi.Resource] = None
            self.ready: list[pulumi.Resource] = []
            self.register_outputs({"storageClasses": {}, "namespace": "", "faultTolerance": self.fault_tolerance})
            return

        self.namespace = ceph.namespace
        self.storage_classes = {"tier2Block": ceph.block_storage_class, "tier2Shared": ceph.shared_storage_class}

        # Host half: per storage host, in parallel, right after its preparation.
        for node in hosts:
            if wiring.host_steps.holds(node.name):
                self.disk_steps[node.name] = wiring.host_steps.script(
                    f"{node.name}-ceph-disks", node.name, "ceph-osd-devices.sh", disk_params(node), parent=self
                )
        if not wiring.scope.platform:  # a layered cluster or node-group stack: the host half only
            self.register_outputs({})
            return

        # Cluster half: the namespace, the operator (CRDs, ceph-csi-operator), the CSI drivers, then the
        # cluster once the disks are checked.
        namespace = wiring.in_cluster.namespace(
            f"{name}-namespace", ceph.namespace, "privileged", NAMESPACE_REASON, parent=self
        )
        operator = release(
            f"{name}-operator",
            wiring.charts.rook_ceph,
            release_name=OPERATOR_RELEASE,
            namespace=ceph.namespace,
            values=operator_values(),
            provider=wiring.in_cluster.provider,
            parent=self,
            depends_on=[*wiring.in_cluster.ready, namespace],
            opts=PROTECTED,
        )
        drivers = release(
            f"{name}-csi-drivers",
            wiring.charts.ceph_csi_drivers,
            release_name=CSI_DRIVERS_RELEASE,
            namespace=ceph.namespace,
            values=csi_drivers_values(ceph.namespace),
            provider=wiring.in_cluster.provider,
            parent=self,
            # The Driver CRD comes with the operator's ceph-csi-operator subchart.
            depends_on=[operator, namespace],
            opts=PROTECTED,
        )
        # The release that creates the tier-2 StorageClasses: what claims on them wait for.
        self.storage_class_release = release(
            f"{name}-cluster",
            wiring.charts.rook_ceph_cluster,
            release_name=CLUSTER_RELEASE,
            namespace=ceph.namespace,
            values=cluster_values(ceph, hosts),
            provider=wiring.in_cluster.provider,
            parent=self,
            depends_on=[operator, drivers, namespace, *self.disk_steps.values()],
            # MONs, MGRs and the OSD prepare jobs come up before the chart's toolbox is Ready.
            timeout_seconds=1800,
            opts=PROTECTED,
        )
        # The tier's cluster-wide releases (not the per-node disk steps): what checks of the tier wait for.
        self.ready = [operator, drivers, self.storage_class_release]
        self.register_outputs(
            {
                "storageClasses": self.storage_classes,
                "namespace": self.namespace,
                "faultTolerance": self.fault_tolerance,
            }
        )


# ---------------------------------------------------------------------------------------------
# Host half
# ---------------------------------------------------------------------------------------------


def disk_params(node: NodeSettings) -> dict[str, str]:
    """Parameters of `ceph-osd-devices.sh` for one storage host. Device paths are validated in
    settings (no spaces), so space-separated lists are unambiguous."""
    return {
        "NODE_NAME": node.name,
        "DEVICES": " ".join(d.device for d in node.osd_devices),
        "WIPE": " ".join(d.device for d in node.osd_devices if d.wipe),
    }


# ---------------------------------------------------------------------------------------------
# Cluster half: Helm values (every key checked against the pinned upstream values.yaml in tests/ceph/test_tier.py)
# ---------------------------------------------------------------------------------------------


def gpu_toleration() -> dict[str, str]:
    """The toleration for ClusterBootstrap's GPU taint (`key=value:effect`)."""
    key_value, effect = GPU_TAINT.rsplit(":", 1)
    key, value = key_value.split("=", 1)
    return {"key": key, "operator": "Equal", "value": value, "effect": effect}


def storage_toleration() -> dict[str, str]:
    """The toleration of the storage hosts' taint (ClusterBootstrap, with `scheduling.tenantNodesOnly`)."""
    key_value, effect = STORAGE_TAINT.rsplit(":", 1)
    key, value = key_value.split("=", 1)
    return {"key": key, "operator": "Equal", "value": value, "effect": effect}


def storage_affinity() -> dict[str, Any]:
    """Required node affinity: only the storage hosts (CPU nodes with osdDevices)."""
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": STORAGE_LABEL, "operator": "In", "values": ["true"]}]}]
        }
    }


def operator_values() -> dict[str, Any]:
    """Values of the `rook-ceph` operator chart (v1.20 line)."""
    return {
        "crds": {"enabled": True},
        # The ceph-csi-operator subchart: it reconciles the Driver resources of ceph-csi-drivers.
        "csi": {"installCsiOperator": True},
        "enableDiscoveryDaemon": False,  # devices are listed explicitly; nothing to discover
        "monitoring": {"enabled": False},  # no Prometheus Operator; Zabbix scrapes the mgr module
    }


def csi_drivers_values(namespace: str) -> dict[str, Any]:
    """Values of the `ceph-csi-drivers` chart: Rook's recommended values (rook v1.20.6
    deploy/charts/ceph-csi-drivers/values.yaml) for a Rook operator in `namespace`, plus placement
    and snapshots. The chart writes each driver's own `nodePlugin.tolerations` (default []) into its
    Driver resource, so the toleration is set per driver, not only in the defaults."""
    node_plugin = {"priorityClassName": "system-node-critical", "tolerations": [gpu_toleration()]}

    def driver(kind: str, snapshot_policy: str) -> dict[str, Any]:
        # Driver names must match the provisioner of Rook's storage classes: <operator namespace>.<kind>.csi.ceph.com
        return {
            "enabled": True,
            "name": f"{namespace}.{kind}.csi.ceph.com",
            # The chart's default for RBD is `none`: no csi-snapshotter, VolumeSnapshots never complete.
            "snapshotPolicy": snapshot_policy,
            "nodePlugin": node_plugin,
        }

    return {
        "operatorConfig": {
            "namespace": namespace,
            "driverSpecDefaults": {
                "imageSet": {"name": CSI_IMAGE_SET},
                "nodePlugin": node_plugin,
            },
        },
        "drivers": {
            "rbd": driver("rbd", "volumeSnapshot"),
            "cephfs": driver("cephfs", "volumeSnapshot"),
            "nfs": {"enabled": False},
            "nvmeof": {"enabled": False},
        },
    }


def split_image(image: str) -> tuple[str, str]:
    """`quay.io/ceph/ceph:v20.2.4` -> (`quay.io/ceph/ceph`, `v20.2.4`). Settings guarantee a tag."""
    repository, tag = image.rsplit(":", 1)
    return repository, tag


def replicated(**extra: Any) -> dict[str, Any]:
    """A replicated pool spec: 3 copies on 3 hosts; I/O needs 2 (min_size), size 1 refused."""
    return {
        "failureDomain": "host",
        "replicated": {"size": REPLICAS, "requireSafeReplicaSize": True},
        # Pool properties Rook applies with `ceph osd pool set` (values are strings).
        "parameters": {"min_size": str(MIN_SIZE)},
        **extra,
    }


def ceph_cluster_spec(ceph: CephSettings, storage_hosts: Sequence[NodeSettings]) -> dict[str, Any]:
    """`cephClusterSpec`: the chart renders it verbatim into the CephCluster's spec (merged over the
    chart's defaults), so it is checked against the CephCluster CRD."""
    return {
        "dataDirHostPath": DATA_DIR,
        "mon": {"count": ceph.mon_count, "allowMultiplePerNode": False},
        "mgr": {"count": MGR_COUNT, "allowMultiplePerNode": False},
        # Ceph-CSI keys the kernel clients on every node (kernels before 7.0) can use.
        "security": {"cephx": {"csi": {"keyType": "aes"}}},
        # Never destroy data on uninstall unless someone sets this by hand.
        "cleanupPolicy": {"confirmation": ""},
        # `all` applies to every Ceph daemon of the cluster: MON, MGR, OSD and its prepare jobs.
        "placement": {"all": {"nodeAffinity": storage_affinity(), "tolerations": [storage_toleration()]}},
        "storage": {
            "useAllNodes": False,
            "useAllDevices": False,
            # Node names are the Kubernetes node names (RKE2 node-name = settings name).
            "nodes": [
                {"name": node.name, "devices": [{"name": d.device} for d in node.osd_devices]} for node in storage_hosts
            ],
        },
        "disruptionManagement": {"managePodBudgets": True},
        # `host`: Ceph daemons on the nodes' network, off the CNI overlay (settings/storage.py says what
        # each choice costs). Rook's empty provider is the pod network.
        "network": {"provider": "host" if ceph.network.provider == "host" else ""},
    }


def cluster_values(ceph: CephSettings, storage_hosts: Sequence[NodeSettings]) -> dict[str, Any]:
    """Values of the `rook-ceph-cluster` chart: the cluster, one block pool, one filesystem."""
    ns = ceph.namespace
    repository, tag = split_image(ceph.ceph_image)
    return {
        "operatorNamespace": ns,
        "clusterName": ns,
        "cephImage": {"repository": repository, "tag": tag, "allowUnsupported": False},
        # The toolbox gives operators the `ceph` CLI: kubectl -n <ns> exec deploy/rook-ceph-tools -- ceph status
        "toolbox": {"enabled": True},
        # No Prometheus Operator here: no ServiceMonitor/PrometheusRule. The mgr's Prometheus module
        # (on unless cephClusterSpec.monitoring turns it off) serves the metrics Zabbix scrapes.
        "monitoring": {"enabled": False, "createPrometheusRules": False},
        "cephClusterSpec": ceph_cluster_spec(ceph, storage_hosts),
        "cephBlockPools": [
            {
                "name": BLOCK_POOL,
                "spec": replicated(),
                "storageClass": {
                    "enabled": True,
                    "name": ceph.block_storage_class,
                    # The cluster's default class: PVCs without a class get durable block storage.
                    "isDefault": True,
                    # Tier 2 holds datasets and durable checkpoints: deleting a PVC keeps the volume.
                    "reclaimPolicy": "Retain",
                    "allowVolumeExpansion": True,
                    "volumeBindingMode": "Immediate",
                    "parameters": _csi_secrets("rbd", ns)
                    | {"imageFormat": "2", "imageFeatures": "layering", "csi.storage.k8s.io/fstype": "ext4"},
                },
            }
        ],
        "cephFileSystems": [
            {
                "name": ceph.filesystem_name,
                "spec": {
                    "metadataPool": replicated(),
                    "dataPools": [replicated(name=DATA_POOL)],
                    "preserveFilesystemOnDelete": True,
                    "metadataServer": {
                        "activeCount": 1,
                        "activeStandby": True,
                        "placement": {"nodeAffinity": storage_affinity(), "tolerations": [storage_toleration()]},
                        "priorityClassName": "system-cluster-critical",
                    },
                },
                "storageClass": {
                    "enabled": True,
                    "name": ceph.shared_storage_class,
                    "isDefault": False,
                    "pool": DATA_POOL,
                    "reclaimPolicy": "Retain",
                    "allowVolumeExpansion": True,
                    "volumeBindingMode": "Immediate",
                    "parameters": _csi_secrets("cephfs", ns),
                },
            }
        ],
        # Not used: no object store (the chart's default would create an RGW).
        "cephObjectStores": [],
        # Snapshot classes for both drivers (RKE2 ships the snapshot CRDs and controller): backups
        # (Velero CSI data movement) take VolumeSnapshots of tier-2 volumes.
        "cephFileSystemVolumeSnapshotClass": {
            "enabled": True,
            "name": ceph.shared_storage_class,
            "isDefault": True,
            "deletionPolicy": "Delete",
        },
        "cephBlockPoolsVolumeSnapshotClass": {
            "enabled": True,
            "name": ceph.block_storage_class,
            "isDefault": True,
            "deletionPolicy": "Delete",
        },
    }


def _csi_secrets(driver: str, namespace: str) -> dict[str, str]:
    """The Ceph-CSI secret references a Rook storage class needs (Rook creates these secrets)."""
    prefix = "csi.storage.k8s.io"
    provisioner, node = f"rook-csi-{driver}-provisioner", f"rook-csi-{driver}-node"
    return {
        f"{prefix}/provisioner-secret-name": provisioner,
        f"{prefix}/provisioner-secret-namespace": namespace,
        f"{prefix}/controller-expand-secret-name": provisioner,
        f"{prefix}/controller-expand-secret-namespace": namespace,
        f"{prefix}/controller-publish-secret-name": provisioner,
        f"{prefix}/controller-publish-secret-namespace": namespace,
        f"{prefix}/node-stage-secret-name": node,
        f"{prefix}/node-stage-secret-namespace": namespace,
    }


# ---------------------------------------------------------------------------------------------
# What survives host losses (stack output `cephFaultTolerance`, docs/ceph-tier.md)
# ---------------------------------------------------------------------------------------------


def fault_tolerance(storage_hosts: int, mon_count: int) -> str:
    """A plain statement of what survives one and two storage host losses with these settings."""
    if storage_hosts == 0:
        return "No Ceph tier: no node in settings has osdDevices."
    mon_losses = (mon_count - 1) // 2
    lines = [
        f"Tier 2 keeps {REPLICAS} copies of every object on {REPLICAS} different hosts "
        f"(failure domain host, min_size {MIN_SIZE}) across {storage_hosts} storage hosts, with {mon_count} MONs.",
    ]
    if storage_hosts > REPLICAS:
        lines.append(
            "One storage host down: no data loss and I/O continues; Ceph re-creates the missing copies "
            "on the other hosts once the host's OSDs are marked out (10 minutes by default)."
        )
    else:
        lines.append(
            "One storage host down: no data loss and I/O continues on two copies; with only "
            f"{storage_hosts} hosts there is nowhere to re-create the third copy, so pools stay degraded "
            "until the host is back."
        )
    if storage_hosts >= REPLICAS + 2:
        two = (
            "pauses until Ceph has re-replicated them onto the remaining hosts (automatic, minutes to hours "
            "depending on the data); afterwards all three copies are restored"
        )
    elif storage_hosts == REPLICAS + 1:
        two = (
            "pauses until Ceph has re-replicated them to a second copy; pools then stay degraded (two copies) "
            "until a host is back"
        )
    else:
        two = "pauses until one of the hosts is back: with one host left there is nowhere to re-replicate to"
    lines.append(
        "Two storage hosts down at once: no data loss (every object keeps at least one copy), but "
        f"placement groups left with one copy fall below min_size {MIN_SIZE} and I/O to them {two}."
    )
    if mon_losses >= 2:
        lines.append(f"MON quorum survives the loss of {mon_losses} MON hosts.")
    else:
        both = (
            "every storage host runs a MON, so two lost hosts always take"
            if mon_count >= storage_hosts
            else "if both lost hosts run MONs they take"
        )
        lines.append(
            f"MON quorum survives the loss of {mon_losses} MON host; {both} quorum with them and all tier-2 "
            "I/O stops (no data loss) until one is back. 5 MONs (on at least 5 storage hosts) survive two."
        )
    lines.append("Three or more hosts down at once can lose data.")
    return " ".join(lines)
