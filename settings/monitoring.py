"""`ml-platform:monitoring`: Zabbix on the cluster and the NAS."""

from __future__ import annotations

from settings.types import Model, Name


class MonitoringSettings(Model):
    namespace: Name = "monitoring"
