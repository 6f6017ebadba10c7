"""Host drift: which nodes differ from what the settings say, and in what.

    python -m stacks.drift STACK [--config FILE] [--fingerprints FILE] [--refresh]

`pulumi refresh` cannot see a host changed by hand: a host step is a command, not a resource with a
readable state. The drift probe (components/acceptance/drift.py, a DaemonSet) prints each node's fingerprint
every `acceptance.drift.intervalSeconds`, and at once when sent SIGHUP (`--refresh` does that on every probe
pod first): `FINGERPRINT {json}` with the RKE2 version, kernel, NVIDIA and Mellanox driver versions, the
sha256 of each file the host steps write and of every file in the directories where a file changes how the
host runs (sysctl.d, modules-load.d, RKE2's config.yaml.d, the RKE2 units' drop-ins), the live value of
each sysctl the program sets, the modules it loads that are not loaded, the versions of the packages it
installs, and the fstab. This command reads the newest line of every probe pod (`kubectl`, KUBECONFIG) or
the lines in FILE, and compares them:

- with the settings, where the settings decide the value: the RKE2 version (`cluster.rke2Version`), the
  NVIDIA driver on GPU nodes (`gpu.driver.version`), the RKE2 `config.yaml` the program renders for the
  node, `registries.yaml` (present only with `cluster.registryMirrors`), the kube-vip manifest, the memlock
  drop-in on InfiniBand nodes and no other drop-in in RKE2's directories, every sysctl at the value of the
  program's file, every module of its modules-load files loaded, no active swap entry in fstab;
- with the node's peers (the nodes of its role, `gpu` or `cpu`; InfiniBand nodes among themselves for OFED
  and the IPoIB file), where the host decides: the kernel, OFED, package versions, fstab (without device
  names) and the other files, which must be the same on every peer (the most common value wins; a node that
  differs from it is listed; a file only some peers have reads `absent` on the others).

A node that is NotReady, or whose probe's log cannot be read, is listed as not checked and the others are
compared; so is each source a probe could not read (the host's root, its package database, /proc/sys): what
comes from it is not compared, neither with the settings nor with the peers (all nodes without a package
database would otherwise agree that every package is `absent`). The probe runs in the host's network namespace.
Exit status 1 when a node drifted, 2 when none did but some could not be checked, 0 otherwise;
each finding names the node, what differs, the expected and the found value. docs/acceptance.md says when
to run it and how to bring a host back.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from components.acceptance.component import PROBE_NAME
from components.acceptance.drift import IPOIB_FILES, MEMLOCK_DROPIN, MODULE_FILES, OWNED_DIRS, UNWRITTEN_FILES
from components.cluster.config import kube_vip_manifest, registries_yaml, rke2_config
from components.minio.tier import etcd_s3_server_config
from settings import SECRET_KEYS, NodeSettings, Settings, load
from stacks.engine import ROOT

MARK = "FINGERPRINT "
CONFIG = "/etc/rancher/rke2/config.yaml"
REGISTRIES = "/etc/rancher/rke2/registries.yaml"
KUBE_VIP = "/var/lib/rancher/rke2/agent/pod-manifests/kube-vip.yaml"
# What infiniband-host.sh writes (components/network/scripts): RKE2's containerd may pin memory for RDMA.
MEMLOCK_CONTENT = "[Service]\nLimitMEMLOCK=infinity"
NOT_CHECKED = "not checked"


@dataclass(frozen=True)
class Finding:
    node: str
    what: str
    expected: str
    found: str

    def __str__(self) -> str:
        if self.what == NOT_CHECKED:
            return f"{self.node}: {NOT_CHECKED}: {self.found}"
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
            f"file {MEMLOCK_DROPIN}": file_hash(MEMLOCK_CONTENT) if node.infiniband is not None else "absent",
            "modules_missing": "",
            "modules_blocked": "",
            "swap_entries": "0",
            # Files the program never writes, whose presence changes how RKE2 runs: absent everywhere.
            **{f"file {path}": "absent" for path in UNWRITTEN_FILES},
        }
        if node.control_plane:
            manifest = kube_vip_manifest(cluster)
            values[f"file {KUBE_VIP}"] = file_hash(manifest) if manifest else "absent"
        if node.gpu is not None:
            values["nvidia"] = settings.gpu.driver.version
        out[node.name] = values
    return out


def flatten(fingerprint: Mapping) -> dict[str, str]:
    """One value per key: versions, `file PATH`, `package NAME`; an IPoIB file by presence (it holds the node's
    own address)."""
    values = {
        k: str(v)
        for k, v in fingerprint.items()
        if k not in ("node", "seq", "files", "sysctl", "packages", "not_checked")
    }
    for path, digest in fingerprint.get("files", {}).items():
        values[f"file {path}"] = ("present" if digest != "absent" else "absent") if path in IPOIB_FILES else str(digest)
    values.update({f"package {name}": str(v) for name, v in fingerprint.get("packages", {}).items()})
    return values


def peer_groups(settings: Settings) -> dict[str, list[NodeSettings]]:
    """Nodes that must agree where the host decides: the nodes of each role."""
    groups: dict[str, list[NodeSettings]] = {}
    for node in settings.nodes:
        groups.setdefault(node.role, []).append(node)
    return groups


def _owned_dir_findings(name: str, values: Mapping[str, str], wanted: Mapping[str, str]) -> list[Finding]:
    """Files in RKE2's drop-in directories the program did not write: each changes how RKE2 runs."""
    out = []
    for key, digest in sorted(values.items()):
        path = key.removeprefix("file ")
        if key.startswith("file ") and path.rsplit("/", 1)[0] in OWNED_DIRS and key not in wanted:
            out.append(Finding(name, f"{key} (a drop-in the program does not write)", "absent", digest))
    return out


