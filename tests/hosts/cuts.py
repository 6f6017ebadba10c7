"""The interruption cases of the host harness: a step's session cut at seeded points, then the step run to
its end; the host must end as an uninterrupted run leaves it (its fingerprint).

- `on_twin`: a twin machine receives its original node's steps unchanged (the host-script copy cut after
  the middle of the first step's program, then every step cut) and must end with the original's fingerprint;
- `after_undo`: a step whose host cannot have a twin (a NAS step names its own host) is cut on that host
  after an operator's undo gave it work to do again (a package removed, a binary deleted), and the host must
  end with its converged fingerprint.
"""

from __future__ import annotations

import random
import re
import shlex
import tarfile
from pathlib import Path

from tests.hosts import inventory, probe


def _points(rng: random.Random, duration: float, kill_points: int) -> list[float]:
    # Early points first: a step that ran to its end is mostly done on the next try, so a late point would
    # find it finished. The first point falls in the first third of the step's bring-up time.
    fractions = [rng.uniform(0.05, 0.3), *(rng.uniform(0.3, 0.95) for _ in range(kill_points - 1))]
    return [round(f * duration, 2) for f in fractions]


def _cut_and_finish(hosts, address: str, step, rng: random.Random, kill_points: int) -> tuple[list[str], str]:
    """`step` cut at seeded points on `address`, then run to its end. Returns the cases and, when the last
    run failed, its output."""
    cases = []
    duration = hosts.first.results[step.name].seconds
    for at in _points(rng, duration, kill_points):
        stdin = hosts.stdin_of(step, hosts.first.results) if step.secret_stdin else None
        rc, _, _, _, cut = hosts.ssh.run(address, step.create, stdin, kill_after=at)
        cases.append(
            f"{step.name} cut at {at:.2f} s of {duration:.1f}: " + ("cut" if cut else f"finished first, rc={rc}")
        )
    stdin = hosts.stdin_of(step, hosts.first.results) if step.secret_stdin else None
    rc, out, err, seconds, _ = hosts.ssh.run(address, step.create, stdin)
    cases.append(f"{step.name} re-run to the end: rc={rc} in {seconds:.1f} s")
    return cases, "" if rc == 0 else f"{step.name} failed after interruptions: rc={rc} {out[-800:]} {err[-1500:]}"


def on_twin(hosts, twin: str, seed: int, kill_points: int) -> tuple[list[str], list[str]]:
    """Every step of the twin's original node, sent unchanged to the twin, cut at seeded points, then
    re-run to the end. Returns the cases and the differences from the original's fingerprint."""
    original = inventory.TWINS[twin]
    address = hosts.lab.machines[twin].address
    rng = random.Random(f"{seed}-{twin}")
    cases = copy_on_twin(hosts, original, address)
    mine = [s for s in hosts.steps if s.node == original and s.create]
    for step in sorted(mine, key=lambda s: hosts.first.order.index(s.name)):
        more, failed = _cut_and_finish(hosts, address, step, rng, kill_points)
        cases += more
        if failed:
            return cases, [failed]
    return cases, probe.differences(hosts.converged[original], probe.fingerprint(hosts.ssh, address))


def copy_on_twin(hosts, original: str, address: str) -> list[str]:
    """The host-script copy cut short, as a dropped SFTP session leaves it: the bundle written up to the
    middle of the first step's program (a program wholly before the cut would be found and run, verified by
    its hash). The first step then stops naming its missing script, and the copy re-run makes the step work."""
    copy = next(s for s in hosts.steps if s.node == original and s.copy)
    source, remote_path = copy.copy
    data = Path(source).read_bytes()
    mine = [s for s in hosts.steps if s.node == original and s.create]
    first = min(mine, key=lambda s: hosts.first.order.index(s.name))
    program = re.search(r"\bh=([0-9a-f]{64})\b", first.create).group(1)
    with tarfile.open(source) as bundle:
        member = bundle.getmember(program)
    cut = member.offset_data + member.size // 2
    rc, err = hosts.ssh.write(address, remote_path, data[:cut])
    assert rc == 0, (rc, err[-600:])
    rc, _, err, _, _ = hosts.ssh.run(address, first.create)
    assert rc != 0 and "is not on this host" in err, (rc, err[-600:])
    rc, out, err, seconds, _ = hosts.ssh.copy(address, source, remote_path)
    assert rc == 0, (out, err)
    return [
        f"{copy.name} cut after {cut} of {len(data)} bytes (inside {first.name}'s program): {first.name} stops, "
        "naming the missing script",
        f"{copy.name} re-run to the end: rc={rc} in {seconds:.1f} s",
    ]


def undo_of(step) -> str:
    """What an operator does that gives a NAS step its work again: the agent's package removed (its
    configuration and user stay), MinIO's server stopped and its binary deleted (its drives and data stay)."""
    if step.kind == "zabbix-agent2":
        return "systemctl stop zabbix-agent2 && DEBIAN_FRONTEND=noninteractive apt-get remove -y -q zabbix-agent2"
    if step.kind == "minio":
        binary = re.search(r"\bBINARY=(\S+)", step.create).group(1)
        service = re.search(r"\bSERVICE=(\S+)", step.create).group(1)
        return f"systemctl stop {service} && rm -f /usr/local/bin/{binary}"
    raise ValueError(f"no undo for {step.kind}")


