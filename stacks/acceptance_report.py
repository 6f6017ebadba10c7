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
running, or it is gone. Each record's status is derived from its evidence (components/acceptance/checks/evidence.py),
not taken from what it claims; a record that ended before its Job started is stale (unverified). Exit status 1
when a check that is not advisory failed, naming it and its node; 3 when none failed but one is skipped or
unverified, or none passed at all (all skipped: non-zero); 0 when every check passed (advisory failures are
listed, marked advisory). The gang check's row shows its PodGroup's phase (Volcano).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from stacks.cli import emit

EVIDENCE = Path(__file__).resolve().parent.parent / "components" / "acceptance" / "checks" / "evidence.py"

MARK = "ACCEPTANCE "
ORDER = {"failed": 0, "no result": 1, "unverified": 2, "skipped": 3, "passed": 4}
# The verdict rule the checks and the driver apply (a file the driver's program carries, so not a package).
_spec = importlib.util.spec_from_file_location("acceptance_evidence", EVIDENCE)
evidence = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(evidence)  # type: ignore[union-attr]


@dataclass(frozen=True)
class Result:
    check: str
    node: str
    status: str  # passed / failed / skipped / unverified / no result
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

    @property
    def green(self) -> bool:
        return self.status == "passed"


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


def judged(row: dict, job_started: str) -> tuple[str, str]:
    """A record's status derived from its evidence (evidence.py), never taken from what it says of itself; a record
    that ended before its Job started is stale (a log of an earlier run): unverified."""
    status, why = evidence.verdict(row)
    ended = (row.get("evidence") or {}).get("ended", "") if isinstance(row.get("evidence"), dict) else ""
    if status == "passed" and job_started and ended and ended < job_started:
        return "unverified", f"stale: the record ended {ended}, before its Job started ({job_started})"
    return status, why


def parse(check_id: str, meta: dict[str, str], log: str, job: Optional[dict[str, Any]] = None) -> Result:
    """One check's row: its pods' records together (the worst status wins), with its Job's state."""
    advisory = meta.get("advisory") == "true"
    state, why, started, ended = job_state(job) if job is not None or meta.get("jobRead") else ("", "", "", "")
    rows = evidence.records(log)
    common = dict(job_state=state, started=started, ended=ended, run=meta.get("run", ""))
    if not rows:
        detail = f"no result from Job {meta.get('namespace', '?')}/{meta.get('job', '?')}: " + (
            why or "its pods did not run to the end, or the Job is gone"
        )
        return Result(check_id, meta.get("node", ""), "no result", advisory, detail=detail, **common)
    judgements = [judged(row, started) for row in rows]
    status = evidence.worst(status for status, _ in judgements)
    worst_row, (_, reason) = next((r, j) for r, j in zip(rows, judgements, strict=True) if j[0] == status)
    detail = str(worst_row.get("detail", ""))
    if reason and reason not in detail:
        detail += f" ({status}: {reason})"
    if len(rows) > 1:
        detail += f" ({len(rows)} pods reported, {sum(j[0] == 'passed' for j in judgements)} passed)"
    if meta.get("podGroupPhase"):
        detail += f"; PodGroup {meta.get('podGroup', '')} phase {meta['podGroupPhase']}"
    return Result(
        check=str(worst_row.get("check", check_id)),
        node=str(worst_row.get("node") or meta.get("node", "")),
        status=status,
        advisory=advisory,
        value=str(worst_row.get("value", "")),
        floor=str(worst_row.get("floor", "")),
        unit=str(worst_row.get("unit", "")),
        detail=detail,
        **common,
    )


def parse_rows(check_id: str, meta: dict[str, str], log: str, job: Optional[dict[str, Any]] = None) -> list[Result]:
    """A check's rows: one, or with `perNode` (a group's driver that runs the check on each of its nodes) one per
    node the check covers, so every node's result is named; a node without a record has no result."""
    if meta.get("perNode") != "true":
        return [parse(check_id, meta, log, job)]
    by_node: dict[str, list[str]] = {node: [] for node in meta.get("node", "").split(",") if node}
    for line in log.splitlines():
        if line.startswith(MARK):
            rows = evidence.records(line)
            by_node.setdefault(str(rows[0].get("node", "")) if rows else "", []).append(line)
    return [parse(check_id, {**meta, "node": node}, "\n".join(lines), job) for node, lines in sorted(by_node.items())]


