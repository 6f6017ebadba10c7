"""Every trigger of the platform's templates says how it recovers: a recovery expression (hysteresis:
the problem clears only on the other side of its threshold, or after a period there), or a sentence in its
description, `Recovery: ...`, stating why its problem expression is enough (a discrete state, nodata(), a
value that only changes with a repair). A trigger with neither fails here, so a new one cannot be added
without deciding whether it can flap. On the real server, tests/monitoring/test_queues.py drives inputs that
hover at thresholds."""

from __future__ import annotations

import re

import pytest
import yaml

from components.monitoring.config import template_sources

# A threshold compared with a measurement that moves (min/max/avg/sum over a window, or last of a gauge)
# flaps near the threshold unless its recovery differs: such triggers need a recovery expression.
_WINDOWED = re.compile(r"\b(min|max|avg|sum)\(/[^)]*,[^)]*\)\s*(>=|<=|>|<)")


def all_triggers() -> list[tuple[str, dict]]:
    found = []
    for stem, (_, text) in template_sources().items():
        for template in yaml.safe_load(text)["zabbix_export"]["templates"]:
            for item in template.get("items", []):
                found += [(f"{stem}: {t['name']}", t) for t in item.get("triggers", [])]
            for rule in template.get("discovery_rules", []):
                found += [(f"{stem}: {t['name']}", t) for t in rule.get("trigger_prototypes", [])]
        found += [(f"{stem}: {t['name']}", t) for t in yaml.safe_load(text)["zabbix_export"].get("triggers", [])]
    return found


def recovers_by_expression(trigger: dict) -> bool:
    return trigger.get("recovery_mode") == "RECOVERY_EXPRESSION" and bool(trigger.get("recovery_expression"))


def test_there_are_triggers_to_check():
    assert len(all_triggers()) >= 40


@pytest.mark.parametrize("name,trigger", all_triggers(), ids=[n for n, _ in all_triggers()])
def test_every_trigger_has_a_recovery_expression_or_says_why_it_needs_none(name, trigger):
    stated = "Recovery: " in trigger.get("description", "")
    assert recovers_by_expression(trigger) or stated, f"{name}: no recovery expression and no 'Recovery: <why>'"


@pytest.mark.parametrize("name,trigger", all_triggers(), ids=[n for n, _ in all_triggers()])
def test_a_threshold_on_a_window_recovers_on_the_other_side_of_it(name, trigger):
    """min(x,5m)>T clears on the first sample under T: with noise around T it flaps. Such triggers must have
    a recovery expression (threshold or period on the good side)."""
    if _WINDOWED.search(trigger["expression"]) and trigger.get("recovery_mode") != "NONE":
        assert recovers_by_expression(trigger), f"{name}: a windowed threshold without a recovery expression"


def test_the_check_catches_a_trigger_without_either():
    bare = {"expression": "last(/t/k)>1", "description": "something"}
    windowed = {"expression": "min(/t/k,5m)>{$X}", "description": "Recovery: none"}
    assert not (recovers_by_expression(bare) or "Recovery: " in bare["description"])
    assert _WINDOWED.search(windowed["expression"]) and not recovers_by_expression(windowed)
