"""ClusterBootstrap: host preparation, HA RKE2 order, secrets, node lifecycle."""

from __future__ import annotations

import copy
import shlex
from functools import cache

import pytest
import yaml

from benchmarks.inventory import host_key
from components.cluster.config import GPU_TAINT
from components.hosts.remote import fingerprint, program_of
from stacks import plan as plan_cli
from stacks.engine import Plan
from tests.conftest import evaluate, problems, run_plan, stack_doc

COMMAND = "command:remote:Command"


def params_of(command: str) -> dict[str, str]:
    """The VAR=value parameters in front of `bash -c` in a host command."""
    words = shlex.split(command)
    if words[:3] == ["sudo", "-n", "env"]:
        words = words[3:]
    params = {}
    for word in words:
        if word == "bash":
            break
        key, _, value = word.partition("=")
        params[key] = value
    return params


def commands(plan: Plan) -> dict[str, dict]:
    return {r["name"]: r for r in plan.by_type(COMMAND)}


def longest_host_chain(plan: Plan) -> int:
    """The most host commands that must run one after another at create (through any resources between
    them); a command with nothing to run at create does not count."""
    by_urn = plan.by_urn()

    @cache
    def depth(urn: str) -> int:
        resource = by_urn.get(urn)
        if resource is None:
            return 0
        own = 1 if resource["type"] == COMMAND and "create" in resource["inputs"] else 0
        return own + max((depth(d) for d in resource["dependencies"]), default=0)

    return max(depth(urn) for urn in by_urn)


def test_one_preparation_command_per_node(prod_plan):
    prepares = [name for name in commands(prod_plan) if name.endswith("-prepare")]
    nodes = [n["name"] for n in stack_doc("prod")["nodes"]]
    assert sorted(prepares) == sorted(f"{n}-prepare" for n in nodes)
    # Preparation waits only for the host's own copy of the host scripts: all hosts are prepared in parallel.
    for name in prepares:
        scripts = prod_plan.named(name.replace("-prepare", "-scripts"))["urn"]
        assert commands(prod_plan)[name]["dependencies"] == [scripts]


def test_init_server_first_then_servers_one_at_a_time(prod_plan):
    cmds = commands(prod_plan)
    urn = {name: r["urn"] for name, r in cmds.items()}
    assert not any(d.endswith("-rke2") for d in cmds["cpu-01-rke2"]["dependencies"])
    assert urn["cpu-01-rke2"] in cmds["cpu-02-rke2"]["dependencies"]
    # cpu-03 joins after cpu-02, kept on the host (it waits until cpu-02's API answers), not in the graph.
    assert urn["cpu-02-rke2"] not in cmds["cpu-03-rke2"]["dependencies"]
    assert params_of(cmds["cpu-03-rke2"]["inputs"]["create"])["JOIN_AFTER"] == "10.20.1.12:6443"
    init_config = yaml.safe_load(params_of(cmds["cpu-01-rke2"]["inputs"]["create"])["RKE2_CONFIG"])
    join_config = yaml.safe_load(params_of(cmds["cpu-02-rke2"]["inputs"]["create"])["RKE2_CONFIG"])
    assert "server" not in init_config
    assert join_config["server"] == "https://10.20.0.10:9345"


def test_every_other_node_waits_only_for_the_init_server_and_the_ca_hash(prod_plan):
    # Agents and further servers alike: the init server's RKE2 step, the CA hash that pins their join
    # token and their own preparation; never another server (the servers' order is kept on the hosts,
    # JOIN_AFTER: tests/cluster/test_rke2_install.py).
    cmds = commands(prod_plan)
    nodes = [n["name"] for n in stack_doc("prod")["nodes"] if n["name"] != "cpu-01"]
    for node in nodes:
        waits = {d.rsplit("::", 1)[1] for d in cmds[f"{node}-rke2"]["dependencies"]}
        token = "rke2-token" if node in {"cpu-02", "cpu-03"} else "rke2-agent-token"
        # An agent never depends on the server token (`rke2-token`): only the agent token.
        assert waits == {f"{node}-prepare", f"{node}-scripts", "cpu-01-rke2", token, "cluster-ca-hash"} | (
            {"rke2-agent-token"} if token == "rke2-token" else set()
        ), node


