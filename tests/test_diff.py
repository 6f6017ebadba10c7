"""The offline diff (`stacks.diff`, `python -m stacks.plan --diff`): a base and a changed configuration of
the real program, and what a reviewer reads: values, replace/delete semantics, danger first, refusals."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pulumi_command
import pulumi_random
import pytest
import yaml

from stacks import diff, engine
from stacks.diff import core
from stacks.plan import REFUSED
from tests.conftest import ROOT, evaluate, node_index, stack_doc


@pytest.fixture(scope="module")
def prod_base() -> dict:
    return json.loads(evaluate("prod").to_json())


def changed(mutate, stack: str = "prod") -> dict:
    return json.loads(evaluate(stack, mutate).to_json())


def write(tmp_path: Path, **plans: dict) -> list[str]:
    paths = []
    for name, plan in plans.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(plan))
        paths.append(str(path))
    return paths


def planner_diff(tmp_path: Path, base: dict, head: dict, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stacks.plan", "--diff", *write(tmp_path, base=base, head=head), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def section(text: str, title: str) -> list[str]:
    """The lines of one section of the text diff (`DANGER: ...` up to the next blank line)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start + 1 : end]


def test_rke2_version_bump_shows_the_versions_and_the_upgrade_order(prod_base, tmp_path):
    old = stack_doc("prod")["cluster"]["rke2Version"]
    new = "v1.35.8+rke2r1"
    assert old != new
    head = changed(lambda raw: raw["cluster"].update({"rke2Version": new, "deployedRke2Version": old}))
    result = diff.compare(prod_base, head)
    # The pre-upgrade step and the Plans appear (only while the upgrade is pending); the check that every
    # node runs rke2Version goes meanwhile; no host RKE2 step (fresh hosts install `old` meanwhile).
    assert result.counts() == {"create": 5, "delete": 1}
    text = diff.render_text(result)
    assert section(text, "DANGER") == [
        f"  ! RKE2 upgrade {old} -> {new}: first the pre-upgrade step on the init server (refuses a downgrade or "
        f"skipped minor, saves a new etcd snapshot pre-upgrade-{new.replace('+', '-')}-<time>); then a rolling "
        "upgrade by the system-upgrade-controller: servers 3 nodes one at a time (cordoned, not drained, 120s "
        "apart); then, once every server runs it, in parallel, a rolling drain of gpu pool 15 nodes 1 at a time "
        "(only saturday, sunday 02:00-08:00 UTC, drain timeout 1800s); storage pool 12 nodes 1 at a time (any time, "
        "drain timeout 900s); cpu pool 20 nodes 2 at a time (any time, drain timeout 900s) (PodDisruptionBudgets "
        "honoured; nodes labelled ml-platform.io/upgrade-hold are skipped); each node's RKE2 restarts once (watch: "
        "kubectl -n system-upgrade get plans,jobs; retry a failed one: python -m stacks.upgrade retry PLAN)"
    ]
    snapshot = next(r for r in head["resources"] if r["name"] == "upgrades-pre-upgrade-snapshot")
    assert diff.command_env(snapshot["inputs"]["create"])["RKE2_VERSION"] == new


def test_cni_switch_is_refused_naming_the_protected_release(prod_base, tmp_path):
    head = changed(lambda raw: raw["network"].update({"cni": "calico"}))
    proc = planner_diff(tmp_path, prod_base, head)
    assert proc.returncode == REFUSED, proc.stderr
    urn = next(r["urn"] for r in head["resources"] if r["name"] == "network-cni")
    errors = section(proc.stdout, "ERRORS")
    assert errors[:2] == [
        f'  error: unable to replace resource "{urn}"',
        "  as it is currently marked for protection. To unprotect the resource, remove the `protect` flag from "
        "the resource in your Pulumi program and run `pulumi up`",
    ]
    assert errors[2].startswith("  network-cni (changes inputs.name, inputs.namespace): switching the CNI")
    # The servers' config.yaml changes (kube-proxy comes back with Calico): RKE2 restarts on those 3.
    assert (
        "  ! RKE2 service restarted on 3 nodes (RKE2_CONFIG changed): servers one after another, agents all at once"
        in (section(proc.stdout, "DANGER"))
    )
    assert "docs/runbook.md §8" in errors[2]
    assert '~ output cni: "cilium" -> "calico"' in proc.stdout, "an output change shows old -> new"
    # The ERRORS section comes before everything else.
    assert proc.stdout.splitlines()[2].startswith("ERRORS")


