"""Least-privilege, CA-pinned joins: servers hold the server token and an agent
token (`agent-token-file`); agents receive only `K10<CA sha256>::node:<agent token>`; joining
servers `K10<CA sha256>::server:<server token>`. On the plan and on stub hosts."""

from __future__ import annotations

import hashlib
import subprocess

import pytest
import yaml

from components.cluster.config import parse_ca_hash, secure_token
from components.hosts.remote import fingerprint, script_text
from tests.cluster.test_bootstrap import commands, params_of
from tests.cluster.test_rke2_install import Host, lab_params
from tests.conftest import evaluate, stack_doc

SERVER_TOKEN = "server-token-must-not-leak"
AGENT_TOKEN = "agent-token-must-not-leak"
CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
CA_HASH = hashlib.sha256(CA_PEM.encode()).hexdigest()
# What a deployment computes and the mock engine leaves unknown: the generated agent token and the
# hash that read-ca-hash.sh prints on the init server.
DEPLOYED = {"rke2-agent-token": {"result": AGENT_TOKEN}, "cluster-ca-hash": {"stdout": CA_HASH + "\n"}}
SERVERS = {"cpu-01", "cpu-02", "cpu-03"}


@pytest.fixture(scope="module")
def deployed_plan():
    def with_token(raw):
        raw["rke2Token"] = SERVER_TOKEN

    return evaluate("prod", with_token, computed=DEPLOYED)


def stdin_of(plan, step: str) -> str:
    return plan.revealed[plan.named(step)["urn"]]["stdin"]


def test_each_role_gets_only_its_tokens_in_the_ca_pinned_form(deployed_plan):
    nodes = [n["name"] for n in stack_doc("prod")["nodes"]]
    # The init server started the cluster before any CA existed: the bare server token, then the agent token.
    assert stdin_of(deployed_plan, "cpu-01-rke2") == f"{SERVER_TOKEN}\n{AGENT_TOKEN}\n"
    for server in ("cpu-02", "cpu-03"):
        assert stdin_of(deployed_plan, f"{server}-rke2") == f"K10{CA_HASH}::server:{SERVER_TOKEN}\n{AGENT_TOKEN}\n"
    agents = [n for n in nodes if n not in SERVERS]
    assert len(agents) > 40
    for agent in agents:
        stdin = stdin_of(deployed_plan, f"{agent}-rke2")
        assert stdin == f"K10{CA_HASH}::node:{AGENT_TOKEN}\n", agent
        assert SERVER_TOKEN not in stdin


def test_agents_inputs_never_depend_on_the_server_token(prod_plan):
    # With a generated server token (a resource), the engine's own dependency record says it.
    server_token = prod_plan.named("rke2-token")["urn"]
    for cmd in commands(prod_plan).values():
        if cmd["name"].endswith("-rke2"):
            stdin_deps = prod_plan.options[cmd["urn"]]["propertyDependencies"]["stdin"]
            server = cmd["name"].removesuffix("-rke2") in SERVERS
            assert (server_token in stdin_deps) == server, cmd["name"]
            assert prod_plan.named("rke2-agent-token")["urn"] in stdin_deps


def test_tokens_stay_secret_in_the_plan(deployed_plan):
    text = deployed_plan.to_json()
    for secret in (SERVER_TOKEN, AGENT_TOKEN, f"K10{CA_HASH}::"):
        assert secret not in text
    for cmd in deployed_plan.by_type("command:remote:Command"):
        if cmd["name"].endswith("-rke2"):
            assert cmd["inputs"]["stdin"] == "[secret]"
            # Never on a command line, where `ps` and logs would show it.
            for field in ("create", "update", "delete"):
                assert AGENT_TOKEN not in str(deployed_plan.revealed[cmd["urn"]].get(field, ""))


def test_servers_configure_the_agent_token_agents_do_not(prod_plan):
    for name, cmd in commands(prod_plan).items():
        if name.endswith("-rke2"):
            config = yaml.safe_load(params_of(cmd["inputs"]["create"])["RKE2_CONFIG"])
            expected = "/etc/rancher/rke2/agent-token" if name.removesuffix("-rke2") in SERVERS else None
            assert config.get("agent-token-file") == expected, name
            assert config["token-file"] == "/etc/rancher/rke2/join-token"


def test_the_ca_hash_comes_from_the_init_server_after_its_install(prod_plan):
    read = prod_plan.named("cluster-ca-hash")
    init = prod_plan.named("cpu-01-rke2")
    assert read["inputs"]["create"].endswith("read-ca-hash.sh")
    assert "delete" not in read["inputs"]  # reading a hash changes nothing on the host
    assert prod_plan.revealed[read["urn"]]["connection"]["host"] == "10.20.1.11"
    assert init["urn"] in read["dependencies"]
    # A replaced init server (on one server: a new cluster, a new CA) reads the hash again.
    assert prod_plan.options[read["urn"]]["propertyDependencies"]["triggers"] == [init["urn"]]


