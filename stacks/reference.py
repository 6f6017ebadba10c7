"""Where the pinned upstream reference files live (charts' values.yaml, full chart directories, CRD schemas),
and how `make reference` fetches them.

One place decides where they are, for the tests and for the review's rendering:
- `$MLP_REFERENCE_DIR` when it is set (e.g. a shared read-only copy on a site without network access);
- else the cache that `make reference` fills: `$XDG_CACHE_HOME/ml-platform/reference`
  (`~/.cache/ml-platform/reference`).
The layout under it: `charts/<chart>/<version>/values.yaml`, `charts-src/<chart>/<version>/` (a chart as
`helm pull --untar` gives it) and `crds/...`.

What is fetched, from where and with which digests is `reference/fetch-list.tsv` (its header says how to
read it). `python -m stacks.reference` fetches every file from its upstream release location (GitHub at the
release tag, or a member of a published chart archive), checks the Git blob id of what it downloaded,
applies the release edit where upstream's packaging makes one, and writes the file only when its sha256
matches. `--mirror URL` (or `$MLP_REFERENCE_MIRROR`) takes every file from an HTTP server that serves a
copy of the reference directory instead (a site mirror); the sha256 is checked all the same. Files already
in place with the right digest are left alone: a second run fetches nothing.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import io
import os
import re
import sys
import tarfile
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

FETCH_COMMAND = "make reference"
ROOT = Path(__file__).resolve().parent.parent
FETCH_LIST = ROOT / "reference" / "fetch-list.tsv"
RELEASE_EDITS = FETCH_LIST.parent / "release-edits"
GITHUB_RAW = "https://raw.githubusercontent.com"

_GITHUB = re.compile(r"github:(?P<repo>[\w.-]+/[\w.-]+)@(?P<ref>[^:]+):(?P<path>.+)")
_TGZ = re.compile(r"tgz:(?P<repo>[\w.-]+/[\w.-]+)@(?P<ref>[^:]+):(?P<path>[^=]+)=(?P<blob>[0-9a-f]{40})#(?P<member>.+)")
_HUNK = re.compile(r"@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


def reference_dir() -> Path:
    """The directory that holds the reference files (it may not exist yet)."""
    explicit = os.environ.get("MLP_REFERENCE_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "ml-platform" / "reference"


class ReferenceMissingError(FileNotFoundError):
    """A reference file the caller needs is not in `reference_dir()`; the message names `FETCH_COMMAND`."""


def strict() -> bool:
    """`MLP_REFERENCE_STRICT=1`: a missing reference file is a failure, not a skip (CI)."""
    return os.environ.get("MLP_REFERENCE_STRICT", "") not in ("", "0")


@dataclass(frozen=True)
class Entry:
    """One line of the fetch list."""

    path: str
    sha256: str
    git_blob: str
    source: str
    release_edit: str = ""


class FetchError(Exception):
    """Reference files that could not be fetched or did not match their digest, one per line."""


def read_fetch_list(path: Path = FETCH_LIST) -> list[Entry]:
    entries = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) not in (4, 5) or not (_GITHUB.fullmatch(fields[3]) or _TGZ.fullmatch(fields[3])):
            raise ValueError(f"{path}:{number}: not `path, sha256, git blob, source[, release edit]`: {line!r}")
        entries.append(Entry(*fields))
    return entries


def git_blob_id(data: bytes) -> str:
    """What `git hash-object` prints for a file with these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # Git's object id, not a security digest


