"""The layered layout's orchestrator (`python -m stacks.orchestrate`) against the Automation API stand-in declared in
tests/stubs/automation.py (the Pulumi CLI cannot run here), and the migration from one stack (`migrate`)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import yaml

from benchmarks.inventory import inventory, stack_file
from stacks import layers, orchestrate
from stacks.layers import StackSpec
from stacks.orchestration import migrate as migration
from stacks.orchestration.run import Orchestrator, changes_of, shares
from stacks.orchestration.workspace import Environment
from tests.conftest import ROOT
from tests.stubs import automation as standin

ENV = "fleet"
GROUPS = ["rack-a", "rack-b", "rack-c", "rack-d"]
SPECS = [
    StackSpec(f"{ENV}-cluster", "cluster"),
    *[StackSpec(f"{ENV}-nodes-{g}", "nodes", g) for g in GROUPS],
    StackSpec(f"{ENV}-platform", "platform"),
]
CLUSTER = {
    "apiEndpoint": "https://10.20.0.10:6443",
    "caHash": "ab" * 32,
    "agentToken": "AGENT-TOKEN-1",
    "nodeKubeconfig": "NODE-PATCH-KUBECONFIG",
    "kubeconfig": "ADMIN-KUBECONFIG",
    "rke2Token": "SERVER-TOKEN",
}
# The environment's stack file as `pulumi config set` writes it: plain settings, secrets as `secure:` values.
ENV_CONFIG = {
    "ml-platform:cluster": {"name": "fleet"},
    "ml-platform:sshPrivateKey": {"secure": "v1:ssh-key"},
    "ml-platform:rke2Token": {"secure": "v1:server-token"},
    "ml-platform:zabbixAdminPassword": {"secure": "v1:zabbix-admin"},
    "ml-platform:monitoring": {"slack": {"channel": "#alerts", "token": {"secure": "v1:nested"}}},
    "kubernetes:kubeconfig": {"secure": "v1:some-kubeconfig"},
}


def write_env(work: Path, config: dict | None = None, **top) -> Path:
    path = work / f"Pulumi.{ENV}.yaml"
    path.write_text(yaml.safe_dump({"encryptionsalt": "v1:salt", **top, "config": config or ENV_CONFIG}))
    return path


@pytest.fixture
def fleet(tmp_path) -> standin.Fleet:
    write_env(tmp_path)
    return standin.Fleet(ENV, tmp_path, CLUSTER)


def orchestrator(fleet: standin.Fleet, lines: list[str] | None = None) -> Orchestrator:
    out = lines.append if lines is not None else (lambda line: None)
    return Orchestrator(Environment(ENV, fleet.work_dir, fleet, config_input=fleet.config_input), SPECS, out)


def window(fleet: standin.Fleet, stack: str, action: str = "up") -> tuple[int, int]:
    (run,) = [r for r in fleet.runs if r.stack == stack and r.action == action][-1:]
    return run.started, run.ended


# --- the budget -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "groups", "expected"),
    [(64, 4, [16, 16, 16, 16]), (10, 4, [3, 3, 2, 2]), (2, 4, [1, 1]), (7, 1, [7]), (5, 16, [1] * 5)],
)
def test_the_budget_is_split_into_slots_that_add_up_to_it(budget, groups, expected):
    assert shares(budget, groups) == expected
    assert sum(shares(budget, groups)) == budget


def test_a_budget_below_one_is_refused():
    with pytest.raises(ValueError, match="--parallel 0: give at least 1"):
        shares(0, 3)


# --- layers in order, groups in parallel -----------------------------------------------------------------------


def test_layers_run_in_order_and_the_groups_side_by_side(fleet):
    fleet.barrier = threading.Barrier(len(GROUPS))  # every group must be running at once to pass it
    lines: list[str] = []
    report = orchestrator(fleet, lines).run("up", 10)
    assert report.ok, lines
    ran = fleet.ran()
    assert (ran[0], sorted(ran[1:5]), ran[5:]) == (SPECS[0].name, [s.name for s in SPECS[1:5]], [SPECS[-1].name])
    cluster_end = window(fleet, f"{ENV}-cluster")[1]
    platform_start = window(fleet, f"{ENV}-platform")[0]
    for group in GROUPS:
        start, end = window(fleet, f"{ENV}-nodes-{group}")
        assert cluster_end < start and end < platform_start
    assert fleet.peak_stacks == len(GROUPS)
    assert sorted(r.parallel for r in fleet.runs if "-nodes-" in r.stack) == [2, 2, 3, 3]
    assert fleet.peak_parallel <= 10
    assert [r.parallel for r in fleet.runs if "-nodes-" not in r.stack] == [10, 10]
    assert "node groups: 4 stacks, 4 at once, --parallel 3+3+2+2" in lines


def test_fewer_slots_than_groups_queue_the_rest_within_the_budget(fleet):
    fleet.barrier = threading.Barrier(2)  # two at a time: passes only if two groups overlap, round after round
    report = orchestrator(fleet).run("up", 2)
    assert report.ok
    assert fleet.peak_parallel <= 2 and fleet.peak_stacks == 2
    assert sorted(r.stack for r in fleet.runs if r.parallel == 1) == [f"{ENV}-nodes-{g}" for g in GROUPS]


def test_every_stack_is_created_with_the_environments_secrets_provider(tmp_path):
    write_env(tmp_path, secretsprovider="awskms://alias/ml-platform?region=eu-central-1")
    fleet = standin.Fleet(ENV, tmp_path, CLUSTER)
    orchestrator(fleet).run("up", 8)
    assert {s.name: s.secrets_provider for s in fleet.stacks.values()} == dict.fromkeys(
        (s.name for s in SPECS), "awskms://alias/ml-platform?region=eu-central-1"
    )


def test_a_passphrase_environment_gives_passphrase_stacks(fleet):
    orchestrator(fleet).run("up", 8)
    assert {s.secrets_provider for s in fleet.stacks.values()} == {"passphrase"}


# --- config and credentials -----------------------------------------------------------------------------------


def test_node_group_stacks_hold_no_admin_credential(fleet):
    orchestrator(fleet).run("up", 8)
    config = {r.stack: r.config for r in fleet.runs}
    for group in GROUPS:
        held = config[f"{ENV}-nodes-{group}"]
        cluster_values = {f"cluster-stack:{key}" for key in ("caHash", "agentToken", "nodeKubeconfig")}
        assert set(held) == {"ml-platform:cluster", "ml-platform:sshPrivateKey", *cluster_values}
        # The CLI re-encrypted it for this stack (`pulumi config cp`), not copied as the env's ciphertext.
        assert held["ml-platform:sshPrivateKey"] == {"secure": f"{ENV}-nodes-{group}:ssh-key"}
        # From the cluster stack's outputs: the agent token and the Node-patching kubeconfig as secrets.
        assert held["cluster-stack:caHash"] == CLUSTER["caHash"]
        assert held["cluster-stack:agentToken"] == {"secure": f"{ENV}-nodes-{group}:{CLUSTER['agentToken']}"}
        assert held["cluster-stack:nodeKubeconfig"]["secure"].endswith(CLUSTER["nodeKubeconfig"])
    for name in (f"{ENV}-cluster", f"{ENV}-platform"):
        assert set(config[name]) == set(ENV_CONFIG)
    # No secret value ever went on a command line (`config set-all` would put them there; `config set` reads
    # each value from standard input, and the stand-in refuses a value among the arguments).
    assert not [args for args in fleet.cli if args[:2] == ["config", "set-all"]]
    sets = [args for args in fleet.cli if args[:2] == ["config", "set"]]
    assert {args[-1] for args in sets} == {
        "cluster-stack:caHash",
        "cluster-stack:agentToken",
        "cluster-stack:nodeKubeconfig",
    }
    assert all(("--secret" in args) == (args[-1] != "cluster-stack:caHash") for args in sets)
    assert ["config", "cp", "--stack", ENV, "--dest", f"{ENV}-nodes-rack-a", "--non-interactive"] in fleet.cli


def test_a_key_the_environment_drops_leaves_every_stack(fleet):
    orchestrator(fleet).run("up", 8)
    write_env(fleet.work_dir, {k: v for k, v in ENV_CONFIG.items() if k != "kubernetes:kubeconfig"})
    orchestrator(fleet).run("up", 8)
    assert all("kubernetes:kubeconfig" not in r.config for r in fleet.runs[len(SPECS) :])


def test_an_environment_importing_esc_environments_is_refused_before_any_stack(tmp_path):
    write_env(tmp_path, environment=["ml-platform/prod-secrets"])
    fleet = standin.Fleet(ENV, tmp_path, CLUSTER)
    with pytest.raises(ValueError, match="environment: the layered stacks get the environment's config by"):
        orchestrator(fleet)
    assert fleet.stacks == {}


# --- failure, resume, staleness ---------------------------------------------------------------------------------


def test_a_failed_group_does_not_stop_the_others_and_holds_the_platform(fleet):
    fleet.failing = {f"{ENV}-nodes-rack-b"}
    lines: list[str] = []
    report = orchestrator(fleet, lines).run("up", 8)
    status = {r.stack: r.status for r in report.results}
    assert status == {
        f"{ENV}-cluster": "succeeded",
        f"{ENV}-nodes-rack-a": "succeeded",
        f"{ENV}-nodes-rack-b": "failed",
        f"{ENV}-nodes-rack-c": "succeeded",
        f"{ENV}-nodes-rack-d": "succeeded",
        f"{ENV}-platform": "not run",
    }
    assert f"{ENV}-platform" not in fleet.ran()
    assert not report.ok
    assert report.held.startswith(
        f"{ENV}-platform not run: it waits for every node group, and {ENV}-nodes-rack-b is failed"
    )
    assert any("up failed: fleet-nodes-rack-b: a host step exited with status 1" in line for line in lines)
    assert f"to resume: python -m stacks.orchestrate up {ENV} --resume" in " ".join(lines)


def test_resume_runs_only_the_failed_group_then_the_platform(fleet):
    fleet.failing = {f"{ENV}-nodes-rack-b"}
    orchestrator(fleet).run("up", 8)
    fleet.failing = set()
    before = len(fleet.runs)
    report = orchestrator(fleet).run("up", 8, resume=True)
    assert report.ok
    assert [r.stack for r in fleet.runs[before:]] == [f"{ENV}-cluster", f"{ENV}-nodes-rack-b", f"{ENV}-platform"]
    assert {r.stack: r.status for r in report.results}[f"{ENV}-nodes-rack-a"] == "up to date"


def test_cluster_outputs_that_change_make_groups_stale_until_they_run_again(fleet):
    orchestrator(fleet).run("up", 8)
    fleet.cluster_outputs["agentToken"] = "AGENT-TOKEN-2"  # e.g. the agent token rotated
    lines: list[str] = []
    report = orchestrator(fleet, lines).run("up", 8, groups=["rack-a"])
    # The group that ran read the cluster outputs of this run, not the earlier ones.
    digest = layers.digest_of({k: fleet.cluster_outputs[k] for k in layers.NODE_INPUTS})
    assert fleet.stacks[f"{ENV}-nodes-rack-a"].outputs[layers.DIGEST_OUTPUT].value == digest
    assert sorted(report.stale) == [f"{ENV}-nodes-{g}" for g in ("rack-b", "rack-c", "rack-d")]
    assert all("cluster's outputs changed since its last up" in why for why in report.stale.values())
    assert "stale node groups (their cluster digest differs from the cluster stack's current outputs):" in lines
    assert f"{ENV}-platform" not in fleet.ran()[len(SPECS) :]
    before = len(fleet.runs)
    assert orchestrator(fleet).run("up", 8, resume=True).ok
    ran = [r.stack for r in fleet.runs[before:]]
    assert ran[0] == f"{ENV}-cluster" and ran[-1] == f"{ENV}-platform"
    assert sorted(ran[1:-1]) == sorted(report.stale)


def test_a_group_whose_update_is_still_running_holds_the_platform(fleet):
    orchestrator(fleet).run("up", 8)
    fleet.stacks[f"{ENV}-nodes-rack-c"].history.insert(0, standin._summary("up", "in-progress"))
    report = orchestrator(fleet).run_stack("up", f"{ENV}-platform", 8)
    assert f"{ENV}-nodes-rack-c is running: an update is in progress" in report.held


def test_continue_on_error_reaches_every_stacks_up_and_no_secret_is_asked_for(layered_env):
    fleet = standin.Fleet(ENV, layered_env, CLUSTER)
    status, _ = run_cli(["up", ENV, "--continue-on-error", "--parallel", "8"], layered_env, fleet)
    assert status == 0
    ups = [opts for _, action, opts in fleet.options if action == "up"]
    assert len(ups) == 4 and all(o["continue_on_error"] is True and o["show_secrets"] is False for o in ups)


def test_a_cluster_that_fails_runs_nothing_after_it(fleet):
    fleet.failing = {f"{ENV}-cluster"}
    report = orchestrator(fleet).run("up", 8)
    assert fleet.ran() == [f"{ENV}-cluster"]
    assert report.held == f"{ENV}-cluster failed: no node group or platform stack ran"


def test_preview_lists_stale_groups_and_runs_every_layer(fleet):
    orchestrator(fleet).run("up", 8)
    fleet.cluster_outputs["caHash"] = "cd" * 32
    orchestrator(fleet).run("up", 8, groups=["rack-c"])
    report = orchestrator(fleet).run("preview", 8)
    ran = fleet.ran("preview")
    assert (ran[0], sorted(ran[1:5]), ran[5:]) == (SPECS[0].name, [s.name for s in SPECS[1:5]], [SPECS[-1].name])
    assert sorted(report.stale) == [f"{ENV}-nodes-{g}" for g in ("rack-a", "rack-b", "rack-d")]


# --- destroy --------------------------------------------------------------------------------------------------------


def test_destroy_runs_the_layers_in_reverse(fleet):
    orchestrator(fleet).run("up", 8)
    assert orchestrator(fleet).run("destroy", 8).ok
    ran = fleet.ran("destroy")
    assert ran[0] == f"{ENV}-platform" and ran[-1] == f"{ENV}-cluster"
    assert window(fleet, f"{ENV}-platform", "destroy")[1] < min(
        window(fleet, f"{ENV}-nodes-{g}", "destroy")[0] for g in GROUPS
    )


def test_destroy_keeps_the_cluster_while_a_group_is_left(fleet):
    orchestrator(fleet).run("up", 8)
    fleet.failing = {f"{ENV}-nodes-rack-d"}
    report = orchestrator(fleet).run("destroy", 8)
    assert f"{ENV}-cluster" not in fleet.ran("destroy")
    assert report.held == f"{ENV}-cluster kept: {ENV}-nodes-rack-d failed to destroy"


# --- a group the settings no longer declare -------------------------------------------------------------------


def test_a_retired_groups_stack_blocks_up_until_it_is_destroyed(fleet):
    more = [*SPECS[:-1], StackSpec(f"{ENV}-nodes-rack-e", "nodes", "rack-e"), SPECS[-1]]
    Orchestrator(Environment(ENV, fleet.work_dir, fleet, config_input=fleet.config_input), more, lambda line: None).run(
        "up", 8
    )
    # rack-e's last nodes left the settings: its stack still holds them, and nothing else would drain them.
    with pytest.raises(ValueError, match=f"{ENV}-nodes-rack-e: the stack of a node group the settings no longer"):
        orchestrator(fleet).run("up", 8)
    lines: list[str] = []
    orchestrator(fleet, lines).run("preview", 8)
    assert any(line.startswith(f"warning: {ENV}-nodes-rack-e:") for line in lines)
    with pytest.raises(ValueError, match="--groups rack-a: destroy takes a group only once the settings no longer"):
        orchestrator(fleet).run("destroy", 8, groups=["rack-a"])
    before = len(fleet.runs)
    assert orchestrator(fleet).run("destroy", 8, groups=["rack-e"]).ok
    assert [(r.stack, r.action) for r in fleet.runs[before:]] == [(f"{ENV}-nodes-rack-e", "destroy")]
    assert ["stack", "rm", "--yes", f"{ENV}-nodes-rack-e"] in fleet.cli and f"{ENV}-nodes-rack-e" not in fleet.stacks
    assert orchestrator(fleet).run("up", 8).ok


def test_another_environments_stacks_are_never_this_ones_retired_groups(fleet):
    """`fleet-nodes-eu-cluster` and `fleet-nodes-eu-platform` are the stacks of an environment `fleet-nodes-eu`, not
    a group `eu-cluster` of `fleet`: only a stack whose own outputs name this environment and group counts."""
    other = standin.Fleet(f"{ENV}-nodes-eu", fleet.work_dir, CLUSTER)
    for name in (f"{ENV}-nodes-eu-cluster", f"{ENV}-nodes-eu-platform"):
        fleet.stacks[name] = standin.StackState(name, None, other.program(f"{ENV}-nodes-eu-cluster"))
    lines: list[str] = []
    assert orchestrator(fleet, lines).run("up", 8).ok
    assert not [line for line in lines if "no longer declare" in line]
    with pytest.raises(ValueError, match="retired groups: none"):
        orchestrator(fleet).run("destroy", 8, groups=["eu-cluster"])
    assert f"{ENV}-nodes-eu-cluster" in fleet.stacks


def test_layered_stacks_do_not_run_beside_a_single_stack_that_still_holds_the_environment(fleet):
    fleet.stacks[ENV] = standin.StackState(ENV, None)
    fleet.stacks[ENV].resources = [
        f"urn:pulumi:{ENV}::ml-platform::pulumi:pulumi:Stack::ml-platform-{ENV}",
        f"urn:pulumi:{ENV}::ml-platform::random:index/randomPassword:RandomPassword::rke2-token",
        f"urn:pulumi:{ENV}::ml-platform::command:remote:Command::cpu-01-rke2",
    ]
    with pytest.raises(ValueError, match=f"stack {ENV} still holds 2 resources of the single layout.*migrate"):
        orchestrator(fleet).run("up", 8)
    with pytest.raises(ValueError, match="still holds 2 resources"):
        orchestrator(fleet).run_stack("up", f"{ENV}-cluster", 8)
    assert fleet.runs == []  # nothing ran
    fleet.stacks[ENV].resources = fleet.stacks[ENV].resources[:1]  # moved away: only its root is left
    assert orchestrator(fleet).run("up", 8).ok


URN_A = f"urn:pulumi:{ENV}-nodes-rack-a::ml-platform::command:remote:Command"


def test_a_node_that_changes_group_is_refused_with_the_moves_that_take_it_along(fleet):
    # cpu-11-b: a node whose name extends cpu-11's; its steps are its own, not cpu-11's.
    fleet.members = {"rack-a": ["cpu-10", "cpu-11", "cpu-11-b"], "rack-b": ["cpu-20"]}
    first = orchestrator(fleet)
    first.members = dict(fleet.members)
    assert first.run("up", 8).ok
    moved = orchestrator(fleet)
    moved.members = {"rack-a": ["cpu-10", "cpu-11-b"], "rack-b": ["cpu-20", "cpu-11"]}
    with pytest.raises(ValueError, match="a node changes group") as refused:
        moved.run("up", 8)
    move = (
        f"cpu-11 moves from {ENV}-nodes-rack-a to {ENV}-nodes-rack-b: pulumi state move --source {ENV}-nodes-rack-a "
        f"--dest {ENV}-nodes-rack-b '{URN_A}::cpu-11-prepare' '{URN_A}::cpu-11-rke2'"
    )
    assert move in str(refused.value)
    assert "cpu-10" not in str(refused.value) and "cpu-11-b" not in str(refused.value)
    with pytest.raises(ValueError, match="a node changes group"):
        moved.run_stack("up", f"{ENV}-nodes-rack-b", 8)
    lines: list[str] = []
    moved.out = lines.append
    moved.run("preview", 8)
    assert any(line.startswith("warning: a node changes group") for line in lines)


def test_a_ci_job_for_one_stack_refuses_while_a_retired_group_still_holds_nodes(fleet):
    more = [*SPECS[:-1], StackSpec(f"{ENV}-nodes-rack-e", "nodes", "rack-e"), SPECS[-1]]
    Orchestrator(Environment(ENV, fleet.work_dir, fleet, config_input=fleet.config_input), more, lambda line: None).run(
        "up", 8
    )
    with pytest.raises(ValueError, match=f"{ENV}-nodes-rack-e: the stack of a node group the settings no longer"):
        orchestrator(fleet).run_stack("up", f"{ENV}-cluster", 8)


# --- the zero-change check ---------------------------------------------------------------------------------------


def test_check_fails_on_a_change_but_not_on_a_stacks_own_components(fleet):
    orchestrator(fleet).run("up", 8)
    fleet.changes = {
        f"{ENV}-nodes-rack-a": [
            ("same", "command:remote:Command", True),
            ("create", "mlplatform:cluster:ClusterBootstrap", False),
            ("create", "pulumi:providers:kubernetes", True),
            ("read", "pulumi:pulumi:StackReference", True),
        ],
        f"{ENV}-nodes-rack-b": [("update", "command:remote:Command", True)],
        f"{ENV}-platform": [("create", "kubernetes:core/v1:Namespace", True)],
    }
    report = orchestrator(fleet).run("preview", 8, check=True)
    failed = {r.stack: r.note for r in report.results if r.status == "failed"}
    assert sorted(failed) == [f"{ENV}-nodes-rack-b", f"{ENV}-platform"]
    assert (
        "update urn:pulumi:fleet-nodes-rack-b::ml-platform::command:remote:Command::x" in failed[f"{ENV}-nodes-rack-b"]
    )
    assert not report.ok


def test_node_groups_preview_only_once_the_cluster_stack_has_outputs(fleet):
    """Before the cluster's first up there is no CA hash or agent token to join with: the groups say so and are
    not previewed (nothing is set in their config); after it, they preview with the cluster's values."""
    lines: list[str] = []
    report = orchestrator(fleet, lines).run("preview", 8)
    waiting = {r.stack: r.note for r in report.results if r.layer == "nodes"}
    assert set(waiting) == {f"{ENV}-nodes-{g}" for g in GROUPS}
    assert all(r.status == "not run" for r in report.results if r.layer == "nodes") and not report.ok
    assert all("no outputs yet" in note for note in waiting.values())
    assert not [args for args in fleet.cli if args[:2] == ["config", "set"]]
    orchestrator(fleet).run("up", 8)
    again = orchestrator(fleet).run("preview", 8)
    assert {r.status for r in again.results if r.layer == "nodes"} == {"succeeded"}


