"""The acceptance report: what the checks of the last `up` found, as Markdown, for people and for CI.

    python -m stacks.acceptance_report STACK [--out report.md]
    python -m stacks.acceptance_report --checks checks.json --logs DIR [--out report.md]

The first form reads the stack output `acceptance` (`pulumi stack output acceptance --json --stack STACK`),
each check's Job (`kubectl get job`: its conditions, start and end times) and its pods' logs (`kubectl logs`),
with the kubeconfig in KUBECONFIG; the second reads them from files: `DIR/<check id>.log` and, when saved,
`DIR/<check id>.job.json` (`kubectl get job -o json`). Every check ends with one `ACCEPTANCE {json}` line per
pod that reports (components/acceptance/checks/lib.sh). One row per check: the pods' results together (the
worst wins), the Job's state, when it started and ended, and the run (`acceptance.run`) it belongs to. A check
without a result line failed; its Job says why: it hit its deadline (pods not scheduled in time, or a run
that did not end), its pod failed before reporting (crashed: the pod's log says why), it is still queued or
running, or it is gone. Exit status 1 when a check that is not advisory failed, naming it and its node; 0
otherwise (advisory failures are listed, marked advisory; skipped checks are listed with the reason).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from stacks.cli import emit

MARK = "ACCEPTANCE "
ORDER = {"failed": 0, "no result": 1, "skipped": 2, "passed": 3}


@dataclass(frozen=True)
class Result:
    check: str
    node: str
    status: str  # passed / failed / skipped / no result
    advisory: bool
    value: str = ""
    floor: str = ""
    unit: str = ""
    detail: str = ""
    job_state: str = ""
    started: str = ""
    ended: str = ""
    run: str = ""

    @property
    def blocking(self) -> bool:
        return self.status in ("failed", "no result") and not self.advisory


def job_state(job: Optional[dict[str, Any]]) -> tuple[str, str, str, str]:
    """(state, why there is no result, started, ended) from a Job object (None: the Job is gone)."""
    if job is None:
        return "gone", "the Job is gone (deleted, or never created: the `up` stopped before it)", "", ""
    status = job.get("status", {})
    started, ended = status.get("startTime", ""), status.get("completionTime", "")
    conditions = {c["type"]: c for c in status.get("conditions", []) if c.get("status") == "True"}
    if "Failed" in conditions:
        cond = conditions["Failed"]
        ended = ended or cond.get("lastTransitionTime", "")
        reason = cond.get("reason", "")
        if reason == "DeadlineExceeded":
            why = (
                "the Job hit its deadline before a result: its pods were not scheduled in time "
                "(resources not allocatable) or the run did not end"
            )
        else:
            why = f"its pod failed before printing a result (crashed; {reason or 'no reason'}: see the pod's log)"
        return f"Failed ({reason})" if reason else "Failed", why, started, ended
    if "Complete" in conditions:
        return "Complete", "the Job completed but its pods printed no result line", started, ended
    if job.get("spec", {}).get("suspend") or "Suspended" in conditions:
        return "Suspended", "the Job is still queued (suspended, not admitted)", started, ended
    return "Running", "the Job is still running", started, ended


def parse(check_id: str, meta: dict[str, str], log: str, job: Optional[dict[str, Any]] = None) -> Result:
    """One check's row: its pods' result lines together (the worst status wins), with its Job's state."""
    advisory = meta.get("advisory") == "true"
    state, why, started, ended = job_state(job) if job is not None or meta.get("jobRead") else ("", "", "", "")
    rows = [json.loads(line[len(MARK) :]) for line in log.splitlines() if line.startswith(MARK)]
    common = dict(job_state=state, started=started, ended=ended, run=meta.get("run", ""))
    if not rows:
        detail = f"no result from Job {meta.get('namespace', '?')}/{meta.get('job', '?')}: " + (
            why or "its pods did not run to the end, or the Job is gone"
        )
        return Result(check_id, meta.get("node", ""), "no result", advisory, detail=detail, **common)
    worst = min(rows, key=lambda r: ORDER.get(r["status"], 0))
    detail = worst.get("detail", "")
    if len(rows) > 1:
        detail += f" ({len(rows)} pods reported, {sum(r['status'] == 'passed' for r in rows)} passed)"
    return Result(
        check=worst.get("check", check_id),
        node=worst.get("node") or meta.get("node", ""),
        status=worst["status"],
        advisory=advisory,
        value=worst.get("value", ""),
        floor=worst.get("floor", ""),
        unit=worst.get("unit", ""),
        detail=detail,
        **common,
    )


