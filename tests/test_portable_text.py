"""The repository speaks to a user anywhere: no sentence that only makes sense on the machines it was
developed on (a sibling `../shared` folder, "installable here", internal issue numbers)."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import ROOT

# Each pattern, and why a user cannot act on a sentence that matches it.
PATTERNS = {
    r"\.\./shared/|\bshared/(upstream|research|tools)\b": "a folder beside the development checkout, not in the repo",
    r"\b(installable|installs?|installed|available) here\b|\bnot run here\b": '"here" is the development machine',
    r"\bworkplace\b|\bthe project's machines\b|\bour (own )?(development )?machines\b": "the development machines",
    r"\bissues? \d+\b|\(issue\b": "an internal issue number (cite upstream issues as owner/repo#N)",
}
# The project's own CI script: its runner keeps a verified copy of the reference files beside the checkout.
ALLOWED = {".ci/run": r"\.\./shared/upstream"}
SKIP = {"reference/fetch-list.tsv", "tests/test_portable_text.py"}


def tracked_text_files() -> list[str]:
    proc = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("not a git checkout: the files to read are the ones git tracks")
    return [name for name in proc.stdout.splitlines() if name not in SKIP and (ROOT / name).is_file()]


def development_only_sentences(name: str, text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, why in PATTERNS.items():
            match = re.search(pattern, line, re.IGNORECASE)
            if match and not (name in ALLOWED and re.search(ALLOWED[name], line)):
                found.append(f"{name}:{number}: {match.group(0)!r} ({why})")
    return found


def test_no_sentence_only_makes_sense_on_the_development_machines():
    found = []
    for name in tracked_text_files():
        try:
            text = (ROOT / name).read_text()
        except UnicodeDecodeError:
            continue
        found += development_only_sentences(name, text)
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "Tests compare values with `../shared/upstream/` and skip without it.",
        "not against a real MinIO (none is installable here).",
        '"""ClusterBootstrap: node lifecycle (issue 3)."""',
        "Before issue 17 the preview took 26 s.",
        "Debian 12 and Python 3.11, like the project's machines.",
    ],
)
def test_the_patterns_catch_the_sentences_they_are_for(line):
    assert development_only_sentences("docs/example.md", line)


def test_upstream_references_and_host_sentences_pass():
    for line in (
        "a sidecar (helm-zabbix issue #136), see rancher/rke2#642",
        'changed "saved etcd snapshot (RKE2 v1.35.7 runs here)"',
    ):
        assert development_only_sentences("docs/example.md", line) == []