def test_a_providers_new_configuration_is_no_change_to_a_deployed_resource():
    """A node group's provider moved from the single stack takes the Node-patching kubeconfig: an update of the
    provider alone; what it would do to a resource is that resource's own step."""
    events = [
        standin._pre_event("update", "urn:p", "pulumi:providers:kubernetes", True),
        standin._pre_event("update", "urn:patch", "kubernetes:core/v1:NodePatch", True),
        standin._pre_event("replace", "urn:job", "kubernetes:batch/v1:Job", True),
    ]
    assert changes_of(events) == [("update", "urn:patch"), ("replace", "urn:job")]


def test_changes_of_reads_real_engine_events():
    events = [standin._pre_event("delete", "urn:a", "command:remote:Command", True), object()]
    assert changes_of(events) == [("delete", "urn:a")]


# --- the stand-in itself ---------------------------------------------------------------------------------------------


def test_the_standin_refuses_what_the_real_api_would(fleet):
    stack = fleet.create_or_select_stack(f"{ENV}-cluster", work_dir=str(fleet.work_dir))
    with pytest.raises(TypeError):
        stack.up(paralel=4)  # a misspelt keyword the real Stack.up does not take
    with pytest.raises(TypeError):
        fleet.create_or_select_stack(f"{ENV}-cluster", workdir="x")


