"""A check's verdict from its evidence record: the one rule the driver (checks/driver.py, which carries this file
in its program) and the report (stacks/acceptance_report.py) apply, and that lib.sh's `finish` applies to derive
the check's exit status. Standard library only, no `from __future__`: it is pasted into the driver's program.

A check prints one line `ACCEPTANCE {record}` whose `claim` is what the check concluded (passed, failed,
skipped) and whose `evidence` is what it measured: `measured` (what), `amounts` (numbers: bytes, GPUs, pods),
`expected` (the amounts the check asked for: each must be met exactly), `durations_ms` (on a monotonic clock),
`digests` (SHA-256 of what was written and read back: all equal), `bound` (`ceiling` where the value must stay
at most its limit, e.g. an age), `at` and `ended` (UTC). A claim of passed
stands only on positive evidence: a decimal value above 0 and at its floor (there must be one), every amount as
expected or, where nothing was asked of it, above 0, a duration above 0 for a rate, digests that agree. A claim
without it is `unverified`; skipped and unverified are never passed, and both exit non-zero (3) so the Job is
not Complete and the next `up` runs it again.
"""

import re

MARK = "ACCEPTANCE "
# The exit status of each verdict (advisory checks exit 0 whatever they found: they report, they do not block).
EXIT = {"passed": 0, "failed": 1, "skipped": 3, "unverified": 3}
# Worst first: the order a group of records is summed up in.
ORDER = ("failed", "unverified", "skipped", "passed")
_NUMBER = re.compile(r"^[0-9]+(\.[0-9]+)?$")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def _number(text) -> bool:
    return isinstance(text, str) and bool(_NUMBER.match(text))


def _mapping(value) -> dict:
    """A part of the evidence as name -> text; anything else (a list, a number) reads as nothing."""
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def verdict(record: dict) -> tuple:
    """(status, why): passed, failed, skipped or unverified, and what made it so ("" when passed)."""
    claim = record.get("claim", record.get("status"))  # a record of an older check program: its status
    if claim == "failed":
        return "failed", ""
    if claim in ("skipped", "unverified"):
        return claim, ""
    if claim != "passed":
        return "failed", f"the record claims {claim!r}, not passed, failed or skipped"
    evidence = record.get("evidence")
    if not isinstance(evidence, dict):
        return "unverified", "the record carries no evidence"
    value, floor = record.get("value", ""), record.get("floor", "")
    # `bound`: the floor is a floor (a rate: above 0 and at least the floor) or a ceiling (an age: at most it).
    ceiling = evidence.get("bound") == "ceiling"
    problems = []
    if not _number(value) or (float(value) <= 0 and not ceiling):
        problems.append(f"the measured value {value!r} is not a decimal number{'' if ceiling else ' above 0'}")
    elif floor == "":
        problems.append(f"there is no {'ceiling' if ceiling else 'floor'} to compare it with")
    else:
        if not _number(floor):
            problems.append(f"the {'ceiling' if ceiling else 'floor'} {floor!r} is not a decimal number")
        elif ceiling and float(value) > float(floor):
            return "failed", f"{value} is above the ceiling of {floor}"
        elif not ceiling and float(value) < float(floor):
            return "failed", f"{value} is below the floor of {floor}"
    amounts, expected = _mapping(evidence.get("amounts")), _mapping(evidence.get("expected"))
    for name, want in sorted(expected.items()):
        got = amounts.get(name, "")
        if not (_number(got) and _number(want) and float(got) == float(want)):
            return "failed", f"{name} is {got or 'missing'}, {want} was asked"
    # An amount with no exact expectation (a count read) must be above 0.
    problems += [
        f"{name} is {got!r}, not above 0"
        for name, got in sorted(amounts.items())
        if name not in expected and (not _number(got) or float(got) <= 0)
    ]
    durations = _mapping(evidence.get("durations_ms"))
    rate = str(record.get("unit", "")).endswith("/s")
    if rate and not any(_number(ms) and float(ms) > 0 for ms in durations.values()):
        problems.append("a rate without a duration above 0 on a monotonic clock")
    digests = _mapping(evidence.get("digests"))
    bad = sorted(name for name, hexdigest in digests.items() if not _DIGEST.match(str(hexdigest)))
    if bad:
        problems.append(f"digest {', '.join(bad)} is not a SHA-256")
    elif len(set(digests.values())) > 1:
        return "failed", "the digests differ: " + ", ".join(f"{n} {d[:12]}" for n, d in sorted(digests.items()))
    if not evidence.get("measured"):
        problems.append("it names nothing it measured")
    return ("unverified", "; ".join(problems)) if problems else ("passed", "")


def worst(statuses) -> str:
    """The status of several records together (the worst wins; none: unverified)."""
    found = list(statuses)
    return min(found, key=ORDER.index) if found else "unverified"


def records(log: str) -> list:
    """The `ACCEPTANCE` records of a log; a line that is not JSON is a record without evidence."""
    import json

    found = []
    for line in log.splitlines():
        if line.startswith(MARK):
            try:
                row = json.loads(line[len(MARK) :])
            except ValueError:
                row = {"claim": "garbage", "detail": line[:200]}
            found.append(row if isinstance(row, dict) else {"claim": "garbage"})
    return found
