"""The parts of docs/safety.md made from what each settings field declares (`settings.declare`): the claims the
checker compares, the credential scanner, and what changing each field does."""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel

from settings import Settings, StackSecrets
from settings.declare import changes_of, claims_of, models_in
from settings.rules.claims import RESERVED_NAMESPACES, RESERVED_PORTS
from settings.scan import PLUGINS_DOC


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def fields(model: type[BaseModel], path: str = "") -> Iterator[tuple[str, type[BaseModel], str]]:
    """(config path, model, field name) of every field under `model`, nested models walked (`[]`: a list item,
    `.<key>`: a map entry)."""
    for name, info in model.model_fields.items():
        at = f"{path}{info.alias or name}"
        yield at, model, name
        inner = models_in(info.annotation)
        if inner:
            suffix = "[]" if "list" in str(info.annotation) else ".<key>" if "dict" in str(info.annotation) else ""
            yield from fields(inner[0], f"{at}{suffix}.")


def lines() -> list[str]:
    claims = [(path, claim) for path, model, name in fields(Settings) for claim in claims_of(model.model_fields[name])]
    extra = [
        ("nodes[].infiniband (address/prefixLength)", "Claim(cidr, network=infiniband): the node's IB subnet"),
        ("scheduling.teams[].name (without namespaces)", "Claim(namespace): the team's namespace"),
    ]
    out = [
        "## Claims: what no two settings may hold",
        "",
        "Every field that names something shared declares a claim on its type (`Claim`: it owns the value; `Uses`:",
        "it names something another field, the site or the system owns). One checker (`settings.rules.claims`)",
        "refuses the same namespace, host name, bucket, storage class, address or port claimed twice, one device",
        "twice on a host or a `/dev/disk/by-id` name on two hosts, overlapping ranges of any two networks, an",
        "address inside another network's range, and reserved values: namespaces "
        + ", ".join(f"`{n}`" for n in sorted(RESERVED_NAMESPACES))
        + "; host ports "
        + ", ".join(f"{port} ({owner})" for port, owner in sorted(RESERVED_PORTS["host"].items()))
        + ".",
        "",
        "| field | claim |",
        "|---|---|",
        *(f"| `{path}` | {cell(repr(claim))} |" for path, claim in claims),
        *(f"| `{path}` | {cell(claim)} |" for path, claim in extra),
        "",
        "## Credentials found by content",
        "",
        f"Besides the secret keys above, {PLUGINS_DOC}.",
        "",
        "## What changing each field does",
        "",
        "Every field declares it (`CHANGES` in its model); the review's Danger names each change that restarts on",
        "nodes, replaces, destroys when lowered (only when it is lowered), rebuilds the cluster or is refused, with",
        "the field and its old and new value. A section's fields declare for it.",
        "",
        "| field | kind | what it does |",
        "|---|---|---|",
    ]
    secrets = [(f"{info.alias or key} (secret)", StackSecrets, key) for key, info in StackSecrets.model_fields.items()]
    rows = [*fields(Settings), *secrets]
    for path, model, name in rows:
        change = changes_of(model).get(name)
        if change is not None:
            out.append(f"| `{path}` | {change.kind} | {cell(change.describe())} |")
    return [*out, ""]


def data_tables() -> list[str]:
    """docs/settings.md's hardware and compatibility tables (settings/hardware.py, settings/compatibility.py): what
    floors, thresholds and versions are bounded by, each row with its source."""
    from settings.compatibility import CHART_COMPONENTS, CUDA_DRIVERS, IPOIB_MODES, OS_INSTALL
    from settings.hardware import GPU_MODELS, IB_GENERATIONS, IB_SOURCE, IB_WIDTHS

    def temperature(value) -> str:
        return f"{value} °C" if value is not None else "not published"

    return [
        "",
        "## Hardware table",
        "",
        "Floors and thresholds are bounded by these rows (`settings/hardware.py`); a new GPU model or InfiniBand",
        "speed is one row there, with its published source.",
        "",
        "| GPU model | peer link | GPU-to-GPU GB/s | memory GB | slowdown | shutdown | source |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {cell(g.name)} | {g.peer_link} {cell(g.link_generation)} | {g.peer_gbs:g} | {g.memory_gb} "
            f"| {temperature(g.slowdown_c)} | {temperature(g.shutdown_c)} | {cell(g.source)} |"
            for g in GPU_MODELS
        ),
        "",
        f"InfiniBand speeds, per lane ({cell(IB_SOURCE)}); a port runs {', '.join(f'{w}X' for w in IB_WIDTHS)}:",
        "",
        "| speed | Gb/s per lane | 4X port Gb/s |",
        "|---|---|---|",
        *(f"| {ib.name} | {ib.lane_gbps:g} | {ib.lane_gbps * 4:g} |" for ib in IB_GENERATIONS),
        "",
        "## Compatibility table",
        "",
        "Versions are bounded by these rows (`settings/compatibility.py`, `settings/rules/compatibility.py`).",
        "",
        "| CUDA | oldest driver branch | source |",
        "|---|---|---|",
        *(f"| {c.cuda_major}.x | {c.min_driver_major} | {cell(c.source)} |" for c in CUDA_DRIVERS),
        "",
        "| chart | release | component | version it deploys | source |",
        "|---|---|---|---|---|",
        *(f"| {r.chart} | {r.version} | {r.component} | `{r.value}` | {cell(r.source)} |" for r in CHART_COMPONENTS),
        "",
        "| OS family | RKE2 install methods | source |",
        "|---|---|---|",
        *(f"| {o.family} | {', '.join(o.methods)} | {cell(o.source)} |" for o in OS_INSTALL),
        "",
        "| InfiniBand speed | HCAs | IPoIB modes | source |",
        "|---|---|---|---|",
        *(f"| {m.speed} | {m.hca} | {', '.join(m.modes)} | {cell(m.source)} |" for m in IPOIB_MODES),
    ]


def effect_table() -> list[str]:
    """docs/safety.md: what each resource kind's update, replacement and delete do (stacks/diff/effects.py)."""
    from stacks.diff.effects import KINDS

    def shown(effect) -> str:
        mark = "**Danger**: " if effect.danger else ""
        by = f" (worded by `{effect.by}`)" if effect.by else ""
        return cell(f"{mark}{effect.what}{by}")

    return [
        "## What each resource kind's update, replacement and delete do",
        "",
        "Every kind a plan can hold declares it (`stacks/diff/effects.py`; a kind without a declaration fails the",
        "suite); the review counts them per kind under Danger. Component resources (`mlplatform:*`) do nothing of",
        "their own.",
        "",
        "| kind | update | replace | delete |",
        "|---|---|---|---|",
        *(
            f"| `{kind}` | {shown(e.update)} | {shown(e.replace)} | {shown(e.delete)} |"
            for kind, e in sorted(KINDS.items())
        ),
        "",
    ]
