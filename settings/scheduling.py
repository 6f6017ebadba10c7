"""`ml-platform:scheduling`: Kueue (quota and admission) and Volcano (gang placement)."""

from __future__ import annotations

from settings.types import Model, Name


class SchedulingSettings(Model):
    volcano_namespace: Name = "volcano-system"
    kueue_namespace: Name = "kueue-system"
