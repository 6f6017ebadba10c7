"""The README's settings reference and outputs table stay true to the code."""

from __future__ import annotations

import re
import typing

from pydantic import BaseModel

from settings import Charts, Settings
from settings.root import _unwrap
from stacks.outputs import CONTRACT
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def settings_paths(model: type[BaseModel] = Settings, prefix: str = "") -> list[str]:
    """Every leaf key of the settings as documented: `nodes[].infiniband.address`."""
    paths = []
    for name, field in model.model_fields.items():
        path = f"{prefix}.{field.alias or name}" if prefix else (field.alias or name)
        tp = _unwrap(field.annotation)
        is_list = typing.get_origin(tp) is list
        inner = typing.get_args(tp)[0] if is_list else tp
        if isinstance(inner, type) and issubclass(inner, BaseModel) and inner is not Charts:
            paths += settings_paths(inner, path + ("[]" if is_list else ""))
        elif inner is not Charts:
            paths.append(path)
    return paths


def test_every_setting_is_documented():
    missing = [p for p in settings_paths() if f"`{p}`" not in README]
    assert missing == [], f"settings missing from the README's settings reference: {missing}"


def test_every_chart_is_documented():
    for alias in (f.alias for f in Charts.model_fields.values()):
        assert f"| `{alias}` |" in README, alias


def test_outputs_table_matches_the_contract():
    table = README.split("## Stack outputs", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([A-Za-z0-9.]+)` \| ([^|]+) \| (yes|no) \| (.+) \|$", table, re.M)
    documented = {name: (type_.strip(), secret == "yes") for name, type_, secret, _ in rows}
    declared = {spec.name: (spec.type, spec.secret) for spec in CONTRACT}
    assert documented == declared
