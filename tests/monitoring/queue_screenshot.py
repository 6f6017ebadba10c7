"""`make screenshot` (second half): docs/img/zabbix-queues.png and docs/img/zabbix-team-queues.png, the
queue dashboards (the platform's page and team llm's page) as the real Zabbix 7.0 frontend draws them
in headless Chromium, with the test data of tests/monitoring/queue_dashboard_data.py on the real 7.0 server.
A missing prerequisite stops it with one line naming it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from components.monitoring.kinds import normalized
from components.monitoring.objects import ZabbixObjectProvider
from tests.monitoring.dashboard_data import render
from tests.monitoring.queue_dashboard_data import build
from tests.monitoring.zabbix70 import zabbix70
from tests.prerequisites import require_chromium

ROOT = Path(__file__).resolve().parents[2]
OUT = {
    "queues": ROOT / "docs" / "img" / "zabbix-queues.png",
    "team_queues": ROOT / "docs" / "img" / "zabbix-team-queues.png",
}


def main() -> int:
    try:
        chromium = require_chromium()
        with zabbix70("queue-screenshot", with_server=True) as zabbix:
            platform = build(zabbix.url, zabbix.server_port)
            api = platform.api
            tokenid = api.token.create(name="screenshot", userid="1")["tokenids"][0]  # userid 1: Admin
            connection = {"url": zabbix.url, "token": api.token.generate(tokenid)[0]["token"], "ca": None}
            for which, png in OUT.items():
                spec = getattr(platform, which)
                props = {"kind": "Dashboard", "spec": normalized("Dashboard", spec), "connection": connection}
                created = ZabbixObjectProvider().create({**props, "secrets": {}})
                if which != "queues":
                    # render() clicks the time selector's tab to fold it; Zabbix keeps that state in the
                    # user's profile, so the second dashboard would open it again: one more click first.
                    render(chromium, platform.url, created.id)
                shown = render(chromium, platform.url, created.id, png)  # the first page: Queues, Team llm
                bad = [w["name"] for w in shown if w["errors"]]
                if bad:
                    print(f"widgets with errors in {png.name}: {bad}", file=sys.stderr)
                    return 1
                print(f"wrote {png.relative_to(ROOT)} ({len(shown)} widgets)")
    except pytest.fail.Exception as failure:  # the prerequisites' one-line message
        print(failure, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
