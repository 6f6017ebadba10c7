"""`ml-platform:monitoring`: Zabbix on the cluster and the NAS."""

from __future__ import annotations

from pydantic import Field

from settings.types import Model, Name


class MonitoringSettings(Model):
    namespace: Name = Field(default="monitoring", description="Namespace of Zabbix.")
