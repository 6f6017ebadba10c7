"""A cron schedule's real intervals, computed with cronsim (cuu508/cronsim, pinned in requirements.txt) rather than
read off its fields: `0 0 29 2 *` is valid cron and runs once in four years.

The settings' schedules are five-field cron (`settings.types.cron` refuses the rest); cronsim evaluates them as
Vixie cron and robfig/cron (Kubernetes CronJob, RKE2) do, day-of-month and day-of-week OR-ed when both are set.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta

from cronsim import CronSim

# A leap year's start, so that a February 29 schedule is seen; four years ahead covers its next run.
_START = datetime(2028, 1, 1)
_HORIZON = timedelta(days=4 * 366 + 1)
_MAX_RUNS = 20_000


@dataclass(frozen=True)
class Intervals:
    """The shortest and longest time between two runs."""

    shortest: timedelta
    longest: timedelta

    @staticmethod
    def text(delta: timedelta) -> str:
        seconds = delta.total_seconds()
        if seconds < 2 * 3600:
            return f"{seconds / 60:g} minutes"
        if seconds < 2 * 86400:
            return f"{seconds / 3600:g} hours"
        return f"{seconds / 86400:.4g} days"


@functools.cache
def intervals(expression: str) -> Intervals:
    """The shortest and longest gap between runs of `expression` over four years (at most 20,000 runs: a schedule
    that runs more often repeats within them)."""
    runs = CronSim(expression, _START)
    previous = next(runs)
    shortest, longest = timedelta.max, timedelta(0)
    for _ in range(_MAX_RUNS):
        current = next(runs)
        gap = current - previous
        shortest, longest = min(shortest, gap), max(longest, gap)
        previous = current
        if current - _START > _HORIZON:
            break
    return Intervals(shortest, longest)
