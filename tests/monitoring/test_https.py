"""The program talks to the Zabbix API over HTTPS only and verifies the certificate with the CA it is
given: the real 7.0 API behind a TLS endpoint on loopback (the web pod's role), certificates made
with the openssl CLI."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
from contextlib import contextmanager

import pytest

from components.monitoring.api import DEFAULT_ADMIN, DEFAULT_PASSWORD, connect, login
from components.monitoring.objects import BootstrapProvider
from tests.monitoring.agent2 import pipe
from tests.monitoring.zabbix70 import free_port, zabbix70

pytestmark = pytest.mark.real_server  # make test-fast leaves these out


def _openssl(*args: str) -> None:
    if not shutil.which("openssl"):
        pytest.fail("the openssl command is needed to make the test certificates (Debian package openssl)")
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(tmp_path, name: str):
    key, cert = tmp_path / f"{name}.key", tmp_path / f"{name}.crt"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
             "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert),
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")  # fmt: skip
    return key, cert


def make_server_cert(tmp_path, ca_key, ca_cert):
    key, csr, cert, ext = (tmp_path / n for n in ("server.key", "server.csr", "server.crt", "server.ext"))
    ext.write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", str(key), "-out", str(csr))  # fmt: skip
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
             "-days", "1", "-extfile", str(ext), "-out", str(cert))  # fmt: skip
    return key, cert


@contextmanager
def tls_front(backend_port: int, cert, key):
    """HTTPS on a free loopback port, passed on as plain HTTP to the API (what nginx does in the pod)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", free_port()))
    port = listener.getsockname()[1]

    def serve():
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(raw,), daemon=True).start()

    def handle(raw):
        try:
            conn = context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()  # the client refused our certificate
            return
        upstream = socket.create_connection(("127.0.0.1", backend_port))
        for a, b in ((conn, upstream), (upstream, conn)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield port
    finally:
        listener.close()


@pytest.fixture(scope="module")
def https_api(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls")
    ca_key, ca_cert = make_ca(tmp, "zabbix-web-ca")
    _, other_ca = make_ca(tmp, "some-other-ca")
    key, cert = make_server_cert(tmp, ca_key, ca_cert)
    with zabbix70("https") as z:
        backend = int(z.url.split(":")[2].split("/")[0])
        with tls_front(backend, cert, key) as port:
            yield f"https://127.0.0.1:{port}/api_jsonrpc.php", ca_cert.read_text(), other_ca.read_text()


def test_the_bootstrap_works_over_https_with_the_web_ca(https_api):
    url, ca, _ = https_api
    props = {"url": url, "ca": ca, "api_user": "ml-platform-api", "admin_password": "Adm1n-over-tls-passphrase",
             "api_password": "Ap1-over-tls-passphrase", "token": None, "userid": None, "wait_seconds": 30}  # fmt: skip
    created = BootstrapProvider().create(props)
    assert connect(url, created.outs["token"], ca).user.get(userids=[created.id], output=["username"])


@pytest.mark.parametrize("which", ["another CA", "the system trust store"])
def test_a_certificate_that_does_not_chain_to_the_given_ca_is_refused(https_api, which):
    url, _, other = https_api
    with pytest.raises(Exception) as err:
        login(url, DEFAULT_ADMIN, DEFAULT_PASSWORD, other if which == "another CA" else None)
    assert "CERTIFICATE_VERIFY_FAILED" in str(err.value) or "certificate verify failed" in str(err.value)
