"""`make screenshot` (second half): docs/img/zabbix-queues.png and docs/img/zabbix-team-queues.png, the
queue dashboards (the platform's page and team llm's page) as the real Zabbix 7.0 frontend draws them
in headless Chromium, with the test data of tests/monitoring/queue_dashboard_data.py on the real 7.0 server.
A missing prerequisite stops it with one line naming it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.monitoring.dashboard_screenshot import shoot
from tests.monitoring.queue_dashboard_data import build

ROOT = Path(__file__).resolve().parents[2]
OUT = {
    "queues": ROOT / "docs" / "img" / "zabbix-queues.png",
    "team_queues": ROOT / "docs" / "img" / "zabbix-team-queues.png",
}


def main() -> int:
    # The second dashboard is drawn once first: see `shoot`'s refold. The PNGs show the first page of each.
    return shoot("queue-screenshot", build, OUT, refold=frozenset({"team_queues"}))


if __name__ == "__main__":
    sys.exit(main())
