"""The real Zabbix agent 2 7.0 for the tests, run with a given configuration.

`tests/monitoring/start-zabbix-api.sh agent2-root` unpacks Debian 13's `zabbix-agent2` (7.0.x, the
frontend's version) with its whole dependency closure into a cached root (never installed: Debian
12's glibc is too old for it); each run here gets its own copy of that root, with the files the
caller gives (a configuration, a PSK file at the owner and mode the pod or host gives it, an
/etc/hosts), and runs `zabbix_agent2 -f` in it with `chroot --userspec` as a non-root user, in its
own network namespace (only loopback; ports forwarded to the test's Zabbix server on request), so
the agent's port 10050 never clashes with anything on the machine.

What the container image and the chart do to a configuration is reproduced here from their public
sources, so a test runs exactly what a pod would run:
- `daemonset_env`: the env of the agent container in the community chart 7.0.12
  (`templates/daemonset-zabbix-agent.yaml`);
- `entrypoint_config`: `docker-entrypoint.sh` of the `zabbix/zabbix-agent2` image (zabbix-docker,
  `Dockerfiles/agent2/ubuntu/docker-entrypoint.sh`, `prepare_zbx_agent_config` and
  `update_config_var`), which turns the `ZBX_*` variables into `zabbix_agent2.conf`;
- `secret_file`: the owner and mode the kubelet gives a file of a Secret volume
  (`pkg/volume/volume_linux.go`, `SetVolumeOwnership`: with an fsGroup, group = fsGroup and the
  mode gains 0440 on a read-only volume such as a Secret; without one, root:root at defaultMode).
The image runs as `USER 1997`, whose passwd entry has group 1995 (`zabbix`) and who is also in
group 0 (`useradd -g zabbix -G root --uid 1997`, `Dockerfiles/agent2/ubuntu/Dockerfile`); a pod's
fsGroup is added to its groups.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

from tests.monitoring.zabbix70 import START, STATE

IMAGE_UID, IMAGE_GID, IMAGE_GROUPS = 1997, 1995, (1995, 0)
CONFIG = "/etc/zabbix/zabbix_agent2.conf"
# Chart 7.0.12 values.yaml defaults of the agent env the DaemonSet always renders (lines 472-488);
# tests/monitoring/test_agent2.py checks them against the pinned chart when it is present.
CHART_AGENT_DEFAULTS = {
    "ZBX_SERVER_HOST": "0.0.0.0/0",
    "ZBX_SERVER_PORT": 10051,
    "ZBX_PASSIVE_ALLOW": True,
    "ZBX_ACTIVE_ALLOW": False,
    "ZBX_DEBUGLEVEL": 3,
    "ZBX_TIMEOUT": 4,
}
_CLONE_NEWNET = 0x40000000


def agent2_root() -> Path:
    """The cached agent root (built on first use; a missing prerequisite fails naming it)."""
    env = {**os.environ, "ZABBIX70_CACHE": str(STATE / "cache")}
    proc = subprocess.run([str(START), "agent2-root", str(STATE / "agent2")], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        pytest.fail(
            f"could not prepare the real Zabbix agent 2 7.0 with tests/monitoring/start-zabbix-api.sh agent2-root "
            f"(exit {proc.returncode}):\n{proc.stderr[-3000:]}",
            pytrace=False,
        )
    return Path(proc.stdout.strip())


# ------------------------------------------------------------------------------------ chart + image
def _helm_quote(value: Any) -> str:
    """Helm's `quote` of a value from values.yaml ("" for a missing one; booleans lower-case)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def daemonset_env(agent_values: Mapping[str, Any], node_name: str) -> dict[str, str]:
    """The agent container's environment as the chart's DaemonSet template renders it."""
    values = {**CHART_AGENT_DEFAULTS, **agent_values}
    env = {"ZBX_HOSTNAME": node_name}  # fieldRef spec.nodeName
    for key in (
        "ZBX_SERVER_HOST",
        "ZBX_SERVER_PORT",
        "ZBX_PASSIVE_ALLOW",
        "ZBX_PASSIVESERVERS",
        "ZBX_ACTIVE_ALLOW",
        "ZBX_ACTIVESERVERS",
        "ZBX_DEBUGLEVEL",
        "ZBX_TIMEOUT",
        "ZBX_LOADMODULE",
    ):
        env[key] = _helm_quote(values.get(key))
    for item in values.get("extraEnv", []):
        env[item["name"]] = item["value"]
    return env


