"""Host scripts reach each host once per version (a content-addressed bundle), and each step's command is a
short call: the same programs run, with the same parameters and standard input, the inputs stay small, and
a deployed stack sees in-place updates only (components/hosts/delivery.py)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import statistics
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from components.hosts import delivery
from components.hosts.remote import inline_invocation, program_digest, script_files, script_text
from stacks import diff
from stacks.diff.core import command_env, command_script

COMMAND = "command:remote:Command"
COPY = "command:remote:CopyToRemote"
# What one host step may hold in its inputs (JSON of the plan's inputs, secrets masked): the median and
# the largest. The state keeps every input twice and a self-managed backend rewrites all of it per step.
MEDIAN_BUDGET = 2048
LARGEST_BUDGET = 6144

# A `bash` first on PATH: the runner (the step's command) runs in the real bash; the program it hands on
# is recorded (text, $0, environment, standard input) instead of run.
RECORDING_BASH = """#!/bin/bash
if [[ $1 == -c && $2 == "set -euo pipefail"$'\\n'"h="* ]]; then exec /bin/bash "$@"; fi
n=$(find "$RECORD" -name "*.program" | wc -l)
printf %s "$2" >"$RECORD/$n.program"
printf %s "$3" >"$RECORD/$n.name"
env -0 >"$RECORD/$n.env"
cat >"$RECORD/$n.stdin"
"""
# sudo as the stub host sees it: `sudo -n env NAME=value COMMAND` runs the rest with the environment kept.
STUB_SUDO = """#!/bin/bash
[[ $1 == -n ]] && shift
exec "$@"
"""


def host_steps(plan) -> list[dict[str, Any]]:
    return [r for r in plan.resources if r["type"] == COMMAND]


def input_bytes(resource: dict[str, Any]) -> int:
    return len(json.dumps(resource["inputs"], sort_keys=True).encode())


class ScratchHost:
    """A temp root with the bundle where the host's `-scripts` step copies it, and the recording bash."""

    def __init__(self, tmp: Path) -> None:
        self.home, self.root, self.record, self.bin = tmp / "home", tmp / "root", tmp / "record", tmp / "bin"
        for d in (self.root, self.record, self.bin):
            d.mkdir(parents=True)
        sha, path = delivery.bundle()
        staged = self.home / delivery.STAGED / f"{sha}.tar"
        staged.parent.mkdir(parents=True)
        shutil.copy(path, staged)
        for name, text in (("bash", RECORDING_BASH), ("sudo", STUB_SUDO)):
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)

    def run(self, cmd: str, stdin: str = "") -> subprocess.CompletedProcess:
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.home), "HOST_ROOT": str(self.root)}
        env["RECORD"] = str(self.record)
        return subprocess.run(["/bin/bash", "-c", cmd], env=env, input=stdin, capture_output=True, text=True)

    def runs(self) -> list[dict[str, Any]]:
        out = []
        for program in sorted(self.record.glob("*.program"), key=lambda p: int(p.stem)):
            env = (program.with_suffix(".env")).read_bytes().decode().split("\0")
            out.append(
                {
                    "program": program.read_text(),
                    "name": program.with_suffix(".name").read_text(),
                    "env": dict(e.split("=", 1) for e in env if "=" in e),
                    "stdin": program.with_suffix(".stdin").read_text(),
                }
            )
        return out


def inline_program(cmd: str) -> tuple[str, str]:
    """(program, $0) of a command that carries its program inline (`bash -c '<program>' <name>`)."""
    tokens = shlex.split(cmd)
    at = tokens.index("-c")
    return tokens[at + 1], tokens[at + 2]


