"""The post-`up` report: one row per check with its Job's state, times and run; counts of checks, not pods."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stacks import acceptance_report

HOME = "ml-platform-acceptance"


def meta(job: str, node: str, advisory: bool = False) -> dict[str, str]:
    return {
        "job": job,
        "namespace": HOME,
        "node": node,
        "advisory": str(advisory).lower(),
        "timeoutSeconds": "600",
        "run": "3",
    }


def line(
    check: str,
    node: str,
    status: str,
    value: str = "",
    floor: str = "",
    unit: str = "",
    detail: str = "ok",
    advisory=False,
    ended: str = "2026-11-27T10:02:00Z",
    **evidence: object,
) -> str:
    """A record as lib.sh prints it; a passed one with positive evidence (a measurement, a duration) unless
    `evidence` says otherwise."""
    found = {"measured": "test", "ended": ended, "amounts": {}, "durations_ms": {"run": "1500"}, "digests": {}}
    return "ACCEPTANCE " + json.dumps(
        {
            "check": check,
            "node": node,
            "claim": status,
            "status": status,
            "value": value,
            "floor": floor,
            "unit": unit,
            "advisory": advisory,
            "detail": detail,
            "evidence": {**found, **evidence},
        }
    )


def job(*conditions: tuple[str, str], start="2026-11-27T10:00:00Z", end="", suspend=False) -> dict:
    return {
        "spec": {"suspend": suspend},
        "status": {
            "startTime": start,
            **({"completionTime": end} if end else {}),
            "conditions": [
                {"type": t, "status": "True", "reason": r, "lastTransitionTime": "2026-11-27T10:10:00Z"}
                for t, r in conditions
            ],
        },
    }


def fabricated(tmp_path: Path, advisory: bool = False) -> tuple[Path, Path]:
    checks = {
        "gpu-gpu-07": meta("acceptance-gpu-gpu-07", "gpu-07", advisory),
        "nccl-ib-gpu-03-gpu-04": meta("acceptance-nccl-ib-gpu-03-gpu-04", "gpu-03,gpu-04"),
        "gpu-gpu-08": meta("acceptance-gpu-gpu-08", "gpu-08"),
        "gang": meta("acceptance-gang", ""),
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    failed = line(
        "gpu-gpu-07", "gpu-07", "failed", "7", "8", "GPUs", "the pod sees 7 GPUs, the inventory gives 8", advisory
    )
    (logs / "gpu-gpu-07.log").write_text(f"some output\n{failed}\n")
    (logs / "gpu-gpu-07.job.json").write_text(json.dumps(job(("Failed", "BackoffLimitExceeded"))))
    (logs / "nccl-ib-gpu-03-gpu-04.log").write_text(
        line("nccl-ib-gpu-03-gpu-04", "gpu-03,gpu-04", "passed", "42.5", "40.0", "GB/s") + "\n"
    )
    complete = job(("Complete", ""), end="2026-11-27T10:03:12Z")
    (logs / "nccl-ib-gpu-03-gpu-04.job.json").write_text(json.dumps(complete))
    (logs / "gpu-gpu-08.log").write_text(line("gpu-gpu-08", "gpu-08", "passed", "8", "8", "GPUs") + "\n")
    # The gang's two pods both report: one check, one row.
    (logs / "gang.log").write_text(
        "\n".join(line("gang", "", "passed", "2", "2", "pods", f"pod {i} of 2") for i in range(2)) + "\n"
    )
    (logs / "gang.job.json").write_text(json.dumps(complete))
    path = tmp_path / "checks.json"
    path.write_text(json.dumps(checks))
    return path, logs


def test_one_row_per_check_with_its_job_state_times_and_run(tmp_path, capsys):
    checks, logs = fabricated(tmp_path)
    out = tmp_path / "report.md"
    assert acceptance_report.main(["--checks", str(checks), "--logs", str(logs), "--out", str(out)]) == 1
    assert "acceptance check gpu-gpu-07 failed on gpu-07: the pod sees 7 GPUs" in capsys.readouterr().err
    text = out.read_text()
    assert "4 checks: 3 passed, 1 failed, 0 failed (advisory), 0 skipped, 0 unverified." in text  # checks, not pods
    assert (
        "| gpu-gpu-07 | gpu-07 | failed | 7 GPUs | 8 GPUs | Failed (BackoffLimitExceeded) | 2026-11-27T10:00:00Z | "
        "2026-11-27T10:10:00Z | 3 |" in text
    )
    assert (
        "| nccl-ib-gpu-03-gpu-04 | gpu-03,gpu-04 | passed | 42.5 GB/s | 40.0 GB/s | Complete | 2026-11-27T10:00:00Z | "
        "2026-11-27T10:03:12Z | 3 |" in text
    )
    assert "| gang | - | passed | 2 pods | 2 pods | Complete |" in text and "(2 pods reported, 2 passed)" in text
    assert text.count("| gang |") == 1


def test_report_advisory_failure_does_not_fail(tmp_path, capsys):
    checks, logs = fabricated(tmp_path, advisory=True)
    assert acceptance_report.main(["--checks", str(checks), "--logs", str(logs)]) == 0
    captured = capsys.readouterr()
    assert "| gpu-gpu-07 | gpu-07 | failed (advisory) |" in captured.out and captured.err == ""


def test_a_check_without_a_result_says_why_from_its_job(tmp_path, capsys):
    checks, logs = fabricated(tmp_path)
    cases = {
        "crashed": (
            job(("Failed", "BackoffLimitExceeded")),
            "its pod failed before printing a result (crashed; BackoffLimitExceeded",
        ),
        "deadline": (
            job(("Failed", "DeadlineExceeded")),
            "the Job hit its deadline before a result: its pods were not scheduled in time",
        ),
        "queued": (job(suspend=True, start=""), "the Job is still queued (suspended, not admitted)"),
    }
    for case, (state, why) in cases.items():
        (logs / "gpu-gpu-08.log").write_text("Traceback: something broke\n")  # no result line
        (logs / "gpu-gpu-08.job.json").write_text(json.dumps(state))
        assert acceptance_report.main(["--checks", str(checks), "--logs", str(logs)]) == 1, case
        err = capsys.readouterr().err
        assert (
            f"acceptance check gpu-gpu-08 failed on gpu-08: no result from Job {HOME}/acceptance-gpu-gpu-08: {why}"
            in err
        ), case
    (logs / "gpu-gpu-08.job.json").unlink()
    (logs / "gpu-gpu-08.log").unlink()
    assert acceptance_report.main(["--checks", str(checks), "--logs", str(logs)]) == 1
    assert (
        "no result from Job ml-platform-acceptance/acceptance-gpu-gpu-08: its pods did not run"
        in capsys.readouterr().err
    )


def test_a_skipped_check_is_listed_and_is_not_passed(tmp_path, capsys):
    checks, logs = fabricated(tmp_path)
    (logs / "gpu-gpu-07.log").write_text(line("gpu-gpu-07", "gpu-07", "skipped", detail="node cordoned") + "\n")
    assert acceptance_report.main(["--checks", str(checks), "--logs", str(logs)]) == 3
    captured = capsys.readouterr()
    assert "4 checks: 3 passed, 0 failed, 0 failed (advisory), 1 skipped, 0 unverified." in captured.out
    assert "the next `up` runs them again" in captured.out and "| skipped |" in captured.out
    assert "acceptance check gpu-gpu-07 skipped on gpu-07: node cordoned" in captured.err


def test_every_check_skipped_exits_non_zero_and_says_nothing_was_measured(tmp_path, capsys):
    checks, logs = fabricated(tmp_path)
    for check_id, node in [
        ("gpu-gpu-07", "gpu-07"),
        ("nccl-ib-gpu-03-gpu-04", "gpu-03,gpu-04"),
        ("gpu-gpu-08", "gpu-08"),
    ]:
        (logs / f"{check_id}.log").write_text(line(check_id, node, "skipped", detail="GPUs in use") + "\n")
    (logs / "gang.log").write_text(line("gang", "", "skipped", detail="no node") + "\n")
    assert acceptance_report.main(["--checks", str(checks), "--logs", str(logs)]) == 3
    out = capsys.readouterr().out
    assert "4 checks: 0 passed, 0 failed, 0 failed (advisory), 4 skipped, 0 unverified. None passed" in out
    # Advisory or not: a report with nothing passed is never green.
    (tmp_path / "advisory").mkdir()
    advisory_checks, advisory_logs = fabricated(tmp_path / "advisory", advisory=True)
    for log in advisory_logs.glob("*.log"):
        log.write_text(line(log.stem, "", "skipped", advisory=True) + "\n")
    assert acceptance_report.main(["--checks", str(advisory_checks), "--logs", str(advisory_logs)]) == 3


@pytest.mark.parametrize(
    ("record", "status", "why"),
    [
        # A pass claimed with no evidence at all (an older program, or a forged line).
        (
            'ACCEPTANCE {"check":"gpu-gpu-08","node":"gpu-08","status":"passed","value":"8","floor":"8","unit":"GPUs"}',
            "unverified",
            "carries no evidence",
        ),
        # A rate without a duration.
        (line("gpu-gpu-08", "gpu-08", "passed", "900", "100", "MiB/s", durations_ms={}), "unverified", "duration"),
        # A decimal comma, as a locale would print it.
        (line("gpu-gpu-08", "gpu-08", "passed", "42,5", "40", "GB/s"), "unverified", "not a decimal number"),
        # A zero count.
        (line("gpu-gpu-08", "gpu-08", "passed", "0", "", "GPUs"), "unverified", "not a decimal number above 0"),
        # Stale: a record that ended before its Job started (a log of an earlier run).
        (line("gpu-gpu-08", "gpu-08", "passed", "8", "8", "GPUs", ended="2026-11-26T09:00:00Z"), "unverified", "stale"),
        # Partial write: less than was asked.
        (
            line(
                "gpu-gpu-08",
                "gpu-08",
                "passed",
                "8",
                "8",
                "GPUs",
                amounts={"bytes": "1048576"},
                expected={"bytes": "1073741824"},
            ),
            "failed",
            "bytes is 1048576, 1073741824 was asked",
        ),
        # A read-back that differs.
        (
            line("gpu-gpu-08", "gpu-08", "passed", "8", "8", "GPUs", digests={"written": "a" * 64, "read": "b" * 64}),
            "failed",
            "the digests differ",
        ),
        # Evidence of the wrong shape (a list where names were expected) reads as none, and does not crash.
        (
            line("gpu-gpu-08", "gpu-08", "passed", "900", "100", "MiB/s", durations_ms=["1500"]),
            "unverified",
            "duration",
        ),
        # Garbage after the mark.
        ("ACCEPTANCE {not json", "failed", "claims 'garbage'"),
    ],
)
def test_the_report_derives_the_status_from_the_evidence_not_the_claim(tmp_path, capsys, record, status, why):
    checks, logs = fabricated(tmp_path)
    (logs / "gpu-gpu-08.log").write_text(record + "\n")
    (logs / "gpu-gpu-08.job.json").write_text(json.dumps(job(("Complete", ""), end="2026-11-27T10:03:12Z")))
    acceptance_report.main(["--checks", str(checks), "--logs", str(logs)])
    out = capsys.readouterr().out
    row = next(r for r in out.splitlines() if r.startswith("| gpu-gpu-08 |"))
    assert f"| {status} |" in row and why in row, row
