"""The whole configuration of one environment, validated before anything is created.

This package is the only place that knows the shape of `Pulumi.<stack>.yaml`. Every key lives under
the `ml-platform:` namespace, one top-level key per area (`cluster`, `ssh`, `nodes`, ...), camelCase
in YAML and snake_case here; each area's models live in their own module. `load()` turns the raw
config into a frozen `Settings` object or raises `SettingsError` listing every problem, one per line,
each naming its path and the fix. Rules that relate several areas live in `settings.rules`; `settings.load`
runs the models and the rules together.
"""

from __future__ import annotations

from typing import ClassVar, Literal, Optional

import pulumi
from pydantic import Field

from settings.acceptance import AcceptanceSettings
from settings.charts import Charts
from settings.cluster import ClusterSettings, SshSettings
from settings.declare import destroys_on_decrease, none
from settings.gpu import GpuSettings
from settings.monitoring import MonitoringSettings
from settings.network import NetworkSettings
from settings.nodes import NasSettings, NodeSettings
from settings.scheduling import SchedulingSettings
from settings.storage import StorageSettings
from settings.types import Model

NAMESPACE = "ml-platform"

# Plain-config keys that people put secrets under, and the secret key that takes the value instead.
SECRET_LOOKALIKES = {
    "botToken": "zabbixSlackBotToken or zabbixMattermostBotToken",
    "webhookUrl": "zabbixSlackBotToken or zabbixMattermostBotToken (the media types take bot tokens)",
    "token": "zabbixSlackBotToken or zabbixMattermostBotToken",
    "psk": "zabbixAgentPsk",
    "password": "zabbixAdminPassword",
    "adminPassword": "zabbixAdminPassword",
}


class SettingsError(pulumi.RunError):
    """Invalid settings: every problem, one per line. Raised before any resource is registered."""

    def __init__(self, problems: list[str], shown: Optional[list[str]] = None):
        """`problems`: one per line, path first; `shown`: what is printed (list items named, notes)."""
        self.problems = problems
        self.shown = shown or problems
        super().__init__("invalid settings:\n" + "\n".join(f"  {p}" for p in shown or problems))


class Settings(Model):
    cluster: ClusterSettings
    """RKE2 and the API endpoint."""
    ssh: SshSettings
    """How every node and NAS host is reached."""
    nodes: list[NodeSettings] = Field(min_length=1)
    """The cluster's machines, one entry per node."""
    nas: NasSettings
    """The NAS hosts outside the cluster (tier 3)."""
    network: NetworkSettings
    """The CNI, pod and service ranges, and the InfiniBand fabric."""
    gpu: GpuSettings
    """The GPU Operator, time-slicing, and tier-1 local NVMe."""
    storage: StorageSettings
    """Tier 2 (Ceph) and tier 3 (MinIO)."""
    scheduling: SchedulingSettings
    """Kueue (quota, admission) and Volcano (gang placement)."""
    monitoring: MonitoringSettings
    """Zabbix."""
    charts: Charts
    """Every Helm chart at a pinned version, each repository overridable for a mirror."""
    acceptance: AcceptanceSettings
    """The acceptance checks every `up` ends with, and the drift probe."""
    layout: Literal["single", "layered"] = "single"
    """`single`: one stack and a plain `pulumi up` (small and mid-size sites). `layered`: `<env>-cluster`, one
    `<env>-nodes-<group>` per node group (in parallel), then `<env>-platform`, run by `python -m stacks.orchestrate`
    (docs/cluster.md, Running a fleet)."""

    CHANGES: ClassVar = {
        "nodes": destroys_on_decrease(
            "a node taken off the list is cordoned, drained and deleted and RKE2 is uninstalled from it (its etcd "
            "member too, for a server); its tier-1 local volumes are lost",
            by="hosts",
        ),
        "layout": none(
            "which stack holds each resource; switching a deployed environment moves state first "
            "(`python -m stacks.orchestrate migrate`, docs/runbook.md)"
        ),
    }

    @property
    def node_groups(self) -> dict[str, list[NodeSettings]]:
        """Group name -> its nodes (inventory order), groups in name order."""
        groups: dict[str, list[NodeSettings]] = {}
        for node in self.nodes:
            groups.setdefault(node.group_name, []).append(node)
        return dict(sorted(groups.items()))

    @property
    def servers(self) -> list[NodeSettings]:
        return [n for n in self.nodes if n.control_plane]

    @property
    def init_server(self) -> NodeSettings:
        """The server that initialises the cluster (and whose kubeconfig the program reads)."""
        return next(n for n in self.nodes if n.name == self.cluster.init_server)

    @property
    def gpu_nodes(self) -> list[NodeSettings]:
        return [n for n in self.nodes if n.role == "gpu"]

    @property
    def cpu_nodes(self) -> list[NodeSettings]:
        return [n for n in self.nodes if n.role == "cpu"]

    @property
    def storage_hosts(self) -> list[NodeSettings]:
        return [n for n in self.nodes if n.storage_host]
