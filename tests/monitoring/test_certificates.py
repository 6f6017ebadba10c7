"""Certificate expiry through the real agent 2 and the real 7.0 server: the DaemonSet's agent reads
the certificate a TLS endpoint serves (web.certificate.get), the expiry trigger fires for one that
expires within `thresholds.certificateExpiryDays` and resolves when a renewed one is served. The
intervals are host macros of 5-10 s here (1 h shipped)."""

from __future__ import annotations

import json
import secrets
import socket
import ssl
import threading

import pytest

from components.monitoring.api import DEFAULT_ADMIN, DEFAULT_PASSWORD, login
from tests.cluster.test_rke2_certificate_dates import certificate, dates
from tests.conftest import stack_doc
from tests.monitoring.agent2 import _in_netns, run_agent2
from tests.monitoring.test_agent2 import (
    daemonset_agent,
    host_with_template,
    node_names,
    planned_agent_hosts,
    server_names,
)
from tests.monitoring.test_https import _openssl, make_ca
from tests.monitoring.test_infiniband import _value, _wait
from tests.monitoring.test_triggers import OK, PROBLEM, triggers
from tests.monitoring.zabbix70 import zabbix70
from tests.rendering import agent_host_mounts

pytestmark = pytest.mark.real_server  # make test-fast leaves these out

PORT = 10250  # the kubelet's, as the node's {$CERT.ENDPOINTS} names it


def server_cert(tmp_path, ca_key, ca_cert, days: int, name: str, address: str = "127.0.0.1"):
    key, csr, cert, ext = (tmp_path / f"{name}.{n}" for n in ("key", "csr", "crt", "ext"))
    ext.write_text(f"subjectAltName=IP:{address}\nextendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=kubelet",
             "-keyout", str(key), "-out", str(csr))  # fmt: skip
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
             "-days", str(days), "-extfile", str(ext), "-out", str(cert))  # fmt: skip
    return cert, key


def serve_tls(netns: str, address: str, port: int, state: dict) -> socket.socket:
    """A TLS endpoint on `address`:`port` inside the agent's network namespace; `state["context"]`
    is the certificate it serves (swapped to renew)."""
    listener = _in_netns(netns, lambda: socket.create_server((address, port)))

    def run():
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            try:
                with state["context"].wrap_socket(raw, server_side=True) as conn:
                    conn.recv(1)
            except (ssl.SSLError, OSError):
                pass

    threading.Thread(target=run, daemon=True).start()
    return listener


def cert_endpoints(plan, host: str) -> str:
    spec = next(h for h in planned_agent_hosts(plan) if h["host"] == host)
    return next(m["value"] for m in spec["macros"] if m["macro"] == "{$CERT.ENDPOINTS}")


@pytest.mark.parametrize("served", ["kubelet", "web UI"])
def test_a_certificate_close_to_expiry_alerts_and_a_renewed_one_resolves(prod_plan, tmp_path, served):
    """kubelet: a CPU node's kubelet port on loopback. web UI: the first control-plane node with the
    endpoints the program gives it, the Zabbix web UI's (API endpoint, NodePort) serving."""
    if served == "kubelet":
        node, address, port = node_names(prod_plan, "cpu")[0], "127.0.0.1", PORT
        endpoints = f"127.0.0.1:{PORT}"
    else:
        doc = stack_doc("prod")
        node = next(n["name"] for n in doc["nodes"] if n.get("controlPlane"))
        endpoints = cert_endpoints(prod_plan, node)
        address, port = doc["cluster"]["apiEndpoint"], doc["monitoring"]["web"]["nodePort"]
        assert f"{address}:{port}" in endpoints.split(",")
    ca_key, ca_cert = make_ca(tmp_path, "rke2-ca")
    contexts = {}
    for days, name in ((5, "expiring"), (300, "renewed")):
        cert, key = server_cert(tmp_path, ca_key, ca_cert, days, name, address)
        contexts[name] = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        contexts[name].load_cert_chain(cert, key)
    state = {"context": contexts["expiring"]}
    psk = secrets.token_hex(32)
    config, run = daemonset_agent(prod_plan, node, psk)
    with zabbix70("agent2-certs", with_server=True) as z:
        api = login(z.url, DEFAULT_ADMIN, DEFAULT_PASSWORD)
        macros = {"{$CERT.ENDPOINTS}": endpoints, "{$CERT.INTERVAL}": "5s", "{$CERT.LLD.INTERVAL}": "10s"}
        hostid = host_with_template(api, node, psk, "certificates", macros)
        forwards = {("127.0.0.1", 10051): ("127.0.0.1", z.server_port)}
        hosts = {name: "127.0.0.1" for name in server_names(config)}
        with run_agent2(
            config, run["files"], groups=run["groups"], hosts=hosts, forwards=forwards, addresses=(address,)
        ) as agent:
            listener = serve_tls(agent.netns, address, port, state)
            try:
                name = f"Certificate of {address}:{port} expires"
                _wait(lambda: _value(api, hostid, name) == PROBLEM, 180, lambda: (triggers(api, hostid), agent.log()))
                state["context"] = contexts["renewed"]
                _wait(lambda: _value(api, hostid, name) == OK, 120, lambda: triggers(api, hostid))
            finally:
                listener.close()


