"""The stack outputs are a contract with other teams: nothing published may silently change.

Other teams read our outputs with `pulumi stack output NAME` and `StackReference.require_output(NAME)`.
A renamed or removed output, a changed type, or a secret made plain breaks them (or leaks) without any
error on our side. `PUBLISHED` below is the contract as released: a literal copy of `stacks/outputs.py`
on purpose, so that changing the code alone fails here and the change is made, and reviewed, twice.

Adding an output: declare it in `stacks/outputs.py` CONTRACT and the table in docs/outputs.md, then add its line
to PUBLISHED (the failing test prints the line to paste).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from stacks import engine
from stacks.engine import SECRET, UNKNOWN
from stacks.outputs import CONTRACT, finalize

# name -> (type, secret). Keep it sorted by name. Changing or deleting a line breaks consumers: see the
# messages below for what to do instead.
PUBLISHED: dict[str, tuple[str, bool]] = {
    "acceptance": ("map[map[string]]", False),
    "apiEndpoint": ("string", False),
    "cephFaultTolerance": ("string", False),
    "cephNamespace": ("string", False),
    "cni": ("string", False),
    "gpuNodes": ("list[string]", False),
    "gpuSchedulable": ("integer", False),
    "gpuTotal": ("integer", False),
    "ibNetworkName": ("string", False),
    "kubeconfig": ("string", True),
    "minioCaCert": ("string", False),
    "minioRestoreCredentials": ("map[map[string]]", True),
    "minioReadToleranceHosts": ("integer", False),
    "minioUsableFraction": ("number", False),
    "minioWriteToleranceHosts": ("integer", False),
    "monitoredHosts": ("list[string]", False),
    "oidcLogin": ("map[string]", False),
    "rdmaResourceName": ("string", False),
    "rke2Token": ("string", True),
    "storageClasses": ("map[string]", False),
    "teamClusterQueues": ("map[string]", False),
    "teamLocalQueues": ("map[string]", False),
    "teamNamespaces": ("map[list[string]]", False),
    "workloadPriorityClasses": ("list[string]", False),
    "zabbixAdminPassword": ("string", True),
    "zabbixApiToken": ("string", True),
    "zabbixApiUser": ("string", False),
    "zabbixUrl": ("string", False),
    "zabbixCaCert": ("string", False),
}

DECLARED = {spec.name: spec for spec in CONTRACT}
SCALARS = {"string", "integer", "number", "boolean"}
_COMPOSITE = re.compile(r"^(list|map)\[(.+)\]$")


def test_no_published_output_disappears():
    gone = sorted(set(PUBLISHED) - set(DECLARED))
    assert not gone, (
        f"stack outputs {gone} were removed or renamed in stacks/outputs.py, but other teams read them "
        "(`pulumi stack output`, `StackReference.require_output`): their next run breaks. Keep exporting the "
        "old name next to a new one until every consumer has moved; only then delete its line from PUBLISHED "
        "in tests/test_outputs_contract.py and announce it."
    )


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_output_keeps_its_type(name):
    if name not in DECLARED:
        pytest.skip(f"{name} is gone: test_no_published_output_disappears reports it")
    published, declared = PUBLISHED[name][0], DECLARED[name].type
    assert declared == published, (
        f"stack output {name!r} changed type from {published} to {declared}: consumers that parse it "
        "break. Export the new shape under a new name and keep the old one."
    )


@pytest.mark.parametrize("name", sorted(n for n, (_, secret) in PUBLISHED.items() if secret))
def test_secret_output_stays_secret(name):
    if name not in DECLARED:
        pytest.skip(f"{name} is gone: test_no_published_output_disappears reports it")
    assert DECLARED[name].secret, (
        f"stack output {name!r} is published as a secret and is now declared plain: its value would be "
        "stored unencrypted in the state and printed by `pulumi stack output` to anyone who can read the "
        "stack. Keep it secret."
    )


@pytest.mark.parametrize("name", sorted(n for n, (_, secret) in PUBLISHED.items() if not secret))
def test_plain_output_stays_plain(name):
    if name not in DECLARED:
        pytest.skip(f"{name} is gone: test_no_published_output_disappears reports it")
    assert not DECLARED[name].secret, (
        f"stack output {name!r} is published as plain and is now declared secret: scripts that read it "
        "with `pulumi stack output` (without --show-secrets) get '[secret]'. If it must become secret, "
        "agree it with the consumers, then change its line in PUBLISHED."
    )


def test_every_declared_output_is_published():
    new = [spec for spec in CONTRACT if spec.name not in PUBLISHED]
    lines = "\n".join(f'    "{spec.name}": ("{spec.type}", {spec.secret}),' for spec in new)
    assert not new, (
        "new stack outputs are declared in stacks/outputs.py but not published. Once released, other teams "
        "depend on them, so publishing is a decision: add these lines to PUBLISHED in "
        f"tests/test_outputs_contract.py (and the rows to the outputs table in docs/outputs.md):\n{lines}"
    )


def parse_type(type_: str) -> tuple[str, ...]:
    """`map[list[string]]` -> ("map", "list", "string"); raises ValueError for an unknown type."""
    match = _COMPOSITE.match(type_)
    if match:
        return (match.group(1), *parse_type(match.group(2)))
    if type_ in SCALARS:
        return (type_,)
    raise ValueError(f"unknown output type {type_!r}: use one of {sorted(SCALARS)}, list[T] or map[T]")


@pytest.mark.parametrize("spec", CONTRACT, ids=lambda s: s.name)
def test_declared_type_is_one_consumers_can_rely_on(spec):
    parse_type(spec.type)


def conforms(value: Any, type_: str) -> bool:
    """Whether a plan value matches a declared type; "[unknown]" (known only after `up`) matches any."""
    if value == UNKNOWN:
        return True
    kind = parse_type(type_)
    if kind[0] == "list":
        inner = type_[len("list[") : -1]
        return isinstance(value, list) and all(conforms(v, inner) for v in value)
    if kind[0] == "map":
        inner = type_[len("map[") : -1]
        return isinstance(value, dict) and all(isinstance(k, str) and conforms(v, inner) for k, v in value.items())
    return {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
    }[kind[0]](value)


def test_conforms_tells_types_apart():
    # The plan checks below are only as good as this.
    assert conforms(["a", UNKNOWN], "list[string]") and not conforms(["a", 1], "list[string]")
    assert conforms({"tier1": "x"}, "map[string]") and not conforms(["x"], "map[string]")
    assert conforms(3, "integer") and not conforms(True, "integer") and not conforms("3", "integer")
    with pytest.raises(ValueError, match="unknown output type"):
        parse_type("object")


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_plan_exports_every_declared_output_as_declared(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan")
    assert sorted(plan.outputs) == sorted(DECLARED), "the program must export exactly the declared outputs"
    for name, spec in DECLARED.items():
        value = plan.outputs[name]
        if spec.secret:
            assert value == SECRET, f"{stack}: secret output {name} is not a Pulumi secret in the plan: {value!r}"
        else:
            assert value != SECRET, (
                f"{stack}: output {name} is declared plain but arrives secret (it is built from a secret); "
                "`pulumi stack output` would show '[secret]'"
            )
            assert conforms(value, spec.type), f"{stack}: output {name} = {value!r} is not a {spec.type}"


def _sample(type_: str) -> Any:
    kind = parse_type(type_)[0]
    return {"string": "x", "integer": 1, "number": 1.5, "boolean": True, "list": [], "map": {}}[kind]


def test_finalize_makes_declared_secrets_secret_whatever_the_component_gives():
    # A component may hand over a plain value (e.g. read from a file); the contract still makes it secret.
    plain = {spec.name: _sample(spec.type) for spec in CONTRACT}
    plan = engine.run("prod", {}, [], lambda: finalize(plain))
    for spec in CONTRACT:
        assert (plan.outputs[spec.name] == SECRET) == spec.secret, spec.name


def test_finalize_refuses_undeclared_and_missing_outputs():
    outputs = {spec.name: _sample(spec.type) for spec in CONTRACT}
    with pytest.raises(ValueError, match=r"undeclared \['surprise'\]"):
        finalize({**outputs, "surprise": "x"})
    with pytest.raises(ValueError, match=r"missing \['kubeconfig'\]"):
        finalize({k: v for k, v in outputs.items() if k != "kubeconfig"})
