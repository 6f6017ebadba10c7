"""The root side of the RKE2 certificate watch: rke2-certificate-dates.sh with the real openssl on a
scratch host root laid out like RKE2's, and the watch the RKE2 step installs and removes
(include/rke2-certificate-watch.sh, in rke2-install.sh and rke2-uninstall.sh) against stubbed system tools,
its systemd units checked by the real `systemd-analyze verify`; a stack deployed while the watch was a step of
its own moves to the RKE2 step's watch without losing it."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import stat
import subprocess
import time
from pathlib import Path

import pytest

from components.cluster.config import certificate_dates_script
from components.hosts.remote import INCLUDES, LIB, expanded
from tests.conftest import evaluate, stack_doc
from tests.prerequisites import require_debian_package

STUBS = Path(__file__).parents[1] / "stubs" / "host"
RKE2 = "var/lib/rancher/rke2"
OUT = "var/lib/ml-platform/rke2-certificates.json"
UNITS = "etc/systemd/system/ml-platform-rke2-certificates"


def openssl(*args: str) -> str:
    if not shutil.which("openssl"):
        pytest.fail("missing prerequisite: the openssl command (Debian package openssl)", pytrace=False)
    return subprocess.run(["openssl", *args], check=True, capture_output=True, text=True).stdout


def certificate(path: Path, days: int, name: str) -> int:
    """A self-signed certificate valid `days` days at `path` (0600, as RKE2 writes them); its notAfter."""
    path.parent.mkdir(parents=True, exist_ok=True)
    key = path.with_suffix(".key")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", str(days),
            "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(path))  # fmt: skip
    path.chmod(0o600)
    key.chmod(0o600)
    end = openssl("x509", "-in", str(path), "-noout", "-enddate").strip().removeprefix("notAfter=")
    return int(ssl.cert_time_to_seconds(end))


def dates(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", certificate_dates_script(), "rke2-certificate-dates"],
        env={"PATH": os.environ["PATH"], "HOST_ROOT": str(root)},
        capture_output=True,
        text=True,
    )


def test_every_rke2_certificate_file_is_listed_with_its_expiry(tmp_path):
    root = tmp_path / "host"
    expected = {
        f"/{RKE2}/server/tls/client-admin.crt": certificate(root / RKE2 / "server/tls/client-admin.crt", 30, "admin"),
        f"/{RKE2}/server/tls/etcd/server-client.crt": certificate(
            root / RKE2 / "server/tls/etcd/server-client.crt", 400, "etcd"
        ),
        f"/{RKE2}/agent/serving-kubelet.crt": certificate(root / RKE2 / "agent/serving-kubelet.crt", 5, "kubelet"),
    }
    # A chain (leaf, then its CA, as RKE2 writes client-kubelet.crt): the leaf's date counts.
    leaf = certificate(tmp_path / "leaf.crt", 12, "system:node:gpu-01")
    certificate(tmp_path / "ca.crt", 3650, "rke2-client-ca")
    chain = root / RKE2 / "agent/client-kubelet.crt"
    chain.write_text((tmp_path / "leaf.crt").read_text() + (tmp_path / "ca.crt").read_text())
    chain.chmod(0o600)
    expected[f"/{RKE2}/agent/client-kubelet.crt"] = leaf
    # Not a certificate: listed as unreadable, not skipped (the template alerts on it).
    (root / RKE2 / "agent/broken.crt").write_text("-----BEGIN CERTIFICATE-----\nnot base64\n")
    expected[f"/{RKE2}/agent/broken.crt"] = None
    # Not listed: keys, files deeper than RKE2 keeps certificates, containerd's and the images' trees.
    certificate(root / RKE2 / "server/tls/a/b/deep.crt", 1, "deep")
    certificate(root / RKE2 / "agent/etc/containerd/registry.crt", 1, "registry")

    before = int(time.time())
    result = dates(root)
    assert result.returncode == 0, result.stderr
    out = root / OUT
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # the unprivileged agent reads it
    doc = json.loads(out.read_text())
    assert doc["certificates"] == expected
    assert before <= doc["written"] <= int(time.time())
    assert "PRIVATE KEY" not in out.read_text() and "BEGIN CERTIFICATE" not in out.read_text()
    assert list(out.parent.iterdir()) == [out]  # written through a temporary file, none left behind

    # A renewed certificate shows its new date at the next run.
    expected[f"/{RKE2}/agent/serving-kubelet.crt"] = certificate(
        root / RKE2 / "agent/serving-kubelet.crt", 365, "kubelet"
    )
    assert dates(root).returncode == 0
    assert json.loads(out.read_text())["certificates"] == expected


def test_before_rke2_runs_the_list_is_empty_and_valid(tmp_path):
    result = dates(tmp_path)
    assert result.returncode == 0, result.stderr
    doc = json.loads((tmp_path / OUT).read_text())
    assert doc["certificates"] == {} and doc["written"] > 0


WATCH = INCLUDES / "rke2-certificate-watch.sh"
# What a stack deployed while the watch was a step of its own (`<node>-rke2-certificate-dates`) runs once,
# at the end of its first `up` after the RKE2 step took the watch over: that step's delete, as its state holds it.
DEPLOYED = Path(__file__).parent / "deployed" / "rke2-certificate-watch.sh"


def watch(root: Path, fake: Path, action: str, node: str = "cpu-01") -> subprocess.CompletedProcess:
    """The RKE2 step's watch: installed as rke2-install.sh does at its end, removed as rke2-uninstall.sh does."""
    env = {"PATH": f"{STUBS}:{os.environ['PATH']}", "HOST_ROOT": str(root), "FAKE_DIR": str(fake)}
    call = {
        "install": 'certificate_watch_install "$NODE_NAME" debian "$DATES"',
        "remove": 'certificate_watch_remove "$NODE_NAME"',
    }[action]
    return subprocess.run(
        ["bash", "-c", f"{LIB.read_text()}\n{WATCH.read_text()}\n{call}\n", "rke2-install.sh"],
        env={**env, "NODE_NAME": node, "DATES": certificate_dates_script()},
        capture_output=True,
        text=True,
    )


