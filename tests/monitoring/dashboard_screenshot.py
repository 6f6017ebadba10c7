"""`make screenshot`: docs/img/zabbix-dashboard.png, the platform overview dashboard as the real
Zabbix 7.0 frontend draws it in headless Chromium, with test data on the real 7.0 server.

It starts the same throwaway Zabbix as the tests (tests/monitoring/start-zabbix-api.sh, as root; it
installs what it needs from Debian), builds the small platform of tests/monitoring/dashboard_data.py,
creates the dashboards through the program's own provider, and saves one PNG per dashboard.
A missing prerequisite stops it with one line naming it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from components.monitoring.kinds import normalized
from components.monitoring.objects import ZabbixObjectProvider
from tests.monitoring.dashboard_data import build, render
from tests.monitoring.zabbix70 import zabbix70
from tests.prerequisites import require_chromium

ROOT = Path(__file__).resolve().parents[2]
OUT = {"overview": ROOT / "docs" / "img" / "zabbix-dashboard.png", "teams": ROOT / "docs" / "img" / "zabbix-teams.png"}


def shoot(label: str, build, out: dict[str, Path], refold: frozenset[str] = frozenset()) -> int:
    """Start the throwaway Zabbix (`label`), build its platform with `build(url, server_port)`, create each
    dashboard `out` names (an attribute of the platform) through the program's provider and save its PNG.
    `refold`: dashboards drawn once before their PNG (render() clicks the time selector's tab to fold it;
    Zabbix keeps that state in the user's profile, so a later dashboard would open it again)."""
    try:
        chromium = require_chromium()
        with zabbix70(label, with_server=True) as zabbix:
            platform = build(zabbix.url, zabbix.server_port)
            api = platform.api
            tokenid = api.token.create(name="screenshot", userid="1")["tokenids"][0]  # userid 1: Admin
            connection = {"url": zabbix.url, "token": api.token.generate(tokenid)[0]["token"], "ca": None}
            for which, png in out.items():
                spec = getattr(platform, which)
                props = {"kind": "Dashboard", "spec": normalized("Dashboard", spec), "connection": connection}
                created = ZabbixObjectProvider().create({**props, "secrets": {}})
                if which in refold:
                    render(chromium, platform.url, created.id)
                shown = render(chromium, platform.url, created.id, png)
                bad = [w["name"] for w in shown if w["errors"]]
                if bad:
                    print(f"widgets with errors in {png.name}: {bad}", file=sys.stderr)
                    return 1
                print(f"wrote {png.relative_to(ROOT)} ({len(shown)} widgets)")
    except pytest.fail.Exception as failure:  # the prerequisites' one-line message
        print(failure, file=sys.stderr)
        return 1
    return 0


def main() -> int:
    return shoot("screenshot", build, OUT)


if __name__ == "__main__":
    sys.exit(main())
