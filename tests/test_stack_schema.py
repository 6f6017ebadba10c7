"""The editor schema (docs/stack-config.schema.json) accepts the real stack files and refuses what the
settings refuse: unknown keys, wrong types, values outside an enum, a missing area, plain-text secrets."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
import yaml

from settings import SECRET_KEYS, SettingsError, load
from tests.conftest import ROOT

SCHEMA = json.loads((ROOT / "docs/stack-config.schema.json").read_text())
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)


def stack_file(stack: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """Each error as `<config key>/<path>: message`."""
    return ["/".join(str(p) for p in e.absolute_path) + ": " + e.message for e in VALIDATOR.iter_errors(doc)]


def settings_problems(doc: dict[str, Any]) -> list[str]:
    """What `settings.load` says about the file's `ml-platform:` keys (as the program reads them)."""
    raw = {k.split(":", 1)[1]: v for k, v in doc["config"].items() if k.startswith("ml-platform:")}
    try:
        load({k: v for k, v in raw.items() if k not in SECRET_KEYS})
    except SettingsError as exc:
        return exc.problems
    return []


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft7Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_the_stack_files_are_valid(stack):
    doc = stack_file(stack)
    assert schema_errors(doc) == []
    assert settings_problems(doc) == []


def test_the_stack_files_name_the_schema_for_editors():
    for stack in ("prod", "lab"):
        first = (ROOT / f"Pulumi.{stack}.yaml").read_text().splitlines()[0]
        assert first == "# yaml-language-server: $schema=docs/stack-config.schema.json", stack


def _set(path: tuple, value: Any) -> Callable[[dict], None]:
    def mutate(config: dict) -> None:
        target = config
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value

    return mutate


def _delete(key: str) -> Callable[[dict], None]:
    return lambda config: config.pop(key)


BAD = {
    "unknown area": (
        _set(("ml-platform:netwrok",), {}),
        "config: 'ml-platform:netwrok' does not match any of the regexes",
        "ml-platform:netwrok",
    ),
    "unknown nested key": (
        _set(("ml-platform:nodes", 0, "controlplane"), True),
        "config/ml-platform:nodes/0",
        "nodes[0].controlplane",
    ),
    "string for an integer": (
        _set(("ml-platform:cluster", "drainTimeoutSeconds"), "900"),
        "config/ml-platform:cluster/drainTimeoutSeconds",
        "cluster.drainTimeoutSeconds",
    ),
    "string for a boolean": (
        _set(("ml-platform:gpu",), {"timeSlicing": {"enabled": "yes"}}),
        "config/ml-platform:gpu/timeSlicing/enabled",
        "gpu.timeSlicing.enabled",
    ),
    "bad enum": (
        _set(("ml-platform:network", "cni"), "flannel"),
        "config/ml-platform:network/cni",
        "network.cni",
    ),
    "bad enum in a list item": (
        _set(("ml-platform:nodes", 3, "role"), "storage"),
        "config/ml-platform:nodes/3/role",
        "nodes[3].role",
    ),
    "out of range": (
        _set(("ml-platform:ssh", "port"), 70000),
        "config/ml-platform:ssh/port",
        "ssh.port",
    ),
    "missing area": (_delete("ml-platform:cluster"), "config", "cluster"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_file_is_refused_by_the_schema_and_by_the_settings_alike(case):
    mutate, schema_path, settings_path = BAD[case]
    doc = copy.deepcopy(stack_file("prod"))
    mutate(doc["config"])
    errors = schema_errors(doc)
    problems = settings_problems(doc)
    assert any(e.startswith(schema_path) for e in errors), errors
    assert any(p.startswith(settings_path) for p in problems), problems


def test_secrets_are_accepted_only_as_secure_values():
    doc = copy.deepcopy(stack_file("prod"))
    doc["config"]["ml-platform:sshPrivateKey"] = {"secure": "v1:AAAA"}
    doc["config"]["ml-platform:rke2Token"] = {"secure": "v1:BBBB"}
    assert schema_errors(doc) == []
    doc["config"]["ml-platform:sshPrivateKey"] = "-----BEGIN OPENSSH PRIVATE KEY-----"
    assert [e for e in schema_errors(doc) if e.startswith("config/ml-platform:sshPrivateKey")]


def test_other_namespaces_are_allowed_and_keys_need_a_namespace():
    doc = copy.deepcopy(stack_file("prod"))
    doc["config"]["kubernetes:enableServerSideApply"] = "true"
    assert schema_errors(doc) == []
    doc["config"]["cluster"] = {}
    assert schema_errors(doc)