def test_rke2_certificate_files_alert_through_the_root_timers_dates(prod_plan, tmp_path):
    """RKE2's certificate files (0600, root) on a node's host root: the DaemonSet's agent cannot read
    them (shown), the root timer's script writes their dates where it can, and the template alerts on
    one close to expiry, resolves when RKE2 renewed it, marks a file that is no certificate, and alerts
    when the dates stop being refreshed."""
    node = node_names(prod_plan, "cpu")[0]
    psk = secrets.token_hex(32)
    config, run = daemonset_agent(prod_plan, node, psk)
    kubelet = "/var/lib/rancher/rke2/agent/client-kubelet.crt"
    # Where the chart mounts the host's / in the agent's container (hostRootFsMount), rendered by Helm.
    (mount,) = [path for path, on_host in agent_host_mounts("prod").items() if on_host == "/"]
    with zabbix70("agent2-rke2-certs", with_server=True) as z:
        api = login(z.url, DEFAULT_ADMIN, DEFAULT_PASSWORD)
        hostid = host_with_template(api, node, psk, "rke2-certificates", {"{$RKE2.CERTS.INTERVAL}": "5s"})
        # What the agent gets when it reads a certificate file itself.
        api.item.create(hostid=hostid, name="direct read", key_=f"vfs.file.contents[{mount}{kubelet}]", type=7,
                        value_type=4, delay="5s")  # fmt: skip
        forwards = {("127.0.0.1", 10051): ("127.0.0.1", z.server_port)}
        hosts = {name: "127.0.0.1" for name in server_names(config)}
        with run_agent2(config, run["files"], groups=run["groups"], hosts=hosts, forwards=forwards) as agent:
            host_root = agent.root / mount.lstrip("/")
            certificate(host_root / kubelet.lstrip("/"), 5, "system:node")
            certificate(host_root / "var/lib/rancher/rke2/server/tls/client-admin.crt", 300, "system:admin")
            (host_root / "var/lib/rancher/rke2/agent/broken.crt").write_text("not a certificate\n")
            assert dates(host_root).returncode == 0

            def item(key: str) -> dict:
                rows = api.item.get(hostids=[hostid], filter={"key_": key}, output=["state", "error", "lastclock"])
                return rows[0] if rows else {}

            def explain():
                return triggers(api, hostid), agent.log()

            expiring = f"RKE2 certificate {kubelet} expires"
            _wait(lambda: _value(api, hostid, expiring) == PROBLEM, 180, explain)
            assert _value(api, hostid, "RKE2 certificate /var/lib/rancher/rke2/server/tls/client-admin.crt") == OK
            direct = item(f"vfs.file.contents[{mount}{kubelet}]")
            assert direct["state"] == "1" and "permission denied" in direct["error"], direct
            broken = "ml.rke2.cert.not_after[/var/lib/rancher/rke2/agent/broken.crt]"
            _wait(lambda: item(broken).get("state") == "1", 60, lambda: item(broken))
            assert "not a readable certificate" in item(broken)["error"]

            certificate(host_root / kubelet.lstrip("/"), 365, "system:node")  # RKE2 renewed it at a restart
            assert dates(host_root).returncode == 0
            _wait(lambda: _value(api, hostid, expiring) == OK, 120, explain)

            # The timer stopped a day ago: the dates are stale, then fresh again.
            listing = host_root / "var/lib/ml-platform/rke2-certificates.json"
            stale = json.loads(listing.read_text())
            listing.write_text(json.dumps({**stale, "written": stale["written"] - 86400}))
            _wait(lambda: _value(api, hostid, "RKE2 certificate dates not refreshed") == PROBLEM, 120, explain)
            assert dates(host_root).returncode == 0
            _wait(lambda: _value(api, hostid, "RKE2 certificate dates not refreshed") == OK, 120, explain)

            # With the period at 20 s (3h shipped) and the timer running (every look writes the dates):
            # the file that is no certificate alerts, then resolves once it is one; no certificate files
            # at all alerts, then resolves when they are back.
            api.host.update(hostid=hostid, macros=[{"macro": "{$RKE2.CERTS.INTERVAL}", "value": "5s"},
                                                   {"macro": "{$RKE2.CERTS.MAX.AGE}", "value": "20s"}])  # fmt: skip

            def fed(name: str, value: str):
                return lambda: dates(host_root).returncode == 0 and _value(api, hostid, name) == value

            unreadable = "RKE2 certificate /var/lib/rancher/rke2/agent/broken.crt not readable for 20s"
            _wait(fed(unreadable, PROBLEM), 120, explain)
            certificate(host_root / "var/lib/rancher/rke2/agent/broken.crt", 365, "fixed")
            _wait(fed(unreadable, OK), 120, explain)
            rke2 = host_root / "var/lib/rancher/rke2"
            rke2.rename(host_root / "var/lib/rancher/elsewhere")
            _wait(fed("No RKE2 certificate files found", PROBLEM), 120, explain)
            (host_root / "var/lib/rancher/elsewhere").rename(rke2)
            _wait(fed("No RKE2 certificate files found", OK), 120, explain)
            assert _value(api, hostid, "RKE2 certificate dates not refreshed") == OK
            assert agent.alive()