# --- the command line --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def layered_env(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("env")
    raw = inventory(100, layout="layered")
    doc = yaml.safe_load(stack_file(raw))
    doc["config"]["ml-platform:sshPrivateKey"] = {"secure": "v1:key"}
    (work / f"Pulumi.{ENV}.yaml").write_text(yaml.safe_dump({"encryptionsalt": "v1:salt", **doc}))
    return work


def run_cli(args: list[str], work: Path, fleet: standin.Fleet | None = None) -> tuple[int, list[str]]:
    lines: list[str] = []
    config_input = fleet.config_input if fleet else None
    return orchestrate.main(args, auto=fleet, work_dir=work, out=lines.append, config_input=config_input), lines


def test_the_command_runs_the_stacks_the_settings_declare(layered_env):
    fleet = standin.Fleet(ENV, layered_env, CLUSTER)
    status, lines = run_cli(["up", ENV, "--parallel", "16"], layered_env, fleet)
    assert status == 0, lines
    ran = fleet.ran()
    assert (ran[0], sorted(ran[1:-1]), ran[-1]) == (
        f"{ENV}-cluster",
        [f"{ENV}-nodes-group-01", f"{ENV}-nodes-group-02"],
        f"{ENV}-platform",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["up", ENV, "--groups", "group-09"], "--groups: group-09 not a node group of fleet (its groups: group-01"),
        (["up", ENV, "--parallel", "0"], "--parallel 0: give at least 1"),
        (["destroy", ENV, "--groups", "group-01"], "to retire a group, remove its nodes from the settings and run up"),
        (["preview", ENV, "--resume"], "--resume: only with up"),
    ],
)
def test_bad_input_is_refused_before_any_stack_is_touched(layered_env, capsys, args, message):
    fleet = standin.Fleet(ENV, layered_env, CLUSTER)
    status, _ = run_cli(args, layered_env, fleet)
    assert status == 2
    assert message in capsys.readouterr().err
    assert fleet.stacks == {} and fleet.runs == []


