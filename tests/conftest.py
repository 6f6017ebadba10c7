"""Shared test machinery: the real program on Pulumi's mock engine (`stacks.engine`)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from settings import SECRET_KEYS, SettingsError, load
from stacks import engine, reference

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = reference.reference_dir()


def stack_doc(stack: str) -> dict[str, Any]:
    """The `config:` section of Pulumi.<stack>.yaml, keys without the namespace."""
    doc = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    return {key.split(":", 1)[1]: value for key, value in doc.items()}


def evaluate(
    stack: str = "prod",
    mutate: Optional[Callable[[dict], Any]] = None,
    computed: Optional[dict[str, dict[str, Any]]] = None,
) -> engine.Plan:
    """Evaluate the real program for `stack`, after `mutate` edits its parsed config in place
    (`computed`: outputs known as after a deployment, see `engine.run`)."""
    raw = copy.deepcopy(stack_doc(stack))
    if mutate is not None:
        mutate(raw)
    config = {f"ml-platform:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
    # A credential in `raw` is set as `pulumi config set --secret` sets it (plain config is refused).
    secret_keys = [f"ml-platform:{k}" for k in raw if k in SECRET_KEYS]
    for full, placeholder in engine.PLACEHOLDER_SECRETS.items():
        config.setdefault(full, placeholder)
        secret_keys.append(full)
    return engine.run(stack, config, secret_keys, computed=computed)


def problems(stack: str = "prod", mutate: Optional[Callable[[dict], Any]] = None) -> list[str]:
    """The settings problems for `stack` after `mutate`; [] when valid."""
    raw = copy.deepcopy(stack_doc(stack))
    if mutate is not None:
        mutate(raw)
    try:
        load(raw)
    except SettingsError as exc:
        return exc.problems
    return []


def run_plan(
    tmp_path: Path, mutate: Callable[[dict], Any], stack: str = "prod"
) -> tuple[subprocess.CompletedProcess, Path]:
    """Run `python -m stacks.plan <stack> --out` as a user would, on Pulumi.<stack>.yaml after `mutate`.

    `mutate` edits the parsed `config:` section in place (keys with the `ml-platform:` namespace).
    Returns the finished process and the `--out` path, which exists only when the plan was written.
    """
    doc = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    mutate(doc["config"])
    config = tmp_path / f"Pulumi.{stack}.changed.yaml"
    config.write_text(yaml.safe_dump(doc))
    out = tmp_path / "plan.json"
    proc = subprocess.run(
        [sys.executable, "-m", "stacks.plan", stack, "--config", str(config), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return proc, out


def tolerates(toleration: dict[str, Any], taint: str) -> bool:
    """Kubernetes' rule: does `toleration` tolerate the taint `key=value:Effect`?"""
    key_value, effect = taint.rsplit(":", 1)
    key, _, value = key_value.partition("=")
    if toleration.get("effect") not in (None, "", effect):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return toleration.get("key") in (None, "", key)
    return toleration.get("key") == key and toleration.get("value", "") == value


def node_index(raw: dict, name: str) -> int:
    return next(i for i, n in enumerate(raw["nodes"]) if n["name"] == name)


@pytest.fixture(scope="session")
def prod_plan() -> engine.Plan:
    return evaluate("prod")


@pytest.fixture(scope="session")
def lab_plan() -> engine.Plan:
    return evaluate("lab")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test that reaches a missing reference file anywhere (a chart source Helm renders, a CRD schema)
    skips naming the command that fetches it, as `requires_upstream` does; with MLP_REFERENCE_STRICT=1
    (CI) it fails."""
    try:
        return (yield)
    except reference.ReferenceMissingError as missing:
        if reference.strict():
            raise
        pytest.skip(f"upstream reference file missing: {missing}")


def requires_upstream(*parts: str) -> Path:
    """A reference file (`stacks.reference`), or skip the test naming the command that fetches it when it is
    absent; with MLP_REFERENCE_STRICT=1 (CI) a missing file fails the test instead."""
    path = UPSTREAM.joinpath(*parts)
    if not path.exists():
        message = (
            f"upstream reference file missing: {path}; run `{reference.FETCH_COMMAND}` "
            "(or set MLP_REFERENCE_DIR to a directory that holds the reference files)"
        )
        if reference.strict():
            pytest.fail(message)
        pytest.skip(message)
    return path
