"""The docs stay true to the code: the generated ones (settings reference, editor schema, air-gap list)
to the models, the outputs table to the contract, every relative link to a file and heading that
exist, and the limitations page to the limits stated on each page."""

from __future__ import annotations

import difflib
import re
import typing

import pytest
from pydantic import BaseModel, Field

from settings import Charts, Settings
from settings.load import _unwrap
from settings.types import Model
from stacks import air_gap, docs
from stacks.outputs import CONTRACT
from stacks.plan import summary
from tests.conftest import ROOT

DOCS = sorted((ROOT / "docs").glob("*.md"))


def settings_paths(model: type[BaseModel] = Settings, prefix: str = "") -> list[str]:
    """Every key of the settings as documented, `nodes[].infiniband.address`, walked independently of
    the generator."""
    paths = []
    for name, field in model.model_fields.items():
        path = f"{prefix}.{field.alias or name}" if prefix else (field.alias or name)
        paths.append(path)
        tp = _unwrap(field.annotation)
        is_list = typing.get_origin(tp) is list
        inner = typing.get_args(tp)[0] if is_list else tp
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            paths += settings_paths(inner, path + ("[]" if is_list else ""))
    return paths


def test_committed_generated_files_match_the_models():
    stale = {}
    for path, expected in docs.generated_files().items():
        committed = (ROOT / path).read_text() if (ROOT / path).exists() else ""
        if committed != expected:
            diff = difflib.unified_diff(committed.splitlines(), expected.splitlines(), path, "generated", lineterm="")
            stale[path] = "\n".join(list(diff)[:20])
    assert not stale, "run `make docs` and commit the result; out of date:\n" + "\n".join(
        f"{path}:\n{diff}" for path, diff in stale.items()
    )


def test_every_setting_has_a_description():
    missing = [row.path for row in docs.rows() if not row.description.strip()]
    assert missing == [], f"give these settings fields a docstring (the line under the field): {missing}"


def test_a_field_docstring_wrapped_over_lines_is_one_line_in_the_reference_and_the_schema():
    class Example(Model):
        size: int = Field(default=1, ge=1)
        """A description long enough to be wrapped
        over three lines, as a long one
        is."""
        name: str = "x"
        """One line."""

    rows = {row.path: row.description for row in docs.rows(Example)}
    schema = Example.model_json_schema(by_alias=True)["properties"]
    expected = {
        "size": "A description long enough to be wrapped over three lines, as a long one is.",
        "name": "One line.",
    }
    assert rows == expected
    assert {key: value["description"] for key, value in schema.items()} == expected
    wrapped = [row.path for row in docs.rows() if "\n" in row.description]
    assert wrapped == []


def test_every_setting_is_in_the_reference():
    reference = (ROOT / "docs/settings.md").read_text()
    missing = [p for p in settings_paths() if f"| `{p}` |" not in reference]
    assert missing == [], f"settings missing from docs/settings.md (run `make docs`): {missing}"


def test_the_reference_shows_type_default_and_constraints():
    reference = (ROOT / "docs/settings.md").read_text()
    assert "| `cluster.drainTimeoutSeconds` | integer | `900` | at least 30; at most 86400 | How long" in reference
    assert "| `network.cni` | one of `cilium`, `calico` | `cilium` |" in reference
    assert "| `nodes[].infiniband.address` | string | required | an IPv4 address |" in reference
    assert "| `charts.kueue.repository` | string | `oci://registry.k8s.io/kueue/charts` |" in reference
    assert "| `sshPrivateKey` |" in reference, "secrets are listed (as secrets)"


def test_air_gap_lists_every_chart_with_its_mirror_key():
    air_gap = (ROOT / "docs/air-gap.md").read_text()
    for name, field in Charts.model_fields.items():
        chart = field.default
        row = (
            f"| `{chart.name}` | `{chart.version}` | `{chart.repository}` | `charts.{field.alias or name}.repository` |"
        )
        assert row in air_gap, row


