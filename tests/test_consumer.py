"""The consumer example (`examples/consumer/`): another team's program built on its team stack.

The whole chain as shipped, on the mock engine: the real platform (prod) writes its public contract;
the real `teams/` program makes the vision team's stack from it (tests/test_teams.py); the consumer's
StackReference is answered with that stack's outputs (its kubeconfig as a secret, as the real engine
returns a secret output), and checked for what that team would notice.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from pulumi.runtime.mocks import MockResourceArgs

from stacks import engine
from stacks.engine import SECRET, UNKNOWN
from tests.conftest import ROOT
from tests.test_teams import ADMIN_KUBECONFIG, DEPLOYED, evaluate, leaks, load_program, team_stack

CONSUMER = ROOT / "examples" / "consumer"
TEAM_STACK = "organization/ml-platform-teams/prod-vision"
KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: ml-prod
  cluster: {server: "https://10.20.0.10:6443", certificate-authority-data: Q0EK}
users:
- name: vision-ci
  user: {token: dmlzaW9uLWNpLXRva2VuCg}
contexts:
- name: ml-prod
  context: {cluster: ml-prod, user: vision-ci, namespace: vision}
current-context: ml-prod
"""


def consumer_config(**overrides: str) -> dict[str, str]:
    """The consumer's config as the CLI would pass it: its Pulumi.yaml defaults, then the overrides."""
    project = yaml.safe_load((CONSUMER / "Pulumi.yaml").read_text())
    name = project["name"]
    values = {key: decl["default"] for key, decl in project["config"].items() if "default" in decl}
    values.update({"teamStack": TEAM_STACK, **overrides})
    return {f"{name}:{key}": value for key, value in values.items()}


def team_outputs(team_plan: engine.Plan, secret: frozenset[str]) -> engine.StackOutputs:
    """What a StackReference to the deployed team stack returns: its outputs, the kubeconfig as up
    makes it, values only `up` knows filled in."""
    values: dict[str, Any] = {}
    for name, value in team_plan.outputs.items():
        if name == "kubeconfig":
            value = KUBECONFIG
        elif value in (SECRET, UNKNOWN):
            value = "value"
        values[name] = value
    return engine.StackOutputs(values=values, secret=secret)


def evaluate_consumer(
    team_plan: engine.Plan,
    secret: frozenset[str] = frozenset({"kubeconfig"}),
    config: dict[str, str] | None = None,
    team_stack_name: str = TEAM_STACK,
) -> engine.Plan:
    config = config or consumer_config()
    project = next(iter(config)).split(":", 1)[0]
    return engine.run(
        "dev",
        config,
        [],
        load_program("vision_training", CONSUMER).program,
        project=project,
        stack_references={team_stack_name: team_outputs(team_plan, secret)},
    )


SHIPPED = sorted(path.name for path in CONSUMER.glob("Pulumi.*.yaml"))


def shipped_config(stack_file: str) -> dict[str, str]:
    """The example's config exactly as shipped: its Pulumi.yaml defaults under its stack file's values."""
    project = yaml.safe_load((CONSUMER / "Pulumi.yaml").read_text())
    config = {f"{project['name']}:{k}": d["default"] for k, d in project["config"].items() if "default" in d}
    return {**config, **yaml.safe_load((CONSUMER / stack_file).read_text())["config"]}


def test_the_example_ships_a_stack_for_each_platform_stack():
    named = {shipped_config(name)["vision-training:teamStack"].split("/")[-1].split("-")[0] for name in SHIPPED}
    assert named == {path.name.split(".")[1] for path in ROOT.glob("Pulumi.*.yaml")}


@pytest.mark.parametrize("stack_file", SHIPPED)
def test_the_example_as_shipped_runs_against_the_team_stack_it_names(stack_file, request):
    # `<org>/ml-platform-teams/<env>-<team>`: the team's stack that the `teams/` program makes from the
    # `<env>` platform's public contract.
    config = shipped_config(stack_file)
    stack_name = config["vision-training:teamStack"]
    env, team = stack_name.removeprefix("organization/ml-platform-teams/").split("-", 1)
    plan = request.getfixturevalue(f"{env}_plan")
    assert team in plan.outputs["teamNamespaces"], f"{stack_file}: team {team!r} is not a team of {env}"
    consumer = evaluate_consumer(team_stack(plan, team), config=config, team_stack_name=stack_name)
    assert consumer.outputs["namespace"] == plan.outputs["teamNamespaces"][team][0]
    pvc = consumer.named("datasets")["inputs"]
    assert pvc["spec"]["storageClassName"] == plan.outputs["storageClasses"]["tier2Shared"]