def test_a_single_stack_environment_is_sent_to_pulumi_up(tmp_path, capsys):
    (tmp_path / "Pulumi.small.yaml").write_text((ROOT / "Pulumi.lab.yaml").read_text())
    status, _ = run_cli(["up", "small"], tmp_path, standin.Fleet("small", tmp_path, CLUSTER))
    assert status == 2
    assert "run `pulumi up --stack small`" in capsys.readouterr().err


# --- migration ------------------------------------------------------------------------------------------------------


def export_of(single_plan: dict, extra: list[dict] = ()) -> dict:
    """A `pulumi stack export` of the single stack as the engine writes it: the root first, URNs without the root
    type in a top-level resource's type chain, default providers, parents before children."""
    key = migration.engine_form
    urn = lambda u: f"urn:pulumi:{ENV}::{key(migration.strip(u))}"  # noqa: E731
    root = f"urn:pulumi:{ENV}::ml-platform::pulumi:pulumi:Stack::ml-platform-{ENV}"
    resources = [{"urn": root, "custom": False, "type": "pulumi:pulumi:Stack"}]
    resources.append(
        {
            "urn": f"urn:pulumi:{ENV}::ml-platform::pulumi:providers:command::default_1_2_1",
            "custom": True,
            "id": "1",
            "type": "pulumi:providers:command",
        }
    )
    for r in single_plan["resources"]:
        parent = r.get("parent")
        entry = {"urn": urn(r["urn"]), "custom": r["custom"], "type": r["type"], "id": "x" if r["custom"] else ""}
        entry["parent"] = urn(parent) if parent and "pulumi:pulumi:Stack::" not in parent else root
        resources.append(entry)
    return {"version": 3, "deployment": {"manifest": {}, "resources": resources + list(extra)}}


