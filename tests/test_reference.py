"""`make reference`: the fetch list covers every chart version we deploy, and the fetcher verifies what it
fetches (end to end against an HTTP server on loopback, as a site mirror or in GitHub's layout)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import io
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from components.cluster.upgrades import SUC_RELEASE
from settings.charts import Charts
from stacks import reference
from stacks.reference import Entry, FetchError, apply_release_edit, fetch, git_blob_id, read_fetch_list
from tests.conftest import ROOT, requires_upstream

ENTRIES = read_fetch_list()


@contextlib.contextmanager
def http_server(directory: Path) -> Iterator[str]:
    """A static HTTP server on loopback serving `directory`; yields its base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def deployed_charts() -> set[tuple[str, str]]:
    """(chart, version) of every chart the settings defaults and the shipped stacks deploy."""
    charts = {(c.name, c.version) for c in Charts().__dict__.values()}
    for stack_file in ROOT.glob("Pulumi.*.yaml"):
        config = yaml.safe_load(stack_file.read_text())["config"]
        charts |= {(c["name"], c["version"]) for c in config.get("ml-platform:charts", {}).values()}
    return charts


def missing_from_fetch_list(charts: set[tuple[str, str]], entries: list[Entry]) -> list[str]:
    """The reference files a deployed chart needs that the fetch list lacks: its values.yaml and the chart."""
    listed = {entry.path for entry in entries}
    needed = [f"charts/{name}/{version}/values.yaml" for name, version in charts]
    needed += [f"charts-src/{name}/{version}/Chart.yaml" for name, version in charts]
    return sorted(path for path in needed if path not in listed)


def test_every_chart_version_we_deploy_is_in_the_fetch_list():
    charts = deployed_charts()
    assert ("zabbix", "7.0.12") in charts and ("kube-state-metrics", "8.4.0") in charts
    assert missing_from_fetch_list(charts, ENTRIES) == []


def test_the_upgrade_controller_we_deploy_is_in_the_fetch_list():
    # Not a chart: its manifests and Plan CRD at the release components/cluster/upgrades.py deploys.
    listed = {entry.path for entry in ENTRIES}
    assert f"crds/system-upgrade-controller/{SUC_RELEASE}/upgrade.cattle.io_plans.yaml" in listed
    assert f"manifests/system-upgrade-controller/{SUC_RELEASE}/system-upgrade-controller.yaml" in listed


def test_a_bumped_chart_without_fetch_list_entries_is_reported():
    bumped = {("kueue", "0.19.3"), ("cilium", "1.19.6")}
    assert missing_from_fetch_list(bumped, ENTRIES) == [
        "charts-src/kueue/0.19.3/Chart.yaml",
        "charts/kueue/0.19.3/values.yaml",
    ]


def test_fetch_list_is_well_formed():
    paths = [entry.path for entry in ENTRIES]
    assert len(paths) == len(set(paths)), "a path is listed twice"
    assert all(re.fullmatch(r"[0-9a-f]{64}", e.sha256) and re.fullmatch(r"[0-9a-f]{40}", e.git_blob) for e in ENTRIES)
    used = {entry.release_edit for entry in ENTRIES if entry.release_edit}
    assert used == {p.name for p in reference.RELEASE_EDITS.glob("*.patch")}, "every release edit used, none missing"
    # The CRD schemas and the whole chart directories are there, not only values files.
    assert any(p.startswith("crds/") for p in paths) and sum(p.startswith("charts-src/") for p in paths) > 800


def test_a_malformed_line_names_its_place(tmp_path):
    listing = tmp_path / "list.tsv"
    listing.write_text("# comment\ncharts/x/1/values.yaml\tabc\tdef\thttps://example.org/values.yaml\n")
    with pytest.raises(ValueError, match=r"list.tsv:2: not `path, sha256"):
        read_fetch_list(listing)


def run_fetch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stacks.reference", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_fetch_from_a_mirror_end_to_end(tmp_path):
    source = requires_upstream(ENTRIES[0].path).parents[3]  # charts/<chart>/<version>/values.yaml
    assert (source / ENTRIES[-1].path).is_file()
    dest = tmp_path / "cache"
    with http_server(source) as url:
        first = run_fetch("--mirror", url, "--dest", str(dest))
        again = run_fetch("--mirror", url, "--dest", str(dest))
    assert first.returncode == 0, first.stderr
    assert f"{len(ENTRIES)} fetched" in first.stdout
    for entry in ENTRIES:
        assert hashlib.sha256((dest / entry.path).read_bytes()).hexdigest() == entry.sha256, entry.path
    assert again.returncode == 0 and "(0 fetched" in again.stdout  # nothing changes on a re-run


