"""`ml-platform:scheduling`: Kueue (quota and admission) and Volcano (gang placement)."""

from __future__ import annotations

from pydantic import Field

from settings.types import Model, Name


class SchedulingSettings(Model):
    volcano_namespace: Name = Field(default="volcano-system", description="Namespace of Volcano.")
    kueue_namespace: Name = Field(default="kueue-system", description="Namespace of Kueue.")
