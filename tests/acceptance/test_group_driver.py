"""One driver per node group runs the NVLink check on each of its nodes in turn (checks/driver.py, run_each): free
nodes at once, busy ones when they free up, a node never free skipped by name; the report names each node's
result and fails a node not checked within `nvlinkEveryRuns` runs."""

from __future__ import annotations

import json

from stacks import acceptance_report
from tests.acceptance.test_driver import HOME, FakeKube, node, pod, record, run_driver

CHECK = "nccl-nvlink-rack-a"
NODES = ["gpu-01", "gpu-02", "gpu-03"]


class FreeingKube(FakeKube):
    """gpu-02's training pod ends after the driver has looked at the node twice."""

    looks = 0

    def handle(self, method, url, body):
        if "spec.nodeName%3Dgpu-02" in url or "spec.nodeName=gpu-02" in url:
            self.looks += 1
            if self.looks > 2:
                self.pods = [p for p in self.pods if p["spec"]["nodeName"] != "gpu-02"]
        return super().handle(method, url, body)


def nvlink_worker(created: dict) -> tuple[str, str]:
    env = {e["name"]: e["value"] for e in created["spec"]["containers"][0]["env"] if "value" in e}
    assert created["spec"]["nodeSelector"]["kubernetes.io/hostname"] == env["NODE"]
    assert created["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == env["NPROC"]
    return "Succeeded", record(CHECK, env["NODE"], "371.2", env["FLOOR_GBS"], "GB/s") + "\n"


def each(nodes=NODES) -> str:
    return json.dumps([{"node": n, "gpus": 8, "env": {"NPROC": "8", "FLOOR_GBS": "315.0"}} for n in nodes])


def run_group(tmp_path, kube, **env):
    base = dict(CHECK=CHECK, NODE=",".join(NODES), NODES="", GPUS="0", EACH=each(), NODE_TIMEOUT="30", DEADLINE="8")
    return run_driver(tmp_path, kube, **{**base, **env})


def test_every_node_is_taken_in_turn_and_a_node_never_free_is_skipped_by_name(tmp_path):
    busy = [pod("llm", "train-2", "gpu-02", 8), pod("vision", "train-3", "gpu-03", 4)]
    kube = FreeingKube([node(n) for n in NODES], busy, run_worker=nvlink_worker)
    proc = run_group(tmp_path, kube)
    records = [json.loads(line[11:]) for line in proc.stdout.splitlines() if line.startswith("ACCEPTANCE ")]
    by_node = {r["node"]: r for r in records}
    assert set(by_node) == set(NODES), proc.stdout + proc.stderr
    assert by_node["gpu-01"]["status"] == by_node["gpu-02"]["status"] == "passed"  # gpu-02 once it was free
    assert by_node["gpu-03"]["status"] == "skipped"
    assert (
        "in use by vision/train-3 (4)" in by_node["gpu-03"]["detail"] and "not checked" in by_node["gpu-03"]["detail"]
    )
    assert proc.returncode == 3  # not all passed: the Job is not Complete, the next up runs it again
    # Each worker's own deadline: the node's time from its admission, bounded by what the Job has left.
    assert all(0 < c["pod"]["spec"]["activeDeadlineSeconds"] <= 30 for c in kube.created.values())
    assert sorted(kube.deleted) == sorted(kube.created)


def test_a_node_without_gpus_fails_and_the_rest_still_run(tmp_path):
    kube = FakeKube([node("gpu-01"), node("gpu-02", gpus=4), node("gpu-03")], run_worker=nvlink_worker)
    proc = run_group(tmp_path, kube)
    rows = [json.loads(line[11:]) for line in proc.stdout.splitlines() if line.startswith("ACCEPTANCE ")]
    statuses = {r["node"]: r["status"] for r in rows}
    assert statuses == {"gpu-01": "passed", "gpu-02": "failed", "gpu-03": "passed"}
    assert proc.returncode == 1


def test_the_report_names_each_node_and_fails_one_not_checked_within_n_runs(tmp_path, capsys):
    meta = {"job": f"acceptance-{CHECK}", "namespace": HOME, "node": ",".join(NODES), "advisory": "false"}
    meta.update(run="0", perNode="true", everyRuns="2")
    checks = tmp_path / "checks.json"
    checks.write_text(json.dumps({CHECK: meta}))
    history = tmp_path / "history.json"
    logs = tmp_path / "logs"
    logs.mkdir()

    def report(run: int, passed: list[str]) -> str:
        lines = [record(CHECK, n, "371.2", "315.0", "GB/s", ended=f"2026-11-2{run}T10:05:00Z") for n in passed]
        (logs / f"{CHECK}.log").write_text("\n".join(lines) + "\n")
        job = {"status": {"startTime": f"2026-11-2{run}T10:00:00Z", "conditions": []}}
        (logs / f"{CHECK}.job.json").write_text(json.dumps(job))
        status = acceptance_report.main(["--checks", str(checks), "--logs", str(logs), "--history", str(history)])
        return f"{status}\n" + capsys.readouterr().out

    first = report(1, ["gpu-01", "gpu-02"])
    assert (
        "| nccl-nvlink-rack-a | gpu-01 | passed |" in first and "| nccl-nvlink-rack-a | gpu-03 | no result |" in first
    )
    second = report(2, ["gpu-01", "gpu-02"])
    assert "| gpu-03 | failed |" in second and "not checked within the last 2 runs (last passed: never)" in second
    third = report(3, NODES)  # gpu-03 checked at last
    assert third.startswith("0\n") and "3 checks: 3 passed" in third
