"""Host drift: the real probe (BusyBox sh and applets, as in its image) on fabricated host roots, each with
one of the hand changes an operator makes, and `python -m stacks.drift` comparing the fingerprints with the
settings and with the node's peers; nodes it cannot read are reported and the others still compared."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from components.acceptance.component import check_program
from components.acceptance.drift import DRIFT_FILES, MEMLOCK_DROPIN, installed_packages, probe_environment
from components.cluster.config import kube_vip_manifest, registries_yaml, rke2_config
from components.minio.tier import etcd_s3_server_config
from settings import load
from stacks import drift
from tests.acceptance.busybox import BUSYBOX, busybox_bin
from tests.conftest import stack_doc

# What prepare-host.sh writes (its sysctls and modules), and the kernel's values when it has applied them.
SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.bridge.bridge-nf-call-iptables": "1",
    "net.bridge.bridge-nf-call-ip6tables": "1",
    "fs.inotify.max_user_instances": "8192",
    "fs.inotify.max_user_watches": "1048576",
    "fs.file-max": "2097152",
    "vm.max_map_count": "262144",
}
KERNELS = {"gpu": "6.8.0-90-generic", "cpu": "6.8.0-85-generic"}  # the flavours differ by role, as they may
FSTAB = "UUID={uuid} / ext4 errors=remount-ro 0 1\n# /swap.img none swap sw 0 0 # disabled by ml-platform\n"


def prod_settings():
    return load(stack_doc("prod"))


def host_files(settings, node) -> dict[str, str]:
    """Every file the host steps leave on `node`, as they write them."""
    cluster = settings.cluster
    server = etcd_s3_server_config(cluster.etcd_snapshots, settings.nas)
    config = rke2_config(node, node.name == cluster.init_server, cluster, settings.network, server)
    files = {
        "/etc/rancher/rke2/config.yaml": yaml.safe_dump(config, sort_keys=True),
        "/etc/sysctl.d/90-ml-platform.conf": "\n".join(f"{k} = {v}" for k, v in SYSCTLS.items()) + "\n",
        "/etc/sysctl.d/99-sysctl.conf": "# the distribution's own\n",
        "/etc/modules-load.d/ml-platform.conf": "overlay\nbr_netfilter\n",
        "/etc/NetworkManager/conf.d/ml-platform-cni.conf": "[keyfile]\nunmanaged-devices=interface-name:cilium_*\n",
        "/etc/fstab": FSTAB.format(uuid=node.name),  # device names differ per node
    }
    if registries_yaml(cluster):
        files["/etc/rancher/rke2/registries.yaml"] = registries_yaml(cluster)
    if node.control_plane and kube_vip_manifest(cluster):
        files["/var/lib/rancher/rke2/agent/pod-manifests/kube-vip.yaml"] = kube_vip_manifest(cluster)
    if node.infiniband is not None:
        files[MEMLOCK_DROPIN] = drift.MEMLOCK_CONTENT + "\n"
        files["/etc/netplan/60-ml-platform-infiniband.yaml"] = f"network: {{addresses: [{node.name}]}}\n"
    return files


def fabricate(tmp_path: Path, settings, node) -> dict[str, Path]:
    """A healthy host root for `node`, with its /proc/sys and /sys stand-ins."""
    base = tmp_path / node.name
    host, proc, sys_dir = base / "root", base / "proc", base / "sys"
    for path, content in host_files(settings, node).items():
        (host / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (host / path.lstrip("/")).write_text(content)
    for key, value in SYSCTLS.items():
        (proc / "sys" / key.replace(".", "/")).parent.mkdir(parents=True, exist_ok=True)
        (proc / "sys" / key.replace(".", "/")).write_text(value + "\n")
    for module in ("overlay", "br_netfilter"):
        (sys_dir / "module" / module).mkdir(parents=True)
    if node.gpu is not None:
        (sys_dir / "module/nvidia").mkdir(parents=True)
        (sys_dir / "module/nvidia/version").write_text(settings.gpu.driver.version + "\n")
    status = host / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    status.write_text(
        "".join(f"Package: {p}\nStatus: install ok installed\nVersion: 1.0-{len(p)}\n\n" for p in installed_packages())
    )
    (host / "usr/local/bin").mkdir(parents=True, exist_ok=True)
    binary = host / "usr/local/bin/rke2"
    binary.write_text(
        f'#!/bin/sh\necho "rke2 version {settings.cluster.rke2_version} (0123abc)"\necho "go version go1.24"\n'
    )
    binary.chmod(0o755)
    return {"host": host, "proc": proc, "sys": sys_dir}


def probe(tmp_path: Path, node, roots: dict[str, Path], kernel: str) -> dict:
    """Run the real probe once (BusyBox sh, the DaemonSet's environment) on a fabricated host root."""
    stubs = tmp_path / "probe-stubs"
    stubs.mkdir(exist_ok=True)
    (stubs / "chroot").write_text('#!/bin/sh\nroot=$1\nshift\nexec "$root$@"\n')  # no chroot(2) for a test
    (stubs / "uname").write_text('#!/bin/sh\necho "$STUB_KERNEL"\n')  # the kernel of the fabricated host
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    env = {
        "PATH": f"{stubs}:{busybox_bin(tmp_path)}",
        "NODE_NAME": node.name,
        "HOST": str(roots["host"]),
        "SYS": str(roots["sys"]),
        "PROC": str(roots["proc"]),
        "STUB_KERNEL": kernel,
        "ONCE": "true",
        **probe_environment(),
    }
    proc = subprocess.run(
        [BUSYBOX, "sh", "-c", check_program("drift-probe.sh")], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return drift.parse(proc.stdout.splitlines())[node.name]


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    """The healthy fingerprint of every prod node: the real probe on one fabricated host per kind of node
    (role, InfiniBand, control plane), that fingerprint with each node's own settings-decided files."""
    tmp = tmp_path_factory.mktemp("hosts")
    settings = prod_settings()
    kinds: dict[tuple, dict] = {}
    out = {}
    for node in settings.nodes:
        kind = (node.role, node.infiniband is not None, node.control_plane)
        if kind not in kinds:
            kinds[kind] = probe(tmp, node, fabricate(tmp, settings, node), KERNELS[node.role])
        fingerprint = json.loads(json.dumps(kinds[kind]))
        fingerprint["node"] = node.name
        for key, value in drift.expected(settings)[node.name].items():
            if key.startswith("file "):
                fingerprint["files"][key.removeprefix("file ")] = value
        out[node.name] = fingerprint
    return settings, out


def test_an_untouched_inventory_shows_no_drift_although_kernels_differ_between_roles(inventory):
    settings, fingerprints = inventory
    assert {fp["kernel"] for fp in fingerprints.values()} == set(KERNELS.values())
    assert drift.compare(settings, fingerprints) == []
    some = fingerprints["gpu-03"]
    # What the probe read: every file the host steps write, the sysctls live and in the file, the packages.
    assert set(DRIFT_FILES) <= set(some["files"]) and some["files"]["/etc/sysctl.d/99-sysctl.conf"] != "absent"
    assert some["sysctl"]["vm.max_map_count"] == {"file": "262144", "live": "262144"}
    assert some["packages"]["chrony"] == "1.0-6" and some["modules_missing"] == "" and some["swap_entries"] == "0"


def changed(tmp_path, inventory, name: str, change) -> list[str]:
    """The findings after `change(roots)` on `name`'s fabricated host, probed for real."""
    settings, healthy = inventory
    node = next(n for n in settings.nodes if n.name == name)
    roots = fabricate(tmp_path, settings, node)
    result = change(roots)  # a kernel name, for the change that is one
    kernel = result if isinstance(result, str) else KERNELS[node.role]
    fingerprints = {**healthy, name: probe(tmp_path, node, roots, kernel)}
    return [str(f) for f in drift.compare(settings, fingerprints)]


def write(root: Path, path: str, text: str) -> None:
    (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (root / path.lstrip("/")).write_text(text)


def package_upgrade(roots):
    status = roots["host"] / "var/lib/dpkg/status"
    status.write_text(
        status.read_text().replace(
            "Package: chrony\nStatus: install ok installed\nVersion: 1.0-6",
            "Package: chrony\nStatus: install ok installed\nVersion: 4.5-1",
        )
    )


def package_by_hand(roots):
    """`apt-get install tree` by hand: tree marked manual, the library it pulled in marked Auto-Installed."""
    status = roots["host"] / "var/lib/dpkg/status"
    status.write_text(
        status.read_text()
        + "Package: tree\nStatus: install ok installed\nVersion: 2.1.0-1\n\n"
        + "Package: libtree0\nStatus: install ok installed\nVersion: 0.3-2\n\n"
        + "Package: removed-one\nStatus: deinstall ok config-files\nVersion: 1.0\n"
    )
    extended = "Package: libtree0\nArchitecture: amd64\nAuto-Installed: 1\n\n"
    write(roots["host"], "/var/lib/apt/extended_states", extended)


def sysctl_w(roots):
    (roots["proc"] / "sys/vm/max_map_count").write_text("65530\n")


HAND_CHANGES = {
    "package upgrade": (
        package_upgrade,
        "gpu-03: package chrony (differs from the other gpu nodes): expected 1.0-6, found 4.5-1",
    ),
    "a package installed by hand": (
        package_by_hand,
        "gpu-03: package tree (differs from the other gpu nodes): expected absent, found 2.1.0-1",
    ),
    "sysctl -w": (sysctl_w, "gpu-03: sysctl vm.max_map_count (live, set by hand?): expected 262144, found 65530"),
    "a new sysctl file": (
        lambda r: write(r["host"], "/etc/sysctl.d/60-tuning.conf", "vm.swappiness = 1\n"),
        "gpu-03: file /etc/sysctl.d/60-tuning.conf (differs from the other gpu nodes): expected absent, found ",
    ),
    "a new modules-load file": (
        lambda r: write(r["host"], "/etc/modules-load.d/nvme-tcp.conf", "nvme_tcp\n"),
        "gpu-03: file /etc/modules-load.d/nvme-tcp.conf (differs from the other gpu nodes): expected absent, found ",
    ),
    "an RKE2 config drop-in": (
        lambda r: write(r["host"], "/etc/rancher/rke2/config.yaml.d/50-debug.yaml", "debug: true\n"),
        "gpu-03: file /etc/rancher/rke2/config.yaml.d/50-debug.yaml (a drop-in the program does not write): "
        "expected absent, found ",
    ),
    "fstab: swap back on": (
        lambda r: (r["host"] / "etc/fstab").write_text(FSTAB.format(uuid="gpu-03").replace("# /swap.img", "/swap.img")),
        "gpu-03: swap_entries: expected 0, found 1",
    ),
    "fstab: mount options": (
        lambda r: (r["host"] / "etc/fstab").write_text(
            FSTAB.format(uuid="gpu-03").replace("errors=remount-ro", "defaults")
        ),
        "gpu-03: fstab (differs from the other gpu nodes): expected ",
    ),
    "the memlock drop-in edited": (
        lambda r: write(r["host"], MEMLOCK_DROPIN, "[Service]\nLimitMEMLOCK=65536\n"),
        f"gpu-03: file {MEMLOCK_DROPIN}: expected {drift.file_hash(drift.MEMLOCK_CONTENT)}, found ",
    ),
    "a kernel unlike its role's": (
        lambda r: "6.8.0-94-generic",
        "gpu-03: kernel (differs from the other gpu nodes): expected 6.8.0-90-generic, found 6.8.0-94-generic",
    ),
    # Beyond the list: a module unloaded, a unit drop-in of RKE2, the IPoIB file deleted.
    "a module unloaded": (
        lambda r: (r["sys"] / "module/br_netfilter").rmdir(),
        "gpu-03: modules_missing: expected (none), found br_netfilter",
    ),
    "an RKE2 unit drop-in": (
        lambda r: write(
            r["host"], "/etc/systemd/system/rke2-agent.service.d/10-env.conf", "[Service]\nEnvironment=X=1\n"
        ),
        "gpu-03: file /etc/systemd/system/rke2-agent.service.d/10-env.conf (a drop-in the program does not write)",
    ),
    "the IPoIB file deleted": (
        lambda r: (r["host"] / "etc/netplan/60-ml-platform-infiniband.yaml").unlink(),
        "gpu-03: file /etc/netplan/60-ml-platform-infiniband.yaml (differs from the other gpu nodes): "
        "expected present, found absent",
    ),
}


@pytest.mark.parametrize("change", HAND_CHANGES, ids=list(HAND_CHANGES))
def test_the_probe_sees_each_hand_change(tmp_path, inventory, change):
    act, finding = HAND_CHANGES[change]
    findings = changed(tmp_path, inventory, "gpu-03", act)
    # Found, on that node only (swap back on also changes the fstab: two findings).
    assert any(f.startswith(finding) for f in findings) and all(f.startswith("gpu-03: ") for f in findings), findings
    assert len(findings) == (2 if change == "fstab: swap back on" else 1), findings


def test_drift_from_the_settings_names_node_expected_and_found(inventory):
    settings, healthy = inventory
    fingerprints = json.loads(json.dumps(healthy))
    fingerprints["gpu-03"]["rke2"] = "v1.35.6+rke2r1"
    fingerprints["cpu-10"]["files"]["/etc/rancher/rke2/config.yaml"] = "f" * 64
    fingerprints["gpu-05"]["nvidia"] = "570.86.15"
    del fingerprints["cpu-20"]  # its probe does not run
    cpu10 = drift.expected(settings)["cpu-10"]["file /etc/rancher/rke2/config.yaml"]
    assert [str(f) for f in drift.compare(settings, fingerprints)] == [
        f"cpu-10: file /etc/rancher/rke2/config.yaml: expected {cpu10}, found {'f' * 64}",
        "cpu-20: fingerprint: expected one from the drift probe, found none (probe not running?)",
        f"gpu-03: rke2: expected {settings.cluster.rke2_version}, found v1.35.6+rke2r1",
        f"gpu-05: nvidia: expected {settings.gpu.driver.version}, found 570.86.15",
    ]


def test_the_command_reads_saved_probe_output_and_exits_1_on_drift(tmp_path, capsys, inventory):
    settings, healthy = inventory
    fingerprints = json.loads(json.dumps(healthy))
    fingerprints["gpu-05"]["nvidia"] = "570.86.15"
    lines = [f"[pod/drift-probe-x{i}/probe] FINGERPRINT {json.dumps(fp)}" for i, fp in enumerate(fingerprints.values())]
    saved = tmp_path / "probe.log"
    saved.write_text("\n".join(lines) + "\n")
    assert drift.main(["prod", "--fingerprints", str(saved)]) == 1
    assert capsys.readouterr().out == f"gpu-05: nvidia: expected {settings.gpu.driver.version}, found 570.86.15\n"
    saved.write_text("\n".join(f"FINGERPRINT {json.dumps(fp)}" for fp in healthy.values()) + "\n")
    assert drift.main(["prod", "--fingerprints", str(saved)]) == 0


def test_the_command_reports_unreachable_and_notready_nodes_and_goes_on(tmp_path, capsys, inventory, monkeypatch):
    # A stand-in kubectl: gpu-02 is NotReady (its kubelet is gone), the log of gpu-04's probe cannot be
    # read, gpu-06's probe prints drift; every other node is healthy. `--refresh` HUPs each probe first.
    _, healthy = inventory
    fingerprints = json.loads(json.dumps(healthy))
    fingerprints["gpu-06"]["kernel"] = "6.8.0-94-generic"
    nodes = {
        "items": [
            {
                "metadata": {"name": n},
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "False" if n == "gpu-02" else "True",
                            "lastTransitionTime": "2026-11-27T10:00:00Z",
                        }
                    ]
                },
            }
            for n in fingerprints
        ]
    }
    pods = {"items": [{"metadata": {"name": f"drift-probe-{n}"}, "spec": {"nodeName": n}} for n in fingerprints]}
    calls = []

    def kubectl(*args, timeout=60):
        calls.append(args)
        if args[:2] == ("get", "nodes"):
            return subprocess.CompletedProcess(args, 0, json.dumps(nodes), "")
        if args[:2] == ("get", "pods"):
            return subprocess.CompletedProcess(args, 0, json.dumps(pods), "")
        if args[0] == "exec":
            signalled.add(args[3])
            return subprocess.CompletedProcess(args, 0, "", "")
        pod = args[3]
        node = pod.removeprefix("drift-probe-")
        if node == "gpu-02":
            raise AssertionError("a NotReady node's log is not asked for")
        if node == "gpu-04":
            return subprocess.CompletedProcess(args, 1, "", "Error from server: dial tcp 10.0.0.14:10250: i/o timeout")
        # The probe answers a SIGHUP with its next fingerprint (sequence number 8 after 7); gpu-09 never does.
        seq = 8 if pod in signalled and node != "gpu-09" else 7
        line = json.dumps({**fingerprints[node], "seq": seq})
        return subprocess.CompletedProcess(args, 0, f"FINGERPRINT {line}\n", "")

    signalled: set[str] = set()
    monkeypatch.setattr(drift, "REFRESH_WAIT", 2)

    monkeypatch.setattr(drift, "_kubectl", kubectl)
    assert drift.main(["prod", "--refresh"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "gpu-06: kernel (differs from the other gpu nodes): expected 6.8.0-90-generic, found 6.8.0-94-generic",
        "gpu-02: not checked: NotReady since 2026-11-27T10:00:00Z",
        "gpu-04: not checked: cannot read the log of drift-probe-gpu-04: "
        "Error from server: dial tcp 10.0.0.14:10250: i/o timeout",
        # Its fingerprint never got newer than the one before the refresh: not read as if fresh.
        "gpu-09: not checked: no fingerprint newer than #7 from drift-probe-gpu-09 within 2 s of the refresh",
    ]
    assert ("exec", "-n", "ml-platform-acceptance", "drift-probe-gpu-06", "--", "kill", "-HUP", "1") in calls
    fingerprints["gpu-06"]["kernel"] = "6.8.0-90-generic"
    assert drift.main(["prod"]) == 2  # no drift, but two nodes could not be checked
    assert (
        capsys.readouterr().out.splitlines()[-1] == f"no drift: {len(fingerprints) - 2} nodes as the settings say, "
        "2 not checked (in whole or in part: listed above)"
    )


def test_probe_is_in_the_plan_on_every_node_reading_the_host_read_only(prod_plan):
    probes = [
        r for r in prod_plan.by_type("kubernetes:apps/v1:DaemonSet") if r["inputs"]["metadata"]["name"] == "drift-probe"
    ]
    assert len(probes) == 1
    spec = probes[0]["inputs"]["spec"]["template"]["spec"]
    assert spec["tolerations"] == [{"operator": "Exists"}]  # every node, GPU and control plane included
    assert {"name": "host", "hostPath": {"path": "/"}} in spec["volumes"]
    container = spec["containers"][0]
    assert {"name": "host", "mountPath": "/host", "readOnly": True} in container["volumeMounts"]
    assert container["command"] == ["sh", "-c", check_program("drift-probe.sh"), "drift-probe"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert {k: env[k] for k in probe_environment()} == probe_environment()


def test_every_file_a_host_script_writes_under_etc_is_fingerprinted():
    # A rule over the scripts, not a list to keep in step: each literal /etc path given to write_file in the
    # cluster hosts' scripts is in DRIFT_FILES or a drift directory (secrets excepted: never printed).
    import re

    from components.acceptance.drift import DRIFT_DIRS, HOST_SCRIPTS, LINE_OWNED
    from components.hosts.remote import expanded

    secret = {"/etc/rancher/rke2/join-token", "/etc/rancher/rke2/agent-token", "/etc/rancher/rke2/oidc-ca.pem"}
    for script in HOST_SCRIPTS:
        text = expanded(script)
        for path in re.findall(r'write_file "?(?:\$HOST_ROOT)?(/etc/[^" $]+)', text):
            owned = path in DRIFT_FILES or path.rsplit("/", 1)[0] in DRIFT_DIRS
            assert owned or path in secret or path in LINE_OWNED, (script, path)


# Hand changes that change how RKE2 or a module runs without touching a file the program writes. Each: (change on
# gpu-03's host, a finding that must be among those on gpu-03).
UNWRITTEN = {
    "HTTP_PROXY in the unit's EnvironmentFile": (
        lambda r: write(r["host"], "/etc/default/rke2-agent", "HTTP_PROXY=http://proxy.example:3128\n"),
        "gpu-03: file /etc/default/rke2-agent: expected absent, found ",
    ),
    "the same in /etc/sysconfig (RHEL family)": (
        lambda r: write(r["host"], "/etc/sysconfig/rke2-agent", "NO_PROXY=*\n"),
        "gpu-03: file /etc/sysconfig/rke2-agent: expected absent, found ",
    ),
    "a full unit override": (
        lambda r: write(r["host"], "/etc/systemd/system/rke2-agent.service", "[Service]\nExecStart=/bin/true\n"),
        "gpu-03: file /etc/systemd/system/rke2-agent.service: expected absent, found ",
    ),
    "a modprobe.d blacklist of nvidia_peermem": (
        lambda r: write(r["host"], "/etc/modprobe.d/no-peermem.conf", "blacklist nvidia-peermem\n"),
        "gpu-03: modules_blocked: expected (none), found nvidia_peermem",
    ),
    "a module installed as a no-op": (
        lambda r: write(r["host"], "/etc/modprobe.d/off.conf", "install br_netfilter /bin/true\n"),
        "gpu-03: modules_blocked: expected (none), found br_netfilter",
    ),
    "an edited containerd template": (
        lambda r: write(r["host"], "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl", "version = 2\n"),
        "gpu-03: file /var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl: expected absent, found ",
    ),
    "the containerd 2 template": (
        lambda r: write(r["host"], "/var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.tmpl", "version = 3\n"),
        "gpu-03: file /var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.tmpl: expected absent, found ",
    ),
    "a drop-in under service.d": (
        lambda r: write(r["host"], "/etc/systemd/system/service.d/10-proxy.conf", "[Service]\nEnvironment=A=1\n"),
        "gpu-03: file /etc/systemd/system/service.d/10-proxy.conf (a drop-in the program does not write)",
    ),
}


@pytest.mark.parametrize("change", UNWRITTEN, ids=list(UNWRITTEN))
def test_the_probe_sees_hand_changes_outside_the_files_the_program_writes(tmp_path, inventory, change):
    act, finding = UNWRITTEN[change]
    findings = changed(tmp_path, inventory, "gpu-03", act)
    assert any(f.startswith(finding) for f in findings) and all(f.startswith("gpu-03: ") for f in findings), findings


@pytest.mark.parametrize(
    ("deny", "says", "unseen"),
    [
        # No package database: every package would read `absent`, on every node alike (peer-relative: no drift).
        (lambda r: (r["host"] / "var/lib/dpkg/status").unlink(), "packages: no package database readable", "package "),
        # No /proc/sys: no live sysctl to compare.
        (lambda r: shutil.rmtree(r["proc"] / "sys"), "sysctl: ", "sysctl "),
        # The host's root not mounted.
        (lambda r: shutil.rmtree(r["host"] / "etc"), "host: the host's root is not mounted", "file "),
    ],
)
def test_a_probe_denied_its_sources_reports_not_checked_never_no_drift(tmp_path, inventory, deny, says, unseen):
    findings = changed(tmp_path, inventory, "gpu-03", deny)
    assert f"gpu-03: not checked: {says}" in "\n".join(findings), findings
    assert not [f for f in findings if f.startswith("gpu-03: ") and unseen in f and "not checked" not in f], findings


def test_every_node_denied_its_package_database_is_not_no_drift(tmp_path, inventory, capsys):
    settings, healthy = inventory
    blind = {
        n: {**fp, "packages": {}, "not_checked": {"packages": "no package database readable"}}
        for n, fp in healthy.items()
    }
    saved = tmp_path / "fingerprints.txt"
    saved.write_text("".join(f"FINGERPRINT {json.dumps(fp)}\n" for fp in blind.values()))
    assert drift.main(["prod", "--fingerprints", str(saved)]) == 2  # none drifted, but none could be checked whole
    out = capsys.readouterr().out
    assert "no drift" in out and f"{len(settings.nodes)} not checked" in out and "packages: no package database" in out


def test_the_probe_runs_in_the_hosts_network_namespace(prod_plan):
    [probe_set] = [
        r for r in prod_plan.by_type("kubernetes:apps/v1:DaemonSet") if r["inputs"]["metadata"]["name"] == "drift-probe"
    ]
    assert probe_set["inputs"]["spec"]["template"]["spec"]["hostNetwork"] is True
