"""What a team can reach: its stack of the `teams/` program, the public contract, its own credential.

The platform stack holds platform secrets and is read by operators only. Each team reads its own stack
of `teams/` (and a consumer program built on it): these tests evaluate the real platform, the real
`teams/` program and the real consumer example on the mock engine, with every secret given a
distinctive value, and look for those values in everything a team can read there: every stack's state
(resource inputs, what reads and StackReferences return) and outputs.
"""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from components.common import InCluster
from components.public_contract import CONTRACT_CONFIGMAP, CONTRACT_NAMESPACE, PublicContract, PublicContractArgs
from settings import SettingsError
from stacks import engine
from stacks.engine import SECRET, UNKNOWN
from stacks.outputs import CONTRACT, PUBLIC
from tests.conftest import ROOT, evaluate, problems

TEAMS = ROOT / "teams"
ADMIN_KUBECONFIG = "kind: Config # admin kubeconfig: must never reach a team"
RKE2_TOKEN = "K10rke2-server-token-must-never-reach-a-team"
DEPLOYED = {"cluster-kubeconfig": {"stdout": ADMIN_KUBECONFIG}, "rke2-token": {"result": RKE2_TOKEN}}
PLATFORM_SECRETS = [ADMIN_KUBECONFIG, RKE2_TOKEN, *engine.PLACEHOLDER_SECRETS.values()]
CONTRACT_ID = f"{CONTRACT_NAMESPACE}/{CONTRACT_CONFIGMAP}"
CONFIGMAP = "kubernetes:core/v1:ConfigMap"
FILLER = {"string": "value", "integer": 1, "number": 1.0, "map[string]": {}, "list[string]": []}
OIDC = {"issuerUrl": "https://sso.example.com/realms/ml", "clientId": "ml-platform"}


def team_token(team: str) -> str:
    return f"service-account-token-of-{team}"


def load_program(module_name: str, folder: Path) -> ModuleType:
    """The Pulumi program `folder/__main__.py`, imported as `module_name` (not run as __main__: it defines
    program() without exporting)."""
    spec = importlib.util.spec_from_file_location(module_name, folder / "__main__.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def platform() -> engine.Plan:
    """prod as deployed: the admin kubeconfig and the RKE2 token known, with distinctive values."""
    return evaluate("prod", computed=DEPLOYED)


def published(plan: engine.Plan) -> dict[str, str]:
    """The contract ConfigMap's data as the platform writes it; values only `up` knows (the NAS CA) filled in."""
    data = dict(plan.revealed[plan.named("contract-configmap")["urn"]]["data"])
    specs = {spec.name: spec for spec in CONTRACT}
    return {k: json.dumps(FILLER[specs[k].type]) if v == UNKNOWN else v for k, v in data.items()}


def team_stack(plan: engine.Plan, team: str, credential: str = "token", data=None) -> engine.Plan:
    reads = {(CONFIGMAP, CONTRACT_ID): {"data": data or published(plan)}}
    reads[(CONFIGMAP, f"{CONTRACT_NAMESPACE}/kube-root-ca.crt")] = {"data": {"ca.crt": "-----BEGIN CERT..."}}
    token = {"token": base64.b64encode(team_token(team).encode()).decode(), "ca.crt": "Q0EK"}
    config = {"ml-platform-teams:team": team, "ml-platform-teams:credential": credential}
    return engine.run(
        f"prod-{team or 'public'}",
        config,
        [],
        load_program("ml_platform_teams", TEAMS).program,
        project="ml-platform-teams",
        reads=reads,
        computed={"ci-token": {"data": token}},
    )


def reachable(plan: engine.Plan) -> str:
    """Everything a reader of the stack can see: state (inputs, reads, references) and outputs."""
    return repr(plan.revealed) + repr(plan.resources) + repr(plan.revealed_outputs)


def encoded(secret: str) -> list[str]:
    return [secret, base64.b64encode(secret.encode()).decode()]


def leaks(plan: engine.Plan, own_team: str, teams: list[str]) -> list[str]:
    seen = reachable(plan)
    others = [form for t in teams if t != own_team for form in encoded(team_token(t))]
    return [s for s in [*PLATFORM_SECRETS, *others] if s in seen]


# ---------------------------------------------------------------------------------------------
# Must show: no team-reachable output holds a platform or other-team secret
# ---------------------------------------------------------------------------------------------


def test_no_team_reachable_stack_holds_a_platform_or_another_teams_secret(platform):
    teams = list(platform.outputs["teamNamespaces"])
    assert len(teams) >= 3
    for team in teams:
        stack = team_stack(platform, team)
        assert leaks(stack, team, teams) == [], team
        # The check sees secrets where they are: the team's own token is in its own stack's state.
        assert team_token(team) in reachable(stack)
        assert not [urn for urn in stack.revealed if "StackReference" in urn], "a team stack references no stack"
        assert stack.outputs["kubeconfig"] == SECRET
    public = team_stack(platform, "")
    assert leaks(public, "", teams) == [] and not public.by_type("kubernetes:core/v1:Secret")
    assert set(public.outputs) == set(PUBLIC)


def test_the_public_contract_holds_no_secret(platform):
    assert all(not spec.secret for spec in CONTRACT if spec.name in PUBLIC)
    configmap = platform.named("contract-configmap")
    assert configmap["inputs"]["metadata"] == {"name": CONTRACT_CONFIGMAP, "namespace": CONTRACT_NAMESPACE}
    assert set(configmap["inputs"]["data"]) == set(PUBLIC)
    assert configmap["secretDigests"] == {}
    assert not [s for s in PLATFORM_SECRETS if s in repr(platform.revealed[configmap["urn"]])]
    # Secrets are still the operators' in the platform stack.
    assert {n for n, v in platform.outputs.items() if v == SECRET} == {s.name for s in CONTRACT if s.secret}
    assert "teamKubeconfigs" not in platform.outputs
    # And no team credential is made by the platform: no ServiceAccount token Secret at all.
    team_namespaces = {ns for nss in platform.outputs["teamNamespaces"].values() for ns in nss}
    tokens = [
        s["inputs"]["metadata"]
        for s in platform.by_type("kubernetes:core/v1:Secret")
        if s["inputs"].get("type") == "kubernetes.io/service-account-token"
    ]
    assert tokens and not [m for m in tokens if m["namespace"] in team_namespaces]


def test_every_authenticated_user_may_read_the_contract_and_nothing_else_in_kube_public(platform):
    role = platform.named("contract-reader")["inputs"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [CONTRACT_CONFIGMAP], "verbs": ["get"]}
    ]
    binding = platform.named("contract-reader-binding")["inputs"]
    assert [s["name"] for s in binding["subjects"]] == ["system:authenticated"]


