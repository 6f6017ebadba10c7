"""The artifact server of the stand-ins: https on the test machine's bridge address, with a CA that the
machines trust (as a site's internal mirror with its own CA). It serves what the stack's air-gap
settings point at: the RKE2 installer (`cluster.install.installerUrl`) and the release files
(`cluster.install.artifactUrl`): the stand-in RKE2 of tests/hosts/rke2_standin/ (standins.STANDINS); the
MinIO server binary (`storage.minio.artifact`): the stand-in of tests/hosts/minio_standin/; an apt
repository with Debian's own zabbix-agent2 and its signing key (`monitoring.nasAgent`), made by
tests/hosts/nas.py.
"""

from __future__ import annotations

import functools
import hashlib
import io
import ssl
import subprocess
import tarfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional

from tests.hosts import nas

STANDIN = Path(__file__).parent / "rke2_standin"
PORT = 8443


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class ArtifactServer:
    def __init__(self, directory: Path, address: str, rke2_version: str) -> None:
        self.directory = directory
        self.address = address
        self.rke2_version = rke2_version
        self.ca = directory / "ca.crt"
        self.server: ThreadingHTTPServer | None = None
        self.minio_sha256 = ""
        self.zabbix_version = ""

    @property
    def installer_url(self) -> str:
        return f"https://{self.address}:{PORT}/rke2/install.sh"

    @property
    def artifact_url(self) -> str:
        return f"https://{self.address}:{PORT}/rke2/{self.rke2_version}"

    @property
    def minio_url(self) -> str:
        return f"https://{self.address}:{PORT}/minio/standin/linux-amd64/minio"

    @property
    def zabbix_repository(self) -> str:
        return f"https://{self.address}:{PORT}/zabbix"

    @property
    def zabbix_key_url(self) -> str:
        return f"https://{self.address}:{PORT}/zabbix/key.gpg"

    def start(self, base: Optional[Path] = None) -> None:
        """`base`: the machines' root file system, whose apt lists name the zabbix-agent2 they resolve."""
        self.directory.mkdir(parents=True)
        self._certificates()
        self._rke2_release()
        www = self.directory / "www"
        self.minio_sha256 = nas.minio_standin(www)
        if base is not None:
            self.zabbix_version = nas.zabbix_repository(www, base, self.directory)
        handler = functools.partial(_Quiet, directory=str(self.directory / "www"))
        self.server = ThreadingHTTPServer((self.address, PORT), handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.directory / "server.crt", self.directory / "server.key")
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def _certificates(self) -> None:
        d = self.directory

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], check=True, capture_output=True)

        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
        openssl(
            "req",
            "-x509",
            *ec,
            "-days",
            "2",
            "-subj",
            "/CN=ml-platform host harness CA",
            "-keyout",
            str(d / "ca.key"),
            "-out",
            str(self.ca),
        )
        openssl(
            "req", *ec, "-subj", f"/CN={self.address}", "-keyout", str(d / "server.key"), "-out", str(d / "server.csr")
        )
        (d / "san.ext").write_text(f"subjectAltName=IP:{self.address}\n")
        openssl(
            "x509",
            "-req",
            "-in",
            str(d / "server.csr"),
            "-CA",
            str(self.ca),
            "-CAkey",
            str(d / "ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            str(d / "san.ext"),
            "-out",
            str(d / "server.crt"),
        )

    def _rke2_release(self) -> None:
        """install.sh, and the release directory: rke2.linux-amd64.tar.gz and sha256sum-amd64.txt."""
        www = self.directory / "www" / "rke2"
        release = www / self.rke2_version
        release.mkdir(parents=True)
        (www / "install.sh").write_text((STANDIN / "install.sh").read_text())
        members = {
            "bin/rke2": ("rke2", 0o755),
            "bin/rke2-uninstall.sh": ("rke2-uninstall.sh", 0o755),
            "lib/systemd/system/rke2-server.service": ("rke2-server.service", 0o644),
            "lib/systemd/system/rke2-agent.service": ("rke2-agent.service", 0o644),
            "share/rke2-standin/rke2d.py": ("rke2d.py", 0o644),
            "share/rke2-standin/kubectl": ("kubectl", 0o755),
        }
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for name, (source, mode) in members.items():
                data = (STANDIN / source).read_text().replace("@VERSION@", self.rke2_version).encode()
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), mode, 0
                tar.addfile(info, io.BytesIO(data))
        tarball = release / "rke2.linux-amd64.tar.gz"
        tarball.write_bytes(buffer.getvalue())
        digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
        (release / "sha256sum-amd64.txt").write_text(f"{digest}  rke2.linux-amd64.tar.gz\n")
