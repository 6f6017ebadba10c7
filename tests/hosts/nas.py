"""What the NAS host's two steps download, served by the artifact server (tests/hosts/artifacts.py), and
the generated values of their secret stdin.

`<nas>-zabbix-agent2` (zabbix-agent2-nas.sh) installs Debian 12's own zabbix-agent2 package from a small
apt repository signed by a key the harness generates (monitoring.nasAgent points at it, as a site points
it at its mirror of repo.zabbix.com); the package's dependencies come from the Debian mirror the machines
use. `<nas>-minio` (minio-nas.sh) installs the MinIO stand-in of tests/hosts/minio_standin/ from
storage.minio.artifact (standins.STANDINS): MinIO's release files cannot be downloaded here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

from tests.hosts import rootfs

STANDIN = Path(__file__).parent / "minio_standin" / "minio"
PACKAGE = "zabbix-agent2"
# The repository's suite. Not "bookworm": settings/rules/semantics.py reads a bookworm pin as Zabbix's own
# build ("+debian12") and refuses Debian's `+b1` rebuild of the same package (a site mirroring Debian's
# zabbix-agent2 names its suite as it likes).
SUITE = "ml-platform-harness"
# Generated values a real `up` computes (RandomPassword, RandomBytes results), by resource name.
TOKENS = {
    "minio-root-user": {"result": "harnessminioroot0123"},
    "minio-root-password": {"result": "harnessminiopassword0123456789abcdefghij"},
    "monitoring-agent-psk": {"hex": "0123456789abcdef" * 4},
}


def _stanza(lists: Path, package: str) -> dict[str, str]:
    """The newest stanza of `package` in the machines' apt lists of the Debian mirror (the root file
    system's): the version they resolve, with the mirror's path and sha256 of the .deb."""
    found: list[dict[str, str]] = []
    for index in sorted(lists.glob("*_dists_*_main_binary-amd64_Packages")):
        for block in index.read_text().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and line[0] != " ")
            if fields.get("Package") == package:
                found.append({**fields, "_text": block.strip()})
    if not found:
        raise RuntimeError(f"{package} is not in the Debian mirror's package lists under {lists}")
    newest = found[0]
    for other in found[1:]:  # several suites: apt's choice is the newest version
        if subprocess.run(["dpkg", "--compare-versions", other["Version"], "gt", newest["Version"]]).returncode == 0:
            newest = other
    return newest


def _deb(stanza: dict[str, str]) -> Path:
    """The .deb of `stanza`, downloaded once from the mirror into the harness's cache, its sha256 checked."""
    cached = rootfs.CACHE / "debs" / Path(stanza["Filename"]).name
    if cached.is_file() and hashlib.sha256(cached.read_bytes()).hexdigest() == stanza["SHA256"]:
        return cached
    cached.parent.mkdir(parents=True, exist_ok=True)
    url = f"{rootfs.MIRROR}/{stanza['Filename']}"
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            data = response.read()
    except OSError as exc:
        mirror = f"the Debian mirror ({rootfs.MIRROR}; MLP_HOSTS_MIRROR to use another)"
        raise RuntimeError(f"{mirror}: {url}: {exc}") from exc
    if hashlib.sha256(data).hexdigest() != stanza["SHA256"]:
        raise RuntimeError(f"{url} does not have the sha256 of the mirror's package list")
    partial = cached.with_name(cached.name + ".partial")
    partial.write_bytes(data)
    partial.rename(cached)
    return cached