def test_a_secret_given_to_the_public_contract_is_refused():
    def program():
        PublicContract(
            "contract",
            PublicContractArgs(
                values={"apiEndpoint": "https://x", "leak": engine_secret()}, in_cluster=InCluster(None, [])
            ),
        )
        return {}

    with pytest.raises(Exception, match="public contract: leak is a secret"):
        engine.run("t", {}, [], program, project="t")


def engine_secret():
    import pulumi

    return pulumi.Output.secret("s3cr3t")


def test_a_stack_reference_to_the_platform_stack_would_copy_its_secrets(platform):
    # Why teams never reference the platform stack: the reference's state holds every output, secret
    # ones included (revealed here as a reader of that stack could decrypt them).
    values = {**platform.outputs, "kubeconfig": ADMIN_KUBECONFIG, "rke2Token": RKE2_TOKEN}
    outputs = engine.StackOutputs(values=values, secret=frozenset({"kubeconfig", "rke2Token"}))

    def program():
        import pulumi

        ref = pulumi.StackReference("platform", stack_name="organization/ml-platform/prod")
        return {"endpoint": ref.require_output("apiEndpoint")}

    plan = engine.run("dev", {}, [], program, project="t", stack_references={"organization/ml-platform/prod": outputs})
    assert ADMIN_KUBECONFIG in reachable(plan) and RKE2_TOKEN in reachable(plan)


# ---------------------------------------------------------------------------------------------
# The team stack: contract, credential, clear errors
# ---------------------------------------------------------------------------------------------


def test_team_stack_publishes_the_contract_and_its_namespaces(platform):
    stack = team_stack(platform, "llm")
    for name in PUBLIC:
        if platform.outputs[name] != UNKNOWN:
            assert stack.outputs[name] == platform.outputs[name], name
    assert stack.outputs["namespaces"] == ["llm-train", "llm-eval"]
    assert stack.outputs["localQueue"] == "default"
    secret = stack.named("ci-token")["inputs"]
    assert secret["metadata"] == {
        "name": "llm-ci-token",
        "namespace": "llm-train",
        "annotations": {"kubernetes.io/service-account.name": "llm-ci"},
    }
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert "data" in stack.options[stack.named("ci-token")["urn"]]["additionalSecretOutputs"]
    # The operator's credential is the provider's ambient KUBECONFIG: not an input, not in this state.
    assert stack.named("cluster")["inputs"].get("kubeconfig") is None


def test_the_operators_kubeconfig_path_never_enters_a_team_stack(platform, monkeypatch):
    """The Kubernetes SDK copies KUBECONFIG into an explicit provider's inputs when none is given
    (pulumi_kubernetes/provider.py); the program gives one that resolves to nothing, so the operator's local
    path stays out of the team's state while the provider plugin still loads it from its environment."""
    path = "/home/operator/.kube/ml-prod-admin.yaml"
    monkeypatch.setenv("KUBECONFIG", path)
    stack = team_stack(platform, "vision")
    assert path not in json.dumps([r["inputs"] for r in stack.resources])
    assert path not in json.dumps(stack.outputs)
    assert stack.named("cluster")["inputs"].get("kubeconfig") is None
    # The check can fail: a provider made as the SDK's default would record it.
    import pulumi_kubernetes as k8s

    recorded = engine.run("check", {}, [], lambda: {"p": k8s.Provider("p").id}, project="ml-platform-teams")
    assert recorded.named("p")["inputs"]["kubeconfig"] == path