@pytest.fixture(scope="module")
def plans(layered_env, tmp_path_factory):
    from stacks.engine import evaluate_stack
    from stacks.layered_plan import evaluate_layered

    layered = {n: p.resources for n, p in evaluate_layered(ENV, layered_env / f"Pulumi.{ENV}.yaml").items()}
    single_file = tmp_path_factory.mktemp("single") / f"Pulumi.{ENV}.yaml"
    single_file.write_text(stack_file(inventory(100)))
    single = json.loads(evaluate_stack(ENV, single_file).to_json())
    plans_dir = tmp_path_factory.mktemp("plans")
    for name, resources in layered.items():
        (plans_dir / f"{name}.json").write_text(json.dumps({"resources": resources}))
    return plans_dir, single


def migrate(layered_env, plans, tmp_path, state: dict, back: bool = False) -> tuple[int, str]:
    plans_dir, _ = plans
    (tmp_path / "state.json").write_text(json.dumps(state))
    args = ["migrate", ENV, "--plans", str(plans_dir), "--state", str(tmp_path / "state.json")]
    status, lines = run_cli(args + (["--back"] if back else []), layered_env)
    return status, "\n".join(lines)


def urn_of(line: str) -> str | None:
    """The URN an argument line of a `pulumi state move` names (shell-quoted when it has a `$`)."""
    text = line.strip().removesuffix("\\").strip().strip("'")
    return text if line.startswith("  ") and text.startswith("urn:") else None


