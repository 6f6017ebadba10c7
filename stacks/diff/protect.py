"""Protected resources that a change would replace or delete: Pulumi's own error, and the safe way."""

from __future__ import annotations

from typing import Optional

from stacks.diff.core import Entry

# The runbook step that does a refused change safely, by resource name suffix.
SAFE_STEPS = {
    "-cni": "switching the CNI means rebuilding the cluster: tear it down per docs/runbook.md §8 "
    "(`pulumi state unprotect` the CNI release first), then bring it up with the new `network.cni`",
    "-init-server": "the init server moves only to retire its machine: docs/runbook.md §3 "
    "(`pulumi state unprotect` this record, name another Ready server in `cluster.initServer`, `pulumi up`)",
}
DEFAULT_SAFE_STEP = "`pulumi state unprotect URN` after checking docs/runbook.md for the resource, then `pulumi up`"


def refusal(entry: Entry, old: Optional[dict]) -> list[str]:
    """Pulumi's own error for a protected resource that would be replaced or deleted, and the safe way."""
    # A base plan from before options were recorded: its protection is taken to be the head's.
    recorded = (old or {}).get("options", entry.options)
    protected = bool(recorded.get("protect"))
    if not protected or entry.action in ("create", "update"):
        return []
    urn = entry.urn
    if entry.action == "delete":
        message = (
            f'unable to delete resource "{urn}"\nas it is currently marked for protection. To unprotect the '
            "resource, either remove the `protect` flag from the resource in your Pulumi program and run "
            f"`pulumi up` or use the command:\n`pulumi state unprotect '{urn}'`"
        )
    else:
        if not entry.options.get("protect"):
            return []  # unprotecting and replacing in one update is allowed (the engine checks both)
        message = (
            f'unable to replace resource "{urn}"\nas it is currently marked for protection. To unprotect the '
            "resource, remove the `protect` flag from the resource in your Pulumi program and run `pulumi up`"
        )
    safe = next((step for suffix, step in SAFE_STEPS.items() if entry.name.endswith(suffix)), DEFAULT_SAFE_STEP)
    why = f" (changes {', '.join(entry.replace_because)})" if entry.replace_because else ""
    return [f"error: {message}\n{entry.name}{why}: {safe}"]
