"""ZabbixMonitoring: Zabbix server, web, database and agents on every node and NAS host.

Not built yet: the component registers itself and nothing else until its issue is done.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence  # noqa: F401
from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.remote import HostAccess
from settings import Charts, MonitoringSettings


@dataclass(frozen=True)
class ZabbixMonitoringArgs:
    monitoring: MonitoringSettings
    charts: Charts
    hosts: Mapping[str, HostAccess]
    provider: k8s.Provider
    cluster_ready: Sequence[pulumi.Resource]


class ZabbixMonitoring(pulumi.ComponentResource):
    def __init__(self, name: str, args: ZabbixMonitoringArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:monitoring:ZabbixMonitoring", name, None, opts)
        self.register_outputs({})