@pytest.fixture(scope="module")
def platform_plan() -> engine.Plan:
    return evaluate("prod", computed=DEPLOYED)


@pytest.fixture(scope="module")
def vision_stack(platform_plan) -> engine.Plan:
    return team_stack(platform_plan, "vision")


@pytest.fixture(scope="module")
def consumer_plan(vision_stack) -> engine.Plan:
    return evaluate_consumer(vision_stack)


def test_consumer_provider_gets_its_teams_kubeconfig_as_a_secret_not_the_admin_one(consumer_plan):
    provider = consumer_plan.named("platform")
    assert provider["type"] == "pulumi:providers:kubernetes"
    assert provider["inputs"]["kubeconfig"] == SECRET
    assert consumer_plan.revealed[provider["urn"]]["kubeconfig"] == KUBECONFIG
    assert ADMIN_KUBECONFIG not in repr(consumer_plan.revealed)
    assert provider["inputs"]["namespace"] == "vision"


def test_the_consumers_whole_state_holds_no_platform_or_other_team_secret(consumer_plan, platform_plan):
    assert leaks(consumer_plan, "vision", list(platform_plan.outputs["teamNamespaces"])) == []
    references = [state["name"] for urn, state in consumer_plan.revealed.items() if "StackReference" in urn]
    assert references == [TEAM_STACK]  # never the platform stack


def test_the_secret_comes_from_the_team_stack(vision_stack):
    # Were the team stack to publish the kubeconfig plain, the consumer would store it plain: the
    # secrecy the consumer gets is the team stack's (tests/test_teams.py pins it).
    assert vision_stack.outputs["kubeconfig"] == SECRET
    leaky = evaluate_consumer(vision_stack, secret=frozenset())
    assert leaky.named("platform")["inputs"]["kubeconfig"] == KUBECONFIG


def test_consumer_objects_go_through_its_own_provider(consumer_plan):
    provider_urn = consumer_plan.named("platform")["urn"]
    assert consumer_plan.named("datasets")["provider"] == provider_urn
    # A team credential cannot create namespaces: the example creates none (the platform does).
    assert not consumer_plan.by_type("kubernetes:core/v1:Namespace")


def test_datasets_volume_is_on_the_platforms_tier2_shared_class(consumer_plan, platform_plan):
    pvc = consumer_plan.named("datasets")
    assert pvc["type"] == "kubernetes:core/v1:PersistentVolumeClaim"
    spec = pvc["inputs"]["spec"]
    assert spec["storageClassName"] == platform_plan.outputs["storageClasses"]["tier2Shared"]
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert spec["resources"]["requests"]["storage"] == "500Gi"
    assert pvc["inputs"]["metadata"]["namespace"] == "vision"


def test_consumer_outputs_hold_no_secret_in_plain_text(consumer_plan, platform_plan):
    assert consumer_plan.outputs == {
        "apiEndpoint": platform_plan.outputs["apiEndpoint"],
        "datasetsClaim": "datasets",
        "namespace": "vision",
    }
    assert KUBECONFIG not in repr(consumer_plan.resources)


def test_consumer_reads_only_what_its_team_stack_publishes(vision_stack):
    # A consumer that reads an undeclared output would break on the next rename without any test failing.
    source = (CONSUMER / "__main__.py").read_text()
    read = set(re.findall(r"(?:require|get)_output\(\s*\"([^\"]+)\"", source))
    assert read, "the example reads no output"
    assert read <= set(vision_stack.outputs), sorted(read - set(vision_stack.outputs))


def test_a_reference_to_a_stack_the_test_did_not_provide_fails_loudly():
    # Like the engine, which fails a StackReference to a stack that does not exist.
    mocks = engine._Mocks({TEAM_STACK: engine.StackOutputs(values={})})
    args = MockResourceArgs("pulumi:pulumi:StackReference", "platform", {"name": "organization/ml-platform/nope"})
    with pytest.raises(KeyError, match="no such stack"):
        mocks.new_resource(args)


def test_consumer_project_files_are_complete():
    project = yaml.safe_load((CONSUMER / "Pulumi.yaml").read_text())
    assert project["runtime"]["name"] == "python"
    requirements = (CONSUMER / "requirements.txt").read_text()
    assert "pulumi>=" in requirements and "pulumi-kubernetes>=" in requirements
    # Every config key the program reads is declared (typed, described) in its Pulumi.yaml.
    read = set(re.findall(r"config\.require\(\"([^\"]+)\"\)", (CONSUMER / "__main__.py").read_text()))
    assert read == set(project["config"]), (read, set(project["config"]))
    assert all(decl.get("description") for decl in project["config"].values())
