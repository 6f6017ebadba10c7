"""Alerts reach Slack and Mattermost: the real 7.0 server runs the preloaded webhooks, configured by
the platform's own objects (media type, user group, user, action per channel), against a local HTTP
receiver on loopback that answers like the Slack Web API and the Mattermost REST API. The only change
to what production sends is the API address (`mattermost_url`, and the Slack script's endpoint line)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from components.monitoring.api import DEFAULT_ADMIN, DEFAULT_PASSWORD, login
from components.monitoring.config import GPU_TEMPLATE, channel_specs, global_macros, media_type_spec, template_sources
from components.monitoring.kinds import IMPORT_RULES, KINDS, normalized
from settings import load
from settings.monitoring import HOST_GROUPS, Channel
from tests.conftest import stack_doc
from tests.monitoring.test_triggers import PROBLEM, push, trappable, wait_for
from tests.monitoring.test_triggers import dcgm as dcgm_sample
from tests.monitoring.zabbix70 import zabbix70

pytestmark = pytest.mark.real_server  # make test-fast leaves these out


class Receiver(ThreadingHTTPServer):
    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests: list[tuple[str, str, dict]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    def _reply(self, body: dict, status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.server.requests.append(("GET", self.path, {}))
        if "/channels/name/" in self.path:  # Mattermost: team/#channel -> channel id
            self._reply({"id": "mmchannel0000000000000000a", "name": self.path.rsplit("/", 1)[1]})
        else:
            self._reply({"id": "mmteam00000000000000000000"})

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(length).decode()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"raw": raw}
        self.server.requests.append(("POST", self.path, body | {"_auth": self.headers.get("Authorization", "")}))
        if self.path.endswith("/api/v4/posts"):
            self._reply({"id": "mmpost000000000000000000001", "channel_id": body.get("channel_id", "")}, 201)
        else:  # Slack chat.postMessage / chat.update
            self._reply({"ok": True, "channel": "C0123456789", "ts": "1700000000.000100"})

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_gpu_problem_reaches_slack_and_mattermost_with_the_documented_text(receiver):
    channels = [
        Channel(name="gpu-slack", type="slack", send_to="#gpu-alerts", min_severity="high"),
        Channel(name="gpu-mattermost", type="mattermost", send_to="ml-team/#gpu-alerts", min_severity="high"),
    ]
    tokens = {"slack": "xoxb-test-slack-token", "mattermost": "mattermost-test-token"}
    with zabbix70("alerts", with_server=True) as z:
        api = login(z.url, DEFAULT_ADMIN, DEFAULT_PASSWORD)
        api.configuration.import_(format="yaml", source=trappable(template_sources()["gpu-dcgm"][1]),
                                  rules=IMPORT_RULES)  # fmt: skip
        for macro, (value, _) in global_macros(load(stack_doc("prod")).monitoring, "https://zabbix.example").items():
            api.usermacro.createglobal(macro=macro, value=value)
        groups = {g: api.hostgroup.create(name=g)["groupids"][0] for g in HOST_GROUPS}
        group = groups["ml-platform/gpu-nodes"]
        for kind in ("slack", "mattermost"):
            spec = media_type_spec(kind, receiver.url)
            KINDS["MediaType"].create(api, normalized("MediaType", spec), {"bot_token": tokens[kind]})
        # The Slack webhook's script names its endpoint itself: point that one line at the receiver.
        slack = api.mediatype.get(filter={"name": "Slack"}, output=["mediatypeid", "script"])[0]
        endpoint = "this.slack_endpoint = 'https://slack.com/api/';"
        assert endpoint in slack["script"]
        script = slack["script"].replace(endpoint, f"this.slack_endpoint = '{receiver.url}/api/';")
        api.mediatype.update(mediatypeid=slack["mediatypeid"], script=script)
        for channel in channels:
            for kind, spec in zip(("UserGroup", "User", "Action"), channel_specs(channel), strict=True):
                KINDS[kind].create(api, normalized(kind, spec), {})
        template = api.template.get(filter={"host": GPU_TEMPLATE}, output=["templateid"])[0]["templateid"]
        hostid = api.host.create(host="gpu-07", groups=[{"groupid": group}], templates=[{"templateid": template}],
                                 macros=[{"macro": "{$GPU.COUNT.EXPECTED}", "value": "8"}])["hostids"][0]  # fmt: skip
        name = wait_for(api, hostid, "below the inventory", PROBLEM,
                        feed=lambda: push(api, "gpu-07", "dcgm.metrics", dcgm_sample(7)))  # fmt: skip
        assert name == "GPU count 7 below the inventory's 8"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            slack = [b for m, p, b in receiver.requests if m == "POST" and p.endswith("/api/chat.postMessage")]
            mattermost = [b for m, p, b in receiver.requests if m == "POST" and p.endswith("/api/v4/posts")]
            if slack and mattermost:
                break
            time.sleep(2)
        else:
            alerts = api.alert.get(output=["sendto", "status", "error"])
            raise AssertionError(f"requests: {receiver.requests}\nalerts: {alerts}")
    # What docs/monitoring.md shows: the problem's name in the message, to the channel the settings name.
    text = json.dumps(slack[0])
    assert slack[0]["channel"] == "#gpu-alerts" and slack[0]["_auth"] == "Bearer xoxb-test-slack-token"
    assert "Problem: GPU count 7 below the inventory's 8" in text and "gpu-07" in text
    post = mattermost[0]
    assert post["channel_id"] == "mmchannel0000000000000000a" and post["_auth"] == "Bearer mattermost-test-token"
    assert "Problem: GPU count 7 below the inventory's 8" in json.dumps(post) and "gpu-07" in json.dumps(post)