@pytest.mark.parametrize("stack", ["prod_plan", "lab_plan"])
def test_host_step_inputs_stay_within_the_budget_and_carry_no_update(stack, request):
    plan = request.getfixturevalue(stack)
    steps = host_steps(plan)
    sizes = sorted(input_bytes(r) for r in steps)
    assert statistics.median(sizes) <= MEDIAN_BUDGET, f"median host step inputs {statistics.median(sizes)} bytes"
    too_big = {r["name"]: input_bytes(r) for r in steps if input_bytes(r) > LARGEST_BUDGET}
    assert not too_big, f"host steps over {LARGEST_BUDGET} bytes of inputs: {too_big}"
    # pulumi-command runs `create` on update when `update` is unset: an `update` that repeats it is
    # the whole command stored twice more (inputs and outputs) for nothing.
    repeated = [r["name"] for r in steps if "update" in r["inputs"] and r["inputs"]["update"] == r["inputs"]["create"]]
    assert not repeated, f"`update` repeats `create`: {repeated}"
    assert not [r["name"] for r in steps if "update" in r["inputs"]], "no host step needs an `update` command"


def test_no_command_carries_a_program(prod_plan):
    programs = {script_text(p.name) for p in script_files()}
    for r in host_steps(prod_plan):
        for field in ("create", "delete"):
            cmd = r["inputs"].get(field)
            if cmd is not None:
                assert not any(p in cmd for p in programs), (r["name"], field)
                assert f"h={program_digest(command_script(cmd))}" in cmd, (r["name"], field)


def test_each_host_gets_the_bundle_once_and_every_step_waits_for_it(prod_plan):
    copies = {r["name"].removesuffix("-scripts"): r for r in prod_plan.by_type(COPY)}
    sha, path = delivery.bundle()
    hosts = {n for n in copies}
    assert len(copies) == 54  # 50 nodes, 4 NAS hosts
    for copy in copies.values():
        assert copy["inputs"]["source"] == {"asset": delivery.local_path(path)}
        assert copy["inputs"]["remotePath"] == f".ml-platform/host-scripts/{sha}.tar"
    by_urn = prod_plan.by_urn()
    host_of = {r["urn"]: prod_plan.revealed[r["urn"]]["connection"]["host"] for r in host_steps(prod_plan)}
    copy_of = {prod_plan.revealed[c["urn"]]["connection"]["host"]: c["urn"] for c in copies.values()}
    for r in host_steps(prod_plan):
        assert copy_of[host_of[r["urn"]]] in r["dependencies"], r["name"]
    prepared = {r["name"].removesuffix("-prepare") for r in host_steps(prod_plan) if r["name"].endswith("-prepare")}
    assert hosts >= prepared
    assert all(by_urn[u]["type"] == COPY for u in copy_of.values())


def test_the_bundle_is_reproducible_and_named_by_content():
    programs = {p.name: script_text(p.name) for p in script_files()}
    assert delivery.bundle_bytes(programs) == delivery.bundle_bytes(dict(reversed(list(programs.items()))))
    sha, path = delivery.bundle()
    with tarfile.open(path) as tar:
        members = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()}
    assert members == {program_digest(name): text for name, text in programs.items()}
    with tarfile.open(path) as tar:
        assert all(m.mtime == 0 and m.uid == 0 and m.mode == 0o600 for m in tar.getmembers())


def test_every_command_runs_the_program_it_carried_inline_on_a_scratch_host(prod_plan, lab_plan, tmp_path):
    """Each host step's create and delete command of prod and lab, run as the host runs it: the program
    that reaches `bash -c` is byte-identical to the one the command carried inline (the trigger's command,
    what deployed stacks ran), with the same `$0` and parameters."""
    host = ScratchHost(tmp_path)
    expected = []
    for plan in (prod_plan, lab_plan):
        for r in host_steps(plan):
            for field in ("create", "delete"):
                cmd = r["inputs"].get(field)
                if cmd is None:
                    continue
                name, params = command_script(cmd), command_env(cmd)
                sudo = cmd.startswith("sudo -n ")
                result = host.run(cmd)
                assert result.returncode == 0, (r["name"], field, result.stderr)
                expected.append((r["name"], field, inline_invocation(name, params, sudo), params))
    runs = host.runs()
    # Every step's command ran (each has a create, a delete or both; prod and lab: some 280 commands).
    assert len(runs) == len(expected) >= sum(len(host_steps(plan)) for plan in (prod_plan, lab_plan)) > 200
    for run, (step, field, inline, params) in zip(runs, expected, strict=True):
        program, name = inline_program(inline)
        assert run["program"] == program, (step, field)
        assert run["name"] == name, (step, field)
        assert {k: run["env"].get(k) for k in params} == params, (step, field)
    # The store holds each program once, root-only, under its hash.
    store = host.root / "var/lib/ml-platform/scripts"
    assert {p.name for p in store.iterdir()} <= {program_digest(p.name) for p in script_files()}
    assert oct(store.stat().st_mode & 0o777) == "0o700"


