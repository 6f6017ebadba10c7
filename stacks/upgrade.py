"""Operate a running RKE2 upgrade: retry a Plan whose upgrade Job failed.

    python -m stacks.upgrade retry PLAN [--kubeconfig FILE]

The system-upgrade-controller keeps a failed upgrade Job (deadline exceeded, a drain that never
finished) until its TTL and creates no new Job for that node until the Plan changes (the Plan CRD's
`jobActiveDeadlineSecs`: "the Plan will stop processing until it is updated to trigger a redeploy").
`retry` does both halves with the cluster's kubectl: it deletes the Plan's failed Jobs (their nodes
stay cordoned; the new Job drains them again) and touches the Plan (annotation
`ml-platform.io/retry-at`), so the controller syncs it and creates the Jobs again. Fix the cause first
(docs/runbook.md, upgrading RKE2: a PodDisruptionBudget that allows no eviction, a pod without a
controller). Exit status 2 for a PLAN that is not one of the program's Plans, 1 when kubectl fails.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import UTC, datetime
from typing import Optional

from components.cluster.upgrades import NAMESPACE, POOLS, SERVER_PLAN, agent_plan_name

PLANS = (SERVER_PLAN, *(agent_plan_name(pool) for pool in POOLS))
RETRY_ANNOTATION = "ml-platform.io/retry-at"
PLAN_LABEL = "upgrade.cattle.io/plan"  # on every Job the controller creates, the Plan's name
NODE_LABEL = "upgrade.cattle.io/node"


def retry_commands(plan: str, failed_jobs: list[str], now: str) -> list[list[str]]:
    """The kubectl calls that retry `plan`: delete its failed Jobs, then touch the Plan."""
    return [
        *(["delete", "job", "-n", NAMESPACE, job] for job in failed_jobs),
        ["annotate", "--overwrite", "-n", NAMESPACE, f"plan/{plan}", f"{RETRY_ANNOTATION}={now}"],
    ]


def failed_jobs(jobs: dict) -> list[tuple[str, str, str]]:
    """(job, node, why) of every Job in a `kubectl get jobs -o json` list whose condition Failed is True."""
    found = []
    for job in jobs.get("items", []):
        for condition in job.get("status", {}).get("conditions", []):
            if condition.get("type") == "Failed" and condition.get("status") == "True":
                why = f"{condition.get('reason', '')}: {condition.get('message', '')}".strip(": ")
                node = job["metadata"].get("labels", {}).get(NODE_LABEL, "?")
                found.append((job["metadata"]["name"], node, why))
    return sorted(found)


def retry(plan: str, kubectl: list[str]) -> int:
    listed = _kubectl(kubectl, ["get", "jobs", "-n", NAMESPACE, "-l", f"{PLAN_LABEL}={plan}", "-o", "json"])
    if listed is None:
        return 1
    failed = failed_jobs(json.loads(listed))
    for job, node, why in failed:
        print(f"failed: {job} on node {node} ({why})")
    if not failed:
        print(f"no failed Job of {plan} is left (deleted after its TTL, or none failed); touching the Plan")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for args in retry_commands(plan, [job for job, _, _ in failed], now):
        if _kubectl(kubectl, args) is None:
            return 1
    print(
        f"retried {plan}: {len(failed)} failed Job(s) deleted, Plan touched; watch: "
        f"kubectl -n {NAMESPACE} get jobs -l {PLAN_LABEL}={plan} -w"
    )
    return 0


def _kubectl(kubectl: list[str], args: list[str]) -> Optional[str]:
    result = subprocess.run([*kubectl, *args], capture_output=True, text=True)
    if result.returncode != 0:
        print(f"error: kubectl {' '.join(args)}: {result.stderr.strip()}", file=sys.stderr)
        return None
    return result.stdout


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.upgrade", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    retry_parser = sub.add_parser("retry", help="delete a Plan's failed upgrade Jobs and touch the Plan")
    retry_parser.add_argument("plan", help=f"one of {', '.join(PLANS)}")
    retry_parser.add_argument("--kubeconfig", help="default: $KUBECONFIG, as kubectl reads it")
    args = parser.parse_args(argv)
    if args.plan not in PLANS:
        print(
            f"error: plan: {args.plan!r} is not an upgrade Plan of this program; use one of {', '.join(PLANS)}",
            file=sys.stderr,
        )
        return 2
    kubectl = ["kubectl", *([f"--kubeconfig={args.kubeconfig}"] if args.kubeconfig else [])]
    return retry(args.plan, kubectl)


if __name__ == "__main__":
    sys.exit(main())