def test_the_token_migration_replaces_and_uninstalls_nothing(prod_plan):
    # The first `up` with agent tokens changes every RKE2 step's stdin and every server's config: both
    # are in-place updates. Only `triggers` replace a command (pulumi-command: the one replaceOnChanges
    # input), and an RKE2 step's triggers hold its identity alone, exactly as before this change.
    for cmd in commands(prod_plan).values():
        urn, name = cmd["urn"], cmd["name"]
        # What the SDK sends from pulumi-command's schema: triggers replace, stdin and create do not.
        assert prod_plan.options[urn]["replaceOnChanges"] == ["triggers[*]"]
        trigger_deps = prod_plan.options[urn]["propertyDependencies"].get("triggers", [])
        # No token, no hash: at most the RKE2 step a step stands on (membership, CA hash).
        assert all(dep.endswith("-rke2") for dep in trigger_deps), name
        if name.endswith("-rke2"):
            node = next(n for n in stack_doc("prod")["nodes"] if f"{n['name']}-rke2" == name)
            role = "server" if node["name"] in SERVERS else "agent"
            identity = fingerprint("rke2-install.sh", "rke2-uninstall.sh", node["name"], node["address"], role)
            assert cmd["inputs"]["triggers"] == [identity] and trigger_deps == [], name


def test_token_helpers_refuse_what_rke2_would_misread():
    assert secure_token(CA_HASH, "node", "abc") == f"K10{CA_HASH}::node:abc"
    with pytest.raises(ValueError, match="bare passphrase"):
        secure_token(CA_HASH, "server", f"K10{CA_HASH}::server:abc")  # a full token set as rke2Token
    with pytest.raises(ValueError, match="not a SHA-256"):
        secure_token("deadbeef", "node", "abc")
    with pytest.raises(ValueError, match="not a SHA-256 hex digest"):
        parse_ca_hash("sha256sum: /var/lib/rancher/rke2/server/tls/server-ca.crt: No such file")
    assert parse_ca_hash(CA_HASH + "\n") == CA_HASH


# Stub hosts: what the install script writes from that stdin.


@pytest.fixture
def cluster_host(host_factory):
    """A host whose cluster answers at the registration address with the CA of CA_HASH."""
    host = host_factory()
    (host.fake / "ping-ok").touch()
    (host.fake / "server-ca.crt").write_text(CA_PEM)
    return host


@pytest.fixture
def host_factory(tmp_path):
    count = iter(range(100))

    def make() -> Host:
        path = tmp_path / f"host{next(count)}"
        path.mkdir()
        return Host(path)

    return make


def mode(path) -> str:
    return oct(path.stat().st_mode & 0o777)


def test_an_agent_writes_only_its_pinned_agent_token(cluster_host):
    cluster_host.register("lab-gpu")
    token = secure_token(CA_HASH, "node", AGENT_TOKEN)
    result = cluster_host.run(lab_params("lab-gpu"), token=token)
    assert result.returncode == 0, result.stderr
    assert cluster_host.file("/etc/rancher/rke2/join-token").read_text() == token + "\n"
    assert mode(cluster_host.file("/etc/rancher/rke2/join-token")) == "0o600"
    assert not cluster_host.file("/etc/rancher/rke2/agent-token").exists()
    assert "agent-token-file" not in cluster_host.config()
    assert token not in result.stdout + result.stderr and AGENT_TOKEN not in result.stdout + result.stderr
    # The pin was checked against what the cluster presents, before the agent started.
    calls = cluster_host.calls()
    cacerts = next(i for i, c in enumerate(calls) if "https://192.168.50.11:9345/cacerts -o " in c)
    assert cacerts < calls.index("systemctl start --no-block rke2-agent.service")


def test_a_joining_server_writes_both_tokens_and_names_the_agent_token_in_its_config(cluster_host):
    cluster_host.register("lab-server")
    params = {**lab_params("lab-server")}
    config = yaml.safe_load(params["RKE2_CONFIG"])
    config["server"] = "https://192.168.50.11:9345"  # as a second server's config
    params["RKE2_CONFIG"] = yaml.safe_dump(config)
    join = secure_token(CA_HASH, "server", SERVER_TOKEN)
    result = cluster_host.run(params, token=join, agent_token=AGENT_TOKEN)
    assert result.returncode == 0, result.stderr
    assert cluster_host.file("/etc/rancher/rke2/join-token").read_text() == join + "\n"
    agent_file = cluster_host.file("/etc/rancher/rke2/agent-token")
    assert agent_file.read_text() == AGENT_TOKEN + "\n" and mode(agent_file) == "0o600"
    assert cluster_host.config()["agent-token-file"] == "/etc/rancher/rke2/agent-token"
    assert SERVER_TOKEN not in result.stdout + result.stderr


