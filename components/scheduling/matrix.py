"""docs/teams.md's tenant matrix, generated from the classification (`surface.py`); a test keeps the page in sync."""

from __future__ import annotations

from components.scheduling import surface
from components.scheduling.surface import Verdict

BEGIN = "<!-- tenant-matrix:begin (generated from components/scheduling/surface.py; do not edit) -->"
END = "<!-- tenant-matrix:end -->"

TABLES: list[tuple[str, dict[str, Verdict]]] = [
    ("Pod spec (`spec` of a Pod, every pod template)", {**surface.POD_SPEC, **surface.NEWER_POD_SPEC}),
    ("Container, init container", surface.CONTAINER),
    ("Ephemeral container", surface.EPHEMERAL_CONTAINER),
    ("Volume source", surface.VOLUME),
    ("Job `spec` (also a CronJob's `jobTemplate.spec`)", surface.JOB_SPEC),
    ("CronJob `spec`", surface.CRON_JOB_SPEC),
    ("Service `spec`", surface.SERVICE_SPEC),
    *[(f"{kind} `spec`", table) for kind, table in surface.CRD_SPEC.items()],
    ("RayCluster `headGroupSpec`", surface.RAY_HEAD_GROUP),
    ("RayCluster `autoscalerOptions`", surface.RAY_AUTOSCALER),
    ("Labels and annotations in a controller's domain", surface.CONTROLLER_KEYS),
    ("Pod subresources", surface.POD_SUBRESOURCES),
]


def _cell(table: dict[str, Verdict], verdict: str) -> str:
    items = [
        f"`{f}`" + ("" if verdict == "allowed" else f" ({v.rule})") for f, v in table.items() if v.verdict == verdict
    ]
    return ", ".join(items) or "-"


def tenant_matrix() -> str:
    """The matrix as Markdown, between its markers."""
    lines = [
        BEGIN,
        "| what a team writes | allowed | constrained (rule) | refused (rule) |",
        "|---|---|---|---|",
        *(
            f"| {title} | {_cell(t, 'allowed')} | {_cell(t, 'constrained')} | {_cell(t, 'refused')} |"
            for title, t in TABLES
        ),
        "",
        "Any other label or annotation in a controller's domain ("
        + ", ".join(f"`{d}` ({c})" for d, c in surface.CONTROLLER_DOMAINS.items())
        + ") is refused (rule controller-key). Environment variables starting with "
        + ", ".join(f"`{p}`" for p in surface.RUNTIME_ENV_PREFIXES)
        + " are refused wherever a container takes them (rule runtime-env). Rights operators grant in a team "
        + "namespace: "
        + "; ".join(
            f"{operator}: " + ", ".join(f"`{r}` {v}" for _, r, v in grants)
            for operator, grants in surface.OPERATOR_GRANTS.items()
        )
        + " (the subresources among them are refused above).",
        "",
        "| rule | why |",
        "|---|---|",
        *(f"| {rule} | {why} |" for rule, why in surface.RULES.items()),
        END,
    ]
    return "\n".join(lines)


def replace_matrix(page: str) -> str:
    """`page` with its matrix regenerated."""
    head, _, rest = page.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + tenant_matrix() + tail
