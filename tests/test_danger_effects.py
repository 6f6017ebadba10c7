"""Danger derived from the plan: every resource kind any plan can hold declares what its update, replacement and
delete do (stacks/diff/effects.py), and the review counts them; quantities are compared by value; restricting
settings are named with what they stop; credentials rotated name how many resources and hosts take them; and what a
settings field declares agrees with what the plan does."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from benchmarks.inventory import inventory, stack_file
from settings import Settings
from settings.declare import every_model
from settings.quantities import ordered_by, parse_duration, parse_quantity
from stacks import diff, engine
from stacks.diff import effects
from stacks.diff.declared import declared
from tests.conftest import ROOT, evaluate, stack_doc


@pytest.fixture(scope="module")
def prod_base() -> dict:
    return json.loads(evaluate("prod").to_json())


@pytest.fixture(scope="module")
def lab_base() -> dict:
    return json.loads(evaluate("lab").to_json())


def danger_of(base: dict, mutate, stack: str = "prod") -> list[str]:
    return diff.compare(base, json.loads(evaluate(stack, mutate).to_json())).danger


def one(lines: list[str], *fragments: str) -> str:
    found = [line for line in lines if all(f in line for f in fragments)]
    assert len(found) == 1, (fragments, lines)
    return found[0]


def team(raw: dict, name: str) -> dict:
    return next(t for t in raw["scheduling"]["teams"] if t["name"] == name)


# ---------------------------------------------------------------------------------------------
# Completeness: every kind of every plan declares its effects
# ---------------------------------------------------------------------------------------------


def _kinds_of(plan: engine.Plan) -> set[str]:
    return {r["type"] for r in plan.resources}


def test_every_kind_in_prod_lab_and_the_benchmark_inventories_declares_its_effects(tmp_path: Path, prod_base, lab_base):
    kinds = {r["type"] for base in (prod_base, lab_base) for r in base["resources"]}
    for nodes in (8, 50):
        path = tmp_path / f"Pulumi.bench{nodes}.yaml"
        path.write_text(stack_file(inventory(nodes)))
        kinds |= _kinds_of(engine.evaluate_stack(f"bench{nodes}", path))

    # a fuller prod: every optional operator, OIDC and the IPoIB network on, so their kinds are in the plan too
    def everything(raw):
        raw["scheduling"]["trainingOperators"].update(jobset=True, trainer=True, kuberay=True)

    kinds |= _kinds_of(evaluate("prod", everything))
    assert len(kinds) > 50
    assert effects.undeclared(kinds) == [], "declare their update/replace/delete in stacks/diff/effects.py KINDS"


def test_an_undeclared_kind_is_reported_by_name():
    assert effects.undeclared({"kubernetes:example.com/v1:Gadget", "kubernetes:core/v1:Secret"}) == [
        "kubernetes:example.com/v1:Gadget"
    ]


def test_every_declared_kind_states_each_action_in_words():
    for kind, declared_effects in effects.KINDS.items():
        for action in ("update", "replace", "delete"):
            assert declared_effects.of(action).what.strip(), (kind, action)


# ---------------------------------------------------------------------------------------------
# Quantities: one parser, compared by value in the settings and in the plan
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("smaller", "larger"),
    [("20Ti", "100Ti"), ("900Gi", "1Ti"), ("500m", "1"), ("1e3", "1Ki"), ("999M", "1G"), ("0.5Gi", "513Mi")],
)
def test_quantities_compare_by_value(smaller, larger):
    assert parse_quantity(smaller) < parse_quantity(larger)


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("1h30m", 5400), ("15m", 900), ("250ms", 0.25)])
def test_durations_are_read_as_go_reads_them(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["12 Gi", "1.2.3Gi", "Gi", "10GB", "", "1h 30m"])
def test_malformed_quantities_and_durations_are_refused(bad):
    with pytest.raises(ValueError):
        parse_quantity(bad)
    with pytest.raises(ValueError):
        parse_duration(bad)


def plan_of(stack: str, mutate=None) -> dict:
    raw = copy.deepcopy(stack_doc(stack))
    if mutate is not None:
        mutate(raw)
    return {"project": "ml-platform", "stack": stack, "resources": [], "outputs": {}, "settings": raw}


def settings_lines(old: dict, new: dict) -> list[str]:
    return [line for line in diff.compare(old, new).danger if line.startswith("settings ")]


def test_a_storage_quota_lowered_by_value_is_named_and_raised_is_not():
    name = stack_doc("prod")["scheduling"]["teams"][0]["name"]

    def storage(value):
        return lambda raw: team(raw, name).update(storage={"tier2-shared": value})

    lowered = settings_lines(plan_of("prod", storage("100Ti")), plan_of("prod", storage("20Ti")))
    assert any('"100Ti" -> "20Ti"' in line and "lowering it destroys" in line for line in lowered), lowered
    # the same amount in another unit, and a raise, are no decrease
    assert settings_lines(plan_of("prod", storage("1Ti")), plan_of("prod", storage("1024Gi"))) == []
    assert settings_lines(plan_of("prod", storage("20Ti")), plan_of("prod", storage("100Ti"))) == []


def test_a_memory_quota_lowered_in_another_unit_is_named():
    name = stack_doc("prod")["scheduling"]["teams"][0]["name"]

    def memory(value):
        def mutate(raw):
            flavor = next(iter(team(raw, name)["quotas"]))
            team(raw, name)["quotas"][flavor]["memory"] = value

        return mutate

    lines = settings_lines(plan_of("prod", memory("2Ti")), plan_of("prod", memory("1500Gi")))
    assert any('"2Ti" -> "1500Gi"' in line for line in lines), lines


def test_a_resource_quota_lowered_in_the_plan_names_the_refused_work_with_its_count(prod_base):
    name = stack_doc("prod")["scheduling"]["teams"][0]["name"]

    def mutate(raw):
        flavor = next(iter(team(raw, name)["quotas"]))
        quota = team(raw, name)["quotas"][flavor]
        quota["cpu"] = max(1, quota["cpu"] // 2)

    lines = danger_of(prod_base, mutate)
    line = one(lines, "ResourceQuota updated", "refuses new work")
    assert line.split()[0].isdigit() and int(line.split()[0]) >= 1


# ---------------------------------------------------------------------------------------------
# Kinds: access, policies, credentials
# ---------------------------------------------------------------------------------------------


def test_removing_a_team_group_names_the_access_it_takes_off(prod_base):
    name = next(t["name"] for t in stack_doc("prod")["scheduling"]["teams"] if t.get("groups"))

    def mutate(raw):
        team(raw, name)["groups"] = []

    lines = danger_of(prod_base, mutate)
    assert any("RoleBinding" in line and "taken off lose the role it binds" in line for line in lines), lines
    assert any(
        line.startswith(f"settings scheduling.teams[name={name}].groups") and "RESTRICTS" in line for line in lines
    )


def test_enabling_oidc_names_the_ci_bindings_it_deletes(lab_base):
    def mutate(raw):
        raw["cluster"]["oidc"] = {"issuerUrl": "https://login.example.com", "clientId": "kubernetes"}

    lines = danger_of(lab_base, mutate, "lab")
    deleted = [line for line in lines if "deleted" in line and ("Binding" in line or "ServiceAccount" in line)]
    assert deleted, lines


def test_a_rotated_secret_names_the_resources_and_hosts_that_take_it(tmp_path: Path):
    def plan(ciphertext: str) -> dict:
        doc = yaml.safe_load((ROOT / "Pulumi.lab.yaml").read_text())
        doc["config"]["ml-platform:zabbixAgentPsk"] = {"secure": ciphertext}
        path = tmp_path / f"Pulumi.lab.{ciphertext}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return json.loads(engine.evaluate_stack("lab", path).to_json())

    result = diff.compare(plan("v1:aaaa"), plan("v1:bbbb"))
    line = one(result.danger, "credential rotated (zabbixAgentPsk)")
    hosts = len(stack_doc("lab")["nodes"]) + len(stack_doc("lab").get("nas", {}).get("hosts", []))
    assert f"on {hosts} host(s)" in line, line
    assert "v1:bbbb" not in line


# ---------------------------------------------------------------------------------------------
# Restricting edits
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "field", "fragment"),
    [
        (lambda raw: raw["scheduling"].update(groupsPrefix="corp:"), "scheduling.groupsPrefix", "lose the teams'"),
        (lambda raw: raw["scheduling"].update(tenantNodesOnly=False), "scheduling.tenantNodesOnly", "team"),
        (
            lambda raw: raw["scheduling"]["priorityClasses"][0].update(value=-5),
            "scheduling.priorityClasses[name=",
            "preemption order",
        ),
    ],
)
def test_restricting_settings_are_named_with_what_they_stop(mutate, field, fragment):
    lines = settings_lines(plan_of("prod"), plan_of("prod", mutate))
    assert any(line.startswith(f"settings {field}") and "RESTRICTS" in line and fragment in line for line in lines)


def test_pod_security_tightened_is_named_and_loosened_is_not():
    name = stack_doc("prod")["scheduling"]["teams"][0]["name"]

    def level(value):
        return lambda raw: team(raw, name).update(podSecurity=value)

    tight = settings_lines(plan_of("prod", level("baseline")), plan_of("prod", level("restricted")))
    assert any("podSecurity" in line and "RESTRICTS" in line for line in tight), tight
    assert settings_lines(plan_of("prod", level("restricted")), plan_of("prod", level("baseline"))) == []


def test_a_first_priority_allowlist_entry_narrows_and_more_entries_do_not():
    name = stack_doc("prod")["scheduling"]["teams"][0]["name"]
    classes = [c["name"] for c in stack_doc("prod")["scheduling"]["priorityClasses"]]

    def allowed(values):
        return lambda raw: team(raw, name).update(priorityClasses=values)

    assert any(
        "priorityClasses" in line and "refused at admission" in line
        for line in settings_lines(plan_of("prod", allowed([])), plan_of("prod", allowed(classes[:1])))
    )
    assert settings_lines(plan_of("prod", allowed(classes[:1])), plan_of("prod", allowed(classes[:2]))) == []


def test_egress_ranges_taken_off_are_named_in_settings_and_in_the_plan(prod_base):
    name = stack_doc("prod")["scheduling"]["teams"][0]["name"]

    def widen(raw):
        team(raw, name)["egressCidrs"] = ["192.0.2.0/24", "198.51.100.0/24"]

    def narrow(raw):
        team(raw, name)["egressCidrs"] = ["192.0.2.0/24"]

    lines = diff.compare(json.loads(evaluate("prod", widen).to_json()), json.loads(evaluate("prod", narrow).to_json()))
    assert any("egressCidrs" in line and "RESTRICTS" in line for line in lines.danger), lines.danger
    assert any("NetworkPolicy updated" in line and "connections" in line for line in lines.danger), lines.danger


# ---------------------------------------------------------------------------------------------
# Versions: every version field declares its order, so any downgrade is named
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "older"),
    [
        (("storage", "ceph", "cephImage"), "quay.io/ceph/ceph:v19.2.3"),
        (("monitoring", "imageTag"), "ubuntu-7.0.10"),
        (("gpu", "driver", "version"), "580.95.05"),
        (("charts", "kueue", "version"), "0.10.0"),
    ],
)
def test_a_version_set_older_is_named_a_downgrade_whatever_the_component(path, older):
    def mutate(raw):
        node = raw
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = older

    assert declared(".".join(path)) is not None
    lines = settings_lines(plan_of("prod"), plan_of("prod", mutate))
    assert any(line.startswith(f"settings {'.'.join(path)}") and "DOWNGRADE" in line for line in lines), lines


# A repository without a tag: the controller tags it with rke2Version, whose order covers it.
UNVERSIONED = {("ClusterUpgrade", "upgrade_image")}


def _version_like(model, name: str) -> bool:
    versioned = name.endswith(("version", "_image", "image_tag")) or name == "image"
    return versioned and (model.__name__, name) not in UNVERSIONED


def test_every_version_and_image_field_declares_its_order():
    missing = [
        f"{model.__name__}.{name}"
        for model in every_model(Settings)
        for name, info in model.model_fields.items()
        if _version_like(model, name) and ordered_by(info) is None
    ]
    assert missing == [], "type them Version, ChartVersion, Rke2Version or Image (settings/types.py)"


# ---------------------------------------------------------------------------------------------
# A setting's declared effect agrees with what the plan does
# ---------------------------------------------------------------------------------------------

# One change per declared kind; the plan's own effects must agree: a field declared harmless (none, re-render)
# makes no Danger effect in the plan; one declared to replace, destroy when lowered or restrict does.
AGREEMENT = [
    (
        "monitoring.thresholds.gpuTemperatureCelsius",
        lambda raw: raw["monitoring"]["thresholds"].update(gpuTemperatureCelsius=80),
    ),
    ("scheduling.cohort", lambda raw: raw["scheduling"].update(cohort="other")),
    (
        "scheduling.waitForPodsReady.backoffMaxSeconds",
        lambda raw: raw["scheduling"].setdefault("waitForPodsReady", {}).update(backoffMaxSeconds=7200),
    ),
]


def _declared_quiet(field: str) -> bool:
    change = declared(field)
    assert change is not None, field
    return not change.danger


@pytest.mark.parametrize(("field", "mutate"), AGREEMENT)
def test_a_field_declared_harmless_makes_no_danger_effect_in_the_plan(prod_base, field, mutate):
    assert _declared_quiet(field)
    result = diff.compare(prod_base, json.loads(evaluate("prod", mutate).to_json()))
    sides = diff.Sides(result.entries, {r["urn"]: r for r in prod_base["resources"]}, {}, prod_base, {})
    assert effects.plan_effects(sides) == {}, [line for line in result.danger]


def test_a_field_declared_destructive_has_a_danger_effect_in_the_plan(prod_base):
    name = stack_doc("prod")["scheduling"]["teams"][0]["name"]
    field = f"scheduling.teams[name={name}].namespaces"
    assert declared(field).kind == "destroys-on-decrease"

    def mutate(raw):
        namespaces = team(raw, name).get("namespaces") or [name]
        team(raw, name)["namespaces"] = [*namespaces, f"{name}-extra"]

    grown = json.loads(evaluate("prod", mutate).to_json())
    lines = diff.compare(grown, prod_base).danger
    assert any(line.startswith("settings ") and ".namespaces" in line for line in lines), lines
    assert any("RoleBinding deleted" in line or "LocalQueue deleted" in line for line in lines), lines


# ---------------------------------------------------------------------------------------------
# Edits while an upgrade is in flight
# ---------------------------------------------------------------------------------------------


def _upgrading(raw: dict) -> None:
    raw["cluster"].update(rke2Version="v1.35.8+rke2r1", deployedRke2Version="v1.35.7+rke2r1")


@pytest.fixture(scope="module")
def upgrading_base() -> dict:
    return json.loads(evaluate("prod", _upgrading).to_json())


@pytest.mark.parametrize(
    ("pool", "change", "shown"),
    [
        ("gpu", {"concurrency": 3}, "concurrency 1 -> 3"),
        ("cpu", {"drain": {"timeoutSeconds": 900, "force": True}}, "force: True"),
        ("gpu", {"window": None}, "-> (unset)"),
    ],
)
def test_an_upgrade_edited_in_flight_is_named(upgrading_base, pool, change, shown):
    def mutate(raw):
        _upgrading(raw)
        raw["cluster"]["upgrade"][pool].update(change)
        if change.get("window", 0) is None:
            raw["cluster"]["upgrade"][pool].pop("window")

    line = one(danger_of(upgrading_base, mutate), f"{pool}-agent-plan changed while the RKE2 upgrade")
    assert "v1.35.8+rke2r1" in line and shown in line


def test_the_same_edit_without_an_upgrade_in_flight_is_not_named(prod_base):
    def mutate(raw):
        raw["cluster"]["upgrade"]["gpu"]["concurrency"] = 3

    assert not [line for line in danger_of(prod_base, mutate) if "in flight" in line]


@pytest.mark.parametrize(
    ("field", "old", "new"),
    [("timeoutSeconds", 900, 300), ("backoffLimitCount", 5, 2)],
)
def test_lowering_kueues_wait_for_pods_ready_names_the_evictions(field, old, new):
    def at(value):
        return lambda raw: raw["scheduling"].setdefault("waitForPodsReady", {}).update({field: value})

    lines = settings_lines(plan_of("prod", at(old)), plan_of("prod", at(new)))
    assert any(f"waitForPodsReady.{field}: {old} -> {new}" in line for line in lines), lines
    assert settings_lines(plan_of("prod", at(new)), plan_of("prod", at(old))) == []


# ---------------------------------------------------------------------------------------------
# Each credential's declared change agrees with what rotating it does in the plan
# ---------------------------------------------------------------------------------------------


def _rotated_plan(tmp_path: Path, key: str, ciphertext: str) -> dict:
    doc = yaml.safe_load((ROOT / "Pulumi.lab.yaml").read_text())
    doc["config"][f"ml-platform:{key}"] = {"secure": ciphertext}
    path = tmp_path / f"Pulumi.lab.{key}.{ciphertext[3:]}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return json.loads(engine.evaluate_stack("lab", path).to_json())


@pytest.mark.parametrize("key", ["sshPrivateKey", "zabbixAgentPsk", "zabbixAdminPassword", "rke2Token"])
def test_a_credentials_declared_change_agrees_with_its_rotation_in_the_plan(tmp_path: Path, key):
    from settings import StackSecrets
    from settings.declare import changes_of

    name = next(n for n, info in StackSecrets.model_fields.items() if (info.alias or n) == key)
    change = changes_of(StackSecrets)[name]
    result = diff.compare(_rotated_plan(tmp_path, key, "v1:aaaa"), _rotated_plan(tmp_path, key, "v1:bbbb"))
    actions = {e.action for e in result.entries}
    if change.kind == "none":
        assert actions == set(), f"{key} is declared to change nothing, but the plan changes {result.counts()}"
    if change.kind in ("none", "re-render", "restart"):
        assert actions <= {"update"}, f"{key} is declared {change.kind}, but the plan has {result.counts()}"
    if change.kind != "none":
        assert result.danger and any(key in line or "token" in line for line in result.danger), result.danger


def test_a_backup_clone_made_smaller_than_before_is_named():
    def size(value):
        def mutate(raw):
            raw["storage"]["minio"]["backup"]["sources"][0]["size"] = value

        return mutate

    if not stack_doc("prod")["storage"]["minio"].get("backup", {}).get("sources"):
        pytest.fail("prod backs up no claim: the test needs a backup source")
    lines = settings_lines(plan_of("prod", size("20Ti")), plan_of("prod", size("500Gi")))
    assert any(".size" in line and "restoreSize" in line for line in lines), lines
    assert settings_lines(plan_of("prod", size("20Ti")), plan_of("prod", size("20480Gi"))) == []


def _gpu_quota(raw: dict) -> dict:
    return next(
        q
        for name, q in team(raw, stack_doc("prod")["scheduling"]["teams"][0]["name"])["quotas"].items()
        if name != "cpu"
    )


# Day-2 edits, each judged twice: by what its fields declare and by what the plan does to each kind. Where the plan
# has a Danger effect, some changed field must declare Danger in that direction (the settings never call harmless
# what the plan shows to refuse work or take access); where no field declares Danger, the plan shows none.
DAY2 = {
    "ephemeral storage lowered": lambda raw: raw["scheduling"]["teams"][0].update(ephemeralStorage="100Gi"),
    "lending limit lowered": lambda raw: _gpu_quota(raw).update(lendingLimit={"gpus": 8}),
    "borrowing limit set": lambda raw: _gpu_quota(raw).update(borrowingLimit={"gpus": 0}),
    "cpu quota halved": lambda raw: raw["scheduling"]["teams"][1]["quotas"]["cpu"].update(cpu=1),
    "groups dropped": lambda raw: raw["scheduling"]["teams"][2].update(groups=[]),
    "fair-sharing weight": lambda raw: raw["scheduling"]["teams"][0].update(fairSharingWeight=5),
    "an alert threshold": lambda raw: raw["monitoring"]["thresholds"].update(gpuIdlePercent=50),
    "a node label": lambda raw: raw["nodes"][30].update(labels={"example.com/rack": "r7"}),
    "a team's default namespace renamed": lambda raw: raw["scheduling"]["teams"][1].update(namespaces=["vision-2"]),
    "a team namespace added": lambda raw: raw["scheduling"]["teams"][1].update(namespaces=["vision", "vision-2"]),
    "an alerting channel removed": lambda raw: raw["monitoring"]["alerting"]["channels"].pop(),
    "the IPoIB network off": lambda raw: (
        raw["network"]["infiniband"].setdefault("ipoibNetwork", {}).update(enabled=False)
    ),
}


@pytest.mark.parametrize("edit", sorted(DAY2))
def test_what_a_field_declares_agrees_with_what_the_plan_does(prod_base, edit):
    from stacks.diff.declared import _speaks, settings_changes

    head = json.loads(evaluate("prod", DAY2[edit]).to_json())
    result = diff.compare(prod_base, head)
    by_urn = {r["urn"]: r for r in prod_base["resources"]}
    sides = diff.Sides(result.entries, by_urn, {r["urn"]: r for r in head["resources"]}, prod_base, head)
    plan_danger = sorted({f"{kind} {action}" for kind, action, *_ in effects.plan_effects(sides)})
    declared_danger = [c.path for c, semantics in settings_changes(sides) if _speaks(c, semantics)]
    assert bool(plan_danger) == bool(declared_danger), (plan_danger, declared_danger)
