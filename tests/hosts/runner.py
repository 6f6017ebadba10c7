"""Sends the plan's host steps the way pulumi-command does: one SSH connection per step (through the
bastion, with the host keys the stack pins), an exec of the step's command string without a terminal,
its stdin written and then closed, the exit status and the output captured. Steps start in the plan's
dependency order, at most PARALLEL at once.

The client is the real OpenSSH client with ProxyJump (what operators use); pulumi-command uses Go's
x/crypto/ssh, which sends the same exec request with the command string unchanged.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Optional

import yaml

from tests.hosts.machines import USER

ROOT = Path(__file__).resolve().parents[2]

# The steps this harness runs, by kind (the resource name after its host's name, or after its component's
# for the init server's cluster steps; `scripts` is the host's copy of the host-script bundle, a
# CopyToRemote; `minio` and `zabbix-agent2` are the NAS host's, tests/hosts/nas.py); a membership step has
# no command at create, only its delete.
RUN = (
    "scripts",
    "prepare",
    "nvme",
    "infiniband",
    "ceph-disks",
    "rke2",
    "ca-hash",
    "kubeconfig",
    "membership",
    "node-versions",
    "minio",
    "zabbix-agent2",
)
PARALLEL = 4

# Kill the processes a step started on its host, as a host that loses the step's session mid-way would
# leave it: every process under every `sshd: USER@notty` session but the one running this. The tree is
# frozen before it is killed (SIGSTOP, then listed again until no new process appears: a process forked
# between a listing and the signal would otherwise escape, orphaned, and go on working, such as the dpkg
# of an apt-get the cut killed); then every frozen process is killed.
KILL_STEP = r"""
me=$$ ancestors=" "
p=$me
while [ "$p" -gt 1 ]; do ancestors="$ancestors$p "; p=$(awk '/^PPid/ {print $2}' /proc/$p/status); done
tree() { echo "$1"; for c in $(pgrep -P "$1"); do tree "$c"; done; }
roots=""
for s in $(pgrep -f "^sshd: USER@notty"); do
  case $ancestors in *" $s "*) continue ;; esac
  roots="$roots $(pgrep -P "$s")"
done
pids=" "
for round in 1 2 3 4 5 6 7 8 9 10; do
  new=""
  for r in $roots; do
    for p in $(tree "$r"); do case $pids in *" $p "*) ;; *) new="$new $p" ;; esac; done
  done
  [ -n "$new" ] || break
  kill -STOP $new 2>/dev/null
  pids="$pids${new# } "