def test_moving_the_init_server_is_refused_until_its_record_is_unprotected(prod_base, tmp_path):
    record = next(r for r in prod_base["resources"] if r["name"] == "cluster-init-server")
    assert record["options"]["protect"] and record["inputs"]["keepers"] == {"initServer": "cpu-01"}
    head = changed(lambda raw: raw["cluster"].update({"initServer": "cpu-02"}))
    proc = planner_diff(tmp_path, prod_base, head)
    assert proc.returncode == REFUSED, proc.stderr
    errors = section(proc.stdout, "ERRORS")
    assert errors[0] == f'  error: unable to replace resource "{record["urn"]}"'
    assert errors[2].startswith("  cluster-init-server (changes inputs.keepers")
    assert "docs/runbook.md §3" in errors[2] and "pulumi state unprotect" in errors[2]


def test_removing_an_agent_marks_its_drain_and_uninstall_destructive(prod_base):
    head = changed(lambda raw: raw["nodes"].pop(node_index(raw, "cpu-20")))
    result = diff.compare(prod_base, head)
    assert {e.name: e.action for e in result.entries} == {
        # Dropped from the state only (retained: the Node itself goes with the membership's delete).
        "cpu-20-labels-taints": "delete",
        "cpu-20-membership": "delete",
        "cpu-20-prepare": "delete",
        "cpu-20-rke2": "delete",
        # Its delete removes the certificate timer, the program's own files only (no danger line).
        # Its copy of the host scripts: no delete command (the files stay for the deletes above).
        "cpu-20-scripts": "delete",
        # Zabbix forgets a removed node: its group's host set deletes the host (no danger line), its claim drops it.
        "monitoring-hosts-nodes": "update",
        "monitoring-hosts-nodes-claim": "update",
        # The monitoring check names no host (it asks Zabbix for the host sets' members): it stays as it is.
    }
    assert result.danger == [
        "cpu-20-membership [host cpu-20] removed: node-remove.sh: cordon + drain (PodDisruptionBudgets honoured) "
        "+ delete the Node object",
        "cpu-20-rke2 [host cpu-20] removed: rke2-uninstall.sh: uninstall RKE2: removes /var/lib/rancher/rke2 "
        "(etcd data, images), /etc/rancher, CNI files",
    ]
    assert not result.errors
    text = diff.render_text(result)
    assert text.index("DANGER") < text.index("- delete cpu-20-rke2")


def test_removing_a_storage_host_warns_with_its_devices(prod_base):
    devices = [d["device"] for d in next(n for n in stack_doc("prod")["nodes"] if n["name"] == "cpu-04")["osdDevices"]]
    assert len(devices) == 4
    head = changed(lambda raw: raw["nodes"].pop(node_index(raw, "cpu-04")))
    result = diff.compare(prod_base, head)
    (ceph,) = [d for d in result.danger if "Ceph storage host" in d]
    assert ceph.startswith(
        f"cpu-04-ceph-disks: Ceph storage host cpu-04 removed with its OSD devices {' '.join(devices)}"
    )
    release = next(e for e in result.entries if e.name == "ceph-cluster")
    assert release.action == "update"
    assert any(c.path == "inputs.values.cephClusterSpec.storage.nodes[name=cpu-04]" for c in release.changes), (
        "list items are matched by name, not by position"
    )