def report(results: list[Result]) -> str:
    failed = [r for r in results if r.blocking]
    advisory = [r for r in results if r.status in ("failed", "no result") and r.advisory]
    passed = sum(r.status == "passed" for r in results)
    skipped = sum(r.status == "skipped" for r in results)
    lines = [
        "# Acceptance checks",
        "",
        f"{len(results)} checks: {passed} passed, {len(failed)} failed, {len(advisory)} failed (advisory), "
        f"{skipped} skipped.",
        "",
        "| check | node | result | measured | floor | Job | started | ended | run | detail |",
        "|---|---|---|---:|---:|---|---|---|---:|---|",
    ]
    for r in sorted(results, key=lambda r: (not r.blocking, ORDER.get(r.status, 0), r.check, r.node)):
        status = f"{r.status} (advisory)" if r.advisory and r.status in ("failed", "no result") else r.status
        measured = f"{r.value} {r.unit}".strip()
        floor = f"{r.floor} {r.unit}".strip() if r.floor else ""
        lines.append(
            f"| {r.check} | {r.node or '-'} | {status} | {measured} | {floor} | {r.job_state or '-'} | "
            f"{r.started or '-'} | {r.ended or '-'} | {r.run or '-'} | {r.detail} |"
        )
    return "\n".join(lines) + "\n"


def _kubectl_json(*args: str) -> Optional[dict[str, Any]]:
    proc = subprocess.run(["kubectl", *args, "-o", "json"], capture_output=True, text=True)
    return json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else None


def collect_live(stack: str) -> list[Result]:
    checks = json.loads(
        subprocess.run(
            ["pulumi", "stack", "output", "acceptance", "--json", "--stack", stack],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    results = []
    for check_id, meta in sorted(checks.items()):
        job = _kubectl_json("get", "job", "-n", meta["namespace"], meta["job"])
        logs = subprocess.run(
            [
                "kubectl",
                "logs",
                "-n",
                meta["namespace"],
                "-l",
                f"batch.kubernetes.io/job-name={meta['job']}",
                "--tail=-1",
            ],
            capture_output=True,
            text=True,
        )
        results.append(parse(check_id, {**meta, "jobRead": "true"}, logs.stdout, job))
    return results


def collect_files(checks_file: Path, logs: Path) -> list[Result]:
    checks = json.loads(checks_file.read_text())
    results = []
    for check_id, meta in sorted(checks.items()):
        log, job_file = logs / f"{check_id}.log", logs / f"{check_id}.job.json"
        job = json.loads(job_file.read_text()) if job_file.exists() else None
        results.append(parse(check_id, meta, log.read_text() if log.exists() else "", job))
    return results


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.acceptance_report", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", nargs="?", help="read the stack output, the Jobs and the pods' logs (pulumi, kubectl)")
    parser.add_argument("--checks", type=Path, help="the `acceptance` stack output as JSON, instead of the stack")
    parser.add_argument("--logs", type=Path, help="with --checks: a directory of <check id>.log (and .job.json) files")
    parser.add_argument("--out", type=Path, help="write the Markdown here (else standard output)")
    args = parser.parse_args(argv)
    if args.checks:
        results = collect_files(args.checks, args.logs or Path("."))
    elif args.stack:
        results = collect_live(args.stack)
    else:
        parser.error("give STACK, or --checks FILE --logs DIR")
    text = report(results)
    emit(text, args.out)
    for r in results:
        if r.blocking:
            print(f"acceptance check {r.check} failed on {r.node or '?'}: {r.detail}", file=sys.stderr)
    return 1 if any(r.blocking for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
