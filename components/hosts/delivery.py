"""How host scripts reach a host: once per version, content-addressed, and the short call each step sends.

A host step's command does not carry its script. Every program a host step can run (`remote.script_text`:
`lib.sh`, then the script with its includes expanded) goes into one bundle, a tar whose members are named
by the SHA-256 of their text. The program writes it under `.host-scripts/<sha256 of the tar>.tar` (next to
`Pulumi.yaml`, git-ignored) and one `<host>-scripts` step per host (pulumi-command's `CopyToRemote`, a
`FileAsset`) copies it over SFTP to `~/.ml-platform/host-scripts/<sha256>.tar` of the SSH user. The state
holds the file's path and hash, not its text; a new version is a new file (old ones stay, so that a
delete recorded by an older version still finds its program).

Each step's command is then the call: its parameters, and a fixed runner (`RUNNER`) that knows only the
SHA-256 of the program it runs. The runner, as root, looks for the program in the host's store
(`/var/lib/ml-platform/scripts/<sha256>`, root only); when it is not there it takes it from a copied
bundle and verifies it. Before running it checks the text against the hash again, then runs exactly that
text as `bash -c <program> <script name>`: the same program, `$0`, parameters and standard input as when
the command carried it inline. A program that is not on the host stops the step with an error naming the
script, its hash and where it was looked for.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import tarfile
from pathlib import Path

import pulumi
import pulumi_command as command

ROOT = Path(__file__).resolve().parents[2]
LOCAL_DIR = ROOT / ".host-scripts"
STORE = "/var/lib/ml-platform/scripts"
STAGED = ".ml-platform/host-scripts"
"""Where a host's `-scripts` step puts the bundle: relative to the SSH user's home (SFTP's start directory)."""

# The runner every step's command sends (about 1 KB). `HASH` is replaced by the program's SHA-256. It
# reads nothing from standard input (the step's secrets are for the program) and holds no single quote
# (shlex.quote wraps it once). HOST_ROOT (tests only, as in the scripts) prefixes the store.
RUNNER = """set -euo pipefail
h=HASH
store=${HOST_ROOT:-}/var/lib/ml-platform/scripts
if [[ -n ${SUDO_USER:-} ]]; then home=$(getent passwd "$SUDO_USER" | cut -d: -f6); else home=${HOME:-/root}; fi
err=""
if [[ ! -f $store/$h ]]; then
  install -d -m 0700 "$store"
  for bundle in "$home"/.ml-platform/host-scripts/*.tar; do
    [[ -f $bundle ]] || continue
    tmp=$(mktemp "$store/.$h.XXXXXX" 2>&1) || { err=$tmp; break; }
    if err=$(tar -xOf "$bundle" "$h" 2>&1 >"$tmp") && [[ $(sha256sum <"$tmp") == "$h  -" ]]; then
      chmod 0600 "$tmp" && mv -f "$tmp" "$store/$h" && break
    fi
    rm -f "$tmp"
  done
fi
if [[ ! -f $store/$h && $err == *"No space left on device"* ]]; then
  echo "error: host script $0 (sha256 $h): $store is full (ENOSPC: $err): free space there, then run\\
 pulumi up again" >&2
  exit 1
elif [[ ! -f $store/$h ]]; then
  echo "error: host script $0 (sha256 $h) is not on this host: not in $store, nor in a bundle in\
 $home/.ml-platform/host-scripts/ (the host's -scripts step copies it there): run pulumi up again" >&2
  exit 1
fi
program=$(cat "$store/$h"; echo .)
program=${program%.}
if [[ $(printf %s "$program" | sha256sum) != "$h  -" ]]; then
  echo "error: $store/$h does not match its sha256: remove it and run pulumi up again" >&2
  exit 1
fi
exec bash -c "$program" "$0"
"""


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def runner(program_digest: str) -> str:
    return RUNNER.replace("HASH", program_digest)


def bundle_bytes(programs: dict[str, str]) -> bytes:
    """A reproducible tar of `programs` (name -> text): members named by their SHA-256, sorted, no times,
    owners or modes that could differ between machines."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted({digest(text) for text in programs.values()}):
            data = next(t for t in programs.values() if digest(t) == name).encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o600, 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@functools.cache
def bundle() -> tuple[str, Path]:
    """(SHA-256, local path) of the bundle of every host program, written once per process."""
    from components.hosts.remote import script_files, script_text

    data = bundle_bytes({path.name: script_text(path.name) for path in script_files()})
    sha = hashlib.sha256(data).hexdigest()
    path = LOCAL_DIR / f"{sha}.tar"
    if not path.is_file() or path.read_bytes() != data:
        LOCAL_DIR.mkdir(exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return sha, path


def local_path(path: Path) -> str:
    """The bundle's path as the state records it: relative to where the program runs (the project
    directory, for `pulumi`), so that the same version has the same path on every machine."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def copy_step(host_name: str, connection: command.remote.ConnectionArgs) -> command.remote.CopyToRemote:
    """`<host>-scripts`: the bundle of this version, copied to the host once (CopyToRemote copies again
    only when the file's hash or the remote path changes: pulumi-command provider/pkg/provider/remote/
    copyController.go, `Update`). Nothing is removed on delete: the files are small, and a node removed
    later runs deletes that may need them."""
    sha, path = bundle()
    return command.remote.CopyToRemote(
        f"{host_name}-scripts",
        connection=connection,
        source=pulumi.FileAsset(local_path(path)),
        remote_path=f"{STAGED}/{sha}.tar",
    )