def moved_urns(script: str) -> list[str]:
    return [u for u in map(urn_of, script.splitlines()) if u]


def test_migration_moves_every_resource_exactly_once(layered_env, plans, tmp_path):
    _, single = plans
    state = export_of(single)
    status, script = migrate(layered_env, plans, tmp_path, state)
    assert status == 0, script
    lines = script.splitlines()
    backup = lines.index(f"pulumi stack export --stack {ENV} --file {ENV}-single-backup.json")
    first_move = next(i for i, line in enumerate(lines) if line.startswith("pulumi state move"))
    expect = f"--check --expect-create {ENV}-layered-creates.txt"
    check = lines.index(f"python -m stacks.orchestrate preview {ENV} {expect}")
    # The cluster stack checked, then brought up alone (moves carry no outputs; the groups join with them).
    cluster_check = lines.index(f"python -m stacks.orchestrate preview {ENV} --stack {ENV}-cluster {expect}")
    cluster_up = lines.index(f"python -m stacks.orchestrate up {ENV} --stack {ENV}-cluster")
    assert backup < first_move < cluster_check < cluster_up < check
    # Created, not moved: what only the layered layout has (the Node-patching credential of the node groups).
    creates = lines[lines.index(f"cat > {ENV}-layered-creates.txt <<'EOF'") + 1 : lines.index("EOF")]
    assert sorted(creates) == sorted(
        f"urn:pulumi:{ENV}-cluster::ml-platform::mlplatform:cluster:ClusterBootstrap${kind}::{name}"
        for kind, name in (
            ("kubernetes:core/v1:ServiceAccount", "cluster-node-labeller"),
            ("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "cluster-node-labeller"),
            ("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding", "cluster-node-labeller"),
            ("kubernetes:core/v1:Secret", "cluster-node-labeller-token"),
        )
    )
    # The commands replayed on the export the way `pulumi state move` works: each resource once, in its stack.
    order = [
        s.name for s in layers.stack_specs(ENV, orchestrate.stack_settings(ENV, layered_env / f"Pulumi.{ENV}.yaml"))
    ]
    held = {s: [migration.engine_form(k) for k in ks] for s, ks in layers.assign(_plans(plans)).items()}
    resources = {
        migration.engine_form(migration.strip(r["urn"])): {"custom": r["custom"], "parent": None}
        for rs in _plans(plans).values()
        for r in rs
    }
    deployed = {migration.strip(r["urn"]) for r in state["deployment"]["resources"]}
    received = migration.check(state, _replay(script, held, resources, order, deployed))
    moved = sorted(k for ks in received.values() for k in ks)
    assert len(moved) == len(set(moved)) == len(state["deployment"]["resources"]) - len(migration.stays(state))
    left = {r["urn"] for r in state["deployment"]["resources"]} - {f"urn:pulumi:{ENV}::{k}" for k in moved}
    assert left == set(migration.stays(state))
    # What stays: the stack's root and its providers (state move copies a provider to each stack that uses it).
    assert sorted(u.split("::")[2] for u in left) == [
        "mlplatform:cluster:ClusterBootstrap$pulumi:providers:kubernetes",
        "pulumi:providers:command",
        "pulumi:pulumi:Stack",
    ]
    # A top-level resource is named as the engine writes it: no root type in its type chain.
    assert f"urn:pulumi:{ENV}::ml-platform::mlplatform:cluster:ClusterBootstrap::cluster" in moved_urns(script)


def _plans(plans) -> dict:
    plans_dir, _ = plans
    return {p.stem: json.loads(p.read_text())["resources"] for p in sorted(plans_dir.glob("*.json"))}


def _replay(script: str, held, resources, order, deployed) -> migration.Migration:
    """The script's moves read back from its text (what an operator runs), with the plans' ownership."""
    plan = migration.plan_migration(ENV, held, resources, order, deployed)
    moves, current = [], None
    for line in script.splitlines():
        if line.startswith("pulumi state move"):
            current = migration.Move(line.split("--dest ")[1].split()[0], [])
            moves.append(current)
        elif urn_of(line) and current is not None:
            current.urns.append(urn_of(line))
    plan.moves = moves
    return plan


def test_migration_refuses_a_state_with_resources_no_stack_holds(layered_env, plans, tmp_path, capsys):
    _, single = plans
    stray = {
        "urn": f"urn:pulumi:{ENV}::ml-platform::command:remote:Command::old-step",
        "custom": True,
        "type": "command:remote:Command",
        "parent": f"urn:pulumi:{ENV}::ml-platform::pulumi:pulumi:Stack::ml-platform-{ENV}",
    }
    status, _ = migrate(layered_env, plans, tmp_path, export_of(single, [stray]))
    assert status == 2
    assert "ml-platform::command:remote:Command::old-step: left behind in fleet" in capsys.readouterr().err


def test_a_planned_resource_the_state_lacks_is_created_not_moved(layered_env, plans, tmp_path):
    _, single = plans
    state = export_of(single)
    dropped = next(r for r in state["deployment"]["resources"] if r["type"] == "command:remote:Command")
    state["deployment"]["resources"].remove(dropped)
    status, script = migrate(layered_env, plans, tmp_path, state)
    assert status == 0
    assert dropped["urn"] not in moved_urns(script)
    stack = next(line for line in script.splitlines() if line.endswith(migration.strip(dropped["urn"])))
    assert stack.startswith(f"urn:pulumi:{ENV}-nodes-group-0") or stack.startswith(f"urn:pulumi:{ENV}-cluster")


def test_migration_asks_for_the_layout_first(tmp_path, capsys):
    (tmp_path / "Pulumi.small.yaml").write_text((ROOT / "Pulumi.lab.yaml").read_text())
    (tmp_path / "state.json").write_text(json.dumps({"deployment": {"resources": []}}))
    status, _ = run_cli(["migrate", "small", "--state", str(tmp_path / "state.json")], tmp_path)
    assert status == 2
    assert "set layout: layered in Pulumi.small.yaml first (no `up`), then migrate" in capsys.readouterr().err


def test_migration_needs_the_state(layered_env, plans, capsys):
    plans_dir, _ = plans
    status, _ = run_cli(["migrate", ENV, "--plans", str(plans_dir)], layered_env)
    assert status == 2
    assert f"give --state, the single stack's state (`pulumi stack export --stack {ENV} --file FILE`)" in (
        capsys.readouterr().err
    )


def test_moves_run_deepest_first_or_a_parent_takes_other_stacks_children(layered_env, plans):
    _, single = plans
    state = export_of(single)
    held = {s: [migration.engine_form(k) for k in ks] for s, ks in layers.assign(_plans(plans)).items()}
    parents = {r["urn"]: r.get("parent") for r in state["deployment"]["resources"]}
    resources = {
        migration.strip(u): {"custom": True, "parent": migration.strip(p) if p else None} for u, p in parents.items()
    }
    for r in state["deployment"]["resources"]:
        resources[migration.strip(r["urn"])]["custom"] = r["custom"]
    order = list(held)
    deployed = set(resources)
    plan = migration.plan_migration(ENV, held, resources, order, deployed)
    assert migration.check(state, plan)
    shallow_first = migration.Migration(ENV, list(reversed(plan.moves)), plan.owner, plan.parents)
    # Shallowest first, a component takes along children that other stacks hold, and their own moves find nothing.
    with pytest.raises(migration.MigrationError, match="no resources found to move to fleet-platform"):
        migration.check(state, shallow_first)


def test_going_back_moves_each_layered_stacks_resources_into_the_single_stack(layered_env, plans, tmp_path):
    _, single = plans
    # The single stack's state after the move holds its root and providers only: not needed to go back.
    status, lines = run_cli(["migrate", ENV, "--plans", str(plans[0]), "--back"], layered_env)
    script = "\n".join(lines)
    assert status == 0
    sources = [line.split("--source ")[1].split()[0] for line in script.splitlines() if "state move" in line]
    assert sources[0] == f"{ENV}-platform" and sources[-1] == f"{ENV}-cluster"
    assert all(f"--dest {ENV} " in line for line in script.splitlines() if "state move" in line)
    assert "pulumi stack export" not in script
    assert f"# Once that preview shows no change: pulumi stack rm --force --yes {ENV}-cluster" in script


# --- what the delivery workflows ask -------------------------------------------------------------------------------


def test_stacks_gives_the_workflow_its_matrix_and_budget(layered_env):
    status, lines = run_cli(["stacks", ENV, "--parallel", "48"], layered_env)
    assert status == 0
    assert lines == [
        "layout=layered",
        f"cluster={ENV}-cluster",
        'groups=["group-01", "group-02"]',
        f"platform={ENV}-platform",
        "slots=2",
        "group-parallel=24",
    ]


def test_stacks_of_a_single_stack_environment(tmp_path):
    (tmp_path / "Pulumi.small.yaml").write_text((ROOT / "Pulumi.lab.yaml").read_text())
    status, lines = run_cli(["stacks", "small", "--parallel", "5"], tmp_path)
    assert status == 0
    assert lines[:3] == ["layout=single", "cluster=", "groups=[]"]


def plan_file(path: Path, resources: list[dict], outputs: dict | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"stack": path.stem, "resources": resources, "outputs": outputs or {}}))