def apply_release_edit(text: str, patch: str, reverse: bool = False) -> str:
    """Apply a unified diff exactly (no fuzz): a hunk whose lines are not where it says fails."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    at = 0
    patch_lines = patch.splitlines(keepends=True)
    i = 0
    while i < len(patch_lines):
        match = _HUNK.match(patch_lines[i])
        i += 1
        if not match:
            continue
        start = int(match.group(1)) - 1
        old: list[str] = []
        new: list[str] = []
        while i < len(patch_lines) and not patch_lines[i].startswith("@@"):
            tag, body = patch_lines[i][:1], patch_lines[i][1:]
            if tag in (" ", "-"):
                old.append(body)
            if tag in (" ", "+"):
                new.append(body)
            i += 1
        if reverse:
            old, new = new, old
        if start < at or lines[start : start + len(old)] != old:
            raise ValueError(f"release edit does not apply at line {start + 1}")
        out += lines[at:start] + new
        at = start + len(old)
    return "".join(out + lines[at:])


def _download(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as response:
        return response.read()


_archive_lock = threading.Lock()


@functools.lru_cache(maxsize=8)
def _archive_members(url: str, blob: str) -> dict[str, bytes]:
    """The regular files of a chart archive, downloaded once, checked by its Git blob id."""
    data = _download(url)
    if git_blob_id(data) != blob:
        raise FetchError(f"{url}: Git blob {git_blob_id(data)}, the fetch list says {blob}")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _from_upstream(entry: Entry, github: str) -> tuple[bytes, str]:
    """The file's bytes from its upstream release location, checked by Git blob id; and where from."""
    tgz = _TGZ.fullmatch(entry.source)
    if tgz:
        url = f"{github}/{tgz['repo']}/{tgz['ref']}/{tgz['path']}"
        with _archive_lock:
            members = _archive_members(url, tgz["blob"])
        if tgz["member"] not in members:
            raise FetchError(f"{entry.path}: {tgz['member']} is not a file in {url}")
        data, origin = members[tgz["member"]], f"{url}#{tgz['member']}"
    else:
        git = _GITHUB.fullmatch(entry.source)
        assert git is not None  # read_fetch_list checked the form
        origin = f"{github}/{git['repo']}/{git['ref']}/{git['path']}"
        data = _download(origin)
    blob = git_blob_id(data)
    if blob != entry.git_blob:
        raise FetchError(f"{entry.path}: Git blob {blob} from {origin}, the fetch list says {entry.git_blob}")
    if entry.release_edit:
        patch = (RELEASE_EDITS / entry.release_edit).read_text()
        data = apply_release_edit(data.decode(), patch).encode()
    return data, origin


def _fetch_one(entry: Entry, dest: Path, mirror: Optional[str], github: str) -> bool:
    """Put one file in place; False when it was already there with the right digest."""
    target = dest / entry.path
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == entry.sha256:
        return False
    if mirror:
        origin = f"{mirror.rstrip('/')}/{entry.path}"
        data = _download(origin)
    else:
        data, origin = _from_upstream(entry, github)
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry.sha256:
        raise FetchError(f"{entry.path}: sha256 {digest} from {origin}, the fetch list says {entry.sha256}")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(data)
    partial.replace(target)
    return True


def fetch(
    dest: Path, entries: list[Entry], mirror: Optional[str] = None, github: str = GITHUB_RAW, workers: int = 8
) -> int:
    """Fetch every entry into `dest`; the number of files written. Raises FetchError naming every file that
    could not be fetched or did not match its digest (those are not written; the others are)."""

    def one(entry: Entry) -> tuple[bool, str]:
        try:
            return _fetch_one(entry, dest, mirror, github), ""
        except FetchError as exc:
            return False, str(exc)
        except (OSError, ValueError) as exc:  # HTTP errors, timeouts, a release edit that does not apply
            return False, f"{entry.path}: {exc}"

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(one, entries))
    errors = [error for _, error in results if error]
    if errors:
        raise FetchError("\n".join(errors))
    return sum(written for written, _ in results)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.reference", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=None, help="where to put them (default: the reference dir)")
    parser.add_argument(
        "--mirror",
        default=os.environ.get("MLP_REFERENCE_MIRROR") or None,
        help="base URL of an HTTP server serving a copy of the reference directory (default: upstream)",
    )
    parser.add_argument("--fetch-list", type=Path, default=FETCH_LIST, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    dest = args.dest or reference_dir()
    entries = read_fetch_list(args.fetch_list)
    try:
        written = fetch(dest, entries, args.mirror)
    except FetchError as exc:
        errors = str(exc).splitlines()
        shown = errors[:10] + ([f"... and {len(errors) - 10} more"] if len(errors) > 10 else [])
        print(
            f"{len(errors)} of {len(entries)} reference files not fetched (none of these was written):\n"
            + "\n".join(shown)
            + "\nWithout access to GitHub: point MLP_REFERENCE_DIR at a copy, or --mirror at a server that serves one.",
            file=sys.stderr,
        )
        return 1
    kept = len(entries) - written
    print(f"{len(entries)} reference files verified in {dest} ({written} fetched, {kept} already there)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
