"""Host drift: the probe script on a fabricated host root (dash, stubbed chroot/uname), and
`python -m stacks.drift` comparing fingerprints with the settings and with the other nodes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from components.acceptance.component import CHECKS, DRIFT_FILES, check_program
from components.cluster.config import rke2_config
from settings import load
from stacks import drift
from tests.conftest import ROOT, stack_doc

SHARED = {path: "a" * 63 + "1" for path in DRIFT_FILES}  # what the preparation step wrote everywhere


def prod_settings():
    return load(stack_doc("prod"))


def healthy(settings) -> dict[str, dict]:
    """A fingerprint per node exactly as the settings (and the shared files) say."""
    fingerprints = {}
    for node, values in drift.expected(settings).items():
        files = {path: SHARED[path] for path in DRIFT_FILES}
        files.update({key.removeprefix("file "): v for key, v in values.items() if key.startswith("file ")})
        fingerprints[node] = {
            "node": node,
            "rke2": values["rke2"],
            "kernel": "6.8.0-90-generic",
            "nvidia": values.get("nvidia", ""),
            "ofed": "",
            "files": files,
        }
    return fingerprints


def probe(tmp_path: Path, node: str, files: dict[str, str], rke2: str, nvidia: str = "") -> dict:
    """Run the real probe once on a fake host root; return the fingerprint it printed."""
    host = tmp_path / node
    for path, content in files.items():
        (host / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (host / path.lstrip("/")).write_text(content)
    (host / "usr/local/bin").mkdir(parents=True, exist_ok=True)
    binary = host / "usr/local/bin/rke2"
    binary.write_text(f'#!/bin/sh\necho "rke2 version {rke2} (0123abc)"\necho "go version go1.24"\n')
    binary.chmod(0o755)
    sys_dir = tmp_path / f"{node}-sys"
    if nvidia:
        (sys_dir / "module/nvidia").mkdir(parents=True)
        (sys_dir / "module/nvidia/version").write_text(nvidia + "\n")
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    (stubs / "chroot").write_text('#!/bin/sh\nroot=$1\nshift\nexec "$root$@"\n')
    (stubs / "uname").write_text("#!/bin/sh\necho 6.8.0-90-generic\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    program = tmp_path / "drift-probe.sh"
    program.write_text(check_program("drift-probe.sh"))
    env = {
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "NODE_NAME": node,
        "HOST": str(host),
        "SYS": str(sys_dir),
        "FILES": " ".join(DRIFT_FILES),
        "ONCE": "true",
    }
    proc = subprocess.run(["sh", str(program)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return drift.parse(proc.stdout.splitlines())[node]


def test_a_healthy_inventory_shows_no_drift():
    settings = prod_settings()
    assert drift.compare(settings, healthy(settings)) == []


def test_drift_reports_a_changed_file_and_a_changed_rke2_version(tmp_path):
    settings = prod_settings()
    fingerprints = healthy(settings)
    wanted = drift.expected(settings)["gpu-03"]
    node = next(n for n in settings.nodes if n.name == "gpu-03")
    config = yaml.safe_dump(rke2_config(node, False, settings.cluster, settings.network), sort_keys=True)
    assert drift.file_hash(config) == wanted["file /etc/rancher/rke2/config.yaml"]
    sysctl = "vm.swappiness = 60\n"  # edited by hand
    # gpu-03: the real probe on a host whose sysctl file was edited and whose RKE2 was changed by hand.
    found = probe(
        tmp_path,
        "gpu-03",
        {"/etc/rancher/rke2/config.yaml": config, "/etc/sysctl.d/90-ml-platform.conf": sysctl},
        rke2="v1.35.6+rke2r1",
        nvidia=settings.gpu.driver.version,
    )
    assert found["files"]["/etc/rancher/rke2/config.yaml"] == wanted["file /etc/rancher/rke2/config.yaml"]
    assert found["files"]["/etc/chrony/sources.d/ml-platform.sources"] == "absent"
    found["files"] = {
        **fingerprints["gpu-03"]["files"],
        "/etc/sysctl.d/90-ml-platform.conf": found["files"]["/etc/sysctl.d/90-ml-platform.conf"],
    }
    fingerprints["gpu-03"] = found
    # cpu-10: a hand-edited RKE2 config.
    fingerprints["cpu-10"]["files"]["/etc/rancher/rke2/config.yaml"] = "f" * 63 + "0"
    del fingerprints["cpu-20"]  # its probe does not run

    findings = [str(f) for f in drift.compare(settings, fingerprints)]
    cpu10_config = drift.expected(settings)["cpu-10"]["file /etc/rancher/rke2/config.yaml"]
    shared_sysctl = SHARED["/etc/sysctl.d/90-ml-platform.conf"]
    assert findings == [
        f"cpu-10: file /etc/rancher/rke2/config.yaml: expected {cpu10_config}, found {'f' * 63}0",
        "cpu-20: fingerprint: expected one from the drift probe, found none (probe not running?)",
        "gpu-03: file /etc/sysctl.d/90-ml-platform.conf (differs from the other nodes): "
        f"expected {shared_sysctl}, found {drift.file_hash(sysctl)}",
        "gpu-03: rke2: expected v1.35.7+rke2r1, found v1.35.6+rke2r1",
    ]


def test_the_command_reads_probe_output_and_exits_1_on_drift(tmp_path, capsys):
    settings = prod_settings()
    fingerprints = healthy(settings)
    fingerprints["gpu-05"]["nvidia"] = "570.86.15"
    lines = [f"[pod/drift-probe-x{i}/probe] FINGERPRINT {json.dumps(fp)}" for i, fp in enumerate(fingerprints.values())]
    saved = tmp_path / "probe.log"
    saved.write_text("\n".join(lines) + "\n")
    assert drift.main(["prod", "--fingerprints", str(saved)]) == 1
    assert capsys.readouterr().out == f"gpu-05: nvidia: expected {settings.gpu.driver.version}, found 570.86.15\n"
    fingerprints["gpu-05"]["nvidia"] = settings.gpu.driver.version
    saved.write_text("\n".join(f"FINGERPRINT {json.dumps(fp)}" for fp in fingerprints.values()) + "\n")
    assert drift.main(["prod", "--fingerprints", str(saved)]) == 0


def test_probe_is_shellcheck_clean_and_in_the_plan(prod_plan):
    assert (CHECKS / "drift-probe.sh").exists()
    probes = [
        r for r in prod_plan.by_type("kubernetes:apps/v1:DaemonSet") if r["inputs"]["metadata"]["name"] == "drift-probe"
    ]
    assert len(probes) == 1
    spec = probes[0]["inputs"]["spec"]["template"]["spec"]
    assert spec["tolerations"] == [{"operator": "Exists"}]  # every node, GPU and control plane included
    assert {"name": "host", "hostPath": {"path": "/"}} in spec["volumes"]
    mounts = spec["containers"][0]["volumeMounts"]
    assert {"name": "host", "mountPath": "/host", "readOnly": True} in mounts
    assert (ROOT / "components/acceptance/checks/drift-probe.sh").read_text() == check_program("drift-probe.sh")