POOL = "https://10.20.3.{11...14}:9000/mnt/minio/drive{1...12}/data (48 drives, erasure sets of 16, EC:8)"
POOL_IS_FIXED = (
    "MinIO fixes the pool when it first starts (format.json on every drive) and cannot shrink or re-stripe it: it "
    "does not start with another drive count, and minio-nas.sh refuses the change on every NAS host whose drives "
    "hold data (the up stops at those steps). To change the layout, build a new deployment and copy the data "
    "(docs/minio-tier.md, 'Layout and what it survives')"
)


def nas_drives(host: str) -> list[str]:
    return [d["device"] for d in next(h for h in stack_doc("prod")["nas"]["hosts"] if h["name"] == host)["drives"]]


def test_removing_nas_drives_names_them_and_what_happens_to_the_pool(prod_base, tmp_path):
    def four_drives_fewer(raw):
        for host in raw["nas"]["hosts"]:
            del host["drives"][8:]

    proc = planner_diff(tmp_path, prod_base, changed(four_drives_fewer))
    assert proc.returncode == 0, proc.stderr
    danger = section(proc.stdout, "DANGER")
    removed = ", ".join(f"drive{slot} {device}" for slot, device in enumerate(nas_drives("nas-03")[8:], 9))
    assert f"  ! nas-03-minio [NAS host nas-03]: drives removed from MinIO's pool: {removed}" in danger
    assert len([line for line in danger if "drives removed from MinIO's pool" in line]) == 4
    assert danger[-1] == (
        f"  ! MinIO's server pool changes: {POOL} -> https://10.20.3.{{11...14}}:9000/mnt/minio/drive{{1...8}}/data "
        f"(32 drives, sets of 16, EC:8). {POOL_IS_FIXED}"
    )


def test_removing_a_nas_host_names_its_drives_and_the_smaller_pool(prod_base):
    def three_hosts(raw):
        raw["nas"]["hosts"] = [host for host in raw["nas"]["hosts"] if host["name"] != "nas-04"]
        raw["storage"]["minio"].update(
            {"erasureSetDrives": 12, "parity": 6, "requireHostLoss": {"read": 1, "write": 1}}
        )

    text = diff.render_text(diff.compare(prod_base, changed(three_hosts)))
    drives = ", ".join(f"drive{slot} {device}" for slot, device in enumerate(nas_drives("nas-04"), 1))
    assert section(text, "DANGER") == [
        f"  ! nas-04-minio [NAS host nas-04]: NAS host removed from MinIO's pool with all its drives: {drives} "
        "(the step has no delete: MinIO keeps running there until stopped by hand)",
        f"  ! MinIO's server pool changes: {POOL} -> https://10.20.3.{{11...13}}:9000/mnt/minio/drive{{1...12}}/data "
        f"(36 drives, sets of 12, EC:6). {POOL_IS_FIXED}",
    ]
    assert "- delete nas-04-minio [command:remote:Command]" in text


def test_a_replaced_nas_drive_heals_and_keeps_the_pool(prod_base):
    old = nas_drives("nas-02")[2]
    new = "/dev/disk/by-id/wwn-0x5000c500ffff0003"
    head = changed(lambda raw: raw["nas"]["hosts"][1]["drives"].__setitem__(2, {"device": new, "format": True}))
    assert diff.compare(prod_base, head).danger == [
        f"nas-02-minio [NAS host nas-02]: drives replaced in MinIO's pool: drive3 {old} -> {new}. MinIO heals each "
        "new drive from the other drives of its erasure set; until then that set survives one drive loss fewer: "
        "replace no more drives of a set than its parity at once (docs/runbook.md §11)"
    ]


