"""The operator's runbook (docs/runbook.md) says what each procedure changes; these tests hold it to
that, on the mock engine: which steps a change updates, which it replaces, and what deletes run."""

from __future__ import annotations

import json
import re
from typing import Any

from stacks import engine
from stacks.plan import diff
from tests.cluster.test_join_tokens import DEPLOYED
from tests.conftest import ROOT, stack_doc

RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()
README = (ROOT / "README.md").read_text()


def plan_with(stack: str, raw_changes: dict[str, Any] | None = None, secrets: dict[str, str] | None = None):
    raw = stack_doc(stack)
    raw.update(raw_changes or {})
    config = {f"ml-platform:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
    config.update({f"ml-platform:{k}": v for k, v in (secrets or {}).items()})
    config.setdefault("ml-platform:sshPrivateKey", "old-key")
    secret_keys = sorted(k for k in config if k.endswith(("sshPrivateKey", "rke2Token")))
    return engine.run(stack, config, secret_keys, computed=DEPLOYED)


def as_doc(plan: engine.Plan) -> dict[str, Any]:
    return json.loads(plan.to_json())


def revealed_changes(old: engine.Plan, new: engine.Plan) -> dict[str, set[str]]:
    """Top-level input keys whose revealed (secret-unwrapped) value differs, per command name."""
    before, after = old.by_urn(), new.by_urn()
    changes = {}
    for urn in before.keys() & after.keys():
        if before[urn]["type"] != "command:remote:Command":
            continue
        a, b = old.revealed[urn], new.revealed[urn]
        keys = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
        if keys:
            changes[before[urn]["name"]] = keys
    return changes


def test_only_membership_and_rke2_steps_run_anything_when_deleted(prod_plan):
    # Runbook 3 and 8: removal and teardown run the membership delete (drain, delete Node) and the
    # RKE2 step's (the certificate timer's own files, then RKE2 uninstalled); every other host step
    # deletes nothing on its host.
    steps = prod_plan.by_type("command:remote:Command")
    with_delete = {r["name"].split("-", 2)[-1] for r in steps if "delete" in r["inputs"]}
    assert with_delete == {"membership", "rke2"}, "update docs/runbook.md sections 3 and 8 (what deletes run)"


def test_adding_a_node_only_adds_that_nodes_steps():
    # Runbook 2: a pull request that adds a node shows creates for that node and nothing else.
    base = as_doc(plan_with("lab"))
    gpu = {
        "name": "lab-gpu-2",
        "address": "192.168.50.22",
        "role": "gpu",
        "gpu": {"model": "NVIDIA L40S", "count": 2},
        "infiniband": {"interface": "ib0", "address": "192.168.60.22"},
    }
    cpu = {"name": "lab-cpu-4", "address": "192.168.50.34", "role": "cpu"}
    for node in (gpu, cpu):
        grown = as_doc(plan_with("lab", {"nodes": [*stack_doc("lab")["nodes"], node]}))
        result = diff(base, grown)
        assert not result["removed"], (node["name"], result)
        # Nothing else changes but the group's Zabbix host set (and its claim) the host joins and, for a GPU node,
        # the group's GPU and NVLink drivers (the monitoring check names no host: it stays as it is).
        aggregates = ["monitoring-hosts-nodes", "monitoring-hosts-nodes-claim"]
        aggregates += ["acceptance-gpu-nodes", "acceptance-nccl-nvlink-nodes"] if "gpu" in node else []
        assert sorted(urn.rsplit("::", 1)[1] for urn in result["changed"]) == sorted(aggregates), result
        added = {urn.rsplit("::", 1)[1] for urn in result["added"]}
        assert {f"{node['name']}-{step}" for step in ("prepare", "rke2", "membership")} <= added
        # A second InfiniBand GPU node makes the two-node NCCL check possible: it is added with it, and the
        # rendezvous Service that NCCL pairs share, which lab had no use for before.
        pair = "acceptance-nccl-ib-lab-gpu-lab-gpu-2"
        enabled = {pair, "acceptance-nccl-rendezvous"} if "infiniband" in node else set()
        assert {name for name in added if not name.startswith(node["name"] + "-")} == enabled, added


def test_teardown_switch_changes_only_the_recorded_membership_deletes():
    # Runbook 8, step 2: `cluster.drainOnRemove: false` + `up` is an in-place update of the memberships.
    base = plan_with("lab")
    cluster = {**stack_doc("lab")["cluster"], "drainOnRemove": False}
    teardown = plan_with("lab", {"cluster": cluster})
    result = diff(as_doc(base), as_doc(teardown))
    assert not result["added"] and not result["removed"]
    assert {urn.rsplit("::", 1)[1] for urn in result["changed"]} == {
        f"{n['name']}-membership" for n in stack_doc("lab")["nodes"]
    }
    assert set().union(*result["changed"].values()) == {"inputs.delete"}
    for resource in teardown.by_type("command:remote:Command"):
        if resource["name"].endswith("-membership"):
            assert "DRAIN=false" in resource["inputs"]["delete"]


def test_a_new_ssh_key_updates_every_host_step_in_place():
    # Runbook 4: only `connection` changes (pulumi-command updates in place); `triggers`, the field that
    # replaces a command (and would run the uninstall/drain deletes first), stays the same.
    old, new = plan_with("lab"), plan_with("lab", secrets={"sshPrivateKey": "new-key"})
    changes = revealed_changes(old, new)
    commands = {r["name"] for r in old.by_type("command:remote:Command")}
    assert set(changes) == commands
    assert all(keys == {"connection"} for keys in changes.values()), changes
    assert not diff(as_doc(old), as_doc(new))["added"]


def test_a_rotated_join_token_updates_only_the_rke2_steps():
    # Runbook 5: setting ml-platform:rke2Token changes the servers' RKE2 steps' stdin (update in place:
    # new token file, restart) and retires the generated token; nothing is replaced. Agents hold only
    # the agent token: their steps do not change.
    old = plan_with("lab")
    new = plan_with("lab", secrets={"rke2Token": "rotated-token"})
    changes = revealed_changes(old, new)
    assert set(changes) == {f"{n['name']}-rke2" for n in stack_doc("lab")["nodes"] if n.get("controlPlane")}
    assert all(keys == {"stdin"} for keys in changes.values()), changes
    result = diff(as_doc(old), as_doc(new))
    assert [urn.rsplit("::", 1)[1] for urn in result["removed"]] == ["rke2-token"]
    assert not result["added"]


def test_runbook_is_linked_from_the_readme_and_covers_every_procedure():
    assert "docs/runbook.md" in README
    for heading in (
        "First bring-up",
        "Adding a node",
        "Removing a node",
        "Rotating the SSH key",
        "Rotating the RKE2 join token",
        "When `up` fails half-way",
        "What `pulumi refresh` can and cannot see",
        "Tearing an environment down",
        "Restoring a CephFS tree from MinIO",
        "Restoring etcd from a MinIO snapshot",
        "Replacing a failed NAS host",
    ):
        assert re.search(rf"^## \d+\. {re.escape(heading)}$", RUNBOOK, re.M), f"docs/runbook.md lacks: {heading}"
