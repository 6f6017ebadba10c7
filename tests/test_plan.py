"""The offline preview: inventory shape, determinism, --diff, and what invalid settings get."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml

from stacks import plan as plan_cli
from stacks.engine import evaluate_stack
from tests.conftest import ROOT, evaluate, run_plan, stack_doc


def test_prod_inventory_shape():
    raw = stack_doc("prod")
    nodes = raw["nodes"]
    assert len(nodes) == 50
    assert sum(n["role"] == "gpu" for n in nodes) == 15
    assert sum(n["role"] == "cpu" for n in nodes) == 35
    servers = [n for n in nodes if n.get("controlPlane")]
    assert len(servers) == 3 and all(n["role"] == "cpu" for n in servers)
    assert len(raw["nas"]["hosts"]) == 4
    assert all("infiniband" in n for n in nodes if n["role"] == "gpu")


def test_prod_plan_has_host_steps_for_every_host(prod_plan):
    commands = {r["name"] for r in prod_plan.by_type("command:remote:Command")}
    names = [n["name"] for n in stack_doc("prod")["nodes"]]
    assert {f"{n}-prepare" for n in names} <= commands


def test_lab_evaluates(lab_plan):
    assert lab_plan.outputs["apiEndpoint"] == "https://192.168.50.11:6443"
    assert {r["name"] for r in lab_plan.by_type("command:remote:Command")} >= {"lab-server-rke2", "lab-gpu-rke2"}


def test_plan_json_is_deterministic(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert plan_cli.main(["prod", "--out", str(first)]) == 0
    assert plan_cli.main(["prod", "--out", str(second)]) == 0
    assert first.read_bytes() == second.read_bytes()
    doc = json.loads(first.read_text())
    assert set(doc) == {"project", "stack", "resources", "reads", "outputs", "settings"}
    # the plain settings the review compares field by field: no secret key among them
    assert "cluster" in doc["settings"] and not set(doc["settings"]) & {"sshPrivateKey", "rke2Token"}
    urns = [r["urn"] for r in doc["resources"]]
    assert urns == sorted(urns)
    assert [r["urn"] for r in doc["reads"]] == sorted(r["urn"] for r in doc["reads"]) and doc["reads"]
    for resource in doc["resources"]:
        assert set(resource) == {
            *("urn", "type", "name", "custom", "parent", "provider", "dependencies", "inputs"),
            *("options", "secretDigests"),
        }
        assert set(resource["options"]) == {
            "protect",
            "deleteBeforeReplace",
            "replaceOnChanges",
            "retainOnDelete",
            "ignoreChanges",
        }


def test_plan_masks_secrets_and_unknowns(prod_plan):
    text = prod_plan.to_json()
    assert "placeholder-ssh-private-key" not in text
    assert prod_plan.outputs["kubeconfig"] == "[secret]"
    provider = prod_plan.by_type("pulumi:providers:kubernetes")[0]
    assert provider["inputs"]["kubeconfig"] == "[secret]"


def test_config_file_option_checks_an_edited_config(tmp_path, capsys):
    doc = yaml.safe_load((ROOT / "Pulumi.lab.yaml").read_text())
    doc["config"]["ml-platform:nodes"].append({"name": "lab-cpu-4", "address": "192.168.50.34", "role": "cpu"})
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(doc))
    out = tmp_path / "plan.json"
    assert plan_cli.main(["lab", "--config", str(edited), "--out", str(out)]) == 0
    names = {r["name"] for r in json.loads(out.read_text())["resources"]}
    assert "lab-cpu-4-rke2" in names


def test_diff_lists_created_deleted_and_updated_with_values(tmp_path, capsys):
    old = evaluate("lab")

    def mutate(raw):
        raw["nodes"] = [n for n in raw["nodes"] if n["name"] != "lab-cpu-3"]
        raw["nodes"].append(
            {"name": "lab-cpu-9", "address": "192.168.50.39", "role": "cpu", "osdDevices": [{"device": "/dev/sdb"}]}
        )
        raw["cluster"]["etcdSnapshots"]["retention"] = 14

    new = evaluate("lab", mutate)
    old_file, new_file = tmp_path / "old.json", tmp_path / "new.json"
    old_file.write_text(old.to_json())
    new_file.write_text(new.to_json())
    assert plan_cli.main(["--diff", str(old_file), str(new_file)]) == 0
    printed = capsys.readouterr().out
    assert "+ create lab-cpu-9-rke2 [command:remote:Command]" in printed
    assert "- delete lab-cpu-3-rke2 [command:remote:Command]" in printed
    server = printed[printed.index("~ update lab-server-rke2") :]
    assert "etcd-snapshot-retention: 14" in server.split("\n~ ")[0], "the changed value is shown"


def test_diff_shows_output_values_old_and_new(tmp_path, capsys):
    old = {"project": "p", "stack": "s", "resources": [], "outputs": {"a": 1, "b": 2}}
    new = {"project": "p", "stack": "s", "resources": [], "outputs": {"b": 3, "c": 4}}
    files = [tmp_path / "old.json", tmp_path / "new.json"]
    for path, doc in zip(files, (old, new), strict=True):
        path.write_text(json.dumps(doc))
    assert plan_cli.main(["--diff", *map(str, files)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-4:] == [
        "Outputs:",
        "  ~ output a: 1 -> (absent)",
        "  ~ output b: 2 -> 3",
        "  ~ output c: (absent) -> 4",
    ]


def test_piping_into_head_exits_quietly():
    # `head -1` closes the pipe after one line; the planner must not print a BrokenPipeError traceback.
    proc = subprocess.run(
        f"{sys.executable} -m stacks.plan prod | head -1",
        shell=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout.startswith("Offline preview of ml-platform/prod")
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def _node(config: dict, name: str) -> dict:
    return next(n for n in config["ml-platform:nodes"] if n["name"] == name)


@pytest.mark.parametrize(
    ("node", "edit", "message"),
    [
        ("gpu-02", lambda n: n.pop("infiniband"), "nodes[36] (gpu-02).infiniband: GPU node 'gpu-02' has no InfiniBand"),
        ("cpu-03", lambda n: n.update({"controlPlane": False}), "nodes: 2 control-plane servers (cpu-01, cpu-02)"),
        (
            "cpu-09",
            lambda n: n.update({"address": "10.20.1.11"}),
            "nodes[8] (cpu-09).address: ipv4 '10.20.1.11' is also claimed by nodes[0].address",
        ),
        (
            "cpu-01",
            lambda n: n.update({"controlplane": True}),
            "nodes[0] (cpu-01).controlplane: unknown key (did you mean 'controlPlane'?)",
        ),
    ],
    ids=["gpu-node-without-infiniband", "two-control-plane-servers", "duplicated-address", "misspelled-key"],
)
def test_invalid_node_settings_exit_2_naming_the_field(tmp_path, node, edit, message):
    proc, out = run_plan(tmp_path, lambda c: edit(_node(c, node)))
    assert proc.returncode == 2 and not out.exists()
    assert message in proc.stderr


def test_invalid_settings_register_nothing():
    from settings import SettingsError

    def mutate(raw):
        raw["nodes"][0]["address"] = "not-an-ip"

    with pytest.raises(SettingsError):
        evaluate("prod", mutate)
    # The same machinery, with valid settings, registers resources; with invalid ones the
    # program stops before the first registration (the monitor records nothing).
    from stacks import engine

    monitor_requests: list = []

    class Recording(engine._RecordingMonitor):
        def RegisterResource(self, request):  # noqa: N802
            if request.type != "pulumi:pulumi:Stack":
                monitor_requests.append(request.name)
            return super().RegisterResource(request)

    original = engine._RecordingMonitor
    engine._RecordingMonitor = Recording
    try:
        with pytest.raises(SettingsError):
            evaluate("prod", mutate)
    finally:
        engine._RecordingMonitor = original
    assert monitor_requests == []


def test_missing_stack_config_exits_2(capsys):
    assert plan_cli.main(["nosuchstack"]) == 2


def test_evaluate_stack_reads_secure_values_as_secrets(tmp_path):
    doc = yaml.safe_load((ROOT / "Pulumi.lab.yaml").read_text())
    doc["config"]["ml-platform:rke2Token"] = {"secure": "v1:AAAABBBB"}
    config = tmp_path / "lab.yaml"
    config.write_text(yaml.safe_dump(doc))
    plan = evaluate_stack("lab", config)
    rke2 = plan.named("lab-server-rke2")
    assert rke2["inputs"]["stdin"] == "[secret]"
    generated = [r["name"] for r in plan.by_type("random:index/randomPassword:RandomPassword")]
    assert "rke2-token" not in generated


def test_every_settings_problem_at_once(tmp_path):
    def four_mistakes(config):
        _node(config, "gpu-15")["adress"] = "10.20.2.25"  # an unknown key (a typo)
        _node(config, "cpu-04")["address"] = "not-an-ip"  # a type error: cpu-04 is set aside, the rest is judged
        _node(config, "cpu-09")["address"] = "10.20.1.11"  # cpu-01's address
        _node(config, "gpu-02").pop("infiniband")

    proc, out = run_plan(tmp_path, four_mistakes)
    assert proc.returncode == 2 and not out.exists()
    lines = [line.strip() for line in proc.stderr.splitlines()[1:]]
    # Each problem at the file and line of the path it names (the note at the end has none).
    placed = [re.match(r"Pulumi\.prod\.changed\.yaml:(\d+): (.*)", line) for line in lines[:-1]]
    assert all(placed), lines
    text = (tmp_path / "Pulumi.prod.changed.yaml").read_text().splitlines()
    cpu04 = next(m for m in placed if m[2].startswith("nodes[3] (cpu-04).address"))
    assert "not-an-ip" in text[int(cpu04[1]) - 1]
    problems = [m[2] for m in placed] + lines[-1:]
    assert problems[:-1] == [
        "nodes[3] (cpu-04).address: 'not-an-ip' is not an IPv4 address; write four numbers 0-255, e.g. '10.20.1.7'",
        "nodes[8] (cpu-09).address: ipv4 '10.20.1.11' is also claimed by nodes[0].address; addresses must be unique",
        "nodes[36] (gpu-02).infiniband: GPU node 'gpu-02' has no InfiniBand settings; add interface and address",
        "nodes[49] (gpu-15).adress: unknown key (did you mean 'address'?); valid keys here: address, controlPlane, "
        "gpu, group, hostKey, infiniband, labels, name, nvme, osdDevices, renamedFrom, role, topology",
    ]
    # What cpu-04's missing entry keeps from being judged is said, not guessed at.
    assert problems[-1].startswith("(checked once the problems above are fixed") and "control-plane" in problems[-1]