def test_changed_lists_only_the_stacks_whose_plan_differs(tmp_path):
    a, b = [{"urn": "u1", "inputs": {"x": 1}}], [{"urn": "u1", "inputs": {"x": 2}}]
    plan_file(tmp_path / "plan-lab-base.json", a)
    plan_file(tmp_path / "plan-lab-head.json", a)  # single, unchanged
    for side, group_b in (("base", a), ("head", b)):
        plan_file(tmp_path / f"plan-big-{side}.json" / "big-cluster.json", a)
        plan_file(tmp_path / f"plan-big-{side}.json" / "big-nodes-rack-a.json", a)
        plan_file(tmp_path / f"plan-big-{side}.json" / "big-nodes-rack-b.json", group_b)
    plan_file(tmp_path / "plan-big-head.json" / "big-nodes-rack-c.json", a)  # a new group
    plan_file(tmp_path / "plan-big-base.json" / "big-nodes-rack-z.json", a)  # a group the change removes
    plan_file(tmp_path / "plan-new-head.json", a)  # an environment new in the change (no base plan)
    status, lines = run_cli(["changed", "lab,big,new", "--plans", str(tmp_path)], tmp_path)
    assert status == 0
    (line,) = lines
    entries = json.loads(line.removeprefix("previews="))
    assert [(e["env"], e["stack"]) for e in entries] == [
        ("big", "big-nodes-rack-b"),
        ("big", "big-nodes-rack-c"),
        ("new", "new"),
    ]
    assert entries[0]["ssh_key"] == "SSH_PRIVATE_KEY_BIG" and entries[0]["rke2_token"] == "RKE2_TOKEN_BIG"


