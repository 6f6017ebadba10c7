"""SchedulingStack: Volcano (gang scheduling) and Kueue (team queues, fair sharing, preemption).

Not built yet: the component registers itself and nothing else until its issue is done.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence  # noqa: F401
from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from settings import Charts, SchedulingSettings


@dataclass(frozen=True)
class SchedulingStackArgs:
    scheduling: SchedulingSettings
    charts: Charts
    provider: k8s.Provider
    cluster_ready: Sequence[pulumi.Resource]


class SchedulingStack(pulumi.ComponentResource):
    def __init__(self, name: str, args: SchedulingStackArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:scheduling:SchedulingStack", name, None, opts)
        self.register_outputs({})
