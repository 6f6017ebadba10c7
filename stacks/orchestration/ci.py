"""What the delivery workflows ask of the orchestrator (.github/workflows/deliver.yml, preview.yml).

- `stacks ENV`: the environment's layout and stacks as GitHub step outputs: the node groups as a JSON list for a
  matrix (one job per group stack), how many of them run at once (`slots`) and each one's `--parallel`: the
  budget divided by the slots, rounded down, so that the jobs running at once never exceed it.
- `changed DIR`: from the offline plans `python -m stacks.review --out DIR` wrote for the base and the head of a
  pull request (`plan-<env>-base.json`, `plan-<env>-head.json`; a folder of `<stack>.json` for a layered
  environment), the stacks whose plan differs: the real `pulumi preview` runs for those only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from stacks import layers
from stacks.orchestration.run import shares


def secret_names(env: str) -> dict[str, str]:
    """The repository secrets a stack of `env` reads (docs/delivery.md)."""
    suffix = env.upper().replace("-", "_")
    return {"ssh_key": f"SSH_PRIVATE_KEY_{suffix}", "rke2_token": f"RKE2_TOKEN_{suffix}"}


def stack_outputs(env: str, settings: Any, parallel: int) -> dict[str, str]:
    specs = layers.stack_specs(env, settings)
    groups = [s.group for s in specs if s.layer == "nodes"]
    slots = shares(parallel, len(groups)) if groups else [parallel]
    return {
        "layout": settings.layout,
        "cluster": next((s.name for s in specs if s.layer == "cluster"), ""),
        "groups": json.dumps(groups),
        "platform": next((s.name for s in specs if s.layer == "platform"), ""),
        "slots": str(len(slots)),
        "group-parallel": str(min(slots)),
    }


def _read(path: Path) -> Optional[dict[str, Any]]:
    if not path.is_file():
        return None
    plan = json.loads(path.read_text())
    return {"resources": plan.get("resources"), "outputs": plan.get("outputs")}


def _side(plans: Path, env: str, label: str) -> Path:
    """`plan-<env>-<label>.json`, or for a layered environment the folder of its stacks' plans: `stacks.review`
    keeps it beside the one plan it merges them into (`<name>.stacks/`)."""
    path = plans / f"plan-{env}-{label}.json"
    folder = path.with_name(path.name + ".stacks")
    return folder if folder.is_dir() else path


def _sides(plans: Path, env: str) -> dict[str, tuple[Optional[dict], Optional[dict]]]:
    """Stack -> (base plan, head plan) of `env`; None where that side has none."""
    base, head = _side(plans, env, "base"), _side(plans, env, "head")
    if head.is_file() or base.is_file() and not head.exists():
        return {env: (_read(base), _read(head))}
    stacks = {p.stem for side in (base, head) if side.is_dir() for p in side.glob("*.json")}
    return {s: (_read(base / f"{s}.json"), _read(head / f"{s}.json")) for s in sorted(stacks)}


def changed(plans: Path, envs: Sequence[str]) -> list[dict[str, str]]:
    """Matrix entries (env, stack, secret names) of the stacks whose offline plan changed; a stack the head has
    and the base could not plan counts as changed, one the head no longer has does not (nothing to preview)."""
    entries = []
    for env in envs:
        for stack, (before, after) in _sides(plans, env).items():
            if after is not None and before != after:
                entries.append({"env": env, "stack": stack, **secret_names(env)})
    return entries
