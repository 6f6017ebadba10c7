"""Credentials found by content, and values judged by what they mean: schedules against their retention, versions
against what their consumer reads and their documented compatibility, thresholds against the inventory, YAML copies
of destructive flags. Each case is one the per-field rules accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from settings.config_file import copy_problems, read
from tests.conftest import ROOT, problems

# Credentials in fields no list names, in forms the URL check does not know. Fake, but in each format's shape.
PRESIGNED = (
    "https://mirror.example.com/v2?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20260101"
    "&X-Amz-Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024"
)
GITHUB = "ghp_" + "R2d2C3po" * 4 + "Ab12"
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ==\n"
    "-----END OPENSSH PRIVATE KEY-----"
)


def _set(raw: dict, path: str, value) -> None:
    *parents, last = path.split(".")
    for key in parents:
        raw = raw[int(key)] if isinstance(raw, list) else raw.setdefault(key, {})
    raw[last] = value


@pytest.mark.parametrize(
    ("path", "value", "plugin"),
    [
        ("cluster.registryMirrors", {"docker.io": [PRESIGNED]}, "High Entropy"),  # a presigned URL's signature
        ("nodes.0.labels", {"example.com/ci": GITHUB}, "GitHub Token"),  # a token in a node label
        ("scheduling.priorityClasses", [{"name": "p", "value": 1, "description": PRIVATE_KEY}], "Private Key"),
        ("scheduling.trainingOperators.trainerRuntimeImage", f"registry.example.com/{GITHUB}:1.0", "GitHub Token"),
    ],
)
def test_a_credential_in_any_plain_string_is_refused_naming_the_field_never_the_value(path, value, plugin):
    secret = GITHUB if GITHUB in str(value) else PRESIGNED.rsplit("=", 1)[1] if "Amz" in str(value) else "b3Blbn"
    found = problems("prod", lambda raw: _set(raw, path, value))
    hits = [p for p in found if "looks like a credential" in p]
    assert hits and plugin in hits[0], found
    assert hits[0].startswith(path.replace(".0.", "[0].").split(".")[0])
    assert not any(secret in p for p in found), "a problem echoes the credential"


def test_credentials_are_reported_with_every_other_problem_in_one_run():
    def mutate(raw):
        raw["nodes"][0]["labels"] = {"example.com/ci": GITHUB}
        raw["nodes"][1]["address"] = "not-an-ip"
        raw["storage"]["minio"]["port"] = 10050

    found = problems("prod", mutate)
    assert any("looks like a credential" in p for p in found)
    assert any(p.startswith("nodes[1].address") for p in found)
    assert any(p.startswith("storage.minio.port") and "Zabbix agent" in p for p in found), found


def test_public_high_entropy_values_of_the_reference_stacks_pass_the_scanner():
    # by-id device names with serials, image digests and pinned host keys are public by their types
    assert problems("prod") == [] and problems("lab") == []


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        # valid cron, but 28 snapshots a minute apart keep 28 minutes of history
        ("cluster.etcdSnapshots.scheduleCron", "* * * * *", "keep only 28 minutes of history"),
        # valid cron, runs once in four years
        ("storage.minio.backup.schedule", "0 0 29 2 *", "leaves up to 1461 days between backups"),
        # monthly backups against 30 days of kept versions
        ("storage.minio.backup.schedule", "0 2 1 * *", "noncurrentRetentionDays: 30 days is not longer than"),
        # hourly runs that may each take 20 hours
        ("storage.minio.backup.schedule", "0 * * * *", "deadlineSeconds: 72000 s is longer than the 60 minutes"),
    ],
)
def test_schedules_are_judged_by_their_real_interval_against_what_they_feed(path, value, expected):
    found = problems("prod", lambda raw: _set(raw, path, value))
    assert any(expected in p for p in found), found


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("charts.kueue", {"name": "kueue", "version": "0.19", "repository": "oci://registry.k8s.io/kueue/charts"},
         "Helm reads it as a range"),
        ("charts.volcano", {"name": "volcano", "version": "v1", "repository": "https://volcano-sh.github.io/helm-charts"},
         "Helm reads it as a range"),
        ("monitoring.imageTag", "ubuntu-7.0-latest", "is not a pinned version"),
        ("storage.minio.backup.image", "docker.io/rclone/rclone:1.75-stable", "is not pinned"),
    ],
)  # fmt: skip
def test_versions_are_exact_where_the_consumer_would_read_a_range(path, value, expected):
    found = problems("prod", lambda raw: _set(raw, path, value))
    assert any(expected in p for p in found), found


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("storage.ceph.cephImage", "quay.io/ceph/ceph:v18.2.7", "is Ceph v18; the pinned Rook v1.20 runs Ceph v19"),
        ("monitoring.nasAgent.version", "1:7.2.3-1+debian12", "is the 7.0 repository"),
        ("monitoring.nasAgent.version", "1:7.0.16-1+debian13", "a build for debian13"),
    ],
)  # fmt: skip
def test_versions_are_checked_against_the_compatibility_their_fields_document(path, value, expected):
    found = problems("prod", lambda raw: _set(raw, path, value))
    assert any(expected in p for p in found), found


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("monitoring.thresholds.ibMinRateGbps", 800, "every port would alert as degraded"),
        ("monitoring.thresholds.cephPoolUsedPercent", 97, "only once Ceph has stopped writes"),
        ("monitoring.thresholds.nodeCordonedMaxMinutes", 5, "every upgrade whose drain takes its allowed time"),
    ],
)
def test_thresholds_are_checked_against_what_they_watch(path, value, expected):
    found = problems("prod", lambda raw: _set(raw, path, value))
    assert any(expected in p for p in found), found


def _stack_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "Pulumi.copy.yaml"
    path.write_text(text)
    return path


def test_an_anchor_copying_wipe_onto_another_disk_is_refused_at_its_line(tmp_path):
    text = (ROOT / "Pulumi.lab.yaml").read_text()
    first = "    - device: /dev/disk/by-id/wwn-0x5000c500a1b2c301\n      wipe: true\n"
    assert first in text
    text = text.replace(first, "    - &osd\n      device: /dev/disk/by-id/wwn-0x5000c500a1b2c301\n      wipe: true\n")
    second = "    - device: /dev/disk/by-id/wwn-0x5000c500a1b2c302\n      wipe: true\n"
    text = text.replace(second, "    - <<: *osd\n      device: /dev/disk/by-id/wwn-0x5000c500a1b2c302\n")
    _, found = read(_stack_file(tmp_path, text), "ml-platform")
    line = text.splitlines().index("    - <<: *osd") + 1
    assert any(p.startswith(f"Pulumi.copy.yaml:{line}: `*osd`") and "copies wipe" in p for p in found), found


@pytest.mark.parametrize(
    "text",
    [
        # a whole NAS drive list copied onto a second host, format flags included
        "a:\n  drives: &d\n  - device: /dev/x\n    format: true\nb:\n  drives: *d\n",
        # an inline merge that adds force
        "nvme:\n- <<: {format: true, force: true}\n  device: /dev/y\n",
        # a node copied to make another server
        "nodes:\n- &s {name: a, controlPlane: true}\n- <<: *s\n  name: b\n",
    ],
)
def test_yaml_copies_of_destructive_flags_are_refused(text):
    assert copy_problems(text, "f.yaml"), text


def test_yaml_copies_without_destructive_flags_are_left_alone():
    assert copy_problems("labels: &l {a: b}\nother: *l\nmore:\n  <<: *l\n  c: d\n", "f.yaml") == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        # chat channel IDs look random by design: the field declares them public
        ("monitoring.alerting.channels", [{"name": "ops", "type": "slack", "sendTo": "C0123456789"}]),
        (
            "monitoring.alerting.channels",
            [{"name": "ops", "type": "mattermost", "sendTo": "q8x3m4kpztfgdbwn1c7yjh5era"}],
        ),
        # a GUID client id is no token
        (
            "cluster.oidc",
            {"issuerUrl": "https://sso.example.com/realms/ml", "clientId": "8f3c5a7e-1b2d-4c6f-9a0e-7d4b3c2a1f0e"},
        ),
    ],
)
def test_random_looking_public_identifiers_are_not_called_credentials(path, value):
    found = problems("prod", lambda raw: _set(raw, path, value))
    assert not [p for p in found if "looks like a credential" in p], found