def test_a_digest_mismatch_fails_loudly_and_is_not_written(tmp_path):
    mirror = tmp_path / "mirror"
    good, bad = ENTRIES[0], next(e for e in ENTRIES if e.path.startswith("crds/"))
    for entry in (good, bad):
        (mirror / entry.path).parent.mkdir(parents=True, exist_ok=True)
        # Contents only: the reference directory may be read-only, and the copy is about to be tampered with.
        shutil.copyfile(requires_upstream(entry.path), mirror / entry.path)
    tampered = (mirror / bad.path).read_text().replace("properties:", "propertiez:", 1)
    (mirror / bad.path).write_text(tampered)
    listing = tmp_path / "list.tsv"
    listing.write_text("".join("\t".join(vars(e).values()).rstrip("\t") + "\n" for e in (good, bad)))
    dest = tmp_path / "cache"
    with http_server(mirror) as url:
        proc = run_fetch("--mirror", url, "--dest", str(dest), "--fetch-list", str(listing))
    assert proc.returncode == 1
    actual = hashlib.sha256(tampered.encode()).hexdigest()
    assert f"{bad.path}: sha256 {actual} from {url}/{bad.path}, the fetch list says {bad.sha256}" in proc.stderr
    assert not (dest / bad.path).exists()
    assert (dest / good.path).is_file()


def github_tree(tmp_path: Path, entries: list[Entry]) -> Path:
    """GitHub's raw layout (<owner>/<repo>/<ref>/<path>) holding the Git files behind `entries`: the stored file,
    or for a release-edited one the stored file with the edit undone."""
    tree = tmp_path / "github"
    for entry in entries:
        git = re.fullmatch(r"github:([^@]+)@([^:]+):(.+)", entry.source)
        assert git, entry.source
        data = requires_upstream(entry.path).read_bytes()
        if entry.release_edit:
            patch = (reference.RELEASE_EDITS / entry.release_edit).read_text()
            data = apply_release_edit(data.decode(), patch, reverse=True).encode()
        target = tree / git[1] / git[2] / git[3]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return tree


def test_upstream_files_are_checked_by_git_blob_and_get_their_release_edits(tmp_path):
    edited = [e for e in ENTRIES if e.release_edit]
    plain = [e for e in ENTRIES if e.source.startswith("github:") and not e.release_edit][:3]
    tree = github_tree(tmp_path, edited + plain)
    dest = tmp_path / "cache"
    with http_server(tree) as url:
        assert fetch(dest, edited + plain, github=url) == len(edited + plain)
    for entry in edited + plain:
        assert (dest / entry.path).read_bytes() == requires_upstream(entry.path).read_bytes(), entry.path

    # A Git file that is not the listed blob (a moved tag, a wrong path) is refused before any edit.
    kueue = next(e for e in edited if e.path == "charts-src/kueue/0.19.2/values.yaml")
    served = tree / "kubernetes-sigs/kueue/v0.19.2/charts/kueue/values.yaml"
    served.write_text(served.read_text() + "# changed\n")
    with http_server(tree) as url, pytest.raises(FetchError, match=r"values.yaml: Git blob [0-9a-f]{40} from http"):
        fetch(tmp_path / "other", [kueue], github=url)


def test_release_edits_are_the_packaging_scripts_changes_and_undo_to_the_git_blob():
    for entry in (e for e in ENTRIES if e.release_edit):
        stored = requires_upstream(entry.path).read_text()
        patch = (reference.RELEASE_EDITS / entry.release_edit).read_text()
        assert git_blob_id(apply_release_edit(stored, patch, reverse=True).encode()) == entry.git_blob, entry.path
    with pytest.raises(ValueError, match="does not apply at line"):
        apply_release_edit("version: 9.9.9\n", "@@ -1 +1 @@\n-version: 0.0.1\n+version: v1.20.6\n")


def test_a_chart_archive_member_is_checked_with_the_archive(tmp_path):
    member = b"image:\n  tag: v1.19.6\n"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("demo/values.yaml")
        info.size = len(member)
        archive.addfile(info, io.BytesIO(member))
    (tmp_path / "github/org/charts/abc123").mkdir(parents=True)
    (tmp_path / "github/org/charts/abc123/demo-1.0.0.tgz").write_bytes(buffer.getvalue())
    archive_blob = git_blob_id(buffer.getvalue())
    source = f"tgz:org/charts@abc123:demo-1.0.0.tgz={archive_blob}#demo/values.yaml"
    entry = Entry("charts/demo/1.0.0/values.yaml", hashlib.sha256(member).hexdigest(), git_blob_id(member), source)
    other_archive = Entry(entry.path, entry.sha256, entry.git_blob, source.replace(archive_blob, "0" * 40))
    with http_server(tmp_path / "github") as url:
        assert fetch(tmp_path / "cache", [entry], github=url) == 1
        with pytest.raises(FetchError, match=r"demo-1.0.0.tgz: Git blob [0-9a-f]{40}, the fetch list says 0{40}"):
            fetch(tmp_path / "cache2", [other_archive], github=url)
    assert (tmp_path / "cache" / entry.path).read_bytes() == member