def deployed_remove(root: Path, fake: Path, node: str = "cpu-01") -> subprocess.CompletedProcess:
    env = {"PATH": f"{STUBS}:{os.environ['PATH']}", "HOST_ROOT": str(root), "FAKE_DIR": str(fake)}
    return subprocess.run(
        ["bash", "-c", f"{LIB.read_text()}\n{DEPLOYED.read_text()}", "rke2-certificate-watch.sh"],
        env={**env, "ACTION": "remove", "NODE_NAME": node},
        capture_output=True,
        text=True,
    )


def test_the_host_step_installs_the_timer_once_and_removes_everything(tmp_path):
    root, fake = tmp_path / "root", tmp_path / "fake"
    (fake / "packages").mkdir(parents=True)
    certificate(root / RKE2 / "agent/client-kubelet.crt", 365, "kubelet")
    first = watch(root, fake, "install")
    assert first.returncode == 0, first.stderr
    calls = (fake / "calls.log").read_text()
    assert "apt-get install -y -q --no-install-recommends openssl" in calls  # it was missing
    assert "systemctl daemon-reload" in calls
    assert "systemctl enable --now ml-platform-rke2-certificates.timer" in calls
    program = root / "usr/local/libexec/ml-platform/rke2-certificate-dates"
    assert program.read_text() == certificate_dates_script() and stat.S_IMODE(program.stat().st_mode) == 0o755
    assert "ExecStart=/usr/local/libexec/ml-platform/rke2-certificate-dates" in (root / f"{UNITS}.service").read_text()
    assert list(json.loads((root / OUT).read_text())["certificates"]) == [f"/{RKE2}/agent/client-kubelet.crt"]

    (fake / "calls.log").unlink()
    again = watch(root, fake, "install")
    assert again.returncode == 0, again.stderr
    assert "changed:" not in again.stdout  # unchanged settings change nothing
    assert "daemon-reload" not in (fake / "calls.log").read_text()

    # A rename of the node (the same machine): the new name installs, then the old name's delete runs.
    assert watch(root, fake, "install", node="cpu-01-renamed").returncode == 0
    kept = watch(root, fake, "remove")
    assert kept.returncode == 0 and "belongs to node cpu-01-renamed now" in kept.stderr
    assert program.exists() and (root / f"{UNITS}.timer").exists()
    gone = watch(root, fake, "remove", node="cpu-01-renamed")
    assert gone.returncode == 0, gone.stderr
    assert "systemctl disable --now ml-platform-rke2-certificates.timer" in (fake / "calls.log").read_text()
    for path in (program, root / f"{UNITS}.service", root / f"{UNITS}.timer", root / OUT):
        assert not path.exists(), path
    assert (root / RKE2 / "agent/client-kubelet.crt").exists()  # RKE2's own files stay