def test_air_gap_lists_every_image_a_setting_defaults_to():
    air_gap = (ROOT / "docs/air-gap.md").read_text()
    images = [
        row
        for row in docs.rows()
        if isinstance(row.default, str) and re.match(r"^[a-z0-9.-]+\.[a-z]+/.+:.+", row.default)
    ]
    assert {r.path for r in images} >= {"cluster.virtualIp.kubeVipImage", "storage.ceph.cephImage"}
    for row in images:
        assert f"| `{row.path}` | `{row.default}` |" in air_gap, row.path


def test_air_gap_names_only_real_settings_keys():
    known = {row.path for row in docs.rows()}
    mentioned = {
        key
        for entry in air_gap.DERIVED
        for text in entry
        for key in re.findall(r"[`{]([a-z][A-Za-z0-9]*(?:\.[a-z][A-Za-z0-9]*)+)[`}:]", text)
        if key.split(".")[0] in Settings.model_fields
    }
    assert mentioned and mentioned <= known, mentioned - known


def test_outputs_table_matches_the_contract():
    table = (ROOT / "docs/outputs.md").read_text().split("\n## Outputs\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([A-Za-z0-9.]+)` \| ([^|]+) \| (yes|no) \| (.+) \|$", table, re.M)
    documented = {name: (type_.strip(), secret == "yes") for name, type_, secret, _ in rows}
    declared = {spec.name: (spec.type, spec.secret) for spec in CONTRACT}
    assert documented == declared
    # The table is the one place that says what each output means (consumers read it there).
    assert not [name for name, _, _, meaning in rows if not meaning.strip()], "say what the output means"


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def relative_links(text: str) -> list[str]:
    """Markdown link targets that are not URLs, outside code blocks and code spans."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", prose) if not re.match(r"^[a-z]+:", t)]


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    broken = []
    for target in relative_links(page.read_text()):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", file.read_text(), re.M)
            if anchor not in {github_anchor(h) for h in headings}:
                broken.append(f"{target}: no heading #{anchor} in {file.name}")
    assert broken == [], f"{page.name}: {broken}"


def test_the_link_checker_sees_a_broken_link_and_a_missing_heading():
    assert relative_links("[a](docs/x.md#y) `[b](c.md)` [d](https://e) ```\n[f](g.md)\n```") == ["docs/x.md#y"]
    assert github_anchor("Bring-up time and `--parallel`") == "bring-up-time-and---parallel"
    assert github_anchor("6. When `up` fails half-way") == "6-when-up-fails-half-way"


def _bullets(markdown: str) -> list[str]:
    """The `- ` bullets of a markdown block, each joined into one line."""
    return [" ".join(b.split()) for b in re.split(r"^- ", markdown, flags=re.M)[1:]]


def test_every_limit_stated_on_a_page_is_collected_in_limitations():
    collected = " ".join((ROOT / "docs/limitations.md").read_text().split())
    pages = [p for p in DOCS if "\n## Limits\n" in p.read_text()]
    assert {"cluster.md", "gpu-pool.md", "network-fabric.md", "ceph-tier.md"} <= {p.name for p in pages}
    for page in pages:
        limits = page.read_text().split("\n## Limits\n", 1)[1].split("\n## ", 1)[0]
        for bullet in _bullets(limits.split("\nAll limitations of the platform", 1)[0]):
            assert bullet in collected, f"docs/limitations.md does not collect this limit of {page.name}: {bullet}"


def test_the_readme_excerpt_of_make_plan_is_what_make_plan_prints(prod_plan):
    readme = (ROOT / "README.md").read_text()
    excerpt = readme.split("```\nOffline preview of ml-platform/prod", 1)[1].split("```", 1)[0]
    printed = summary(prod_plan).splitlines()
    lines = [f"Offline preview of ml-platform/prod{excerpt.splitlines()[0]}", *excerpt.splitlines()[1:]]
    stale = [line for line in lines if line not in ("", "...") and line not in printed]
    assert not stale, f"README's `make plan` excerpt is not what it prints now: {stale}"