done
[ -z "${pids// /}" ] || kill -KILL $pids 2>/dev/null
echo "killed:$pids"
""".replace("USER", USER)


@dataclass
class Step:
    name: str
    urn: str
    node: str
    address: str
    kind: str
    create: Optional[str]
    delete: Optional[str]
    dependencies: list[str]
    secret_stdin: bool = False
    subject: str = ""
    copy: Optional[tuple[str, str]] = None
    """A CopyToRemote: (local source file, remote path relative to the SSH user's home)."""


@dataclass
class Result:
    step: str
    host: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    killed_at: Optional[float] = None

    @property
    def changes(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.startswith("changed: ")]


def steps(plan: dict, config_file: Path, revealed: dict[str, dict]) -> tuple[list[Step], list[str]]:
    """The host steps of `plan` (the plan JSON) that this harness runs, and the names of those it does
    not. The host of a step is in its connection, which the JSON masks as secret: it is read from the same
    evaluation with secrets revealed (`revealed`), whose commands must equal the JSON's."""
    config = yaml.safe_load(config_file.read_text())["config"]
    names = {n["address"]: n["name"] for n in config["ml-platform:nodes"]}
    names.update({h["address"]: h["name"] for h in config["ml-platform:nas"]["hosts"]})
    chosen, skipped = [], []
    for resource in plan["resources"]:
        if resource["type"] not in ("command:remote:Command", "command:remote:CopyToRemote"):
            continue
        name, inputs = resource["name"], resource["inputs"]
        secret = revealed[name]
        assert (secret.get("create"), secret.get("delete")) == (inputs.get("create"), inputs.get("delete")), name
        copy = None
        if resource["type"] == "command:remote:CopyToRemote":
            source = Path(inputs["source"]["asset"])  # a FileAsset: relative to the project, as `pulumi` runs
            copy = (str(source if source.is_absolute() else ROOT / source), inputs["remotePath"])
        address = secret["connection"]["host"]
        node = names[address]
        # The node a step is about (a membership's delete runs on the init server, about its own node).
        subject = max((n for n in names.values() if name.startswith(f"{n}-")), key=len, default=node)
        kind = name[len(subject) + 1 :] if name.startswith(f"{subject}-") else name.split("-", 1)[1]
        if kind not in RUN:
            skipped.append(name)
            continue
        chosen.append(
            Step(
                name,
                resource["urn"],
                node,
                address,
                kind,
                inputs.get("create"),
                inputs.get("delete"),
                resource["dependencies"],
                secret_stdin=inputs.get("stdin") is not None,
                subject=subject,
                copy=copy,
            )
        )
    return chosen, sorted(skipped)


class Ssh:
    """OpenSSH client configuration: the stack's user, the bastion as ProxyJump, pinned host keys only."""

    def __init__(self, directory: Path, key: Path, config_file: Path, extra: tuple[tuple[str, str], ...] = ()) -> None:
        """`extra`: (address, host key) of machines outside the stack (the twins), pinned the same way."""
        config = yaml.safe_load(config_file.read_text())["config"]
        ssh = config["ml-platform:ssh"]
        pinned = [(ssh["bastion"]["host"], ssh["bastion"]["hostKey"])]
        pinned += [(n["address"], n["hostKey"]) for n in config["ml-platform:nodes"]]
        pinned += [(h["address"], h["hostKey"]) for h in config["ml-platform:nas"]["hosts"]]
        pinned += list(extra)
        known = directory / "known_hosts"
        known.write_text("".join(f"{address} {host_key}\n" for address, host_key in pinned))
        self.config = directory / "ssh_config"
        self.logs = directory / "ssh-logs"
        self.logs.mkdir(exist_ok=True)
        self._serial = itertools.count()
        self.lost: list[str] = []
        self.dial_limit = int(ssh.get("dialErrorLimit", 10))
        self.dial_failures: list[str] = []
        dial = int(ssh.get("perDialTimeoutSeconds", 15))
        common = (
            f"  User {ssh['user']}\n  IdentityFile {key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {known}\n"
            "  StrictHostKeyChecking yes\n  BatchMode yes\n"
            # A host that dies without closing the connection (a power cut) ends it within a minute: OpenSSH's
            # keepalives go end to end, through the ProxyJump, to the host itself.
            "  ServerAliveInterval 15\n  ServerAliveCountMax 4\n"
            "  LogLevel ERROR\n"
            "  ControlMaster no\n  ControlPath none\n"
        )
        bastion = ssh["bastion"]
        self.config.write_text(
            f"Host {bastion['host']}\n  Port {bastion['port']}\n  ProxyJump none\n  ConnectTimeout {dial}\n{common}"
            # pulumi-command gives each hop its own dial timeout; OpenSSH's ConnectTimeout for a host behind
            # ProxyJump runs from before the bastion's handshake to the host's banner: both hops' time.
            f"Host *\n  Port {ssh['port']}\n  ProxyJump {bastion['user']}@{bastion['host']}:{bastion['port']}\n"
            f"  ConnectTimeout {2 * dial}\n{common}"
        )

    def argv(self, address: str, command: str, direct: bool = False) -> list[str]:
        extra = ["-o", "ProxyJump=none"] if direct else []
        # One argument after the host: ssh sends it as the exec request's command string, unchanged.
        return ["ssh", "-F", str(self.config), "-T", *extra, address, command]

    def run(
        self,
        address: str,
        command: str,
        stdin: Optional[str] = None,
        kill_after: Optional[float] = None,
        timeout: float = 600,
    ) -> tuple[int, str, str, float, Optional[float]]:
        """Exec `command` on `address`; with `kill_after`, cut the step at that second: its processes on
        the host are killed (KILL_STEP, over a second connection), then its connection.

        A dial that fails before authentication is dialled again, up to `ssh.dialErrorLimit` times, as
        pulumi-command does (`dial_failures`). A connection that ends without the command's exit status
        (ssh's 255) after it authenticated, and was not cut, is run once more, as an operator re-runs
        `pulumi up` after a lost connection (every step is safe to re-run: the interruption test shows it);
        each such loss is recorded in `lost`. The tests print both."""
        result, authenticated = self._dial(address, command, stdin, kill_after, timeout)
        if result[0] == 255 and authenticated and kill_after is None:
            lost = f"{address}: {command[:60]!r}... ended without an exit status, run again: {result[2][-400:]}"
            self.lost.append(lost)
            result, _ = self._dial(address, command, stdin, kill_after, timeout)
        return result

    def _dial(
        self, address: str, command: str, stdin: Optional[str], kill_after: Optional[float], timeout: float
    ) -> tuple[tuple[int, str, str, float, Optional[float]], bool]:
        for attempt in range(1, self.dial_limit + 1):
            result, authenticated = self._run(address, command, stdin, kill_after, timeout)
            if result[0] != 255 or authenticated or attempt == self.dial_limit:
                return result, authenticated
            self.dial_failures.append(f"{address}: dial {attempt}: {result[2].strip().splitlines()[-1:]}")
            time.sleep(1)
        raise AssertionError("unreachable")

    def _run(
        self, address: str, command: str, stdin: Optional[str], kill_after: Optional[float], timeout: float
    ) -> tuple[tuple[int, str, str, float, Optional[float]], bool]:
        start = time.monotonic()
        # The client's own messages (VERBOSE) go to a log of this connection, not to the step's stderr;
        # a connection that ends without the command's exit status (ssh's 255) gets the log's end.
        log = self.logs / f"{address}-{next(self._serial)}.log"
        argv = self.argv(address, command)
        proc = subprocess.Popen(
            [argv[0], "-o", "LogLevel=VERBOSE", "-E", str(log), *argv[1:]],
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        killed_at = None
        if kill_after is not None:
            timer = threading.Timer(kill_after, self._cut, (address, proc))
            timer.start()
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        finally:
            if kill_after is not None:
                timer.cancel()
                # A cut under way ends before the next step starts: its kill, still listing the sessions
                # when this connection closed, would otherwise kill the next step's processes too.
                timer.join()
                killed_at = kill_after if getattr(proc, "cut", False) else None
        text = log.read_text(errors="replace") if log.is_file() else ""
        if proc.returncode == 255:
            err += "\n[ssh client log]\n" + "\n".join(text.splitlines()[-15:])
        authenticated = f"Authenticated to {address} " in text
        return (proc.returncode, out, err, time.monotonic() - start, killed_at), authenticated

    def write(self, address: str, remote_path: str, data: bytes) -> tuple[int, str]:
        """`data` written to `remote_path` (its directory made), as the part of a copy that an interrupted
        session leaves. A connection that ends without the command's exit status (ssh's 255: a failed
        dial, or a connection lost on a busy machine) writes again, up to `ssh.dialErrorLimit` times: the
        write replaces the whole file, so a retry leaves what one write does."""
        parent = shlex.quote(str(PurePosixPath(remote_path).parent))
        command = f"mkdir -p {parent} && cat > {shlex.quote(remote_path)}"
        for attempt in range(1, self.dial_limit + 1):
            log = self.logs / f"{address}-{next(self._serial)}.log"
            argv = self.argv(address, command)
            proc = subprocess.run(
                [argv[0], "-o", "LogLevel=VERBOSE", "-E", str(log), *argv[1:]], input=data, capture_output=True
            )
            err = proc.stderr.decode(errors="replace")
            if proc.returncode != 255 or attempt == self.dial_limit:
                break
            tail = log.read_text(errors="replace").splitlines()[-3:] if log.is_file() else []
            self.dial_failures.append(f"{address}: write {remote_path}, attempt {attempt}: {tail}")
            time.sleep(1)
        if proc.returncode == 255 and log.is_file():
            err += "\n[ssh client log]\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        return proc.returncode, err

    def copy(self, address: str, source: str, remote_path: str) -> tuple[int, str, str, float, None]:
        """A CopyToRemote as pulumi-command v1.2.1 does it over SFTP (provider/pkg/provider/remote/
        copyController.go, `sftpCopy`): the remote path's parent directories made (MkdirAll), then the file
        created or truncated and written. The real OpenSSH sftp client, through the bastion."""
        parents = [str(p) for p in reversed(PurePosixPath(remote_path).parents) if str(p) not in (".", "/")]
        batch = "".join(f"-mkdir {p}\n" for p in parents) + f"put {source} {remote_path}\n"
        start = time.monotonic()
        for attempt in range(1, self.dial_limit + 1):
            # The client's messages at VERBOSE: a copy that fails says how its connection ended.
            proc = subprocess.run(
                ["sftp", "-F", str(self.config), "-o", "LogLevel=VERBOSE", "-b", "-", address],
                input=batch,
                capture_output=True,
                text=True,
            )
            # sftp echoes each batch command once connected: none echoed is a failed dial, dialled again.
            if proc.returncode == 0 or "sftp>" in proc.stdout or attempt == self.dial_limit:
                break
            self.dial_failures.append(f"{address}: dial {attempt} (sftp): {proc.stderr.strip().splitlines()[-1:]}")
            time.sleep(1)
        return proc.returncode, proc.stdout, proc.stderr if proc.returncode else "", time.monotonic() - start, None

    def run_cut_when(
        self, address: str, command: str, stdin: Optional[str], condition: str, freeze: str, wait: float = 120
    ) -> tuple[int, str, str, bool]:
        """Exec `command` on `address`, cut at a moment of its work rather than a second: a watcher on the
        host tests the shell `condition` every few milliseconds; when it holds it freezes what `freeze`
        names (`pkill -STOP ...`, at once), then kills the step as a cut does (KILL_STEP). Returns the step's
        exit status, output, errors and whether the watcher saw the condition (no lost-connection re-run)."""
        polls = int(wait / 0.005)
        watcher = subprocess.Popen(
            self.argv(address, "sudo -n bash -s"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        watcher.stdin.write(
            f"echo watching\nfor i in $(seq {polls}); do if {condition}; then {freeze}; echo seen\n"
            f"{KILL_STEP}\nexit 0; fi; sleep 0.005; done\necho unseen\n"
        )
        watcher.stdin.close()
        assert watcher.stdout.readline().strip() == "watching", watcher.stderr.read()
        (rc, out, err, _, _), _ = self._dial(address, command, stdin, None, wait + 60)
        told = watcher.stdout.read()
        watcher.wait(timeout=wait + 60)
        return rc, out, err, "seen" in told.split()

    def _cut(self, address: str, proc: subprocess.Popen) -> None:
        if proc.poll() is not None:
            return
        proc.cut = True  # type: ignore[attr-defined]
        subprocess.run(
            self.argv(address, "sudo -n bash -s"), input=KILL_STEP, capture_output=True, text=True, timeout=60
        )
        proc.kill()

    def sudo(self, address: str, script: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """A harness command (not a plan step) as root on `address`: the fingerprint, drift changes."""
        return subprocess.run(
            self.argv(address, "sudo -n bash -s"), input=script, capture_output=True, text=True, timeout=timeout
        )


@dataclass
class Run:
    results: dict[str, Result] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    def failed(self) -> list[Result]:
        return [r for r in self.results.values() if r.returncode != 0]


def run_steps(
    ssh: Ssh,
    chosen: list[Step],
    action: str = "create",
    parallel: int = PARALLEL,
    address_of: Optional[dict] = None,
    stdin_of: Optional[Callable[[Step, dict[str, Result]], str]] = None,
) -> Run:
    """Run each step's `create` (or `delete`, in reverse dependency order) once its dependencies within
    `chosen` succeeded, at most `parallel` at once. `address_of`: node -> another address (a twin)."""
    by_urn = {s.urn: s for s in chosen}
    deps = {s.urn: {d for d in s.dependencies if d in by_urn} for s in chosen}
    if action == "delete":  # dependents first
        deps = {s.urn: {t.urn for t in chosen if t.delete and s.urn in deps[t.urn]} for s in chosen}
    run = Run()
    done: set[str] = set()
    running: dict[concurrent.futures.Future, Step] = {}
    pending = [s for s in chosen if getattr(s, action) or (s.copy and action == "create")]
    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        while pending or running:
            ready = [s for s in pending if deps[s.urn] <= done]
            for step in ready[: max(0, parallel - len(running))]:
                pending.remove(step)
                address = (address_of or {}).get(step.node, step.address)
                # A secret stdin is known once what it is made of is (a join token pins the CA hash
                # that an earlier step read): as the engine resolves it when the step starts.
                stdin = stdin_of(step, run.results) if step.secret_stdin and action == "create" and stdin_of else None
                if step.copy:
                    running[pool.submit(ssh.copy, address, *step.copy)] = step
                else:
                    running[pool.submit(ssh.run, address, getattr(step, action), stdin)] = step
                run.order.append(step.name)
            if not running:
                break  # what is left waits for a failed step
            finished, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                step = running.pop(future)
                rc, out, err, seconds, _ = future.result()
                run.results[step.name] = Result(step.name, step.node, rc, out, err, seconds)
                if rc == 0:
                    done.add(step.urn)
        for step in pending:
            run.results[step.name] = Result(step.name, step.node, -1, "", "not run: a dependency failed", 0.0)
    return run