@pytest.mark.real_server  # systemd's own checker; make test-fast leaves it out
def test_systemd_accepts_the_units_as_written(tmp_path):
    analyze = require_debian_package("the systemd unit check", "/usr/bin/systemd-analyze", "systemd")
    root, fake = tmp_path / "root", tmp_path / "fake"
    (fake / "packages" / "openssl").mkdir(parents=True)
    assert watch(root, fake, "install").returncode == 0
    # The units they need (timers.target, sysinit.target, ...) from this system's systemd.
    shutil.copytree("/usr/lib/systemd", root / "usr/lib/systemd", symlinks=True)
    units = [str(root / f"{UNITS}.timer"), str(root / f"{UNITS}.service")]
    result = subprocess.run([analyze, "verify", f"--root={root}", *units], capture_output=True, text=True, cwd=root)
    # verify exits 0 on unknown keys and bad values too, but prints them: nothing must be printed.
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_a_stack_deployed_with_the_watch_step_keeps_its_watch(tmp_path):
    """The first `up` after the RKE2 step took the watch over: the RKE2 step runs again (its program
    changed) and installs the watch under its owner; then the old watch step's delete runs, as deployed,
    and leaves that watch alone. Removing the node afterwards removes it."""
    root, fake = tmp_path / "root", tmp_path / "fake"
    (fake / "packages" / "openssl").mkdir(parents=True)
    old = subprocess.run(
        ["bash", "-c", f"{LIB.read_text()}\n{DEPLOYED.read_text()}", "rke2-certificate-watch.sh"],
        env={"PATH": f"{STUBS}:{os.environ['PATH']}", "HOST_ROOT": str(root), "FAKE_DIR": str(fake),
             "ACTION": "install", "NODE_NAME": "cpu-01", "OS_FAMILY": "debian",
             "DATES_SCRIPT": certificate_dates_script()},
        capture_output=True, text=True,
    )  # fmt: skip
    assert old.returncode == 0, old.stderr
    taken = watch(root, fake, "install")
    assert taken.returncode == 0, taken.stderr
    assert taken.stdout.splitlines() == [f"changed: wrote {root}/var/lib/ml-platform/rke2-certificates.node"]
    program = root / "usr/local/libexec/ml-platform/rke2-certificate-dates"
    left = deployed_remove(root, fake)
    assert left.returncode == 0 and "left alone" in left.stderr, left.stderr
    assert program.exists() and (root / f"{UNITS}.timer").exists() and (root / OUT).exists()
    gone = watch(root, fake, "remove")
    assert gone.returncode == 0, gone.stderr
    assert not program.exists() and not (root / f"{UNITS}.timer").exists()


def test_the_rke2_step_installs_the_watch_last_and_its_delete_removes_it_first():
    install, uninstall = expanded("rke2-install.sh"), expanded("rke2-uninstall.sh")
    # The timer's program travels inside the RKE2 step's program, byte for byte.
    heredoc = install.split("cat <<'ML_PLATFORM_DATES'\n", 1)[1].split("\nML_PLATFORM_DATES\n", 1)[0]
    assert heredoc + "\n" == certificate_dates_script()
    assert install.rstrip().splitlines()[-2:] == [
        'certificate_watch_install "$NODE_NAME" "$OS_FAMILY" "$(certificate_dates_program)"',
        'echo "RKE2 $installed $RKE2_TYPE running on $NODE_NAME; node registered"',
    ]
    assert uninstall.index('certificate_watch_remove "$NODE_NAME"') < uninstall.index("RKE2 is not installed")


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_no_node_has_a_watch_step_of_its_own(stack):
    """Resources per node: the watch is part of each node's RKE2 step (its program and OS family there)."""
    plan = evaluate(stack)
    assert not [r["name"] for r in plan.resources if r["name"].endswith("-rke2-certificate-dates")]
    rke2 = {r["name"].removesuffix("-rke2"): r for r in plan.resources if r["name"].endswith("-rke2")}
    assert set(rke2) == {n["name"] for n in stack_doc(stack)["nodes"]}  # cluster nodes only: no NAS host
    for step in rke2.values():
        assert "OS_FAMILY=" in step["inputs"]["create"] and "rke2-uninstall.sh" in step["inputs"]["delete"]
