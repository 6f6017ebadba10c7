"""Settings refuse, by class, what upstream would reject or misread; each class with two or more cases.

Where a class is defined by a field type (a credential, a schedule, a URL, an image, a digest), the test
enumerates the fields of that type from the models, so a field added later is covered without a new test.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from settings import SECRET_KEYS, Settings, StackSecrets
from settings.types import SECRET, cron
from tests.conftest import ROOT, problems, run_plan

# ---------------------------------------------------------------------------------------------
# The models, walked
# ---------------------------------------------------------------------------------------------


def _models(tp) -> Iterator[type[BaseModel]]:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        yield from _models(typing.get_args(tp)[0])
    elif origin is not None:
        for arg in typing.get_args(tp):
            yield from _models(arg)
    elif isinstance(tp, type) and issubclass(tp, BaseModel):
        yield tp


def fields(model: type[BaseModel], path: str = "") -> Iterator[tuple[str, str, object]]:
    """(config path, python name, field info) of every field below `model`; list items as `[]`."""
    for name, info in model.model_fields.items():
        key = info.alias or name
        here = f"{path}.{key}" if path else key
        yield here, name, info
        for sub in _models(info.annotation):
            if sub is not model:
                yield from fields(sub, here + ("[]" if typing.get_origin(info.annotation) is list else ""))


def has_validator(info, validator) -> bool:
    return any(getattr(meta, "func", None) is validator for meta in info.metadata)


CREDENTIAL_NAME = re.compile(
    r"(password|passwd|token|secret|psk|private_?key|access_?key|api_?key|credential|webhook)", re.I
)


def test_every_credential_is_a_secret_field_of_the_secrets_model_only():
    # `..._secret_name` names a Kubernetes Secret object (where a credential lives), not a credential.
    named = [
        (path, name)
        for path, name, _ in fields(Settings)
        if CREDENTIAL_NAME.search(name) and not name.endswith("_secret_name")
    ]
    # A plain settings field may name a credential only to say where it goes (a path, a user, a switch).
    assert named == [], f"credential-like settings fields must be Secret fields of StackSecrets: {named}"
    secret_in_plain = [path for path, _, info in fields(Settings) if SECRET in info.metadata]
    assert secret_in_plain == []
    declared = {info.alias or name for name, info in StackSecrets.model_fields.items() if SECRET in info.metadata}
    assert declared == set(SECRET_KEYS) and {"sshPrivateKey", "rke2Token", "zabbixAgentPsk"} <= declared
    assert all(CREDENTIAL_NAME.search(name) for name in StackSecrets.model_fields)


@pytest.mark.parametrize("key", sorted(SECRET_KEYS))
def test_every_credential_set_as_plain_config_exits_2_naming_the_secret_command(key, tmp_path: Path):
    def plain(config):
        config[f"ml-platform:{key}"] = "plain-text-value"

    proc, out = run_plan(tmp_path, plain, stack="lab")
    assert proc.returncode == 2 and not out.exists(), proc.stderr
    assert f"`pulumi config set --secret ml-platform:{key}`" in proc.stderr
    assert "plain-text-value" not in proc.stderr + proc.stdout


# ---------------------------------------------------------------------------------------------
# Schedules: one validator for every one
# ---------------------------------------------------------------------------------------------

SCHEDULES = [path for path, name, info in fields(Settings) if has_validator(info, cron)]


def test_every_schedule_field_uses_the_cron_validator():
    named = [path for path, name, _ in fields(Settings) if re.search(r"schedule|cron", name)]
    assert named and set(named) == set(SCHEDULES)


def _set(raw: dict, path: str, value) -> None:
    *parents, last = path.split(".")
    node = raw
    for part in parents:
        node = node[part[:-2]][0] if part.endswith("[]") else node.setdefault(part, {})
    node[last] = value


def _prod_with(path: str, value):
    def mutate(raw):
        if path.startswith("storage.minio.backup.sources"):
            return
        _set(raw, path, value)

    return mutate


@pytest.mark.parametrize("path", SCHEDULES)
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("@daily", "is not a five-field cron schedule"),
        ("0 */6 * * * *", "is not a five-field cron schedule"),
        ("60 1 * * *", "minute 60 is out of range; use 0-59"),
        ("30 1 * * 7", "day of week 7 is out of range; use 0-6"),
        ("*/0 * * * *", "the step after '/' must be a whole number of at least 1"),
        ("0 3 * * SUNDAY", "day of week 'SUNDAY' is not a number or a name"),
        ("0 0 30 2 *", "never runs: no month it names has day 30"),
        ("0 22-6 * * *", "hour range '22-6' runs backwards"),
    ],
)
def test_every_schedule_refuses_what_cron_would_reject_or_misread(path, value, message):
    found = problems("prod", _prod_with(path, value))
    assert any(p.startswith(f"{path}: {value!r}") and message in p for p in found), found


@pytest.mark.parametrize("value", ["30 1 * * *", "*/15 0-6 * JAN-MAR mon-fri", "5/20 2,14 1-7 * 0", "0 0 29 2 *"])
def test_valid_schedules_pass(value):
    """Valid cron is read as written; what it means next to the retention it feeds (two of these are absurd for
    etcd snapshots: every 15 minutes for a quarter of the year, once in four years) is judged separately
    (tests/test_settings_semantics.py)."""
    found = problems("prod", _prod_with("cluster.etcdSnapshots.scheduleCron", value))
    at = f"cluster.etcdSnapshots.scheduleCron: {value!r}"
    assert [p for p in found if p.startswith(at) and "leaves up to" not in p] == []
    assert all("etcdSnapshots" in p for p in found), found


# ---------------------------------------------------------------------------------------------
# URLs, images, digests
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("storage.minio.artifact.url", "http://mirror.example.internal/minio", "is plain http"),
        ("cluster.install.installerUrl", "http://get.rke2.io", "is plain http"),
        (
            "monitoring.alerting.mattermostUrl",
            "https://chat.example.internal/hooks/abcdefghij0123456789klmnop",
            "carries a credential",
        ),
        ("cluster.install.artifactUrl", "https://ci:hunter2@artifacts.example.internal/rke2", "carries a credential"),
        ("charts.cilium.repository", "https://helm.example.internal/charts?token=abc", "carries a credential"),
        (
            "monitoring.alerting.mattermostUrl",
            "https://hooks.slack.com/services/T000/B000/XXXX",
            "carries a credential",
        ),
    ],
)
def test_urls_must_be_https_and_carry_no_credential(path, value, message):
    found = problems("prod", _prod_with(path, value))
    assert any(p.startswith(f"{path}: ") and message in p for p in found), found
    if message == "carries a credential":  # the refusal must not print the credential it refuses
        assert not any(secret in p for p in found for secret in ("hunter2", "abcdefghij0123456789klmnop", "XXXX"))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("storage.ceph.cephImage", "quay.io/ceph/ceph"),
        ("storage.ceph.cephImage", "quay.io/ceph/ceph:latest"),
        ("storage.minio.backup.image", "docker.io/rclone/rclone:latest"),
        ("storage.minio.backup.image", "docker.io/rclone/rclone@sha256:" + "0" * 64),
    ],
)
def test_images_must_be_pinned(path, value):
    found = problems("prod", _prod_with(path, value))
    assert any(p.startswith(f"{path}: ") and ("is not pinned" in p or "placeholder" in p) for p in found), found


@pytest.mark.parametrize("digest", ["0" * 64, "ab" * 32, "deadbeef" * 8, "0123456789abcdef" * 4, "a" * 60 + "bcde"])
def test_placeholder_checksums_are_refused(digest):
    found = problems("prod", _prod_with("storage.minio.artifact.sha256", digest))
    assert any(p.startswith("storage.minio.artifact.sha256: ") and "placeholder" in p for p in found), found


# ---------------------------------------------------------------------------------------------
# Cross-field classes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shared", ["cephfs-backup", "etcd-snapshots", "common"])
def test_one_bucket_serves_one_purpose(shared):
    def mutate(raw):
        raw["storage"]["minio"]["cephfsBackupBucket"] = shared
        raw["storage"]["minio"]["etcdSnapshotBucket"] = shared

    found = problems("prod", mutate)
    assert any(
        p.startswith("storage.minio.etcdSnapshotBucket: bucket")
        and "is also claimed by storage.minio.cephfsBackupBucket" in p
        and "serves one purpose" in p
        for p in found
    ), found


@pytest.mark.parametrize(
    ("path", "namespace"),
    [
        ("storage.minio.backup.sources[].namespace", "ml-data"),
        ("storage.minio.backup.sources[].namespace", "kube-system"),
        ("network.infiniband.ipoibNetwork.namespace", "rdma-nets"),
        ("network.infiniband.ipoibNetwork.namespace", "monitoring-ib"),
    ],
)
def test_an_object_in_a_namespace_nothing_creates_is_refused(path, namespace):
    found = problems("prod", lambda raw: _set(raw, path, namespace))
    field = path.replace("[]", "[0]")
    assert any(p.startswith(f"{field}: {namespace!r} is not a namespace the program creates") for p in found), found
    assert problems("prod", lambda raw: _set(raw, "network.infiniband.ipoibNetwork.namespace", "gpu-operator")) == []


@pytest.mark.parametrize(
    ("resource", "value", "cohort"),
    [("cpu", 0, None), ("memory", "0", None), ("memory", "0Gi", "limit0"), ("cpu", 0, "limit0")],
)
def test_a_quota_that_can_never_admit_a_workload_is_refused(resource, value, cohort):
    def mutate(raw):
        quota = raw["scheduling"]["teams"][0]["quotas"]["nvidia-l40s"]
        quota[resource] = value
        if cohort is None:
            raw["scheduling"]["cohort"] = None
            quota.pop("borrowingLimit", None)
            quota.pop("lendingLimit", None)
        else:
            quota["borrowingLimit"] = {resource: value}

    found = problems("lab", mutate)
    assert any(
        p.startswith(f"scheduling.teams[0].quotas.nvidia-l40s.{resource}: 0 with nothing to borrow") for p in found
    ), found


@pytest.mark.parametrize(
    "label",
    ["kubernetes.io/hostname", "node-role.kubernetes.io/worker", "nvidia.com/gpu.present", "ml-platform.io/role"],
)
def test_node_labels_under_reserved_prefixes_are_refused(label):
    def mutate(raw):
        raw["nodes"][0]["labels"] = {label: "x"}

    found = problems("prod", mutate)
    assert any(p.startswith(f"nodes[0].labels.{label}: ") for p in found), found


# ---------------------------------------------------------------------------------------------
# The YAML file itself: file, line and the fix; every problem in one run; never a traceback
# ---------------------------------------------------------------------------------------------


def _plan_file(tmp_path: Path, text: str, stack: str = "lab"):
    import subprocess
    import sys

    path = tmp_path / f"Pulumi.{stack}.yaml"
    path.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "stacks.plan", stack, "--config", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


LAB = (ROOT / "Pulumi.lab.yaml").read_text()


@pytest.mark.parametrize(
    ("edit", "line_of", "message"),
    [
        (lambda t: t.replace("  ml-platform:nodes:\n", "  ml-platform:nodes: [\n", 1), None, "YAML syntax error"),
        (lambda t: t.replace("rke2Version: ", "rke2Version: [", 1), None, "YAML syntax error"),
    ],
)
def test_a_yaml_syntax_error_names_file_and_line(tmp_path, edit, line_of, message):
    proc = _plan_file(tmp_path, edit(LAB))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert re.search(rf"Pulumi\.lab\.yaml:\d+: {message}", proc.stderr), proc.stderr


def test_duplicate_keys_misspelt_prefixes_and_type_errors_are_reported_together_with_lines(tmp_path):
    doc = yaml.safe_load(LAB)
    text = LAB.replace("  ml-platform:scheduling:", "  ml-platfrom:scheduling:", 1)
    text = text.replace("  ml-platform:gpu:", "  ml_platform:gpu:", 1)
    # a duplicated key inside cluster, and a count written as a string
    text = text.replace("    rke2Version: ", "    rke2Version: v1.35.7+rke2r1\n    rke2Version: ", 1)
    gpu_node = next(n for n in doc["config"]["ml-platform:nodes"] if n.get("gpu"))
    text = text.replace(f"count: {gpu_node['gpu']['count']}", f'count: "{gpu_node["gpu"]["count"]}"', 1)
    proc = _plan_file(tmp_path, text)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = text.splitlines()

    def line_no(fragment: str) -> int:
        return next(i for i, line in enumerate(lines, 1) if fragment in line)

    err = proc.stderr
    assert f"Pulumi.lab.yaml:{line_no('ml-platfrom:scheduling')}: ml-platfrom:scheduling: unknown project prefix" in err
    assert "rename it to 'ml-platform:scheduling'" in err
    assert f"Pulumi.lab.yaml:{line_no('ml_platform:gpu')}: ml_platform:gpu: unknown project prefix" in err
    second = [i for i, line in enumerate(lines, 1) if "rke2Version:" in line][1]
    assert f"Pulumi.lab.yaml:{second}: key 'rke2Version' is given twice in this mapping" in err
    assert re.search(
        r"Pulumi\.lab\.yaml:(\d+): nodes\[\d+\] \([a-z0-9-]+\)\.gpu\.count: input should be a valid integer", err
    )
    assert "write a whole number, without quotes" in err
    assert err.count("unknown project prefix") == 2


def test_a_section_left_out_means_its_defaults_and_one_with_a_required_key_stays_required():
    from settings.types import Model, Name

    class Defaults(Model):
        size: int = 3

    class Required(Model):
        name: Name

    class Parent(Model):
        optional: Defaults
        """A section whose keys all have defaults."""
        required: Required
        """A section with a required key."""

    assert Parent.model_fields["optional"].default == Defaults() and not Parent.model_fields["optional"].is_required()
    assert Parent.model_fields["required"].is_required()
    assert Parent.model_validate({"required": {"name": "a"}}).optional == Defaults(size=3)
    assert Parent.model_json_schema()["properties"]["optional"]["default"] == {"size": 3}
    # The shipped settings: every section of the root that can be left out is (ssh, network, ...), nodes cannot.
    assert not Settings.model_fields["ssh"].is_required() and Settings.model_fields["nodes"].is_required()