def secret_plan(key: str) -> dict:
    """The lab plan with `key` as the SSH private key (a Pulumi secret)."""
    raw = stack_doc("lab")
    config = {f"ml-platform:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
    config["ml-platform:sshPrivateKey"] = key
    return json.loads(engine.run("lab", config, ["ml-platform:sshPrivateKey"]).to_json())


def test_a_changed_secret_is_reported_without_its_value(tmp_path):
    # Markers with '!', which base64 (e.g. a pickled dynamic provider in the plan) never contains.
    base, head = secret_plan("first-private-key!A"), secret_plan("second-private-key!B")
    proc = planner_diff(tmp_path, base, head)
    assert proc.returncode == 0, proc.stderr
    assert "inputs.connection: [secret] -> [secret] (changed; value not shown)" in proc.stdout
    # Every host step and every copy of the host scripts: their connections hold the key.
    steps = len([r for r in head["resources"] if r["type"].startswith("command:remote:")])
    assert f": 0 to create, {steps} to update," in proc.stdout.splitlines()[0]
    for text in (proc.stdout, json.dumps(base), json.dumps(head)):
        assert "key!A" not in text and "key!B" not in text


def test_a_changed_secure_config_value_changes_the_offline_plan(tmp_path):
    # Offline, secrets are placeholders: one derived from the `secure:` ciphertext, so a rotated secret shows.
    doc = yaml.safe_load((ROOT / "Pulumi.lab.yaml").read_text())
    files = []
    for n, cipher in enumerate(("v1:QQZZone", "v1:QQZZtwo")):
        doc["config"]["ml-platform:sshPrivateKey"] = {"secure": cipher}
        files.append(tmp_path / f"{n}.yaml")
        files[-1].write_text(yaml.safe_dump(doc))
    base, head = (json.loads(engine.evaluate_stack("lab", f).to_json()) for f in files)
    result = diff.compare(base, head)
    assert result.entries and all(
        [c.path for c in e.changes] == ["inputs.connection"] and e.action == "update" for e in result.entries
    )
    assert "QQZZ" not in json.dumps(base) + json.dumps(head)


def test_no_change_is_an_empty_diff(prod_base):
    result = diff.compare(prod_base, prod_base)
    assert (result.entries, result.outputs, result.danger, result.errors) == ([], [], [], [])


def test_markdown_is_collapsible_per_component_with_counts(prod_base):
    head = changed(lambda raw: raw["nodes"].pop(node_index(raw, "cpu-04")))
    markdown = diff.render_markdown(diff.compare(prod_base, head))
    # The other updates: the team-placement admission policy no longer names cpu-04 among the storage hosts; its
    # group's Zabbix host set and claim drop it.
    counts = "0 to create, 4 to update, 0 to replace, 0 to delete-before-replace,"
    assert markdown.startswith(f"**ml-platform/prod**: {counts}")
    assert "| scheduling | 1 update |" in markdown
    assert "| cluster | 4 delete |" in markdown and "| ceph | 1 update, 1 delete |" in markdown
    assert "<details><summary>by host (1 hosts)</summary>" in markdown and "| cpu-04 | 4 delete |" in markdown
    assert "<details><summary>ceph: 1 update, 1 delete</summary>" in markdown
    assert markdown.index("**Danger") < markdown.index("<details>")


# --- the replace/update table against the providers' own statements --------------------------------------


def test_command_replace_rule_is_the_sdks_own(prod_base):
    # pulumi-command's SDK registers every Command with replaceOnChanges on its triggers.
    source = Path(pulumi_command.__file__).parent / "remote" / "command.py"
    assert 'replace_on_changes=["triggers[*]"]' in source.read_text()
    assert diff.REPLACE_ON["command:remote:Command"] == ("triggers",)
    commands = [r for r in prod_base["resources"] if r["type"] == "command:remote:Command"]
    assert all("triggers[*]" in r["options"]["replaceOnChanges"] for r in commands)


def test_random_password_replaces_on_any_input():
    source = Path(pulumi_random.__file__).parent / "random_password.py"
    assert "will trigger recreation of resource" in source.read_text()
    assert diff.replace_paths({"type": "random:index/randomPassword:RandomPassword", "options": {}}) == ("",)


@pytest.mark.parametrize(
    ("type_", "path", "action"),
    [
        ("kubernetes:helm.sh/v3:Release", "name", "replace"),
        ("kubernetes:helm.sh/v3:Release", "namespace", "replace"),
        ("kubernetes:helm.sh/v3:Release", "values", "update"),
        ("kubernetes:helm.sh/v3:Release", "version", "update"),
        ("kubernetes:storage.k8s.io/v1:StorageClass", "parameters", "replace"),
        ("kubernetes:storage.k8s.io/v1:StorageClass", "metadata", "replace"),
        ("kubernetes:storage.k8s.io/v1:StorageClass", "reclaimPolicy", "update"),
        ("kubernetes:core/v1:Namespace", "metadata", "replace"),
        ("kubernetes:mellanox.com/v1alpha1:NicClusterPolicy", "spec", "update"),
        ("command:remote:Command", "create", "update"),
    ],
)
def test_classification(type_, path, action):
    # metadata changes here are to metadata.name; StorageClass/Release rules: pulumi-kubernetes forcenew.go and
    # helm_release.go (see stacks/diff.py).
    value = {"name": "a"} if path == "metadata" else "a"
    other = {"name": "b"} if path == "metadata" else "b"
    options = {"replaceOnChanges": ["triggers[*]"] if type_.startswith("command:") else []}
    old = {"urn": "u", "name": "n", "type": type_, "inputs": {path: value}, "options": options}
    new = {**old, "inputs": {path: other}}
    assert diff.classify(old, new, "c").action == action


def test_minio_user_rename_deletes_first_as_its_dynamic_provider_says():
    old = {"urn": "u", "name": "n", "type": core.DYNAMIC, "inputs": {"user": "a", "policyName": "p"}, "options": {}}
    assert (
        diff.classify(old, {**old, "inputs": {"user": "b", "policyName": "p"}}, "c").action == "delete-before-replace"
    )
    bucket = {**old, "inputs": {"bucket": "a"}}
    assert diff.classify(bucket, {**bucket, "inputs": {"bucket": "b"}}, "c").action == "replace"


def test_delete_before_replace_and_retain_options():
    base = {"urn": "u", "name": "n", "type": "command:remote:Command", "inputs": {"triggers": ["a"]}}
    old = {**base, "options": {"replaceOnChanges": ["triggers[*]"], "deleteBeforeReplace": True}}
    new = {**old, "inputs": {"triggers": ["b"]}}
    assert diff.classify(old, new, "c").action == "delete-before-replace"
    retained = {**base, "options": {"retainOnDelete": True}}
    assert "retainOnDelete: left in place" in diff.entry_lines(diff.classify(retained, None, "c"))[0]


def test_ignore_changes_hides_a_change():
    old = {"urn": "u", "name": "n", "type": "kubernetes:helm.sh/v3:Release", "inputs": {"version": "1"}}
    old["options"] = {"ignoreChanges": ["version"]}
    assert diff.classify(old, {**old, "inputs": {"version": "2"}}, "c") is None


def test_every_registered_type_has_a_rule(prod_base):
    for type_ in {r["type"] for r in prod_base["resources"]}:
        if type_.startswith("mlplatform:"):
            continue  # components: no provider, nothing to replace
        known = (
            type_ in diff.REPLACE_ON or type_ == core.DYNAMIC or type_.startswith(("kubernetes:", "pulumi:providers:"))
        )
        assert known, f"{type_}: add its replace rule (and source) to stacks/diff.py REPLACE_ON"


def test_values_line_diff_and_nested_paths():
    changes = diff.value_changes(
        {"script": "a\nb\nc", "list": [{"name": "x", "v": 1}, {"name": "y", "v": 2}], "n": 1},
        {"script": "a\nB\nc", "list": [{"name": "y", "v": 3}, {"name": "x", "v": 1}], "n": 2},
        "inputs",
    )
    rendered = [line for c in changes for line in diff.render_change(c)]
    assert "inputs.list[name=y].v: 2 -> 3" in rendered
    assert "inputs.n: 1 -> 2" in rendered
    script = rendered[rendered.index("inputs.script:") + 1 :]
    assert [line.strip() for line in script if re.match(r"\s+[-+][^-+]", line)] == ["-b", "+B"]


def test_zabbix_rule_names_every_kind_the_provider_handles():
    from components.monitoring.objects import KINDS

    assert set(core.ZABBIX_KINDS) == set(KINDS)
