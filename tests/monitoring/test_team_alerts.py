"""A team's channel (`monitoring.alerting.channels[].teams`) gets its own idle GPUs and queues, and no
other team's: the real 7.0 server runs the platform's action (event-tag conditions) and the preloaded
Slack webhook against the loopback receiver of tests/monitoring/test_alerts.py."""

from __future__ import annotations

import json
import time

import pytest

from components.monitoring.api import DEFAULT_ADMIN, DEFAULT_PASSWORD, login
from components.monitoring.config import GPU_TEMPLATE, channel_specs, global_macros, media_type_spec, template_sources
from components.monitoring.kinds import IMPORT_RULES, KINDS, normalized
from settings import load
from settings.monitoring import HOST_GROUPS, Channel
from tests.conftest import stack_doc
from tests.monitoring import kueue_samples as s
from tests.monitoring.test_alerts import receiver  # noqa: F401 (the fixture)
from tests.monitoring.test_triggers import PROBLEM, push, trappable, wait_for
from tests.monitoring.zabbix70 import zabbix70

pytestmark = pytest.mark.real_server


def test_an_idle_gpu_reaches_its_teams_channel_only(receiver):  # noqa: F811
    settings = load(stack_doc("prod"))
    teams = settings.scheduling.teams
    channels = [
        Channel(name="llm-team", type="slack", send_to="#llm", min_severity="information", teams=["llm"]),
        Channel(name="vision-team", type="slack", send_to="#vision", min_severity="information", teams=["vision"]),
    ]
    with zabbix70("team-alerts", with_server=True) as z:
        api = login(z.url, DEFAULT_ADMIN, DEFAULT_PASSWORD)
        api.configuration.import_(
            format="yaml", source=trappable(template_sources()["gpu-dcgm"][1]), rules=IMPORT_RULES
        )
        for macro, (value, _) in global_macros(settings.monitoring, "https://zabbix.example", teams).items():
            api.usermacro.createglobal(macro=macro, value=value)
        groups = {g: api.hostgroup.create(name=g)["groupids"][0] for g in HOST_GROUPS}
        KINDS["MediaType"].create(api, normalized("MediaType", media_type_spec("slack", None)), {"bot_token": "xoxb-t"})
        slack = api.mediatype.get(filter={"name": "Slack"}, output=["mediatypeid", "script"])[0]
        script = slack["script"].replace(
            "this.slack_endpoint = 'https://slack.com/api/';", f"this.slack_endpoint = '{receiver.url}/api/';"
        )
        api.mediatype.update(mediatypeid=slack["mediatypeid"], script=script)
        for channel in channels:
            for kind, spec in zip(("UserGroup", "User", "Action"), channel_specs(channel, teams), strict=True):
                id_ = KINDS[kind].create(api, normalized(kind, spec), {})
                if kind == "Action":  # the tag conditions read back as declared (no drift on refresh)
                    assert KINDS[kind].read(api, id_) == normalized(kind, spec)
        template = api.template.get(filter={"host": GPU_TEMPLATE}, output=["templateid"])[0]["templateid"]
        hostid = api.host.create(
            host="gpu-03",
            groups=[{"groupid": groups["ml-platform/gpu-nodes"]}],
            templates=[{"templateid": template}],
            macros=[{"macro": "{$GPU.IDLE.PERIOD}", "value": "1m"}, {"macro": "{$GPU.COUNT.EXPECTED}", "value": "1"}],
        )["hostids"][0]
        idle = s.dcgm_pods({0: 0}, {0: ("vision", "resnet-3")}, {0: 0.0})
        deadline = time.monotonic() + 120
        while not api.item.get(hostids=[hostid], search={"key_": "dcgm.pod.activity"}, output=["itemid"]):
            assert time.monotonic() < deadline, "the pod's GPU was not discovered"
            push(api, "gpu-03", "dcgm.metrics", idle)
            time.sleep(2)
        now = int(time.time())
        for ago in (110, 90, 70):
            push(api, "gpu-03", "dcgm.metrics", idle, clock=now - ago)
        fired = wait_for(api, hostid, "resnet-3", PROBLEM, feed=lambda: push(api, "gpu-03", "dcgm.metrics", idle))
        assert fired == "Team vision, queue vision/default: pod resnet-3 on gpu-03 holds 1 GPUs, idle (under 5% for 1m)"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            posts = [b for m, p, b in receiver.requests if m == "POST" and p.endswith("/api/chat.postMessage")]
            if posts:
                break
            time.sleep(2)
        time.sleep(10)  # room for a wrong second message to arrive
        posts = [b for m, p, b in receiver.requests if m == "POST" and p.endswith("/api/chat.postMessage")]
    assert [p["channel"] for p in posts] == ["#vision"], posts
    assert "Team vision, queue vision/default: pod resnet-3 on gpu-03" in json.dumps(posts[0])