def zabbix_repository(www: Path, base: Path, work: Path) -> str:
    """An apt repository at www/zabbix/ holding zabbix-agent2 (dists/SUITE/main, InRelease signed by a
    throwaway key) and that key, binary, at www/zabbix/key.gpg (the shape of repo.zabbix.com's .gpg key).
    Returns the package's version."""
    stanza = _stanza(base / "var/lib/apt/lists", PACKAGE)
    repo = www / "zabbix"
    target = repo / stanza["Filename"]
    target.parent.mkdir(parents=True)
    shutil.copy(_deb(stanza), target)
    packages_path = "main/binary-amd64/Packages"
    dist = repo / "dists" / SUITE
    (dist / "main/binary-amd64").mkdir(parents=True)
    packages = (stanza["_text"] + "\n").encode()
    (dist / packages_path).write_bytes(packages)
    date = time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime(time.time() - 3600))
    release = (
        f"Origin: ml-platform host harness\nLabel: zabbix-agent2 from Debian {SUITE}\nSuite: {SUITE}\n"
        f"Codename: {SUITE}\nDate: {date}\nArchitectures: amd64\nComponents: main\n"
        f"SHA256:\n {hashlib.sha256(packages).hexdigest()} {len(packages)} {packages_path}\n"
    )
    (dist / "Release").write_text(release)
    gnupg = work / "gnupg"
    gnupg.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(gnupg)}

    def gpg(*args: str) -> str:
        proc = subprocess.run(
            ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "", *args],
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"gpg {' '.join(args)} failed: {proc.stderr[-800:]}")
        return proc.stdout

    uid = "ml-platform host harness apt key <hosts@ml-platform.invalid>"
    gpg("--quick-gen-key", uid, "ed25519", "sign", "2d")
    gpg("--clearsign", "--output", str(dist / "InRelease"), str(dist / "Release"))
    gpg("--output", str(repo / "key.gpg"), "--export", uid)
    return stanza["Version"]


def minio_standin(www: Path) -> str:
    """The MinIO stand-in at www/minio/standin/linux-amd64/minio; returns its sha256."""
    target = www / "minio/standin/linux-amd64/minio"
    target.parent.mkdir(parents=True)
    shutil.copy(STANDIN, target)
    return hashlib.sha256(target.read_bytes()).hexdigest()


def tls_outputs(config_file: Path) -> dict[str, dict[str, str]]:
    """The MinIO tier's CA, server key and certificate (the `tls` resources' outputs a real `up`
    computes), made once per stack file with openssl: a P-384 CA, a P-256 server key, a certificate for
    the NAS hosts' names and addresses."""
    saved = config_file.with_name("minio-tls.json")
    if saved.is_file():
        return json.loads(saved.read_text())
    hosts = yaml.safe_load(config_file.read_text())["config"]["ml-platform:nas"]["hosts"]
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)

        def openssl(*args: str) -> None:
            proc = subprocess.run(["openssl", *args], capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"openssl {' '.join(args)} failed: {proc.stderr[-800:]}")

        openssl("ecparam", "-name", "secp384r1", "-genkey", "-noout", "-out", str(d / "ca.key"))
        openssl(
            "req", "-x509", "-new", "-key", str(d / "ca.key"), "-subj", "/CN=ml-platform MinIO tier CA",
            "-days", "2", "-out", str(d / "ca.crt"),
        )  # fmt: skip
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(d / "server.key"))
        openssl("req", "-new", "-key", str(d / "server.key"), "-subj", "/CN=minio.nas", "-out", str(d / "server.csr"))
        names = [f"DNS:{h['name']}" for h in hosts] + [f"IP:{h['address']}" for h in hosts]
        (d / "ext").write_text(
            f"subjectAltName={','.join(names)}\nkeyUsage=digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
        )
        openssl(
            "x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
            "-CAcreateserial", "-days", "2", "-extfile", str(d / "ext"), "-out", str(d / "server.crt"),
        )  # fmt: skip
        outputs = {
            "minio-ca-key": {"privateKeyPem": (d / "ca.key").read_text()},
            "minio-ca": {"certPem": (d / "ca.crt").read_text()},
            "minio-server-key": {"privateKeyPem": (d / "server.key").read_text()},
            "minio-server-cert": {"certPem": (d / "server.crt").read_text()},
        }
    saved.write_text(json.dumps(outputs))
    return outputs
