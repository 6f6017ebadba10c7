"""prepare-host.sh against stubbed system tools in a scratch root (tests/stubs/host)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from components.cluster.config import prepare_params
from components.hosts.remote import script_text
from settings import load
from tests.conftest import stack_doc

STUBS = Path(__file__).parents[1] / "stubs" / "host"

FSTAB = """UUID=1111 / ext4 defaults 0 1
/swap.img none swap sw 0 0
"""


def make_host(tmp_path: Path) -> tuple[Path, Path]:
    root, fake = tmp_path / "root", tmp_path / "fake"
    (root / "etc" / "chrony").mkdir(parents=True)
    (root / "etc" / "chrony" / "chrony.conf").write_text("pool ntp.ubuntu.com iburst\n")
    (root / "etc" / "fstab").write_text(FSTAB)
    (root / "sys" / "module" / "overlay").mkdir(parents=True)
    fake.mkdir()
    (fake / "hostname").write_text("localhost\n")
    (fake / "swaps").write_text("/swap.img file 2G 0B -2\n")
    return root, fake


def run(root: Path, fake: Path, params: dict[str, str]) -> subprocess.CompletedProcess:
    env = {"PATH": f"{STUBS}:{os.environ['PATH']}", "HOST_ROOT": str(root), "FAKE_DIR": str(fake), **params}
    return subprocess.run(
        ["bash", "-c", script_text("prepare-host.sh"), "prepare-host.sh"], env=env, capture_output=True, text=True
    )


def params(**cluster_changes) -> dict[str, str]:
    raw = stack_doc("prod")
    raw["cluster"].update(cluster_changes)
    settings = load(raw)
    node = next(n for n in settings.nodes if n.name == "gpu-03")
    return prepare_params(node, settings.cluster, settings.network)


def test_prepares_a_fresh_host(tmp_path):
    root, fake = make_host(tmp_path)
    result = run(root, fake, params())
    assert result.returncode == 0, result.stderr
    assert (fake / "hostname").read_text() == "gpu-03\n"
    assert not (fake / "swaps").exists()
    assert "# /swap.img none swap sw 0 0 # disabled by ml-platform" in (root / "etc" / "fstab").read_text()
    assert (fake / "systemd" / "masked-swap.target").exists()
    assert (root / "etc/modules-load.d/ml-platform.conf").read_text() == "overlay\nbr_netfilter\n"
    calls = (fake / "calls.log").read_text()
    assert "modprobe br_netfilter" in calls and "modprobe overlay" not in calls  # overlay was loaded
    sysctls = (root / "etc/sysctl.d/90-ml-platform.conf").read_text()
    assert "net.ipv4.ip_forward = 1" in sysctls and "fs.inotify.max_user_watches = 1048576" in sysctls
    assert "kernel.panic" not in sysctls  # CIS values only with the CIS profile
    assert "sysctl --system" in calls
    assert "--no-install-recommends curl ca-certificates chrony iptables conntrack lvm2" in calls
    sources = (root / "etc/chrony/sources.d/ml-platform.sources").read_text()
    assert sources == "server ntp1.dc.example.internal iburst\nserver ntp2.dc.example.internal iburst\n"
    assert "sourcedir /etc/chrony/sources.d" in (root / "etc/chrony/chrony.conf").read_text()
    assert "systemctl enable --now chrony" in calls


def test_second_run_changes_nothing(tmp_path):
    root, fake = make_host(tmp_path)
    assert run(root, fake, params()).returncode == 0
    before = (fake / "calls.log").read_text()
    files = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    again = run(root, fake, params())
    assert again.returncode == 0, again.stderr
    assert "changed:" not in again.stdout
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == files
    new_calls = (fake / "calls.log").read_text()[len(before) :]
    assert not any(word in new_calls for word in ("apt-get", "modprobe", "sysctl --system", "restart", "swapoff"))


def test_cis_profile_adds_etcd_user_and_kernel_settings(tmp_path):
    root, fake = make_host(tmp_path)
    result = run(root, fake, params(cisProfile=True))
    assert result.returncode == 0, result.stderr
    assert "changed: created user etcd" in result.stdout
    sysctls = (root / "etc/sysctl.d/90-ml-platform.conf").read_text()
    assert "kernel.panic = 10" in sysctls and "vm.overcommit_memory = 1" in sysctls


def test_network_manager_is_kept_off_cni_interfaces(tmp_path):
    root, fake = make_host(tmp_path)
    (fake / "systemd").mkdir()
    (fake / "systemd" / "active-NetworkManager").touch()
    result = run(root, fake, params())
    assert result.returncode == 0, result.stderr
    conf = (root / "etc/NetworkManager/conf.d/ml-platform-cni.conf").read_text()
    assert conf.startswith("[keyfile]\nunmanaged-devices=") and "interface-name:cilium_*" in conf
    assert "systemctl reload NetworkManager" in (fake / "calls.log").read_text()