def test_the_runner_hands_standard_input_to_the_program(prod_plan, tmp_path):
    host = ScratchHost(tmp_path)
    cmd = prod_plan.named("gpu-02-rke2")["inputs"]["create"]
    assert host.run(cmd, stdin="K10abc::node:secret\n").returncode == 0
    assert host.runs()[0]["stdin"] == "K10abc::node:secret\n"
    assert "secret" not in cmd


def test_a_missing_bundle_fails_naming_the_script_and_the_step_that_copies_it(prod_plan, tmp_path):
    host = ScratchHost(tmp_path)
    shutil.rmtree(host.home / ".ml-platform")
    cmd = prod_plan.named("cpu-04-prepare")["inputs"]["create"]
    result = host.run(cmd)
    assert result.returncode == 1
    assert f"error: host script prepare-host.sh (sha256 {program_digest('prepare-host.sh')}) is not on this host" in (
        result.stderr
    )
    assert "-scripts step copies it there" in result.stderr and host.runs() == []


@pytest.mark.parametrize(
    "tamper",
    ["store", "bundle"],
)
def test_a_program_that_does_not_match_its_hash_never_runs(prod_plan, tmp_path, tamper):
    host = ScratchHost(tmp_path)
    cmd = prod_plan.named("gpu-01-nvme")["inputs"]["create"]
    digest = program_digest("nvme-tier1.sh")
    if tamper == "store":
        store = host.root / "var/lib/ml-platform/scripts"
        store.mkdir(parents=True)
        (store / digest).write_text(script_text("nvme-tier1.sh") + "rm -rf /\n")
        message = "does not match its sha256"
    else:
        staged = next((host.home / delivery.STAGED).glob("*.tar"))
        evil_text = script_text("nvme-tier1.sh") + "rm -rf /\n"
        evil = delivery.bundle_bytes({"nvme-tier1.sh": evil_text})
        staged.write_bytes(evil.replace(delivery.digest(evil_text).encode(), digest.encode()))
        message = "is not on this host"
    result = host.run(cmd)
    assert result.returncode == 1 and message in result.stderr
    assert host.runs() == []


def test_a_delete_recorded_by_an_older_version_still_finds_its_program(prod_plan, tmp_path):
    """Bundles are never removed: a node removed after a newer version was copied runs the delete its
    state recorded, whose program is only in the older bundle."""
    host = ScratchHost(tmp_path)
    old_text = script_text("rke2-uninstall.sh").replace("uninstall", "un-install", 1)
    old = delivery.bundle_bytes({"rke2-uninstall.sh": old_text})
    (host.home / delivery.STAGED / "0ld.tar").write_bytes(old)
    delete = prod_plan.named("gpu-03-rke2")["inputs"]["delete"]
    old_delete = delete.replace(program_digest("rke2-uninstall.sh"), delivery.digest(old_text))
    assert host.run(old_delete).returncode == 0
    assert host.runs()[0]["program"] == old_text


def _as_deployed(plan) -> dict[str, Any]:
    """The plan as the program before this delivery sent it: each command carried its program inline,
    `update` repeated `create`, and there were no `-scripts` steps."""
    copies = {r["urn"] for r in plan.by_type(COPY)}
    resources = []
    for r in plan.resources:
        if r["urn"] in copies:
            continue
        r = json.loads(json.dumps(r))
        r["dependencies"] = [d for d in r["dependencies"] if d not in copies]
        if r["type"] == COMMAND:
            inputs = r["inputs"]
            for field in ("create", "delete"):
                if field in inputs:
                    cmd = inputs[field]
                    inputs[field] = inline_invocation(command_script(cmd), command_env(cmd), cmd.startswith("sudo"))
            if "create" in inputs:
                inputs["update"] = inputs["create"]
        resources.append(r)
    return {"project": plan.project, "stack": plan.stack, "resources": resources, "outputs": plan.outputs}


