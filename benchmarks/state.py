"""What the engine itself costs: the stack state a plan makes, and what saving it costs during a fresh `up`.

    python -m benchmarks.state PLAN.json [PLAN.json ...]

State estimate (`state_bytes`): Pulumi's checkpoint keeps, per resource, its URN, type, parent, provider,
dependencies and per-property dependencies, its inputs, and its outputs, which for every provider here
hold the inputs again (pulumi-command's outputs embed its inputs and add stdout/stderr; a Kubernetes
object's are the live object). So: inputs twice, plus the resource's own fields, plus a fixed allowance
per output (OUTPUT_EXTRA). Secrets are stored encrypted: base64 of the value's JSON plus the cipher's
nonce and tag (`_ciphertext`). The offline preview only has placeholders for the SSH key; a real
ed25519 key in OpenSSH format is about 411 bytes (PRIVATE_KEY), counted for each `privateKey`.

Snapshot cost (`snapshot_writes`): with a self-managed backend (`pulumi login --local`, S3) the engine
saves the whole checkpoint when a step begins and again when it ends (pulumi/pulumi pkg/backend/
snapshot.go: every mutation persists the full snapshot; journaling, which writes only the change, is
Pulumi Cloud's). A fresh `up` of N resources is 2N saves of a checkpoint that grows from nothing to the
full state; the saves are made one at a time. The bytes are summed in the order the bring-up model
(benchmarks/makespan.py) finishes the resources; the seconds divide them by a rate measured here
(`serialisation_rate`: json.dumps of the plan's own state shape, written to a file). The engine is Go,
not Python: the rate is this machine's order of magnitude, not the engine's exact figure.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

SECRET = "[secret]"
PRIVATE_KEY = 411
"""Bytes of an ed25519 private key in OpenSSH PEM format (what `ssh-keygen -t ed25519` writes)."""
OUTPUT_EXTRA = {"command:remote:Command": 200, "command:remote:CopyToRemote": 0}
"""Bytes an output adds beyond the inputs: a host step's stdout/stderr (its `changed: ...` lines)."""
DEFAULT_EXTRA = 400
"""A Kubernetes object's live fields (uid, resourceVersion, managedFields, status), a dynamic resource's id."""
HOST_TYPES = ("command:remote:Command", "command:remote:CopyToRemote")


def _ciphertext(plain_bytes: int) -> int:
    """Length of an encrypted secret in the checkpoint: `v1:<nonce>:<base64 ciphertext+tag>`."""
    return 3 + 16 + 1 + ((plain_bytes + 16 + 2) // 3) * 4


def _secret_size(value: Any) -> int:
    text = json.dumps(value, sort_keys=True)
    keys = text.count('"privateKey"')
    return _ciphertext(len(text) + keys * PRIVATE_KEY)


def _shaped(value: Any, revealed: Any) -> Any:
    """The inputs with each secret replaced by a string as long as its ciphertext."""
    if value == SECRET:
        return "s" * _secret_size(revealed)
    if isinstance(value, dict):
        known = revealed if isinstance(revealed, dict) else {}
        return {k: _shaped(v, known.get(k)) for k, v in value.items()}
    if isinstance(value, list):
        rev = revealed if isinstance(revealed, list) else [None] * len(value)
        return [_shaped(v, r) for v, r in zip(value, rev, strict=False)]
    return value


def state_resource(resource: dict[str, Any], revealed: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """One resource as the checkpoint would hold it (shape and size, not values)."""
    inputs = _shaped(resource["inputs"], (revealed or {}).get(resource["urn"], {}))
    extra = OUTPUT_EXTRA.get(resource["type"], DEFAULT_EXTRA)
    outputs = {**inputs, "_extra": "x" * extra} if extra else dict(inputs)
    return {
        "urn": resource["urn"],
        "custom": resource.get("custom", True),
        "id": "0123456789abcdef",
        "type": resource["type"],
        "inputs": inputs,
        "outputs": outputs,
        "parent": resource.get("parent") or "",
        "provider": resource.get("provider") or "",
        "dependencies": resource.get("dependencies", []),
        "propertyDependencies": {"_": resource.get("dependencies", [])},
    }


def state_document(plan: dict[str, Any], revealed: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    return {"version": 3, "deployment": {"resources": [state_resource(r, revealed) for r in plan["resources"]]}}


def sizes(plan: dict[str, Any], revealed: Optional[dict[str, Any]] = None) -> dict[str, int]:
    """Bytes each resource adds to the checkpoint, by URN."""
    return {r["urn"]: len(json.dumps(state_resource(r, revealed), indent=4)) for r in plan["resources"]}


def state_bytes(plan: dict[str, Any], revealed: Optional[dict[str, Any]] = None) -> int:
    return sum(sizes(plan, revealed).values())


def snapshot_writes(order: Iterable[str], size_by_urn: dict[str, int]) -> int:
    """Bytes written by a fresh `up` that finishes the resources in `order`: a full save at each step's
    start (the resources done so far) and at its end (one more)."""
    done = total = 0
    for urn in order:
        total += done  # the save when the step begins
        done += size_by_urn[urn]
        total += done  # the save when it ends
    return total


def serialisation_rate(document: dict[str, Any], rounds: int = 3) -> float:
    """Bytes per second this machine serialises and writes `document` (best of `rounds`)."""
    best = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "checkpoint.json"
        for _ in range(rounds):
            start = time.perf_counter()
            text = json.dumps(document, indent=4)
            path.write_text(text)
            best = min(best, time.perf_counter() - start)
    if best <= 0 or not text:
        raise RuntimeError("serialisation rate: nothing was written")
    return len(text.encode()) / best


def host_step_inputs(plan: dict[str, Any]) -> list[int]:
    """Bytes of each host step's inputs (the plan's JSON, secrets masked), smallest first."""
    return sorted(
        len(json.dumps(r["inputs"], sort_keys=True).encode()) for r in plan["resources"] if r["type"] in HOST_TYPES
    )


def summary(plan: dict[str, Any], plan_bytes: int, nodes: int) -> dict[str, float]:
    steps = host_step_inputs(plan)
    return {
        "plan_bytes": plan_bytes,
        "state_bytes": state_bytes(plan),
        "median_step": statistics.median(steps),
        "largest_step": steps[-1],
        "resources_per_node": len(plan["resources"]) / nodes,
    }


def main(argv: list[str]) -> int:
    for name in argv:
        text = Path(name).read_text()
        plan = json.loads(text)
        steps = [r for r in plan["resources"] if r["type"] == "command:remote:Command"]
        nodes = sum(1 for r in steps if r["name"].endswith("-rke2"))
        print(name, json.dumps(summary(plan, len(text.encode()), nodes)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
