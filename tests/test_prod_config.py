"""Pulumi.prod.yaml sets every settings key explicitly, so a reviewer sees every choice."""

from __future__ import annotations

from typing import Any

from tests.conftest import stack_doc
from tests.test_docs import settings_paths

# Optional keys whose absence is the choice (public sources instead of a mirror).
UNSET_IN_PROD = {
    "cluster.install.artifactUrl",
    "cluster.systemDefaultRegistry",
    "cluster.deployedRke2Version",  # set only in a change that upgrades RKE2
    # Storage and other CPU agents upgrade at any time; drains keep the pods' own grace periods.
    *(
        f"cluster.upgrade.{pool}.window{key}"
        for pool in ("storage", "cpu")
        for key in ("", ".days", ".startTime", ".endTime", ".timeZone")
    ),
    *(f"cluster.upgrade.{pool}.drain.gracePeriodSeconds" for pool in ("gpu", "storage", "cpu")),
    "nodes[].renamedFrom",  # set only in a change that renames a node
    # No IB topology recorded for prod's GPU nodes: no Kueue Topology (tests/scheduling/test_stack.py adds one).
    "nodes[].topology",
    "nodes[].topology.block",
    "nodes[].topology.rack",
    # No identity provider client for the cluster yet: teams use the CI token of their `teams/` stack.
    "cluster.oidc",
    "cluster.oidc.issuerUrl",
    "cluster.oidc.clientId",
    "cluster.oidc.usernameClaim",
    "cluster.oidc.groupsClaim",
    "cluster.oidc.usernamePrefix",
    "cluster.oidc.groupsPrefix",
    "cluster.oidc.caPem",
}


def present(doc: Any, path: list[str]) -> bool:
    if not path:
        return True
    head, rest = path[0], path[1:]
    if head.endswith("[]"):
        items = doc.get(head[:-2], []) if isinstance(doc, dict) else []
        return any(present(item, rest) for item in items)
    return isinstance(doc, dict) and head in doc and present(doc[head], rest)


def test_prod_sets_every_key():
    doc = stack_doc("prod")
    missing = [p for p in settings_paths() if p not in UNSET_IN_PROD and not present(doc, p.split("."))]
    assert missing == [], f"Pulumi.prod.yaml does not set: {missing}"


def test_prod_pins_every_chart():
    charts = stack_doc("prod")["charts"]
    from settings import Charts

    assert set(charts) == {f.alias for f in Charts.model_fields.values()}
