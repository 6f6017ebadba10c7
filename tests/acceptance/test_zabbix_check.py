"""The monitoring check (zabbix.sh) against the real Zabbix 7.0, API and server, behind HTTPS with a
certificate from a CA of the test's own (as the program's CA signs the web pod's), run with the tools its
image carries: curl and BusyBox. Agent data comes in through the server's trapper; the check's token is a
read-only API user's, allowed item.get alone."""

from __future__ import annotations

import time

import pytest

from components.monitoring import kinds
from components.monitoring import objects as zbx
from components.monitoring.api import DEFAULT_ADMIN, DEFAULT_PASSWORD, login
from components.monitoring.reader import READER, ApiTokenProvider, reader_specs
from tests.acceptance.busybox import result_line, run_check
from tests.monitoring.test_https import make_ca, make_server_cert, tls_front
from tests.monitoring.zabbix70 import trapper_request, zabbix70
from tests.prerequisites import require_debian_package

pytestmark = pytest.mark.real_server  # make test-fast leaves these out

HOSTS = ("gpu-01", "nas-01", "cpu-04")  # cpu-04: its agent never reports
ADMIN, API = "Adm1n-acceptance-passphrase-3", "Api-acceptance-passphrase-5"


@pytest.fixture(scope="module")
def zabbix(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("zabbix-tls")
    ca_key, ca_cert = make_ca(tmp, "ml-platform-zabbix-web-ca")
    _, other_ca = make_ca(tmp, "another-ca")
    key, cert = make_server_cert(tmp, ca_key, ca_cert)
    with zabbix70("acceptance", with_server=True) as z:
        api = login(z.url, DEFAULT_ADMIN, DEFAULT_PASSWORD)
        group = api.hostgroup.create(name="acceptance")["groupids"][0]
        elsewhere = api.hostgroup.create(name="elsewhere")["groupids"][0]  # the reader has no right there
        api.host.create(host="hidden", groups=[{"groupid": elsewhere}])
        for host in HOSTS:
            hostid = api.host.create(host=host, groups=[{"groupid": group}])["hostids"][0]
            # A trapper item with the agent's key: the test sends what an agent would.
            api.item.create(hostid=hostid, name="ping", key_="agent.ping", type=2, value_type=3)
        token = make_reader(z.url, ["acceptance"])
        api = login(z.url, DEFAULT_ADMIN, ADMIN)  # the bootstrap set the Admin password
        backend = int(z.url.split(":")[2].split("/")[0])
        with tls_front(backend, cert, key) as port:
            yield {
                "url": f"https://127.0.0.1:{port}",
                "api": api,
                "server_port": z.server_port,
                "token": token,
                "ca": ca_cert,
                "other_ca": other_ca,
            }


def make_reader(url: str, host_groups: list[str]) -> str:
    """The read-only API user as the program makes it (components/monitoring/reader.py), through the same dynamic
    providers and with the program's own API user (the bootstrap), not by hand: its token."""
    bootstrap = zbx.BootstrapProvider().create(
        {"url": url, "api_user": "ml-platform-api", "admin_password": ADMIN, "api_password": API, "wait_seconds": 30}
    )
    connection = {"url": url, "token": bootstrap.outs["token"]}
    objects = zbx.ZabbixObjectProvider()
    for kind, spec in zip(("UserRole", "UserGroup", "User"), reader_specs(host_groups), strict=True):
        props = {"kind": kind, "spec": kinds.normalized(kind, spec), "connection": connection, "secrets": {}}
        created = objects.create(props)
        # Read back as declared: a refresh and the next `up` see no change.
        assert objects.read(created.id, created.outs).outs["spec"] == props["spec"], kind
    made = ApiTokenProvider().create({"username": READER, "name": READER, "connection": connection, "token": None})
    assert ApiTokenProvider().read(made.id, made.outs).id == made.id
    return made.outs["token"]


def report_ping(zabbix, *hosts: str) -> None:
    """agent.ping from `hosts`, through the trapper; sent again until the server's configuration cache knows
    the new items and the history syncer stored the values."""
    deadline = time.time() + 180
    while time.time() < deadline:
        rows = [{"host": host, "key": "agent.ping", "value": "1", "clock": int(time.time())} for host in hosts]
        reply = trapper_request(zabbix["server_port"], {"request": "sender data", "data": rows})
        assert reply.get("response") == "success", reply
        time.sleep(2)
        items = zabbix["api"].item.get(host=hosts[-1], filter={"key_": "agent.ping"}, output=["lastclock"])
        if items and int(items[0]["lastclock"]) > time.time() - 60:
            return
    pytest.fail(f"the Zabbix server did not store agent.ping of {hosts} within 180 s")


def monitoring_check(tmp_path, zabbix, hosts: str, ca=None, token=None, **env):
    curl = require_debian_package("the monitoring check (its image carries curl)", "/usr/bin/curl", "curl")
    (tmp_path / "token").write_text(token or zabbix["token"])
    return run_check(
        "zabbix.sh",
        tmp_path,
        tools={"curl": curl},
        CHECK="monitoring",
        ZABBIX_URL=zabbix["url"],
        HOSTS=hosts,
        MAX_AGE="600",
        TOKEN_FILE=str(tmp_path / "token"),
        CA_FILE=str(ca or zabbix["ca"]),
        **env,
    )


def test_the_check_passes_against_a_healthy_server_with_a_read_only_token(tmp_path, zabbix):
    report_ping(zabbix, "gpu-01", "nas-01")
    proc = monitoring_check(tmp_path, zabbix, "gpu-01 nas-01")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = result_line(proc)
    assert result["status"] == "passed" and 0 <= int(result["value"]) < 600, result


def test_the_check_fails_naming_the_stale_host(tmp_path, zabbix):
    report_ping(zabbix, "gpu-01", "nas-01")
    proc = monitoring_check(tmp_path, zabbix, "gpu-01 nas-01 cpu-04")
    assert proc.returncode == 1
    assert "acceptance check monitoring failed on cpu-04: no agent.ping in the last 600s from: cpu-04" in proc.stderr
    assert result_line(proc)["node"] == "cpu-04"
    unknown = monitoring_check(tmp_path, zabbix, "gpu-01 cpu-99")  # not in Zabbix at all
    assert unknown.returncode == 1 and "failed on cpu-99" in unknown.stderr


def test_without_a_host_list_the_check_takes_every_host_the_reader_may_read(tmp_path, zabbix):
    """The Job names no host (a node added changes its group's host set, not the check): the check asks Zabbix for
    the monitored hosts its token may read, here the three of the group `acceptance` and not `hidden`."""
    report_ping(zabbix, "gpu-01", "nas-01")
    proc = monitoring_check(tmp_path, zabbix, "")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no agent.ping in the last 600s from: cpu-04" in proc.stderr and "hidden" not in proc.stderr
    report_ping(zabbix, "gpu-01", "nas-01", "cpu-04")
    proc = monitoring_check(tmp_path, zabbix, "")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result_line(proc)["status"] == "passed"


def test_the_check_verifies_the_certificate_and_reports_api_errors_with_its_result_line(tmp_path, zabbix):
    # The certificate chains to the program's CA only: curl refuses it with another CA, and the check ends
    # with its result line (not lost in a command substitution).
    other = monitoring_check(tmp_path, zabbix, "gpu-01", ca=zabbix["other_ca"])
    assert other.returncode == 1 and result_line(other)["status"] == "failed"
    assert f"the Zabbix API at {zabbix['url']} did not answer: curl: (60)" in other.stderr
    # A token Zabbix does not know: the API's error is the result.
    refused = monitoring_check(tmp_path, zabbix, "gpu-01", token="0" * 64)
    assert refused.returncode == 1 and "the Zabbix API refused item.get" in refused.stderr
    assert result_line(refused)["status"] == "failed"
    # Advisory: reported, and the Job succeeds.
    advisory = monitoring_check(tmp_path, zabbix, "gpu-01", ca=zabbix["other_ca"], ADVISORY="true")
    assert advisory.returncode == 0 and result_line(advisory)["advisory"] is True


def test_the_read_only_token_reads_what_the_check_needs_and_cannot_change_zabbix(zabbix):
    # What the check holds: the read methods on the host groups it was given, nothing else.
    from zabbix_utils import ZabbixAPI
    from zabbix_utils.exceptions import APIRequestError

    api = ZabbixAPI(url=zabbix["url"] + "/api_jsonrpc.php", token=zabbix["token"], validate_certs=False)
    [host] = api.host.get(filter={"host": "gpu-01"}, output=["hostid"])
    assert api.item.get(hostids=[host["hostid"]], output=["itemid"])
    api.problem.get(output=["eventid"])  # allowed (none yet)
    api.trigger.get(output=["triggerid"])
    with pytest.raises(APIRequestError):
        api.host.update(hostid=host["hostid"], status=1)  # a write: refused by the role's allow list
    with pytest.raises(APIRequestError):
        api.host.create(host="intruder", groups=[{"groupid": "1"}])
    with pytest.raises(APIRequestError):
        api.user.get(output=["username"])  # not in the allow list either
    # Read permission on the given host groups only.
    assert api.host.get(filter={"host": "hidden"}, output=["hostid"]) == []
    assert zabbix["api"].host.get(filter={"host": "gpu-01"}, output=["status"])[0]["status"] == "0"  # unchanged