def _sysctl_findings(name: str, fingerprint: Mapping) -> list[Finding]:
    return [
        Finding(name, f"sysctl {key} (live, set by hand?)", v.get("file", ""), v.get("live", ""))
        for key, v in sorted(fingerprint.get("sysctl", {}).items())
        if v.get("file") != v.get("live")
    ]


# What each source the probe may fail to read decides: keys of that kind are not compared (never "no drift").
_SOURCE_KEYS = {
    "host": lambda key: True,
    "packages": lambda key: key.startswith("package "),
    "sysctl": lambda key: key.startswith("sysctl "),
}


def unread(fingerprint: Mapping) -> dict[str, str]:
    """Source -> why the probe could not read it. A fingerprint of an older probe (no `not_checked`) that reads
    no package at all is judged the same way: no package database."""
    out = {str(k): str(v) for k, v in (fingerprint.get("not_checked") or {}).items()}
    if "not_checked" not in fingerprint and not fingerprint.get("packages"):
        out["packages"] = "the probe read no package"
    return out


def blind(fingerprint: Mapping, key: str) -> bool:
    """Whether the probe could not read what `key` comes from."""
    return any(_SOURCE_KEYS.get(source, lambda _: False)(key) for source in unread(fingerprint))


def compare(settings: Settings, fingerprints: Mapping[str, Mapping]) -> list[Finding]:
    wanted = expected(settings)
    found = {}
    findings = []
    for name, fingerprint in fingerprints.items():
        sources = unread(fingerprint)
        values = flatten(fingerprint)
        for source, why in sorted(sources.items()):
            findings.append(Finding(name, NOT_CHECKED, "", f"{source}: {why}"))
            values = {k: v for k, v in values.items() if not _SOURCE_KEYS.get(source, lambda key: False)(k)}
        found[name] = values
        if "host" in sources:
            wanted = {**wanted, name: {}}
    for node in settings.nodes:
        if node.name not in found:
            findings.append(Finding(node.name, "fingerprint", "one from the drift probe", "none (probe not running?)"))
            continue
        for key, value in sorted(wanted[node.name].items()):
            if found[node.name].get(key, "absent" if key.startswith("file ") else "") != value:
                findings.append(Finding(node.name, key, value, found[node.name].get(key, "")))
        findings += _owned_dir_findings(node.name, found[node.name], wanted[node.name])
        if not unread(fingerprints[node.name]).keys() & {"sysctl", "host"}:
            findings += _sysctl_findings(node.name, fingerprints[node.name])
    # What the host decides: the same on every peer that has it (IB nodes among themselves for OFED, IPoIB).
    decided = {key for values in wanted.values() for key in values}
    for role, members in sorted(peer_groups(settings).items()):
        names = [n.name for n in members if n.name in found]
        ib_names = [n.name for n in members if n.infiniband is not None and n.name in found]
        keys = {key for name in names for key in found[name]} - decided
        for key in sorted(keys):
            if key.startswith("file ") and key.removeprefix("file ").rsplit("/", 1)[0] in OWNED_DIRS:
                continue  # judged above
            infiniband_only = key == "ofed" or key.removeprefix("file ") in (*IPOIB_FILES, *MODULE_FILES[1:])
            peers = [n for n in (ib_names if infiniband_only else names) if not blind(fingerprints[n], key)]
            default = "absent" if key.startswith(("file ", "package ")) else ""
            values = {name: found[name].get(key, default) for name in peers}
            if len(values) < 2:
                continue
            common, _ = Counter(values.values()).most_common(1)[0]
            findings += [
                Finding(name, f"{key} (differs from the other {role} nodes)", common, value)
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


def _kubectl(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["kubectl", *args], capture_output=True, text=True, timeout=timeout)


def live_fingerprints(namespace: str, refresh: bool = False) -> tuple[dict[str, dict], list[Finding]]:
    """The newest fingerprint of every probe pod, and the nodes that could not be read (NotReady, or their
    pod's log unreadable), each as a `not checked` finding; one bad node does not stop the others."""
    nodes = json.loads(_kubectl("get", "nodes", "-o", "json").stdout or "{}").get("items", [])
    not_ready = {}
    for node in nodes:
        ready = [c for c in node.get("status", {}).get("conditions", []) if c.get("type") == "Ready"]
        if not ready or ready[0].get("status") != "True":
            since = ready[0].get("lastTransitionTime", "?") if ready else "?"
            not_ready[node["metadata"]["name"]] = f"NotReady since {since}"
    listing = _kubectl("get", "pods", "-n", namespace, "-l", f"app.kubernetes.io/name={PROBE_NAME}", "-o", "json")
    if listing.returncode != 0:
        raise SystemExit(f"cannot list the drift probe pods in {namespace}: {listing.stderr.strip()}")
    pods = {p["spec"].get("nodeName", ""): p["metadata"]["name"] for p in json.loads(listing.stdout)["items"]}
    fingerprints: dict[str, dict] = {}
    problems = [Finding(name, NOT_CHECKED, "", why) for name, why in sorted(not_ready.items())]
    for node, pod in sorted(pods.items()):
        if node in not_ready:
            continue
        try:
            logs = _kubectl("logs", "-n", namespace, pod, "--tail=20", timeout=30)
            if logs.returncode == 0 and refresh:
                logs = fresh_logs(namespace, pod, node, logs.stdout)
        except subprocess.TimeoutExpired:
            problems.append(Finding(node, NOT_CHECKED, "", f"the log of {pod} did not come within 30 s"))
            continue
        except StaleFingerprint as stale:
            problems.append(Finding(node, NOT_CHECKED, "", str(stale)))
            continue
        if logs.returncode != 0:
            problems.append(Finding(node, NOT_CHECKED, "", f"cannot read the log of {pod}: {logs.stderr.strip()}"))
            continue
        fingerprints.update(parse(logs.stdout.splitlines()))
    return fingerprints, problems


class StaleFingerprint(Exception):  # noqa: N818 (a state, not an error)
    """No fingerprint newer than the refresh's request came in time."""


REFRESH_WAIT = 60


def fresh_logs(namespace: str, pod: str, node: str, before: str) -> subprocess.CompletedProcess:
    """SIGHUP the probe, then read its log until a fingerprint with a sequence number above the last one seen
    before the signal shows (REFRESH_WAIT seconds at most): a fingerprint read at once may be the old one."""
    last = int(parse(before.splitlines()).get(node, {}).get("seq", 0) or 0)
    sent = _kubectl("exec", "-n", namespace, pod, "--", "kill", "-HUP", "1", timeout=30)
    if sent.returncode != 0:
        raise StaleFingerprint(f"cannot signal {pod} for a fresh fingerprint: {sent.stderr.strip()}")
    deadline = time.monotonic() + REFRESH_WAIT
    while True:
        logs = _kubectl("logs", "-n", namespace, pod, "--tail=20", timeout=30)
        seq = int(parse(logs.stdout.splitlines()).get(node, {}).get("seq", 0) or 0) if logs.returncode == 0 else 0
        if seq > last:
            return logs
        if time.monotonic() >= deadline:
            raise StaleFingerprint(
                f"no fingerprint newer than #{last} from {pod} within {REFRESH_WAIT} s of the refresh"
            )
        time.sleep(1)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.drift", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", help="the stack whose settings are the reference (Pulumi.<stack>.yaml)")
    parser.add_argument("--config", type=Path, help="a stack file instead of Pulumi.<stack>.yaml")
    parser.add_argument("--fingerprints", type=Path, help="probe output saved in a file, instead of kubectl")
    parser.add_argument("--refresh", action="store_true", help="have every probe print a fresh fingerprint first")
    args = parser.parse_args(argv)
    doc = yaml.safe_load((args.config or ROOT / f"Pulumi.{args.stack}.yaml").read_text())["config"]
    raw = {key.split(":", 1)[1]: value for key, value in doc.items() if key.startswith("ml-platform:")}
    settings = load({key: value for key, value in raw.items() if key not in SECRET_KEYS})
    if args.fingerprints:
        fingerprints, unchecked = parse(args.fingerprints.read_text().splitlines()), []
    else:
        fingerprints, unchecked = live_fingerprints(settings.acceptance.namespace, refresh=args.refresh)
    skipped = {f.node for f in unchecked}
    compared = [f for f in compare(settings, fingerprints) if f.node not in skipped]
    findings = [f for f in compared if f.what != NOT_CHECKED]
    unchecked += [f for f in compared if f.what == NOT_CHECKED]
    for finding in [*findings, *unchecked]:
        print(finding)
    if not findings:
        blind = {f.node for f in unchecked}  # nodes not checked at all, or a source of theirs not
        checked = len(settings.nodes) - len(blind)
        print(
            f"no drift: {checked} nodes as the settings say"
            + (f", {len(blind)} not checked (in whole or in part: listed above)" if blind else "")
        )
    return 1 if findings else 2 if unchecked else 0


if __name__ == "__main__":
    sys.exit(main())