def test_token_kubeconfig_holds_endpoint_ca_token_and_namespace():
    teams = load_program("ml_platform_teams", TEAMS)
    data = {"token": base64.b64encode(b"tok-123").decode(), "ca.crt": "Q0EK"}
    config = yaml.safe_load(teams.token_kubeconfig("vision", "https://10.20.0.10:6443", "vision", data))
    assert config["clusters"][0]["cluster"] == {
        "server": "https://10.20.0.10:6443",
        "certificate-authority-data": "Q0EK",
    }
    assert config["users"][0]["user"] == {"token": "tok-123"}
    assert config["contexts"][0]["context"]["namespace"] == "vision"


def test_unknown_team_and_wrong_credential_fail_with_the_fix(platform):
    with pytest.raises(Exception, match="'nobody' is not a team of this platform"):
        team_stack(platform, "nobody")
    data = {**published(platform), "oidcLogin": json.dumps(OIDC)}
    with pytest.raises(Exception, match="credential: 'token', but the platform expects 'oidc'"):
        team_stack(platform, "vision", data=data)


# ---------------------------------------------------------------------------------------------
# OIDC: people log in as themselves; no team token exists
# ---------------------------------------------------------------------------------------------


def with_oidc(raw: dict) -> None:
    raw["cluster"]["oidc"] = {**OIDC, "caPem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}


@pytest.fixture(scope="module")
def oidc_platform() -> engine.Plan:
    return evaluate("prod", with_oidc, computed=DEPLOYED)


def test_oidc_flags_reach_every_servers_rke2_config(oidc_platform):
    servers = [r for r in oidc_platform.resources if r["name"].endswith("-rke2")]
    flags = {
        "oidc-issuer-url=https://sso.example.com/realms/ml",
        "oidc-client-id=ml-platform",
        "oidc-username-claim=email",
        "oidc-username-prefix=oidc:",
        "oidc-groups-claim=groups",
        "oidc-groups-prefix=oidc:",
        "oidc-ca-file=/etc/rancher/rke2/oidc-ca.pem",
    }
    checked = 0
    for step in servers:
        stdin = repr(oidc_platform.revealed[step["urn"]])
        env = oidc_platform.revealed[step["urn"]]
        text = json.dumps(env)
        if "RKE2_TYPE=server" not in text and "RKE2_TYPE='server'" not in text:
            assert "oidc-issuer-url" not in stdin  # agents run no API server
            continue
        checked += 1
        assert all(flag in text for flag in flags), step["name"]
        assert "OIDC_CA_PEM=" in text
    assert checked == 3


def test_oidc_team_bindings_name_the_prefixed_groups_and_no_service_account_exists(oidc_platform):
    bindings = [
        b["inputs"]
        for b in oidc_platform.by_type("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")
        if b["inputs"]["metadata"]["name"] == "team-member"
    ]
    assert bindings
    for b in bindings:
        assert all(s["kind"] == "Group" and s["name"].startswith("oidc:") for s in b["subjects"]), b
    team_namespaces = {ns for nss in oidc_platform.outputs["teamNamespaces"].values() for ns in nss}
    accounts = [a["inputs"]["metadata"] for a in oidc_platform.by_type("kubernetes:core/v1:ServiceAccount")]
    assert not [a for a in accounts if a["namespace"] in team_namespaces and a["name"].endswith("-ci")]
    assert accounts  # the check sees accounts where there are some (the platform's own)
    assert oidc_platform.outputs["oidcLogin"] == OIDC


def test_oidc_team_stack_has_a_login_kubeconfig_and_no_secret(oidc_platform):
    stack = team_stack(oidc_platform, "vision", credential="oidc")
    assert not stack.by_type("kubernetes:core/v1:Secret")
    config = yaml.safe_load(stack.outputs["kubeconfig"])
    user = config["users"][0]["user"]["exec"]
    assert user["args"][:2] == ["oidc-login", "get-token"]
    assert f"--oidc-issuer-url={OIDC['issuerUrl']}" in user["args"]
    assert config["contexts"][0]["context"]["namespace"] == "vision"
    assert leaks(stack, "vision", list(oidc_platform.outputs["teamNamespaces"])) == []


@pytest.mark.parametrize(
    "oidc,message",
    [
        ({"issuerUrl": "http://sso.example.com", "clientId": "k"}, "cluster.oidc.issuerUrl"),
        ({"issuerUrl": "https://sso.example.com", "clientId": ""}, "cluster.oidc.clientId"),
        ({"issuerUrl": "https://sso.example.com", "clientId": "k", "caPem": "not a pem"}, "cluster.oidc.caPem"),
    ],
)
def test_bad_oidc_settings_name_the_field(oidc, message):
    def mutate(raw):
        raw["cluster"]["oidc"] = oidc

    found = problems("prod", mutate)
    assert any(p.startswith(message) for p in found), found


def test_settings_error_type_is_what_the_plan_reports():
    assert issubclass(SettingsError, Exception)