def test_a_wrong_pin_changes_nothing_on_a_running_agent(cluster_host):
    # The agent runs with its old token; the cluster presents another CA than the token pins (a stale
    # hash, or someone else answering at the VIP): nothing is written, RKE2 is not restarted.
    cluster_host.register("lab-gpu")
    assert cluster_host.run(lab_params("lab-gpu"), token="old-short-token").returncode == 0
    before = len(cluster_host.calls())
    (cluster_host.fake / "server-ca.crt").write_text(CA_PEM.replace("fake", "other"))
    result = cluster_host.run(lab_params("lab-gpu"), token=secure_token(CA_HASH, "node", AGENT_TOKEN))
    assert result.returncode != 0
    assert f"the join token pins {CA_HASH}; changed nothing" in result.stderr
    assert cluster_host.file("/etc/rancher/rke2/join-token").read_text() == "old-short-token\n"
    assert not any("systemctl restart" in c or "systemctl start" in c for c in cluster_host.calls()[before:])


def test_an_agent_refuses_a_second_secret_and_a_server_needs_the_agent_token(cluster_host):
    cluster_host.register("lab-gpu")
    agent = cluster_host.run({**lab_params("lab-gpu"), "RKE2_TYPE": "agent"}, token=f"t\n{SERVER_TOKEN}")
    assert agent.returncode != 0 and "an agent receives one token only" in agent.stderr
    server = cluster_host.run(lab_params("lab-server"), agent_token="")
    assert server.returncode != 0 and "no agent token on standard input" in server.stderr
    assert cluster_host.calls() == []


def test_migration_of_a_running_cluster_restarts_each_node_once_and_installs_nothing(host_factory):
    # Before: a server and an agent joined with the bare server token, no agent token anywhere.
    server, agent = host_factory(), host_factory()
    for host, node in ((server, "lab-server"), (agent, "lab-gpu")):
        (host.fake / "ping-ok").touch()
        (host.fake / "server-ca.crt").write_text(CA_PEM)
        host.register(node)
    old_server = lab_params("lab-server")
    config = yaml.safe_load(old_server["RKE2_CONFIG"])
    config.pop("agent-token-file")
    assert server.run({**old_server, "RKE2_CONFIG": yaml.safe_dump(config)}, token=SERVER_TOKEN).returncode == 0
    server.file("/etc/rancher/rke2/agent-token").unlink()
    assert agent.run(lab_params("lab-gpu"), token=SERVER_TOKEN).returncode == 0
    marks = {host: len(host.calls()) for host in (server, agent)}

    # The first `up` with this program: servers first (the init server keeps its bare token), then agents.
    migrated = server.run(old_server, token=SERVER_TOKEN, agent_token=AGENT_TOKEN)
    assert migrated.returncode == 0, migrated.stderr
    assert server.config()["agent-token-file"] == "/etc/rancher/rke2/agent-token"
    switched = agent.run(lab_params("lab-gpu"), token=secure_token(CA_HASH, "node", AGENT_TOKEN))
    assert switched.returncode == 0, switched.stderr
    assert SERVER_TOKEN not in agent.file("/etc/rancher/rke2/join-token").read_text()
    for host, unit in ((server, "rke2-server"), (agent, "rke2-agent")):
        new_calls = host.calls()[marks[host] :]
        assert new_calls.count(f"systemctl restart --no-block {unit}.service") == 1
        assert not any(c.startswith("installer") or "uninstall" in c for c in new_calls)
    # A second run changes nothing.
    assert "changed:" not in agent.run(lab_params("lab-gpu"), token=secure_token(CA_HASH, "node", AGENT_TOKEN)).stdout


def test_read_ca_hash_prints_the_sha256_of_the_ca_file(host_factory):
    host = host_factory()
    program = script_text("read-ca-hash.sh")
    env = {"PATH": "/usr/bin:/bin", "HOST_ROOT": str(host.root)}
    missing = subprocess.run(["bash", "-c", program], env=env, capture_output=True, text=True)
    assert missing.returncode != 0 and "RKE2 does not run as a server here" in missing.stderr
    ca = host.file("/var/lib/rancher/rke2/server/tls/server-ca.crt")
    ca.parent.mkdir(parents=True)
    ca.write_text(CA_PEM)
    result = subprocess.run(["bash", "-c", program], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert parse_ca_hash(result.stdout) == CA_HASH
