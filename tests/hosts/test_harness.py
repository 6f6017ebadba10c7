"""The host harness's own safety (tests/hosts/machines.py), without booting machines: a pid file proves which
process it names before cleanup() signals it, and every name a run makes carries its state directory's scope."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.hosts import machines

ROOT = Path(__file__).resolve().parents[2]


def _sleeper(seconds: str = "60") -> subprocess.Popen:
    return subprocess.Popen(["sleep", seconds])


def test_a_pid_file_naming_a_foreign_process_leaves_it_untouched(tmp_path):
    foreign = _sleeper()  # not started by the harness: its pid written as a bare number, as older runs did
    try:
        bare = tmp_path / "bare.pid"
        bare.write_text(str(foreign.pid))
        machines._stop_pid(bare)
        assert foreign.poll() is None and not bare.exists()
        # A pid file whose recorded start time and command line are another process's: the pid now names
        # a different process (a reused number), which is left alone.
        other = _sleeper("61")  # another command line: its recorded identity is not the foreign process's
        forged = tmp_path / "forged.pid"
        machines.record_pid(forged, other.pid)
        identity = forged.read_text().split(" ", 1)[1]
        other.kill()
        other.wait()
        forged.write_text(f"{foreign.pid} {identity}")
        machines._stop_pid(forged)
        assert foreign.poll() is None and not forged.exists()
    finally:
        foreign.kill()
        foreign.wait()


def test_a_process_the_harness_recorded_is_ended(tmp_path):
    mine = _sleeper()
    pid_file = tmp_path / "mine.pid"
    machines.record_pid(pid_file, mine.pid)
    assert machines.started_here(pid_file) == mine.pid
    machines._stop_pid(pid_file)
    assert mine.wait(timeout=20) is not None and not pid_file.exists()


def test_names_are_scoped_by_the_state_directory(tmp_path):
    """Two state directories give two scopes; each name the harness makes on the test machine carries it and
    fits a network interface name (15 characters)."""
    probe = "from tests.hosts import machines as m; print(m.PREFIX, m.BRIDGE, m.Machine('agent-1', '10.0.0.1').netns)"
    outs = []
    for state in (tmp_path / "a", tmp_path / "b"):
        env = {"MLP_HOSTS_STATE": str(state), "PATH": "/usr/bin:/bin"}
        done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        outs.append(done.stdout.split())
    (prefix_a, bridge_a, netns_a), (prefix_b, bridge_b, netns_b) = outs
    assert prefix_a != prefix_b and prefix_a.startswith("mlph") and len(bridge_a) <= 15
    assert netns_a.startswith(prefix_a) and netns_b.startswith(prefix_b)
    assert len(f"{prefix_a}v99") <= 15
