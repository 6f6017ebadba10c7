"""Stand-in for `rke2 server` / `rke2 agent` (tests/hosts/standins.py): what the host steps observe of RKE2.

A server makes (init) or fetches (join, after checking the token's CA pin) the cluster CA, keeps etcd's
data directory, answers https on 9345 (/ping, /cacerts) and 6443 (/readyz, a node registry), writes the
admin kubeconfig; every node registers itself at the registration address with its join token, which
the init server checks against its token files, and gets a kubelet kubeconfig. The kubectl stand-in
talks to the registry. No container, no etcd, no Kubernetes.
"""

import hashlib
import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ETC = "/etc/rancher/rke2"
DATA = "/var/lib/rancher/rke2"
TLS = f"{DATA}/server/tls"
NODES = f"{DATA}/server/standin-nodes.json"
VERSION = "@VERSION@"
INSECURE = ssl._create_unverified_context()
LOCK = threading.Lock()


def config():
    values = {}
    for line in read(f"{ETC}/config.yaml").splitlines():
        if ":" in line and not line.startswith((" ", "-")):
            key, _, value = line.partition(":")
            values[key.strip()] = value.strip().strip("'\"")
    return values


def read(path):
    with open(path) as f:
        return f.read().strip()


def write(path, text, mode=0o600):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.chmod(path + ".tmp", mode)
    os.replace(path + ".tmp", path)


def fetch(url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET")
    with urllib.request.urlopen(request, context=INSECURE, timeout=10) as response:
        return response.read().decode()


def nodes():
    try:
        return json.loads(read(NODES))
    except (OSError, ValueError):
        return {}


def kubeconfig(server):
    return (
        f"apiVersion: v1\nclusters:\n- cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\n"
        "  name: default\ncontexts:\n- context:\n    cluster: default\n    user: default\n  name: default\n"
        "current-context: default\nkind: Config\nusers:\n- name: default\n  user:\n    token: stand-in\n"
    )


class Api(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, text):
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        if self.path == "/ping":
            return self.reply(200, "pong")
        if self.path == "/cacerts":
            return self.reply(200, open(f"{TLS}/server-ca.crt").read())
        if self.path == "/readyz":
            return self.reply(200, "ok")
        if self.path == "/v1/nodes":
            return self.reply(200, json.dumps(nodes()))
        self.reply(404, "not found")

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with LOCK:
            registry = nodes()
            if self.path == "/v1/register":
                token = body["token"]
                user, _, password = token.rpartition("::")[2].partition(":") if "::" in token else ("server", "", token)
                wanted = read(f"{ETC}/agent-token") if user == "node" else read(f"{ETC}/join-token").rpartition(":")[2]
                if password != wanted:
                    return self.reply(401, "token refused")
                registry[body["name"]] = {"version": VERSION, "unschedulable": False}
            elif self.path == "/v1/cordon" and body["name"] in registry:
                registry[body["name"]]["unschedulable"] = True
            elif self.path == "/v1/delete":
                registry.pop(body["name"], None)
            write(NODES, json.dumps(registry, sort_keys=True))
        self.reply(200, "ok")


def serve(port, cert, key):
    server = ThreadingHTTPServer(("0.0.0.0", port), Api)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def pinned_ca(registration, token):
    """The cluster CA from /cacerts, checked against the token's K10<sha256> pin as RKE2 checks it."""
    ca = fetch(f"{registration}/cacerts")
    if token.startswith("K10"):
        pin = token[3:].split("::", 1)[0]
        if hashlib.sha256(ca.encode()).hexdigest() != pin:
            sys.exit(f"the CA at {registration} does not match the token's pin {pin}")
    return ca


def main(mode):
    cfg = config()
    name = cfg["node-name"]
    token = read(cfg.get("token-file", f"{ETC}/join-token"))
    registration = cfg.get("server")
    os.makedirs(f"{DATA}/bin", exist_ok=True)
    subprocess.run(
        ["install", "-m", "0755", "/usr/local/share/rke2-standin/kubectl", f"{DATA}/bin/kubectl"], check=True
    )
    if mode == "server":
        os.makedirs(TLS, exist_ok=True)
        if registration:
            write(f"{TLS}/server-ca.crt", pinned_ca(registration, token), 0o644)
        elif not os.path.exists(f"{TLS}/server-ca.crt"):
            subprocess.run(
                [
                    "openssl",
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                    "-nodes",
                    "-days",
                    "3650",
                    "-subj",
                    "/CN=rke2-server-ca",
                    "-keyout",
                    f"{TLS}/server-ca.key",
                    "-out",
                    f"{TLS}/server-ca.crt",
                ],
                check=True,
                capture_output=True,
            )
        if not os.path.exists(f"{TLS}/serving.crt"):
            subprocess.run(
                [
                    "openssl",
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                    "-nodes",
                    "-days",
                    "3650",
                    "-subj",
                    f"/CN={name}",
                    "-keyout",
                    f"{TLS}/serving.key",
                    "-out",
                    f"{TLS}/serving.crt",
                ],
                check=True,
                capture_output=True,
            )
        os.makedirs(f"{DATA}/server/db/etcd", exist_ok=True)
        for port in (9345, 6443):
            serve(port, f"{TLS}/serving.crt", f"{TLS}/serving.key")
        write(f"{ETC}/rke2.yaml", kubeconfig("https://127.0.0.1:6443"))
    else:
        pinned_ca(registration, token)
    api = f"https://{registration.split('//')[1].rsplit(':', 1)[0]}:6443" if registration else "https://127.0.0.1:6443"
    for _ in range(60):
        try:
            fetch(f"{registration or 'https://127.0.0.1:9345'}/v1/register", {"name": name, "token": token})
            break
        except OSError as exc:
            print(f"registering {name}: {exc}", file=sys.stderr, flush=True)
            time.sleep(2)
    else:
        sys.exit("could not register")
    write(f"{DATA}/agent/kubelet.kubeconfig", kubeconfig(api))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main(sys.argv[1])