def with_history(results: list[Result], checks: dict[str, dict[str, str]], path: Path) -> list[Result]:
    """Checks run on each node of a group in turn (`everyRuns` in their stack output) keep, in the file `path`, the
    runs they ran (each Job's start) and each node's last passed run. A node that has not passed within the last
    `everyRuns` runs (busy each time: skipped) fails, naming its last pass: a node never free is never checked."""
    history = json.loads(path.read_text()) if path.exists() else {}
    rows = {r.check for r in results}
    out = []
    for check_id, meta in checks.items():
        if not meta.get("everyRuns") or check_id not in rows:
            continue
        entry = history.setdefault(check_id, {"runs": [], "passed": {}})
        mine = [r for r in results if r.check == check_id]
        run = next((r.started for r in mine if r.started), "") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if run not in entry["runs"]:
            entry["runs"] = [*entry["runs"], run][-100:]
        for r in mine:
            if r.green:
                entry["passed"][r.node] = run
    every = {c: int(m["everyRuns"]) for c, m in checks.items() if m.get("everyRuns")}
    for r in results:
        entry = history.get(r.check)
        if entry is None or r.green or r.check not in every:
            out.append(r)
            continue
        last = entry["passed"].get(r.node, "")
        # Only once there have been that many runs; the run that checks the node is what fixes it.
        if len(entry["runs"]) >= every[r.check] and last not in entry["runs"][-every[r.check] :]:
            detail = f"{r.detail}; not checked within the last {every[r.check]} runs (last passed: {last or 'never'})"
            r = replace(r, status="failed", detail=detail)
        out.append(r)
    path.write_text(json.dumps(history, indent=1, sort_keys=True) + "\n")
    return out


def summary(results: list[Result]) -> str:
    """The summary line: every state counted; what is not green said first."""
    count = {s: sum(r.status == s for r in results) for s in ORDER}
    failed = sum(r.blocking for r in results)
    advisory = sum(r.status in ("failed", "no result") and r.advisory for r in results)
    line = (
        f"{len(results)} checks: {count['passed']} passed, {failed} failed, {advisory} failed (advisory), "
        f"{count['skipped']} skipped, {count['unverified']} unverified."
    )
    if not results:
        return line + " No check reported: nothing was measured."
    if count["passed"] == 0:
        return line + " None passed: nothing was measured."
    if count["skipped"] or count["unverified"]:
        return line + " Skipped and unverified checks are not passed; the next `up` runs them again."
    return line


def exit_status(results: list[Result]) -> int:
    """1: a check that is not advisory failed (or has no result). 3: none failed, but something is not green (a
    check skipped or unverified, or none passed at all). 0: every check passed (advisory failures aside)."""
    if any(r.blocking for r in results):
        return 1
    if not any(r.green for r in results):
        return 3
    if any(r.status in ("skipped", "unverified") and not r.advisory for r in results):
        return 3
    return 0


def report(results: list[Result]) -> str:
    lines = [
        "# Acceptance checks",
        "",
        summary(results),
        "",
        "| check | node | result | measured | floor | Job | started | ended | run | detail |",
        "|---|---|---|---:|---:|---|---|---|---:|---|",
    ]
    for r in sorted(results, key=lambda r: (not r.blocking, ORDER.get(r.status, 0), r.check, r.node)):
        status = f"{r.status} (advisory)" if r.advisory and not r.green else r.status
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


def stack_output(stack: str) -> str:
    command = ["pulumi", "stack", "output", "acceptance", "--json", "--stack", stack]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def collect_live(stack: str) -> list[Result]:
    checks = json.loads(stack_output(stack))
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
        if meta.get("podGroup"):
            group = _kubectl_json("get", "podgroups.scheduling.volcano.sh", "-n", meta["namespace"], meta["podGroup"])
            meta = {**meta, "podGroupPhase": ((group or {}).get("status") or {}).get("phase", "") or "gone"}
        results += parse_rows(check_id, {**meta, "jobRead": "true"}, logs.stdout, job)
    return results


def collect_files(checks_file: Path, logs: Path) -> list[Result]:
    checks = json.loads(checks_file.read_text())
    results = []
    for check_id, meta in sorted(checks.items()):
        log, job_file = logs / f"{check_id}.log", logs / f"{check_id}.job.json"
        job = json.loads(job_file.read_text()) if job_file.exists() else None
        results += parse_rows(check_id, meta, log.read_text() if log.exists() else "", job)
    return results


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.acceptance_report", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", nargs="?", help="read the stack output, the Jobs and the pods' logs (pulumi, kubectl)")
    parser.add_argument("--checks", type=Path, help="the `acceptance` stack output as JSON, instead of the stack")
    parser.add_argument("--logs", type=Path, help="with --checks: a directory of <check id>.log (and .job.json) files")
    parser.add_argument("--out", type=Path, help="write the Markdown here (else standard output)")
    parser.add_argument(
        "--history", type=Path, help="a JSON file kept between reports: nodes not checked within `everyRuns` runs fail"
    )
    args = parser.parse_args(argv)
    if args.checks:
        results = collect_files(args.checks, args.logs or Path("."))
        checks = json.loads(args.checks.read_text())
    elif args.stack:
        results = collect_live(args.stack)
        checks = {}  # read again only for the history (below)
    else:
        parser.error("give STACK, or --checks FILE --logs DIR")
    if args.history:
        if not checks:
            checks = json.loads(stack_output(args.stack))
        results = with_history(results, checks, args.history)
    text = report(results)
    emit(text, args.out)
    for r in results:
        if not r.green and not r.advisory:
            word = "failed" if r.blocking else r.status
            print(f"acceptance check {r.check} {word} on {r.node or '?'}: {r.detail}", file=sys.stderr)
    return exit_status(results)


if __name__ == "__main__":
    raise SystemExit(main())