def after_undo(hosts, node: str, seed: int, kill_points: int) -> tuple[list[str], list[str]]:
    """Each step of `node` that `undo_of` knows, undone and then cut at seeded points on the node itself,
    then run to its end; the agent's step also cut while dpkg unpacks its package (`inside_unpack`): the
    node's fingerprint equals its converged one."""
    address = hosts.nodes()[node]
    rng = random.Random(f"{seed}-{node}")
    cases = []
    for step in (s for s in hosts.steps if s.node == node and s.kind in ("zabbix-agent2", "minio")):
        undone = hosts.ssh.sudo(address, undo_of(step))
        assert undone.returncode == 0, undone.stderr
        cases.append(f"{step.name} undone: {undo_of(step)}")
        more, failed = _cut_and_finish(hosts, address, step, rng, kill_points)
        cases += more
        if not failed and step.kind == "zabbix-agent2":
            more, failed = inside_unpack(hosts, address, step)
            cases += more
        if failed:
            return cases, [failed]
    return cases, probe.differences(hosts.converged[node], probe.fingerprint(hosts.ssh, address))


# While dpkg unpacks zabbix-agent2, its files are written as *.dpkg-new and renamed at the end of the unpack.
UNPACKING = "[ -e /etc/init.d/zabbix-agent2.dpkg-new ]"


def inside_unpack(hosts, address: str, step) -> tuple[list[str], str]:
    """The agent's step cut while dpkg unpacks the package (a seeded second seldom lands in that window): a
    watcher on the host freezes dpkg the moment its first *.dpkg-new file appears, then the step is killed.
    The package is left half installed (reinst-required), which neither `dpkg --configure -a` nor an install
    of the same version repairs; the step's re-run must install it again."""
    undone = hosts.ssh.sudo(address, undo_of(step))
    assert undone.returncode == 0, undone.stderr
    stdin = hosts.stdin_of(step, hosts.first.results) if step.secret_stdin else None
    rc, _, _, seen = hosts.ssh.run_cut_when(address, step.create, stdin, UNPACKING, "pkill -STOP -x dpkg")
    status = hosts.ssh.sudo(address, "dpkg-query -W -f='${Status}' zabbix-agent2").stdout
    cases = [f"{step.name} cut while dpkg unpacked it (watcher saw it: {seen}, rc={rc}): dpkg says {status!r}"]
    if not seen or "half-installed" not in status:
        return cases, f"{step.name}: the cut did not land inside dpkg's unpack (seen: {seen}, dpkg: {status!r})"
    rc, out, err, seconds, _ = hosts.ssh.run(address, step.create, stdin)
    cases.append(f"{step.name} re-run to the end: rc={rc} in {seconds:.1f} s: {' / '.join(out.splitlines())}")
    return cases, "" if rc == 0 else f"{step.name} failed after a cut inside dpkg: rc={rc} {out[-800:]} {err[-1500:]}"


# --- Cuts at named points: lib.sh's `mark` (after each write, before each pending action) --------------------

HOLD = "/run/ml-platform/hold"
HELD = "/run/ml-platform/held"
MARKS = "/run/ml-platform/marks"


def cut_at(hosts, address: str, step, point: str) -> tuple[bool, int]:
    """`step` run on `address` until it reaches the named point `point`, where it holds; then cut there as a
    lost session cuts it (its processes on the host killed, then its connection). Returns whether it held
    there, the exit status the cut left and the named points it passed (lib.sh `mark` logs each one while a
    hold file exists)."""
    script = _script_name(step)
    hold = hosts.ssh.sudo(
        address, f"mkdir -p /run/ml-platform && rm -f {HELD} && echo {shlex.quote(f'{script}: {point}')} > {HOLD}"
    )
    assert hold.returncode == 0, hold.stderr
    stdin = hosts.stdin_of(step, hosts.first.results) if step.secret_stdin else None
    try:
        rc, _, _, seen = hosts.ssh.run_cut_when(address, step.create, stdin, f"[ -e {HELD} ]", ":")
    finally:
        told = hosts.ssh.sudo(address, f"cat {MARKS} 2>/dev/null; rm -f {HOLD} {HELD} {MARKS}")
    return seen, rc, _marks_of(told.stdout, script)


def _marks_of(marks: str, script: str) -> list[str]:
    return [line.split(": ", 1)[1] for line in marks.splitlines() if line.startswith(f"{script}: ")]


def _script_name(step) -> str:
    found = re.search(r"\bbash -c '.*' (\S+\.sh)$", step.create, re.S)
    assert found, step.name
    return found.group(1)


def finish(hosts, address: str, step, listing: bool = False) -> tuple[int, str, list[str]]:
    """`step` run again to its end: its exit status, its output and, with `listing`, the named points it passed
    (an empty hold file makes it log them and hold at none)."""
    stdin = hosts.stdin_of(step, hosts.first.results) if step.secret_stdin else None
    if listing:
        assert hosts.ssh.sudo(address, f"mkdir -p /run/ml-platform && : > {HOLD} && rm -f {MARKS}").returncode == 0
    try:
        rc, out, err, _, _ = hosts.ssh.run(address, step.create, stdin)
    finally:
        told = hosts.ssh.sudo(address, f"cat {MARKS} 2>/dev/null; rm -f {HOLD} {MARKS}") if listing else None
    return rc, out + err[-1500:], _marks_of(told.stdout, _script_name(step)) if told else []
