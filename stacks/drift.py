"""Host drift: which nodes differ from what the settings say, and in what.

    python -m stacks.drift STACK [--config FILE] [--fingerprints FILE]

`pulumi refresh` cannot see a host changed by hand: a host step is a command, not a resource with a
readable state. The drift probe (components/acceptance/component.py, a DaemonSet) prints each node's fingerprint
every `acceptance.drift.intervalSeconds`: `FINGERPRINT {json}` with the RKE2 version, kernel, NVIDIA and
Mellanox driver versions and the sha256 of each file the host steps write. This command reads the
newest line of every probe pod (`kubectl logs`, KUBECONFIG) or the lines in FILE, and compares them:

- with the settings, where the settings decide the value: the RKE2 version (`cluster.rke2Version`), the
  NVIDIA driver on GPU nodes (`gpu.driver.version`), the RKE2 `config.yaml` the program renders for the
  node, `registries.yaml` (present only with `cluster.registryMirrors`) and the kube-vip manifest;
- with the other nodes, where the host decides: the kernel, the OFED version on InfiniBand nodes and
  the files the preparation step writes, which must be the same on every node (the most common value
  wins; a node that differs from it is listed).

Exit status 1 when a node differs or has no fingerprint; each finding names the node, what differs,
the expected and the found value. docs/acceptance.md says when to run it and how to bring a host back.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from components.acceptance.component import PROBE_NAME
from components.cluster.config import kube_vip_manifest, registries_yaml, rke2_config
from components.minio.tier import etcd_s3_server_config
from settings import SECRET_KEYS, Settings, load
from stacks.engine import ROOT

MARK = "FINGERPRINT "
CONFIG = "/etc/rancher/rke2/config.yaml"
REGISTRIES = "/etc/rancher/rke2/registries.yaml"
KUBE_VIP = "/var/lib/rancher/rke2/agent/pod-manifests/kube-vip.yaml"


@dataclass(frozen=True)
class Finding:
    node: str
    what: str
    expected: str
    found: str

    def __str__(self) -> str:
        return f"{self.node}: {self.what}: expected {self.expected or '(none)'}, found {self.found or '(none)'}"


def file_hash(content: str) -> str:
    """The sha256 of a file as the host steps' write_file writes it (trailing newlines normalised to one)."""
    return hashlib.sha256((content.rstrip("\n") + "\n").encode()).hexdigest()


def expected(settings: Settings) -> dict[str, dict[str, str]]:
    """Per node, the values the settings decide (files by path, versions by name)."""
    cluster = settings.cluster
    server_config = etcd_s3_server_config(cluster.etcd_snapshots, settings.nas)
    registries = registries_yaml(cluster)
    out = {}
    for node in settings.nodes:
        config = rke2_config(node, node.name == cluster.init_server, cluster, settings.network, server_config)
        values = {
            "rke2": cluster.rke2_version,
            f"file {CONFIG}": file_hash(yaml.safe_dump(config, sort_keys=True)),
            f"file {REGISTRIES}": file_hash(registries) if registries else "absent",
        }
        if node.control_plane:
            manifest = kube_vip_manifest(cluster)
            values[f"file {KUBE_VIP}"] = file_hash(manifest) if manifest else "absent"
        if node.gpu is not None:
            values["nvidia"] = settings.gpu.driver.version
        out[node.name] = values
    return out


def flatten(fingerprint: Mapping) -> dict[str, str]:
    values = {k: str(v) for k, v in fingerprint.items() if k not in ("node", "files")}
    values.update({f"file {path}": str(h) for path, h in fingerprint.get("files", {}).items()})
    return values


def compare(settings: Settings, fingerprints: Mapping[str, Mapping]) -> list[Finding]:
    wanted = expected(settings)
    found = {name: flatten(fp) for name, fp in fingerprints.items()}
    findings = []
    for node in settings.nodes:
        if node.name not in found:
            findings.append(Finding(node.name, "fingerprint", "one from the drift probe", "none (probe not running?)"))
            continue
        for key, value in sorted(wanted[node.name].items()):
            if found[node.name].get(key, "") != value:
                findings.append(Finding(node.name, key, value, found[node.name].get(key, "")))
    # What the host decides: the same on every node that has it (IB nodes for OFED).
    peers = {
        "kernel": [n.name for n in settings.nodes],
        "ofed": [n.name for n in settings.nodes if n.infiniband is not None],
    }
    decided = {key for values in wanted.values() for key in values}
    shared_files = {key for fp in found.values() for key in fp if key.startswith("file ") and key not in decided}
    for key in sorted(shared_files):
        peers[key] = [n.name for n in settings.nodes]
    for key, names in sorted(peers.items()):
        values = {name: found[name].get(key, "") for name in names if name in found}
        if not values:
            continue
        common, _ = Counter(values.values()).most_common(1)[0]
        findings += [
            Finding(name, f"{key} (differs from the other nodes)", common, value)
            for name, value in sorted(values.items())
            if value != common
        ]
    return sorted(findings, key=lambda f: (f.node, f.what))


def parse(lines: Iterable[str]) -> dict[str, dict]:
    """The newest fingerprint per node from probe output (`FINGERPRINT {json}` lines; prefixes allowed)."""
    fingerprints = {}
    for line in lines:
        if MARK in line:
            data = json.loads(line.split(MARK, 1)[1])
            fingerprints[data["node"]] = data
    return fingerprints


def live_lines(namespace: str) -> list[str]:
    proc = subprocess.run(
        ["kubectl", "logs", "-n", namespace, "-l", f"app.kubernetes.io/name={PROBE_NAME}", "--tail=1"],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.splitlines()


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.drift", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", help="the stack whose settings are the reference (Pulumi.<stack>.yaml)")
    parser.add_argument("--config", type=Path, help="a stack file instead of Pulumi.<stack>.yaml")
    parser.add_argument("--fingerprints", type=Path, help="probe output saved in a file, instead of kubectl logs")
    args = parser.parse_args(argv)
    doc = yaml.safe_load((args.config or ROOT / f"Pulumi.{args.stack}.yaml").read_text())["config"]
    raw = {key.split(":", 1)[1]: value for key, value in doc.items() if key.startswith("ml-platform:")}
    settings = load({key: value for key, value in raw.items() if key not in SECRET_KEYS})
    lines = (
        args.fingerprints.read_text().splitlines() if args.fingerprints else live_lines(settings.acceptance.namespace)
    )
    findings = compare(settings, parse(lines))
    for finding in findings:
        print(finding)
    if not findings:
        print(f"no drift: {len(settings.nodes)} nodes as the settings say")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
