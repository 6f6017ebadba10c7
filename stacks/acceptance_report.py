"""The acceptance report: what the checks of the last `up` found, as Markdown, for people and for CI.

    python -m stacks.acceptance_report STACK [--out report.md]
    python -m stacks.acceptance_report --checks checks.json --logs DIR [--out report.md]

The first form reads the stack output `acceptance` (`pulumi stack output acceptance --json --stack STACK`)
and each check's pod logs (`kubectl logs`, with the kubeconfig in KUBECONFIG); the second reads both from
files (`DIR/<check id>.log`), e.g. logs saved earlier. Every check ends with one `ACCEPTANCE {json}` line
(components/acceptance/checks/lib.sh). A check without one never ran to the end (its pods were not scheduled, or
the Job is gone): it counts as failed. Exit status 1 when a check that is not advisory failed, naming it
and its node; 0 otherwise (advisory failures are listed, marked advisory).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from stacks.cli import emit

MARK = "ACCEPTANCE "


@dataclass(frozen=True)
class Result:
    check: str
    node: str
    status: str  # passed / failed / no result
    advisory: bool
    value: str = ""
    floor: str = ""
    unit: str = ""
    detail: str = ""

    @property
    def blocking(self) -> bool:
        return self.status != "passed" and not self.advisory


def parse(check_id: str, meta: dict[str, str], log: str) -> list[Result]:
    """The results a check's log reports (one per pod that reached the end), or one `no result`."""
    advisory = meta.get("advisory") == "true"
    results = []
    for line in log.splitlines():
        if not line.startswith(MARK):
            continue
        data = json.loads(line[len(MARK) :])
        results.append(
            Result(
                check=data.get("check", check_id),
                node=data.get("node") or meta.get("node", ""),
                status=data["status"],
                advisory=advisory,
                value=data.get("value", ""),
                floor=data.get("floor", ""),
                unit=data.get("unit", ""),
                detail=data.get("detail", ""),
            )
        )
    if not results:
        detail = (
            f"no result from Job {meta.get('namespace', '?')}/{meta.get('job', '?')}: its pods did not run to the "
            "end (not scheduled in time, e.g. resources not allocatable; or the Job is gone)"
        )
        results.append(Result(check_id, meta.get("node", ""), "no result", advisory, detail=detail))
    return results


def report(results: list[Result]) -> str:
    failed = [r for r in results if r.blocking]
    advisory = [r for r in results if r.status != "passed" and r.advisory]
    passed = sum(r.status == "passed" for r in results)
    lines = [
        "# Acceptance checks",
        "",
        f"{passed} passed, {len(failed)} failed, {len(advisory)} failed (advisory) of {len(results)}.",
        "",
        "| check | node | result | measured | floor | detail |",
        "|---|---|---|---:|---:|---|",
    ]
    for r in sorted(results, key=lambda r: (not r.blocking, r.status == "passed", r.check, r.node)):
        status = f"{r.status} (advisory)" if r.advisory and r.status != "passed" else r.status
        measured = f"{r.value} {r.unit}".strip()
        floor = f"{r.floor} {r.unit}".strip() if r.floor else ""
        lines.append(f"| {r.check} | {r.node or '-'} | {status} | {measured} | {floor} | {r.detail} |")
    return "\n".join(lines) + "\n"


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
        results += parse(check_id, meta, logs.stdout)
    return results


def collect_files(checks_file: Path, logs: Path) -> list[Result]:
    checks = json.loads(checks_file.read_text())
    results = []
    for check_id, meta in sorted(checks.items()):
        log = logs / f"{check_id}.log"
        results += parse(check_id, meta, log.read_text() if log.exists() else "")
    return results


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.acceptance_report", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", nargs="?", help="read the stack output and the pods' logs (pulumi, kubectl)")
    parser.add_argument("--checks", type=Path, help="the `acceptance` stack output as JSON, instead of the stack")
    parser.add_argument("--logs", type=Path, help="with --checks: a directory of <check id>.log files")
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