def _update_config_var(lines: list[str], name: str, value: str, multiple: bool = False) -> list[str]:
    """`update_config_var` of the image's entrypoint, line for line."""
    if value == "":
        return [line for line in lines if not line.startswith(f"{name}=")]
    if value == '""':
        return [f"{name}=" if line.startswith(f"{name}=") else line for line in lines]
    if re.fullmatch(r"TLS.*File", name) and not value.startswith("/"):
        value = f"/var/lib/zabbix/enc/{value}"
    value = value.replace("\n", "")
    if any(line.startswith(f"{name}=") for line in lines) and not multiple:
        return [f"{name}={value}" if line.startswith(f"{name}=") else line for line in lines]
    if sum(line.startswith(f"# {name}=") for line in lines) > 1:
        out = []
        for line in lines:
            if re.fullmatch(rf"[#;] {re.escape(name)}=", line):
                out.append(f"{name}={value}")
            out.append(line)
        return out
    if any(re.match(rf"[#;] {re.escape(name)}=", line) for line in lines):
        out = []
        for line in lines:
            out.append(line)
            if re.match(rf"[#;] {re.escape(name)}=", line):
                out.append(f"{name}={value}")
        return out
    return [*lines, f"{name}={value}"]


def entrypoint_config(base: str, env: Mapping[str, str]) -> str:
    """`prepare_zbx_agent_config` of the image's entrypoint applied to `base` (the image's
    zabbix_agent2.conf) with the container's environment. TLS*File values given as file paths only
    (the `ZBX_TLSPSK`-style inline secrets are not used by the platform)."""
    e = {k: v for k, v in env.items()}
    server_host = e.get("ZBX_SERVER_HOST") or "zabbix-server"
    server_port = e.get("ZBX_SERVER_PORT") or "10051"
    passive = e.get("ZBX_PASSIVESERVERS", "")
    active = e.get("ZBX_ACTIVESERVERS", "")
    passive_servers = server_host + ("," + passive if passive else "")
    active_servers = f"{server_host}:{server_port}" + ("," + active if active else "")
    lines = base.splitlines()

    def upd(name: str, value: str = "", multiple: bool = False) -> None:
        nonlocal lines
        lines = _update_config_var(lines, name, value, multiple)

    def allowed(flag: str) -> bool:
        return (e.get(flag) or "true").lower() == "true"

    upd("PidFile")
    upd("LogType", "console")
    upd("LogFile")
    upd("LogFileSize")
    upd("DebugLevel", e.get("ZBX_DEBUGLEVEL", ""))
    upd("SourceIP")
    # ZBX_PASSIVE_ALLOW / ZBX_ACTIVE_ALLOW other than "true" (default): the server list is removed.
    upd("Server", passive_servers if allowed("ZBX_PASSIVE_ALLOW") else "")
    upd("ListenPort", e.get("ZBX_LISTENPORT", ""))
    upd("ListenIP", e.get("ZBX_LISTENIP", ""))
    upd("ServerActive", active_servers if allowed("ZBX_ACTIVE_ALLOW") else "")
    upd("HeartbeatFrequency", e.get("ZBX_HEARTBEAT_FREQUENCY", ""))
    upd("ForceActiveChecksOnStart", e.get("ZBX_FORCEACTIVECHECKSONSTART", ""))
    upd("EnablePersistentBuffer", "1" if e.get("ZBX_ENABLEPERSISTENTBUFFER", "").lower() == "true" else "0")
    for name, var in (
        ("HostInterface", "ZBX_HOSTINTERFACE"),
        ("HostInterfaceItem", "ZBX_HOSTINTERFACEITEM"),
        ("Hostname", "ZBX_HOSTNAME"),
        ("HostnameItem", "ZBX_HOSTNAMEITEM"),
        ("HostMetadata", "ZBX_METADATA"),
        ("HostMetadataItem", "ZBX_METADATAITEM"),
        ("RefreshActiveChecks", "ZBX_REFRESHACTIVECHECKS"),
        ("BufferSend", "ZBX_BUFFERSEND"),
        ("BufferSize", "ZBX_BUFFERSIZE"),
        ("Timeout", "ZBX_TIMEOUT"),
    ):
        upd(name, e.get(var, ""))
    upd("Include", "/etc/zabbix/zabbix_agent2.d/plugins.d/*.conf")
    upd("Include", "/etc/zabbix/zabbix_agentd.d/*.conf", multiple=True)
    upd("UnsafeUserParameters", e.get("ZBX_UNSAFEUSERPARAMETERS", ""))
    upd("TLSConnect", e.get("ZBX_TLSCONNECT", ""))
    upd("TLSAccept", e.get("ZBX_TLSACCEPT", ""))
    upd("TLSCAFile", e.get("ZBX_TLSCAFILE", ""))
    upd("TLSCRLFile", e.get("ZBX_TLSCRLFILE", ""))
    upd("TLSServerCertIssuer", e.get("ZBX_TLSSERVERCERTISSUER", ""))
    upd("TLSServerCertSubject", e.get("ZBX_TLSSERVERCERTSUBJECT", ""))
    upd("TLSCertFile", e.get("ZBX_TLSCERTFILE", ""))
    upd("TLSKeyFile", e.get("ZBX_TLSKEYFILE", ""))
    upd("TLSPSKIdentity", e.get("ZBX_TLSPSKIDENTITY", ""))
    upd("TLSPSKFile", e.get("ZBX_TLSPSKFILE", ""))
    return "\n".join(lines) + "\n"


