"""Debian 12 machines booted with systemd-nspawn (systemd as PID 1, sshd, a sudo user), each in its own
network namespace on one test bridge, plus a bastion; the relay that lets apt reach the Debian mirror.

Everything lives under names that start with `mlph` and the scope of the state directory (bridge, namespaces,
host-side veths, cgroups) and files under STATE; `cleanup()` removes what a killed earlier run of the same
state directory left behind and `Lab.stop()` what this run started: processes only when their pid file proves
they are the ones it started (start time and command line), nothing of another state directory.
The machines talk only to the bridge's /24: the test machine's address on it (relay, artifact server)
and each other.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tests.hosts import rootfs, standins
from tests.hosts.artifacts import ArtifactServer

STATE = Path(os.environ.get("MLP_HOSTS_STATE", "/var/tmp/ml-platform-hosts"))
# Every name this run makes on the test machine (network namespaces, veths, the bridge, cgroups) carries a
# scope derived from its state directory: two runs with different state directories (and subnets,
# MLP_HOSTS_SUBNET) never meet, and cleanup() removes only what a run of this state directory made.
SCOPE = hashlib.sha256(str(STATE.resolve()).encode()).hexdigest()[:4]
PREFIX = f"mlph{SCOPE}"  # at most 15 characters with the suffixes below: a network interface's limit
BRIDGE = f"{PREFIX}br0"
SUBNET = ipaddress.ip_network(os.environ.get("MLP_HOSTS_SUBNET", "10.251.73.0/24"))
GATEWAY = str(SUBNET[1])  # the test machine: relay to the mirror, artifact server
BASTION_ADDRESS = str(SUBNET[5])
HOSTNAME_PREFIX = "mlph"  # the machines' own host names (inside them: nothing to scope)
USER = "mlops"
MIRROR_HOSTS = ("deb.debian.org",)


def sh(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return proc


@dataclass
class Machine:
    name: str  # the machine (and network namespace) name; the node name is the stack's
    address: str
    disks: dict[str, str] = field(default_factory=dict)  # by-id name -> loop device
    host_key: str = ""  # "ssh-ed25519 AAAA..." as ssh-keyscan prints it
    pid: Optional[int] = None

    @property
    def root(self) -> Path:
        return STATE / "machines" / self.name

    @property
    def netns(self) -> str:
        return f"{PREFIX}-{self.name}"


class Lab:
    """The machines of one test run: `start()` boots them, `stop()` removes everything it made."""

    def __init__(self, names: list[str], disks: Optional[dict[str, list[str]]] = None, rke2_version: str = "") -> None:
        self.bastion = Machine("bastion", BASTION_ADDRESS)
        self.machines = {n: Machine(n, str(SUBNET[11 + i])) for i, n in enumerate(names)}
        self.wanted_disks = disks or {}
        self.key = STATE / "id_ed25519"
        self.relay: Optional[subprocess.Popen] = None
        self.loops: list[str] = []
        self.artifacts = ArtifactServer(STATE / "artifacts", GATEWAY, rke2_version)

    def all(self) -> list[Machine]:
        return [self.bastion, *self.machines.values()]

    def start(self) -> None:
        cleanup()
        (STATE / "machines").mkdir(parents=True, exist_ok=True)
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ml-platform-hosts", "-f", str(self.key))
        base = STATE / "base"  # the root file system unpacked once; each machine is an overlay on it
        base.mkdir()
        sh("tar", "--numeric-owner", "-xf", str(rootfs.tarball()), "-C", str(base))
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{GATEWAY}/{SUBNET.prefixlen}", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
        self._start_relay()
        self.artifacts.start(base)
        # The machines trust the artifact server's CA, as a site's hosts trust its internal mirror.
        shutil.copy(self.artifacts.ca, base / "usr/local/share/ca-certificates/ml-platform-hosts.crt")
        sh("chroot", str(base), "update-ca-certificates")
        for index, machine in enumerate(self.all()):
            self._prepare(machine, base, index)
        for machine in self.all():
            self._boot(machine)
        for machine in self.all():
            wait_for_port(machine.address, 22, 90)
            # Each machine's systemd in a tree of its own, no other machine's (machine_cgroups).
            init = sh("pgrep", "-P", str(machine.pid)).stdout.split()[0]
            groups = {line.split(":", 2)[2] for line in Path(f"/proc/{init}/cgroup").read_text().splitlines()}
            payload = {g for g in groups if g.endswith("/payload/init.scope")}
            own = {g for g in payload if g.startswith(f"/{PREFIX}-{machine.name}/")}
            assert payload and own == payload, f"{machine.name}'s systemd is not in a cgroup of its own: {groups}"

    def _start_relay(self) -> None:
        """apt on the machines reaches the mirror through this relay (the mirror's name maps to GATEWAY)."""
        log = open(STATE / "relay.log", "w")  # noqa: SIM115 (the relay writes to it until the end)
        self.relay = subprocess.Popen(
            ["socat", f"TCP-LISTEN:80,bind={GATEWAY},fork,reuseaddr", f"TCP:{MIRROR_HOSTS[0]}:80"],
            stdout=log,
            stderr=log,
        )
        record_pid(STATE / "relay.pid", self.relay.pid)
        wait_for_port(GATEWAY, 80, 10)
        self.check_relay()  # listening, and the relay's own (not a process left on the address)

    def check_relay(self) -> None:
        """The relay to the Debian mirror still runs: a relay that died fails the run naming it (and its log),
        rather than a later step that needs an uncached package."""
        if self.relay is not None and self.relay.poll() is not None:
            log = (STATE / "relay.log").read_text(errors="replace")[-600:] if (STATE / "relay.log").is_file() else ""
            raise RuntimeError(
                f"the relay to the Debian mirror (socat, pid {self.relay.pid}) ended with {self.relay.returncode}: "
                f"{log or 'no output'}"
            )

    def _prepare(self, machine: Machine, base: Path, index: int) -> None:
        root = machine.root
        layer = STATE / "layers" / machine.name
        for path in (root, layer / "upper", layer / "work"):
            path.mkdir(parents=True)
        options = f"lowerdir={base},upperdir={layer / 'upper'},workdir={layer / 'work'}"
        sh("mount", "-t", "overlay", "overlay", "-o", options, str(root))
        key = root / "etc/ssh/ssh_host_ed25519_key"
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{machine.name}", "-f", str(key))
        machine.host_key = " ".join(key.with_suffix(".pub").read_text().split()[:2])
        sh("chroot", str(root), "useradd", "--create-home", "--shell", "/bin/bash", USER)
        (root / f"etc/sudoers.d/{USER}").write_text(f"{USER} ALL=(ALL) NOPASSWD:ALL\n")
        os.chmod(root / f"etc/sudoers.d/{USER}", 0o440)
        ssh_dir = root / "home" / USER / ".ssh"
        ssh_dir.mkdir(mode=0o700)
        (ssh_dir / "authorized_keys").write_text(self.key.with_suffix(".pub").read_text())
        uid = int(sh("chroot", str(root), "id", "-u", USER).stdout)
        for path in (ssh_dir, ssh_dir / "authorized_keys"):
            os.chown(path, uid, uid)
        # As the Debian installer leaves a host: its name in /etc/hostname and /etc/hosts.
        (root / "etc/hostname").write_text(f"{HOSTNAME_PREFIX}-{machine.name}\n")
        (root / "etc/hosts").write_text(
            f"127.0.0.1 localhost\n127.0.1.1 {HOSTNAME_PREFIX}-{machine.name}\n{GATEWAY} {' '.join(MIRROR_HOSTS)}\n"
        )
        if machine is not self.bastion:
            standins.install(root, GATEWAY)
        # The network: a veth from the namespace to the bridge; the address is set before boot.
        sh("ip", "netns", "add", machine.netns)
        host_side = f"{PREFIX}v{index}"
        sh("ip", "link", "add", host_side, "type", "veth", "peer", "name", "eth0", "netns", machine.netns)
        sh("ip", "link", "set", host_side, "master", BRIDGE, "up")
        sh("ip", "-n", machine.netns, "addr", "add", f"{machine.address}/{SUBNET.prefixlen}", "dev", "eth0")
        sh("ip", "-n", machine.netns, "link", "set", "eth0", "up")
        sh("ip", "-n", machine.netns, "link", "set", "lo", "up")
        for disk in self.wanted_disks.get(machine.name, []):
            image = STATE / f"{machine.name}-{disk}.img"
            with open(image, "wb") as f:
                f.truncate(512 * 2**20)  # XFS needs 300 MB at least
            loop = sh("losetup", "--find", "--show", str(image)).stdout.strip()
            self.loops.append(loop)
            machine.disks[disk] = loop
        standins.link_disks(root, machine.disks)

    def _boot(self, machine: Machine) -> None:
        log = open(STATE / f"{machine.name}.console", "w")  # noqa: SIM115 (written until the machine stops)
        procs = [group / "cgroup.procs" for group in machine_cgroups(machine.name)]
        command = [
            "systemd-nspawn",
            "--quiet",
            "--boot",
            "--register=no",
            "--keep-unit",
            "--console=passive",
            f"--network-namespace-path=/run/netns/{machine.netns}",
            f"--machine={HOSTNAME_PREFIX}-{machine.name}",
            f"--directory={machine.root}",
            *[f"--bind={loop}" for loop in machine.disks.values()],
            *standins.nspawn_options(machine.root),
        ]
        # The shell moves itself into the machine's cgroups, then becomes systemd-nspawn (same pid).
        enter = f'echo $$ | tee {" ".join(shlex.quote(str(path)) for path in procs)} >/dev/null && exec "$@"'
        proc = subprocess.Popen(
            ["/bin/sh", "-c", enter, "sh", *command],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        machine.pid = proc.pid
        # Recorded once the shell has become systemd-nspawn (its command line is then nspawn's).
        deadline = time.monotonic() + 10
        while b"systemd-nspawn" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{machine.name}: systemd-nspawn did not start; see {log.name}")
            time.sleep(0.05)
        record_pid(STATE / f"{machine.name}.pid", proc.pid)

    def stop(self) -> None:
        self.artifacts.stop()
        cleanup()


def _cgroup_roots() -> list[Path]:
    """Where this process sits in the hierarchies a booted systemd manages: systemd's own (cgroup v1,
    name=systemd) and the unified one (cgroup v2), whichever are mounted."""
    mounts = {}
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, target, kind, options = line.split()[:4]
        if kind == "cgroup2":
            mounts.setdefault("", Path(target))
        elif kind == "cgroup" and "name=systemd" in options.split(","):
            mounts.setdefault("name=systemd", Path(target))
    roots = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers in mounts:
            roots.append(mounts[controllers] / path.lstrip("/"))
    return roots


def machine_cgroups(name: str) -> list[Path]:
    """A cgroup of the machine's own in each hierarchy its systemd manages, as each real host
    has its own tree. systemd-nspawn (--keep-unit) puts the machine's systemd in a `payload` cgroup below
    the one it starts in: machines started side by side in one cgroup would share one tree, each machine's
    systemd making, killing and removing its units' cgroups in the others' (a unit of one machine then
    fails at step CGROUP when another removed the cgroup it was just given)."""
    roots = _cgroup_roots()
    if not roots:
        raise RuntimeError(
            "no cgroup hierarchy for the machines' systemd (cgroup2, or cgroup v1 name=systemd) "
            "is mounted: mount cgroup2 on /sys/fs/cgroup"
        )
    groups = [root / f"{PREFIX}-{name}" for root in roots]
    for group in groups:
        group.mkdir()  # cleanup() at the start removed an earlier run's
    return groups


def _remove_cgroup(group: Path) -> None:
    """rmdir `group` and what is below it, deepest first (a cgroup goes once its processes have ended)."""
    if not group.is_dir():
        return
    deadline = time.monotonic() + 10
    while True:
        try:
            for child in sorted((c for c in group.rglob("*") if c.is_dir()), key=lambda c: len(c.parts), reverse=True):
                child.rmdir()
            group.rmdir()
            return
        except OSError:  # busy: a process of the machine has not ended yet
            if time.monotonic() > deadline:
                raise
            for procs in group.rglob("cgroup.procs"):
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.5)


def wait_for_port(address: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((address, port), timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{address}:{port} did not answer within {timeout:.0f} s") from None
            time.sleep(0.5)


def _identity(pid: int) -> Optional[str]:
    """A process's start time (clock ticks since boot, /proc/PID/stat field 22) and command line: what a pid
    names only while that process lives, never a later process given the same number."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    start = stat.rsplit(")", 1)[1].split()[19]
    return f"{start} {hashlib.sha256(cmdline).hexdigest()[:16]}"


def record_pid(pid_file: Path, pid: int) -> None:
    """`pid_file`: the pid of a process this harness started, with its start time and command line, so that
    `cleanup()` can prove it is still that process before it signals it."""
    identity = _identity(pid)
    if identity is None:
        raise RuntimeError(f"process {pid} ended before its pid file {pid_file} was written")
    pid_file.write_text(f"{pid} {identity}\n")


def started_here(pid_file: Path) -> Optional[int]:
    """The pid in `pid_file` when that process is still the one recorded there (start time and command line
    equal), else None: a pid file naming another process, or one without an identity, proves nothing."""
    try:
        pid_text, identity = pid_file.read_text().strip().split(" ", 1)
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    return pid if _identity(pid) == identity else None


def _stop_pid(pid_file: Path) -> None:
    """End the process this harness started (its pid in `pid_file`, proved by `started_here`): SIGTERM
    (nspawn then shuts the machine down), SIGKILL after 15 s. A pid file that proves nothing is removed and
    its process left alone."""
    pid = started_here(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file.unlink(missing_ok=True)
        return
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child (an earlier run's): poll until it is gone
            done = 0 if Path(f"/proc/{pid}").exists() else pid
        if done:
            break
        time.sleep(0.2)
    else:
        if started_here(pid_file) == pid:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    pid_file.unlink(missing_ok=True)


def cleanup() -> None:
    """Remove every machine, namespace, veth, loop device, the bridge and the relay that this harness
    (this run or a killed earlier one) started; nothing else is touched."""
    if STATE.is_dir():
        for pid_file in STATE.glob("*.pid"):
            _stop_pid(pid_file)
    for netns in sh("ip", "netns", "list").stdout.split("\n"):
        name = netns.split(" ")[0]
        if name.startswith(f"{PREFIX}-"):
            sh("ip", "netns", "delete", name, check=False)
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        sh("ip", "link", "delete", BRIDGE, check=False)
    # A host-side veth outlives its namespace's name while a process of a killed run still holds it.
    for link in Path("/sys/class/net").glob(f"{PREFIX}v*"):
        sh("ip", "link", "delete", link.name, check=False)
    if STATE.is_dir():
        for image in STATE.glob("*.img"):
            for line in sh("losetup", "-j", str(image)).stdout.splitlines():
                sh("losetup", "-d", line.split(":")[0], check=False)
        machines = STATE / "machines"
        if machines.is_dir():
            for root in machines.iterdir():
                mounts = [m.split()[1] for m in Path("/proc/mounts").read_text().splitlines()]
                for mount in sorted((m for m in mounts if m.startswith(str(root))), reverse=True):
                    sh("umount", "-l", mount, check=False)
        shutil.rmtree(STATE, ignore_errors=True)
    for root in _cgroup_roots():
        for group in root.glob(f"{PREFIX}-*"):
            _remove_cgroup(group)
