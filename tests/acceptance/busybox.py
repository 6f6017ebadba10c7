"""Run a check's program the way its image does: BusyBox's sh and applets (Debian's busybox package: the
alpine and curl images are BusyBox userlands), plus the real programs the image adds (curl, rclone) and,
where an image's tool cannot run here (nvidia-smi, torchrun), a stub. Nothing else from this machine is on
PATH, so a check that relies on a GNU option fails here as it would in the pod."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Optional

from components.acceptance.component import check_program
from tests.prerequisites import require_debian_package

BUSYBOX = "/usr/bin/busybox"


def busybox_bin(tmp_path: Path) -> Path:
    """A directory with every BusyBox applet as a link, created once per test directory."""
    busybox = require_debian_package("the acceptance checks' scripts (they run in BusyBox)", BUSYBOX, "busybox")
    folder = tmp_path / "busybox-bin"
    if not folder.is_dir():
        folder.mkdir()
        applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout.split()
        for applet in applets:
            (folder / applet).symlink_to(busybox)
    return folder


def run_check(
    script: str,
    tmp_path: Path,
    stubs: Optional[dict[str, str]] = None,
    tools: Optional[dict[str, str]] = None,
    **env: str,
) -> subprocess.CompletedProcess:
    """The check's program (as the Job runs it: `sh -c PROGRAM`) in BusyBox sh; `stubs`: name -> sh body of
    a stand-in command; `tools`: name -> path of a real program the image carries."""
    stub_dir = tmp_path / "stubs"
    stub_dir.mkdir(exist_ok=True)
    for name, body in (stubs or {}).items():
        (stub_dir / name).write_text("#!/bin/sh\n" + body)
        (stub_dir / name).chmod(0o755)
    for name, path in (tools or {}).items():
        link = stub_dir / name
        if not link.exists():
            link.symlink_to(path)
    path = f"{stub_dir}:{busybox_bin(tmp_path)}"
    return subprocess.run(
        [BUSYBOX, "sh", "-c", check_program(script), script],
        env={"PATH": path, "TMPDIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def result_line(proc: subprocess.CompletedProcess) -> dict:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ACCEPTANCE ")]
    assert len(lines) == 1, proc.stdout + proc.stderr
    return json.loads(lines[0].removeprefix("ACCEPTANCE "))