def test_no_ssh_session_per_node_on_the_init_server_at_create(prod_plan):
    # Labels and taints go through the Kubernetes API; the per-node step on the init server runs only
    # at delete (pulumi-command opens no connection for a Command without create/update).
    init = stack_doc("prod")["nodes"][0]["address"]
    on_init_at_create = [
        r["name"]
        for r in prod_plan.by_type(COMMAND)
        if prod_plan.revealed[r["urn"]]["connection"]["host"] == init and "create" in r["inputs"]
    ]
    assert sorted(on_init_at_create) == [
        "cluster-ca-hash",
        "cluster-kubeconfig",
        "cpu-01-prepare",
        "cpu-01-rke2",
        "upgrades-node-versions",
    ]
    membership = prod_plan.named("gpu-01-membership")["inputs"]
    assert "create" not in membership and "update" not in membership and "node-remove.sh" in membership["delete"]


def test_labels_and_taints_are_server_side_applied_node_patches(prod_plan):
    patches = {r["name"]: r for r in prod_plan.by_type("kubernetes:core/v1:NodePatch")}
    assert sorted(patches) == sorted(f"{n['name']}-labels-taints" for n in stack_doc("prod")["nodes"])
    gpu = patches["gpu-01-labels-taints"]
    assert gpu["inputs"]["metadata"]["name"] == "gpu-01"
    labels = gpu["inputs"]["metadata"]["labels"]
    assert labels["ml-platform.io/role"] == "gpu" and labels["node-role.kubernetes.io/gpu"] == "true"
    assert gpu["inputs"]["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert gpu["inputs"]["metadata"]["annotations"]["pulumi.com/patchForce"] == "true"
    # A CPU node that is neither a server nor a storage host has no taints: its patch leaves the Node's taint
    # list alone (it is atomic). Servers and storage hosts get theirs (scheduling.tenantNodesOnly, prod).
    assert "spec" not in patches["cpu-20-labels-taints"]["inputs"]
    assert patches["cpu-20-labels-taints"]["inputs"]["metadata"]["labels"]["ml-platform.io/tenant-workloads"] == "true"
    assert patches["cpu-01-labels-taints"]["inputs"]["spec"]["taints"] == [
        {"key": "node-role.kubernetes.io/control-plane", "value": "", "effect": "NoSchedule"}
    ]
    assert patches["cpu-10-labels-taints"]["inputs"]["spec"]["taints"] == [
        {"key": "ml-platform.io/ceph-storage", "value": "true", "effect": "NoSchedule"}
    ]
    assert "ml-platform.io/tenant-workloads" not in patches["cpu-10-labels-taints"]["inputs"]["metadata"]["labels"]
    # Applied once the node registered (its RKE2 step), through the cluster's provider; a removed node's
    # Node is deleted by its membership's delete, so the patch is retained, not taken back.
    assert prod_plan.named("gpu-01-rke2")["urn"] in gpu["dependencies"]
    assert prod_plan.options[gpu["urn"]]["retainOnDelete"] is True
    # The annotation follows the RKE2 step's id: a replaced step re-labels the re-registered Node.
    annotation = gpu["inputs"]["metadata"]["annotations"]["ml-platform.io/rke2-install"]
    assert annotation == fingerprint("gpu-01-rke2-id")


def _own_disks(node: dict) -> dict:
    """A copied node's disks under its own by-id names (a disk's by-id name is unique across hosts)."""
    node["nvme"] = [{**disk, "device": f"{disk['device']}-{node['name']}"} for disk in node.get("nvme", [])]
    return node


def _grow(raw: dict, total: int) -> None:
    """Extend the prod inventory with CPU and GPU agents up to `total` nodes."""
    template_gpu = next(n for n in raw["nodes"] if n["role"] == "gpu")
    i = 0
    while len(raw["nodes"]) < total:
        i += 1
        if i % 3 == 0:
            node = {**template_gpu, "name": f"gpu-x{i}", "address": f"10.21.{i // 200}.{i % 200 + 1}"}
            node["infiniband"] = {**template_gpu["infiniband"], "address": f"10.32.{i // 200}.{i % 200 + 1}"}
            _own_disks(node)
        else:
            node = {"name": f"cpu-x{i}", "address": f"10.21.{i // 200}.{i % 200 + 1}", "role": "cpu"}
        node["hostKey"] = host_key(node["name"])  # each machine its own key
        node["group"] = f"grown-{i // 64}"  # node groups of 64 (a group holds at most 128)
        raw["nodes"].append(node)
    # Teams' own IPoIB pools are sized for prod's GPU nodes; the shared pool serves the grown inventory.
    for team in raw["scheduling"]["teams"]:
        team.pop("ipoibRange", None)


def test_longest_chain_does_not_grow_with_the_node_count(prod_plan):
    big = evaluate("prod", lambda raw: _grow(raw, 200))
    assert len(big.by_type(COMMAND)) > len(prod_plan.by_type(COMMAND)) + 400
    # prepare -> init server -> CA hash -> any other node's RKE2 step
    assert longest_host_chain(prod_plan) == 4
    assert longest_host_chain(big) == longest_host_chain(prod_plan)


def test_rke2_config_uses_real_keys(prod_plan):
    cmds = commands(prod_plan)
    server = yaml.safe_load(params_of(cmds["cpu-02-rke2"]["inputs"]["create"])["RKE2_CONFIG"])
    assert server == {
        "advertise-address": "10.20.1.12",
        "agent-token-file": "/etc/rancher/rke2/agent-token",
        "cluster-cidr": "10.42.0.0/16",
        "cni": "none",
        # RKE2's bundled ingress controllers stay off (cluster.bundledIngress): no path past team NetworkPolicies.
        "disable": ["rke2-ingress-nginx", "rke2-traefik"],
        "disable-kube-proxy": True,
        # Only these two etcd-s3 keys: with any other, RKE2 ignores the config Secret (MinioTier).
        "etcd-s3": True,
        "etcd-s3-config-secret": "rke2-etcd-s3",
        "etcd-snapshot-retention": 28,
        "etcd-snapshot-schedule-cron": "0 */6 * * *",
        "node-ip": "10.20.1.12",
        "node-label": ["ml-platform.io/control-plane=true", "ml-platform.io/role=cpu"],
        "node-name": "cpu-02",
        "server": "https://10.20.0.10:9345",
        "service-cidr": "10.43.0.0/16",
        "tls-san": ["10.20.0.10"],
        "token-file": "/etc/rancher/rke2/join-token",
        "write-kubeconfig-mode": "0600",
    }
    gpu = yaml.safe_load(params_of(cmds["gpu-01-rke2"]["inputs"]["create"])["RKE2_CONFIG"])
    assert gpu["node-taint"] == [GPU_TAINT]
    assert "ml-platform.io/role=gpu" in gpu["node-label"]
    assert "cni" not in gpu and "tls-san" not in gpu  # server-only keys stay off agents
    params = params_of(cmds["gpu-01-rke2"]["inputs"]["create"])
    assert params["RKE2_VERSION"] == "v1.35.7+rke2r1" and params["RKE2_TYPE"] == "agent"


def test_cis_profile_and_mirrors_reach_the_config():
    def mutate(raw):
        raw["cluster"]["cisProfile"] = True
        raw["cluster"]["registryMirrors"] = {"docker.io": ["https://mirror.example.internal"]}
        raw["cluster"]["systemDefaultRegistry"] = "registry.example.internal"

    cmds = commands(evaluate("prod", mutate))
    params = params_of(cmds["cpu-01-rke2"]["inputs"]["create"])
    config = yaml.safe_load(params["RKE2_CONFIG"])
    assert config["profile"] == "cis" and config["system-default-registry"] == "registry.example.internal"
    assert yaml.safe_load(params["REGISTRIES_YAML"]) == {
        "mirrors": {"docker.io": {"endpoint": ["https://mirror.example.internal"]}}
    }
    assert params_of(cmds["cpu-01-prepare"]["inputs"]["create"])["CIS_PROFILE"] == "true"


def test_virtual_ip_runs_kube_vip_on_servers_only(prod_plan):
    cmds = commands(prod_plan)
    manifest = yaml.safe_load(params_of(cmds["cpu-02-rke2"]["inputs"]["create"])["KUBE_VIP_MANIFEST"])
    env = {e["name"]: e["value"] for e in manifest["spec"]["containers"][0]["env"]}
    assert env["address"] == "10.20.0.10" and env["vip_interface"] == "bond0" and env["cp_enable"] == "true"
    assert params_of(cmds["gpu-01-rke2"]["inputs"]["create"])["KUBE_VIP_MANIFEST"] == ""


def test_ssh_key_and_token_never_in_the_plan(tmp_path):
    def with_token(raw):
        raw["rke2Token"] = "token-that-must-not-leak"

    plan = evaluate("prod", with_token, computed={"rke2-agent-token": {"result": "agent-token"}})
    text = plan.to_json()
    assert "placeholder-ssh-private-key" not in text
    assert "token-that-must-not-leak" not in text
    assert plan.outputs["kubeconfig"] == "[secret]"
    # The token travels on stdin (revealed only to this test), never on a command line; what each
    # role receives: tests/cluster/test_join_tokens.py.
    rke2 = plan.named("cpu-01-rke2")
    revealed = plan.revealed[rke2["urn"]]
    assert revealed["stdin"] == "token-that-must-not-leak\nagent-token\n"
    for cmd in plan.by_type(COMMAND):
        for field in ("create", "update", "delete"):
            assert "token-that-must-not-leak" not in str(plan.revealed[cmd["urn"]].get(field, ""))


def test_kubeconfig_step_does_not_log_and_hides_its_output(prod_plan):
    read = prod_plan.named("cluster-kubeconfig")
    assert read["inputs"]["logging"] == "none"
    assert {"stdout", "stderr"} <= set(prod_plan.options[read["urn"]]["additionalSecretOutputs"])
    provider = prod_plan.by_type("pulumi:providers:kubernetes")[0]
    assert provider["inputs"]["clusterIdentifier"] == "ml-prod"
    assert read["urn"] in provider["dependencies"]


def test_host_key_and_bastion_reach_the_connection(prod_plan):
    node = next(n for n in stack_doc("prod")["nodes"] if n["name"] == "gpu-05")
    connection = prod_plan.revealed[prod_plan.named("gpu-05-prepare")["urn"]]["connection"]
    assert connection["host"] == node["address"]
    assert connection["hostKey"] == node["hostKey"]
    assert connection["user"] == "mlops"
    assert connection["proxy"]["host"] == "10.20.0.5"
    assert connection["proxy"]["hostKey"] == stack_doc("prod")["ssh"]["bastion"]["hostKey"]
    assert connection["privateKey"] == "placeholder-ssh-private-key"
    # A non-root user runs scripts through sudo.
    assert prod_plan.named("gpu-05-prepare")["inputs"]["create"].startswith("sudo -n env ")


def _grown(raw):
    raw["nodes"].append({"name": "cpu-36", "address": "10.20.1.46", "role": "cpu", "hostKey": host_key("cpu-36")})


def _shrunk(raw):
    raw["nodes"] = [n for n in raw["nodes"] if n["name"] != "cpu-30"]


def _gpu_grown(raw):
    last = next(n for n in raw["nodes"] if n["name"] == "gpu-15")
    node = {**copy.deepcopy(last), "name": "gpu-16", "address": "10.20.1.99", "hostKey": host_key("gpu-16")}
    node["infiniband"]["address"] = "10.30.0.99"
    raw["nodes"].append(_own_disks(node))


GPU_OUTPUTS = {"acceptance", "gpuNodes", "gpuSchedulable", "gpuTotal"}


@pytest.mark.parametrize(
    ("edit", "node", "side", "gpu"),
    [(_grown, "cpu-36", "added", False), (_shrunk, "cpu-30", "removed", False), (_gpu_grown, "gpu-16", "added", True)],
)
def test_adding_or_removing_a_node_touches_only_its_own_resources(prod_plan, edit, node, side, gpu):
    result = plan_cli.diff(_doc(prod_plan), _doc(evaluate("prod", edit)))
    own = ["labels-taints", "membership", "prepare", "rke2", "scripts"]
    if gpu:  # its InfiniBand and NVMe steps (its acceptance checks are its group's drivers, below)
        own += ["infiniband", "nvme"]
    # A new InfiniBand GPU node is paired for the NCCL check: with 15 before, the odd one out (gpu-15, paired
    # with gpu-01) now pairs with it. All pairs share one rendezvous Service: it stays as it is.
    pairs = (
        {"added": ["acceptance-nccl-ib-gpu-15-gpu-16"], "removed": ["acceptance-nccl-ib-gpu-15-gpu-01"]} if gpu else {}
    )
    own_names = [f"{node}-{suffix}" for suffix in own] + pairs.get(side, [])
    assert sorted(u.rsplit("::", 1)[1] for u in result[side]) == sorted(own_names)
    other = "removed" if side == "added" else "added"
    assert sorted(u.rsplit("::", 1)[1] for u in result[other]) == sorted(pairs.get(other, []))
    # Beyond the node's own resources, only its group's aggregates change: its Zabbix host is an entry of its
    # group's host set (and of the set's claim). The monitoring check names no host (it asks Zabbix for the
    # hosts of the sets) and waits for the sets, not for every node's host: it stays as it is.
    expected = {
        "monitoring-hosts-nodes": [f"inputs.spec.hosts.{node}"],
        "monitoring-hosts-nodes-claim": ["inputs.hosts"],
    }
    if gpu:  # its group's GPU node and NVLink drivers, which take each GPU node of the group in turn, take it too
        driver = "inputs.spec.template.spec.containers[name=driver].env"
        expected["acceptance-nccl-nvlink-nodes"] = [f"{driver}[name={n}].value" for n in ("EACH", "NODE", "WORKER")]
        # ... and the GPU node check waits for the new node's labels and taints too (its dependencies).
        expected["acceptance-gpu-nodes"] = ["dependencies"] + [
            f"{driver}[name={n}].value" for n in ("EACH", "NODE", "WORKER")
        ]
    assert {u.rsplit("::", 1)[1]: paths for u, paths in result["changed"].items()} == expected
    outputs = {"monitoredHosts", *(GPU_OUTPUTS if gpu else ())}
    assert result["outputs"] == dict.fromkeys(sorted(outputs), "changed")


def test_removal_drains_then_uninstalls_also_on_replace(prod_plan):
    membership = prod_plan.named("cpu-30-membership")
    rke2 = prod_plan.named("cpu-30-rke2")
    # The membership depends on the RKE2 step, so the engine deletes it first: drain and delete
    # the Node on the init server, then uninstall RKE2 on the host.
    assert rke2["urn"] in membership["dependencies"]
    # On a replace of the RKE2 step (delete-before-replace) `depends_on` is not enough: the engine
    # deletes first only the dependents whose replace-on-change inputs depend on it. The
    # membership's triggers do, so a replace drains and deletes the Node before the uninstall,
    # then reinstalls and re-labels.
    assert prod_plan.options[membership["urn"]]["propertyDependencies"]["triggers"] == [rke2["urn"]]
    # The trigger's value is the membership's own identity hash, as before this dependency existed:
    # a deployed stack sees no change (no drain of every node on the first up).
    assert membership["inputs"]["triggers"] == [fingerprint("node-membership.sh", "node-remove.sh", "cpu-30")]
    assert params_of(rke2["inputs"]["delete"]) == {"NODE_NAME": "cpu-30"}  # the uninstall checks the host
    assert params_of(membership["inputs"]["delete"]) == {"DRAIN": "true", "DRAIN_TIMEOUT": "900", "NODE_NAME": "cpu-30"}
    assert '"$KUBECTL" drain' in program_of(membership["inputs"]["delete"])
    assert rke2["inputs"]["delete"].endswith(" rke2-uninstall.sh")
    for resource in (membership, rke2):
        assert prod_plan.options[resource["urn"]]["deleteBeforeReplace"] is True
    # The membership runs on the init server, not on the node being removed.
    assert prod_plan.revealed[membership["urn"]]["connection"]["host"] == "10.20.1.11"


def test_script_changes_update_destructive_steps_in_place(prod_plan):
    # Destructive steps are replaced only when their identity changes: their triggers do not hold
    # the script, so a changed script is an update (no uninstall/drain).
    def bump(raw):
        raw["cluster"]["rke2Version"] = "v1.35.8+rke2r1"

    bumped = evaluate("prod", bump)
    before, after = prod_plan.named("gpu-01-rke2"), bumped.named("gpu-01-rke2")
    assert before["inputs"]["triggers"] == after["inputs"]["triggers"]
    assert before["inputs"]["create"] != after["inputs"]["create"]


def test_label_changes_are_reconciled_on_existing_nodes(prod_plan):
    def relabel(raw):
        raw["nodes"][40]["labels"] = {"example.com/team": "vision"}

    relabeled = evaluate("prod", relabel)
    name = stack_doc("prod")["nodes"][40]["name"]
    # config.yaml holds only registration-time labels: a label edit does not restart RKE2.
    assert relabeled.named(f"{name}-rke2")["inputs"] == prod_plan.named(f"{name}-rke2")["inputs"]
    # Only the Node patch changes; server-side apply removes a label the settings drop again.
    result = plan_cli.diff(_doc(prod_plan), _doc(relabeled))
    assert [u.rsplit("::", 1)[1] for u in result["changed"]] == [f"{name}-labels-taints"]
    labels = relabeled.named(f"{name}-labels-taints")["inputs"]["metadata"]["labels"]
    assert labels["example.com/team"] == "vision"
    assert "example.com/team" not in prod_plan.named(f"{name}-labels-taints")["inputs"]["metadata"]["labels"]


def _doc(plan: Plan) -> dict:
    return {"resources": plan.resources, "outputs": plan.outputs}


def test_the_init_server_is_named_and_every_server_knows_the_registration_address(prod_plan):
    cmds = commands(prod_plan)
    for server in ("cpu-01", "cpu-02", "cpu-03"):
        assert params_of(cmds[f"{server}-rke2"]["inputs"]["create"])["REGISTRATION_ADDRESS"] == "10.20.0.10:9345"
    # No silent default to "the first server listed": reordering nodes cannot make a new init server.
    assert "cluster.initServer: required; add it" in problems("prod", lambda raw: raw["cluster"].pop("initServer"))


def test_a_version_bump_reaches_running_nodes_only_through_the_upgrade_plans(prod_plan):
    def bump(raw):
        raw["cluster"]["rke2Version"] = "v1.36.3+rke2r1"
        raw["cluster"]["deployedRke2Version"] = "v1.35.7+rke2r1"

    bumped = evaluate("prod", bump)
    result = plan_cli.diff(_doc(prod_plan), _doc(bumped))
    names = {key: {urn.rsplit("::", 1)[1] for urn in result[key]} for key in ("added", "removed", "changed")}
    # The pre-upgrade step and the Plans exist while the upgrade is pending (tests/cluster/test_upgrades.py); no host
    # RKE2 step changes (it installs only on a fresh host, the release the cluster runs).
    assert names == {
        "added": {
            "upgrades-pre-upgrade-snapshot",
            "upgrades-server-plan",
            "upgrades-gpu-agent-plan",
            "upgrades-storage-agent-plan",
            "upgrades-cpu-agent-plan",
        },
        "removed": {"upgrades-node-versions"},
        "changed": set(),
    }
    assert longest_host_chain(bumped) == longest_host_chain(prod_plan)


@pytest.mark.parametrize(
    ("wanted", "message"),
    [
        ("v1.34.9+rke2r1", "is older than the deployed 'v1.35.7+rke2r1'; RKE2 does not support downgrades"),
        ("v1.37.0+rke2r1", "skips minor versions from the deployed 'v1.35.7+rke2r1'"),
    ],
)
def test_downgrade_and_minor_skip_exit_2(tmp_path, wanted, message):
    def bump(config):
        config["ml-platform:cluster"].update(rke2Version=wanted, deployedRke2Version="v1.35.7+rke2r1")

    proc, out = run_plan(tmp_path, bump)
    assert proc.returncode == 2 and not out.exists()
    assert f"cluster.rke2Version: {wanted!r} {message}" in proc.stderr


def test_renamed_from_is_checked():
    def rename_server(raw):
        raw["nodes"][1]["name"] = "cpu-92"
        raw["nodes"][1]["renamedFrom"] = "cpu-02"

    assert any("control-plane server; its etcd member cannot be renamed" in p for p in problems("prod", rename_server))

    def keep_both(raw):
        raw["nodes"][40]["renamedFrom"] = raw["nodes"][41]["name"]

    assert any("is still in nodes" in p for p in problems("prod", keep_both))