@pytest.mark.parametrize("stack", ["prod_plan", "lab_plan"])
def test_a_deployed_stack_sees_in_place_updates_only(stack, request):
    """The first `up` after the change: the `-scripts` steps are created, every host step is updated in
    place (its command is now the short call; pulumi-command runs it: the same program again, idempotent),
    and nothing is replaced: the triggers keep their values, so no delete runs, no drain, no uninstall."""
    plan = request.getfixturevalue(stack)
    result = diff.compare(_as_deployed(plan), json.loads(plan.to_json()))
    actions = {}
    for entry in result.entries:
        actions.setdefault((entry.type, entry.action), []).append(entry.name)
    steps = host_steps(plan)
    assert sorted(actions) == [(COMMAND, "update"), (COPY, "create")], sorted(actions)
    assert len(actions[(COMMAND, "update")]) == len(steps)
    assert len(actions[(COPY, "create")]) == len(plan.by_type(COPY))
    assert not result.danger and not result.errors
    for entry in result.entries:
        if entry.type == COMMAND:
            paths = {c.path for c in entry.changes}
            assert paths <= {"inputs.create", "inputs.delete", "inputs.update", "dependencies"}


def test_triggers_hash_the_inline_command(prod_plan):
    # The value a deployed non-destructive step holds: the fingerprint of the command that carried its
    # program inline. Destructive steps (with a delete) hash their names and identity, as before.
    from components.hosts.remote import fingerprint

    inline = inline_invocation("prepare-host.sh", {"NODE_NAME": "cpu-01"}, True)
    assert inline.startswith("sudo -n env NODE_NAME=cpu-01 bash -c ")
    assert shlex.quote(script_text("prepare-host.sh")) in inline
    checked = 0
    for r in host_steps(prod_plan):
        cmd = r["inputs"].get("create")
        if cmd is None or "delete" in r["inputs"]:
            continue
        trigger = fingerprint(inline_invocation(command_script(cmd), command_env(cmd), cmd.startswith("sudo")))
        assert r["inputs"]["triggers"] == [trigger], r["name"]
        assert re.fullmatch(r"[0-9a-f]{16}", trigger)
        checked += 1
    assert checked > 50


def test_a_full_script_store_is_named_as_full_not_as_a_missing_program(prod_plan, tmp_path):
    """The host's script store on a full file system (a 64 KiB tmpfs filled, in a mount namespace of its own):
    the runner says the store is full (ENOSPC), not that the program is missing, and nothing runs."""
    if not shutil.which("unshare"):
        pytest.fail("unshare is missing: install util-linux")
    host = ScratchHost(tmp_path)
    store = host.root / "var/lib/ml-platform/scripts"
    store.mkdir(parents=True)
    cmd = prod_plan.named("cpu-04-prepare")["inputs"]["create"]
    script = tmp_path / "step.sh"
    script.write_text(cmd)
    fill = f"mount -t tmpfs -o size=64k tmpfs {store} && "
    fill += f"(dd if=/dev/zero of={store}/x bs=4k count=64 2>/dev/null; true)"
    env = {"PATH": f"{host.bin}:/usr/bin:/bin", "HOME": str(host.home), "HOST_ROOT": str(host.root)}
    env["RECORD"] = str(host.record)
    result = subprocess.run(
        ["unshare", "-rm", "/bin/bash", "-c", f"{fill} && /bin/bash {script}"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 1, result.stderr
    assert (
        f"error: host script prepare-host.sh (sha256 {program_digest('prepare-host.sh')}): {store} is full (ENOSPC"
        in (result.stderr)
    )
    assert "is not on this host" not in result.stderr and host.runs() == []