def config_values(config: str, name: str) -> list[str]:
    return [line.split("=", 1)[1] for line in config.splitlines() if line.startswith(f"{name}=")]


@dataclass(frozen=True)
class File:
    """A file in the agent's root: content, owner, group, mode."""

    content: str
    uid: int = 0
    gid: int = 0
    mode: int = 0o644


def secret_file(content: str, default_mode: Optional[int], fs_group: Optional[int]) -> File:
    """A key of a Secret volume as the kubelet writes it (defaultMode unset = 0644)."""
    mode = 0o644 if default_mode is None else default_mode
    if fs_group is None:
        return File(content, 0, 0, mode)
    return File(content, 0, fs_group, mode | 0o440)


# ------------------------------------------------------------------------------------------ running
_libc = ctypes.CDLL(None, use_errno=True)


def _in_netns(netns: str, work):
    """Runs `work()` in a thread that has joined the network namespace `netns` (setns affects the
    calling thread only); sockets it creates stay in that namespace."""
    box: dict[str, Any] = {}

    def run() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(netns, os.O_RDONLY)
        try:
            if _libc.setns(target, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns")
            try:
                box["value"] = work()
            except Exception as exc:  # noqa: BLE001 (re-raised in the caller)
                box["error"] = exc
            finally:
                _libc.setns(own, _CLONE_NEWNET)
        finally:
            os.close(own)
            os.close(target)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def _forward(listener: socket.socket, target: tuple[str, int]) -> None:
    """Accepts in the agent's namespace, connects in ours."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        try:
            upstream = socket.create_connection(target, timeout=10)
        except OSError:
            conn.close()
            continue
        for a, b in ((conn, upstream), (upstream, conn)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()


@dataclass
class Agent2:
    root: Path
    process: subprocess.Popen
    log_path: Path
    _listeners: list[socket.socket] = field(default_factory=list)

    @property
    def netns(self) -> str:
        return f"/proc/{self.process.pid}/ns/net"

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def accepts(self, port: int) -> bool:
        """What a tcpSocket probe checks: a TCP connection to the port opens."""

        def probe() -> bool:
            with socket.socket() as sock:
                sock.settimeout(3)
                return sock.connect_ex(("127.0.0.1", port)) == 0

        return _in_netns(self.netns, probe)

    def forward(self, address: str, port: int, target: tuple[str, int]) -> None:
        """`address`:`port` in the agent's namespace -> `target` in the test's."""
        listener = _in_netns(self.netns, lambda: socket.create_server((address, port)))
        self._listeners.append(listener)
        threading.Thread(target=_forward, args=(listener, target), daemon=True).start()

    def stop(self) -> None:
        for listener in self._listeners:
            listener.close()
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


@contextmanager
def run_agent2(
    config: str,
    files: Mapping[str, File] = {},  # noqa: B006 (read-only)
    *,
    uid: int = IMAGE_UID,
    gid: int = IMAGE_GID,
    groups: tuple[int, ...] = IMAGE_GROUPS,
    hosts: Mapping[str, str] = {},  # noqa: B006 (read-only)
    forwards: Mapping[tuple[str, int], tuple[str, int]] = {},  # noqa: B006 (read-only)
    writable_dirs: tuple[str, ...] = ("/run/zabbix",),
    settle_seconds: float = 3.0,
    addresses: tuple[str, ...] = (),
) -> Iterator[Agent2]:
    """Runs `zabbix_agent2 -f -c /etc/zabbix/zabbix_agent2.conf` with `config` as that file, the
    given extra files, /etc/hosts with `hosts` (name -> address), as uid:gid with `groups`, in a
    network namespace of its own where `forwards` ((address, port) there -> (address, port) here)
    lead out and where `addresses` are local too; `writable_dirs` belong to uid:gid (what the image
    or the package's postinst does). Yields after `settle_seconds` (the agent may already have
    exited: check `alive()`)."""
    cached = agent2_root()
    base = STATE / "agent2" / "runs"
    base.mkdir(parents=True, exist_ok=True)
    root = base / uuid.uuid4().hex[:12]
    # Hard links share the cache's inodes: every file written below is removed first, never changed.
    if subprocess.run(["cp", "-al", str(cached), str(root)], capture_output=True).returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        subprocess.run(["cp", "-a", str(cached), str(root)], check=True)
    for directory in writable_dirs:
        path = root / directory.lstrip("/")
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, uid, gid)
    dev_null = root / "dev" / "null"  # the container's /dev (agent 2 runs commands with stdin from it)
    dev_null.parent.mkdir(exist_ok=True)
    if not dev_null.exists():
        os.mknod(dev_null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        os.chmod(dev_null, 0o666)
    etc_hosts = "127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in hosts.items())
    all_files = {CONFIG: File(config), "/etc/hosts": File(etc_hosts), **files}
    for path, spec in all_files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        target.write_text(spec.content)
        os.chown(target, spec.uid, spec.gid)
        os.chmod(target, spec.mode)
    log_path = base / f"{root.name}.log"
    local = sorted({a for a, _ in forwards if not a.startswith("127.")} | set(addresses))
    script = (
        'ip link set lo up && for a in $5; do ip addr add "$a/32" dev lo; done && '
        'exec chroot --userspec="$1" --groups="$2" "$3" /usr/sbin/zabbix_agent2 -f -c "$4"'
    )
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                "unshare",
                "--net",
                "--",
                "sh",
                "-c",
                script,
                "agent2",
                f"{uid}:{gid}",
                ",".join(str(g) for g in groups),
                str(root),
                CONFIG,
                " ".join(local),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    agent = Agent2(root, process, log_path)
    try:
        own = os.stat("/proc/self/ns/net").st_ino
        deadline = time.monotonic() + 10
        for (address, port), target in forwards.items():
            while agent.alive():  # until unshare has run and `ip` has brought loopback up
                try:
                    if os.stat(agent.netns).st_ino != own:
                        agent.forward(address, port, target)
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the agent's network namespace did not come up")
                time.sleep(0.05)
        time.sleep(settle_seconds)
        yield agent
    finally:
        agent.stop()
        shutil.rmtree(root, ignore_errors=True)