def test_an_environment_that_turns_layered_previews_every_new_stack(tmp_path):
    plan_file(tmp_path / "plan-prod-base.json", [{"urn": "u1"}])
    for name in ("prod-cluster", "prod-nodes-rack-a", "prod-platform"):
        plan_file(tmp_path / "plan-prod-head.json" / f"{name}.json", [{"urn": "u1"}])
    status, lines = run_cli(["changed", "prod", "--plans", str(tmp_path)], tmp_path)
    assert [e["stack"] for e in json.loads(lines[0].removeprefix("previews="))] == [
        "prod-cluster",
        "prod-nodes-rack-a",
        "prod-platform",
    ]


def test_one_platform_job_refuses_while_a_group_is_behind(fleet):
    orch = orchestrator(fleet)
    orch.run_stack("up", f"{ENV}-cluster", 8)
    for group in GROUPS[:3]:
        orch.run_stack("up", f"{ENV}-nodes-{group}", 2)
    report = orchestrator(fleet).run_stack("up", f"{ENV}-platform", 8)
    assert not report.ok and f"{ENV}-platform" not in fleet.ran()
    assert f"{ENV}-nodes-rack-d is never: never deployed" in report.held
    orchestrator(fleet).run_stack("up", f"{ENV}-nodes-rack-d", 2)
    assert orchestrator(fleet).run_stack("up", f"{ENV}-platform", 8).ok
    with pytest.raises(ValueError, match="--stack fleet-nodes-rack-q: not a stack of fleet"):
        orch.run_stack("up", f"{ENV}-nodes-rack-q", 2)


def test_without_the_pulumi_cli_the_real_api_says_so(layered_env, monkeypatch, capsys):
    # No stand-in: the real pulumi.automation, which looks for the `pulumi` binary first.
    monkeypatch.setenv("PATH", str(layered_env))
    monkeypatch.delenv("PULUMI_HOME", raising=False)
    status = orchestrate.main(["up", ENV], work_dir=layered_env, out=lambda line: None)
    assert status == 2
    assert "the Pulumi CLI is not on PATH: install it (3.226 or later)" in capsys.readouterr().err
