"""The driver of the GPU and tier-1 checks (components/acceptance/checks/driver.py), run by Debian's python3 (the GPU
image's python runs it in the pod) against a stand-in Kubernetes API that serves fabricated Node, Pod and
ClusterPolicy objects; the workers it creates run their real check program in BusyBox (the GPU node check with
a stub nvidia-smi). Then the report reads what the driver printed."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional
from urllib.parse import parse_qs, urlparse

import pytest

from components.acceptance.drivers import driver_program
from components.acceptance.programs import MOUNT, Delivered
from stacks import acceptance_report
from tests.acceptance.busybox import BUSYBOX, busybox_bin, result_line
from tests.prerequisites import require_debian_package

HOME = "ml-platform-acceptance"
DRIVER_POD = {"POD_NAME": "acceptance-gpu-gpu-07-x7k2p", "POD_UID": "0b6a-driver-uid"}


def node(name: str, gpus: int = 8, cordoned: bool = False) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": str(gpus)}, "capacity": {"nvidia.com/gpu": "8"}},
    }


def pod(namespace: str, name: str, on: str, gpus: int, phase: str = "Running", labels=None) -> dict:
    container = {"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}
    return {
        "metadata": {"namespace": namespace, "name": name, "labels": labels or {}},
        "spec": {"nodeName": on, "containers": [container]},
        "status": {"phase": phase},
    }


def policy(state: str) -> dict:
    return {"metadata": {"name": "cluster-policy"}, "status": {"state": state}}


class FakeKube:
    """The API paths the driver uses; `run_worker(pod) -> (phase, log)` plays the kubelet for a created pod."""

    def __init__(self, nodes, pods=(), policies=None, run_worker: Optional[Callable] = None):
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.pods, self.run_worker = list(pods), run_worker
        self.policies = [policy("ready")] if policies is None else list(policies)
        self.created: dict[str, dict] = {}
        self.deleted: list[str] = []
        self.tokens: set[str] = set()
        self.volumes: list[dict] = []

    def handle(self, method: str, url: str, body: Optional[dict]) -> tuple[int, object]:
        path, query = urlparse(url).path, parse_qs(urlparse(url).query)
        parts = path.strip("/").split("/")
        if path.startswith("/api/v1/nodes/"):
            found = self.nodes.get(parts[-1])
            return (200, found) if found else (404, {"kind": "Status", "reason": "NotFound"})
        if path == "/api/v1/pods":
            on = query["fieldSelector"][0].removeprefix("spec.nodeName=")
            bound = [
                p for p in self.pods + [c["pod"] for c in self.created.values()] if p["spec"].get("nodeName") == on
            ]
            return 200, {"items": bound}
        if path == "/api/v1/persistentvolumes":
            return 200, {"items": self.volumes}
        if path == "/apis/nvidia.com/v1/clusterpolicies":
            return 200, {"items": self.policies}
        if path == f"/api/v1/namespaces/{HOME}/pods" and method == "POST":
            name = body["metadata"]["name"]
            phase, log = self.run_worker(body) if self.run_worker else ("Pending", "")
            self.created[name] = {"pod": {**body, "status": {"phase": phase}}, "log": log}
            return 201, body
        name = parts[5] if len(parts) > 5 else ""
        if name in self.created:
            if method == "DELETE":
                self.deleted.append(name)
                return 200, {}
            if path.endswith("/log"):
                return 200, self.created[name]["log"]
            return 200, self.created[name]["pod"]
        return 404, {"kind": "Status", "reason": "NotFound"}


def serve(kube: FakeKube) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            kube.tokens.add(self.headers.get("Authorization", ""))
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            status, payload = kube.handle(self.command, self.path, body)
            data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _any  # noqa: N815 (BaseHTTPRequestHandler's names)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def run_driver(tmp_path: Path, kube: FakeKube, **env: str) -> subprocess.CompletedProcess:
    python = require_debian_package(
        "the acceptance driver (the GPU image runs it with python3)", "/usr/bin/python3", "python3"
    )
    (tmp_path / "token").write_text("sa-token-of-the-driver\n")
    server = serve(kube)
    base = dict(CHECK="gpu-gpu-07", NODE="gpu-07", ADVISORY="false", NAMESPACE=HOME, NODES="gpu-07", GPUS="8")
    base.update(DRIVER_POD, WORKER=json.dumps(worker_spec()), DEADLINE="60", POLICY_WAIT="2", RETRY_EVERY="1")
    base.update(API=f"http://127.0.0.1:{server.server_port}", TOKEN_FILE=str(tmp_path / "token"))
    try:
        return subprocess.run(
            [python, "-c", driver_program(), "driver"],
            env={**base, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.shutdown()


def gpu_program() -> Delivered:
    from components.acceptance.component import check_program

    return Delivered(None, "gpu-node.sh", check_program("gpu-node.sh"))  # type: ignore[arg-type]  # no resource


def worker_spec() -> dict:
    """The GPU node check's worker as the plan renders it (the driver pins it and names its node): its program
    from its ConfigMap, checked against its SHA-256 first."""
    program = gpu_program()
    return {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "volumes": [program.volume],
        "containers": [
            {
                "name": "check",
                "command": program.command("sh"),
                "volumeMounts": [program.mount],
                "env": [
                    {"name": "CHECK", "value": "gpu-gpu-07"},
                    {"name": "ADVISORY", "value": "false"},
                    {"name": "EXPECTED_GPUS", "value": "8"},
                    {"name": "EXPECTED_DRIVER", "value": "595.91.07"},
                    {"name": "RDMA", "value": "false"},
                ],
                "resources": {"requests": {"cpu": "500m"}, "limits": {"nvidia.com/gpu": "8"}},
            }
        ],
    }


SMI = (
    'i=0; while [ $i -lt 8 ]; do echo "$i, GPU-1d2b6f5a-7c3e-4b8e-9a1f-0000000000$((10 + i)), NVIDIA H100 80GB HBM3, '
    '${STUB_DRIVER}"; i=$((i+1)); done\n'
)


def record(check: str, node: str, value: str, floor: str, unit: str, ended: str = "", **evidence: object) -> str:
    """A worker's passed record with positive evidence (what lib.sh prints), `evidence` overriding parts of it."""
    found = {"measured": "test", "amounts": {}, "durations_ms": {"run": "1200"}, "digests": {}, **evidence}
    if ended:
        found["ended"] = ended
    row = {"check": check, "node": node, "claim": "passed", "status": "passed", "value": value, "floor": floor}
    return "ACCEPTANCE " + json.dumps({**row, "unit": unit, "advisory": False, "detail": "ok", "evidence": found})


def busybox_worker(tmp_path: Path, driver_version: str = "595.91.07", program: Optional[str] = None) -> Callable:
    """The kubelet's part: run the created pod's container in BusyBox sh, with its env and a stub nvidia-smi,
    its program's ConfigMap mounted (a folder of tmp_path in place of the mount path; `program`: other content
    than the ConfigMap the plan names, as one deleted and created again would hold)."""
    mounted = tmp_path / "program-volume"
    mounted.mkdir(exist_ok=True)
    (mounted / "gpu-node.sh").write_text(gpu_program().text if program is None else program)
    validations = tmp_path / "validations"
    validations.mkdir(exist_ok=True)
    for component in ("driver", "toolkit", "cuda", "plugin"):
        (validations / f"{component}-ready").touch()
    stubs = tmp_path / "stubs"
    stubs.mkdir(exist_ok=True)
    (stubs / "nvidia-smi").write_text("#!/bin/sh\n" + SMI)
    (stubs / "nvidia-smi").chmod(0o755)

    def run(created: dict) -> tuple[str, str]:
        container = created["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        env.update(PATH=f"{stubs}:{busybox_bin(tmp_path)}", VALIDATIONS=str(validations), STUB_DRIVER=driver_version)
        command = [BUSYBOX, *(arg.replace(MOUNT, str(mounted)) for arg in container["command"])]
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        return ("Succeeded" if proc.returncode == 0 else "Failed"), proc.stdout + proc.stderr

    return run


def test_a_cordoned_node_is_skipped_with_the_reason_and_its_gpus_are_not_taken(tmp_path):
    kube = FakeKube([node("gpu-07", cordoned=True)])
    proc = run_driver(tmp_path, kube)
    assert proc.returncode == 3, proc.stderr  # not passed: the Job is not Complete, the next `up` runs it again
    result = result_line(proc)
    assert result["status"] == "skipped" and result["node"] == "gpu-07"
    assert "gpu-07 is cordoned (spec.unschedulable)" in result["detail"]
    assert not kube.created
    assert kube.tokens == {"Bearer sa-token-of-the-driver"}  # the ServiceAccount's token, from its file


def test_gpus_in_use_by_another_pod_skip_the_check_naming_the_pod(tmp_path):
    pods = [
        pod("llm-train", "train-0", "gpu-07", 2),
        pod("llm-eval", "done-0", "gpu-07", 8, phase="Succeeded"),  # ended: holds nothing
        pod("kube-system", "agent", "gpu-07", 0),  # no GPU
        pod("vision", "elsewhere", "gpu-03", 8),  # another node
    ]
    kube = FakeKube([node("gpu-07")], pods)
    proc = run_driver(tmp_path, kube)
    assert proc.returncode == 3, proc.stderr
    result = result_line(proc)
    assert result["status"] == "skipped"
    assert result["detail"] == "GPUs of gpu-07 in use by llm-train/train-0 (2): not taken"
    assert not kube.created


def test_a_free_node_runs_the_check_in_a_pinned_worker_relays_its_result_and_deletes_it(tmp_path):
    # Another acceptance check's worker on the node (the NVLink check) is no reason to skip: they queue.
    other = pod(HOME, "acceptance-nccl-nvlink-abc-w0", "gpu-07", 8, labels={"ml-platform.io/acceptance": "worker"})
    kube = FakeKube([node("gpu-07")], [other], run_worker=busybox_worker(tmp_path))
    proc = run_driver(tmp_path, kube)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = result_line(proc)  # the worker's line, relayed: the only one
    assert result["status"] == "passed" and "8 GPUs allocatable and visible, driver 595.91.07" in result["detail"]
    [(name, created)] = kube.created.items()
    worker = created["pod"]
    assert worker["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-07"}
    assert worker["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": DRIVER_POD["POD_NAME"], "uid": DRIVER_POD["POD_UID"]}
    ]
    assert worker["metadata"]["labels"]["ml-platform.io/acceptance"] == "worker"
    assert 0 < worker["spec"]["activeDeadlineSeconds"] <= 60
    assert {"name": "NODE", "value": "gpu-07"} in worker["spec"]["containers"][0]["env"]
    assert kube.deleted == [name]


def test_a_driver_version_mismatch_fails_the_check(tmp_path):
    kube = FakeKube([node("gpu-07")], run_worker=busybox_worker(tmp_path, driver_version="580.95.05"))
    proc = run_driver(tmp_path, kube)
    assert proc.returncode == 1
    result = result_line(proc)
    assert result["status"] == "failed"
    assert "driver 580.95.05 runs, gpu.driver.version is 595.91.07" in result["detail"]
    assert kube.deleted == list(kube.created)  # deleted on a failure too


def test_a_worker_whose_program_is_not_the_one_its_job_names_runs_nothing(tmp_path):
    """The worker's ConfigMap deleted and created again with other content: the SHA-256 in the pod template
    (which nobody can change) does not match, the program is not run, the check fails."""
    tampered = gpu_program().text.replace("EXPECTED_GPUS", "EXPECTED_GPUZ", 1)
    kube = FakeKube([node("gpu-07")], run_worker=busybox_worker(tmp_path, program=tampered))
    proc = run_driver(tmp_path, kube)
    assert proc.returncode == 1
    assert "/gpu-node.sh does not match its SHA-256" in proc.stdout  # the worker's log, relayed
    result = result_line(proc)  # the driver's own: the worker printed none
    assert result["status"] == "failed" and "the worker pods printed no result" in result["detail"]
    assert kube.deleted == list(kube.created)


def test_a_clusterpolicy_that_never_gets_ready_fails_naming_it(tmp_path):
    kube = FakeKube([node("gpu-07")], policies=[policy("notReady")])
    proc = run_driver(tmp_path, kube)
    assert proc.returncode == 1
    assert "acceptance check gpu-gpu-07 failed on gpu-07: ClusterPolicy not ready after 2s" in proc.stderr
    assert "(cluster-policy state notReady)" in result_line(proc)["detail"]
    assert not kube.created  # no GPU taken before the operator is ready
    advisory = run_driver(tmp_path, FakeKube([node("gpu-07")], policies=[]), ADVISORY="true")
    assert advisory.returncode == 0 and "(none exists)" in result_line(advisory)["detail"]
    assert result_line(advisory)["advisory"] is True


def test_a_node_the_driver_cannot_read_or_without_its_gpus_fails(tmp_path):
    missing = run_driver(tmp_path, FakeKube([node("gpu-03")]))
    assert missing.returncode == 1 and "cannot read Node gpu-07: HTTP 404" in result_line(missing)["detail"]
    short = run_driver(tmp_path, FakeKube([node("gpu-07", gpus=7)]))
    assert short.returncode == 1
    assert "gpu-07 has 7 nvidia.com/gpu allocatable (Node status), the check takes 8" in result_line(short)["detail"]
    unreachable = run_driver(tmp_path, FakeKube([]), API="http://127.0.0.1:9")
    assert unreachable.returncode == 1 and result_line(unreachable)["status"] == "failed"


def test_an_nccl_pair_with_a_skipped_node_is_skipped_and_a_free_pair_gets_its_rendezvous(tmp_path):
    pair = dict(CHECK="nccl-ib-gpu-03-gpu-07", NODE="gpu-03,gpu-07", NODES="gpu-03 gpu-07")
    rendezvous = "acceptance-nccl-ib-gpu-03-gpu-07"
    busy = FakeKube([node("gpu-03"), node("gpu-07", cordoned=True)])
    skipped = run_driver(tmp_path, busy, **pair, RENDEZVOUS=rendezvous, RENDEZVOUS_SERVICE="nccl-rendezvous")
    assert skipped.returncode == 3 and result_line(skipped)["status"] == "skipped"
    assert result_line(skipped)["node"] == "gpu-03,gpu-07" and "gpu-07 is cordoned" in result_line(skipped)["detail"]
    assert not busy.created

    def torchrun(created: dict) -> tuple[str, str]:
        index = next(e["value"] for e in created["spec"]["containers"][0]["env"] if e["name"] == "JOB_COMPLETION_INDEX")
        line = record("nccl-ib-gpu-03-gpu-07", "gpu-03,gpu-07", "42.5", "40.0", "GB/s")
        return "Succeeded", f"{line}\n" if index == "0" else "rank 1 done\n"

    free = FakeKube([node("gpu-03"), node("gpu-07")], run_worker=torchrun)
    proc = run_driver(tmp_path, free, **pair, RENDEZVOUS=rendezvous, RENDEZVOUS_SERVICE="nccl-rendezvous")
    assert proc.returncode == 0 and result_line(proc)["status"] == "passed", proc.stderr
    workers = [c["pod"] for c in free.created.values()]
    assert [(w["spec"]["hostname"], w["spec"]["subdomain"]) for w in workers] == [
        (f"{rendezvous}-0", "nccl-rendezvous"),
        (f"{rendezvous}-1", "nccl-rendezvous"),
    ]
    assert [w["spec"]["nodeSelector"]["kubernetes.io/hostname"] for w in workers] == ["gpu-03", "gpu-07"]
    # The label the one Service of all pairs selects.
    assert all(w["metadata"]["labels"]["ml-platform.io/rendezvous"] == "nccl-rendezvous" for w in workers)
    assert sorted(free.deleted) == sorted(free.created)


def test_the_tier1_worker_is_deleted_at_the_end_so_its_claim_is_released(tmp_path):
    # No NODES: no GPU taken, so no node is looked at; one worker, wherever the scheduler puts it; deleted at the end.
    line = record("storage-tier1", "tier1-nvme", "900", "100", "MiB/s")
    kube = FakeKube([], policies=[], run_worker=lambda created: ("Succeeded", f"{line}\n"))
    proc = run_driver(tmp_path, kube, CHECK="storage-tier1", NODE="tier1-nvme", NODES="", GPUS="0")
    assert proc.returncode == 0 and result_line(proc)["status"] == "passed", proc.stderr
    [worker] = [c["pod"] for c in kube.created.values()]
    assert "nodeSelector" not in worker["spec"] and "hostname" not in worker["spec"]
    assert kube.deleted == list(kube.created)


def test_a_worker_without_a_result_fails_and_one_never_ending_fails_at_the_deadline(tmp_path):
    silent = FakeKube([node("gpu-07")], run_worker=lambda created: ("Failed", "exec format error\n"))
    proc = run_driver(tmp_path, silent)
    assert proc.returncode == 1 and "the worker pods printed no result" in result_line(proc)["detail"]
    pending = FakeKube([node("gpu-07")])  # never scheduled, the node still free: failed when its time is up
    proc = run_driver(tmp_path, pending, DEADLINE="3", SCHEDULE_WAIT="1")
    assert proc.returncode == 1 and "did not end within the check's time" in result_line(proc)["detail"]
    assert pending.deleted == list(pending.created)


@pytest.mark.parametrize("cordoned", [True, False])
def test_the_report_counts_a_skipped_gpu_check_as_skipped_not_failed(tmp_path, cordoned, capsys):
    kube = FakeKube([node("gpu-07", cordoned=cordoned)], [] if cordoned else [pod("vision", "a", "gpu-07", 1)])
    proc = run_driver(tmp_path, kube)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "gpu-gpu-07.log").write_text(proc.stdout)
    (logs / "gpu-gpu-07.job.json").write_text(
        json.dumps({"status": {"conditions": [{"type": "Complete", "status": "True"}]}})
    )
    meta = {"job": "acceptance-gpu-gpu-07", "namespace": HOME, "node": "gpu-07", "advisory": "false", "run": "0"}
    checks = tmp_path / "checks.json"
    checks.write_text(json.dumps({"gpu-gpu-07": meta}))
    assert acceptance_report.main(["--checks", str(checks), "--logs", str(logs)]) == 3
    out = capsys.readouterr().out
    assert "1 checks: 0 passed, 0 failed, 0 failed (advisory), 1 skipped, 0 unverified. None passed" in out
    assert ("cordoned" if cordoned else "in use by vision/a (1)") in out


def test_tier1_is_skipped_when_every_disk_is_claimed_and_fails_when_there_is_none(tmp_path):
    def volumes(*phases: str) -> list[dict]:
        return [{"spec": {"storageClassName": "tier1-nvme"}, "status": {"phase": p}} for p in phases]

    env = dict(CHECK="storage-tier1", NODE="tier1-nvme", NODES="", GPUS="0", STORAGE_CLASS="tier1-nvme")
    claimed = FakeKube([], policies=[], run_worker=lambda created: ("Succeeded", "never run\n"))
    claimed.volumes = volumes("Bound", "Bound", "Released")
    proc = run_driver(tmp_path, claimed, **env)
    assert proc.returncode == 3 and result_line(proc)["status"] == "skipped", proc.stderr
    assert "every tier1-nvme volume is claimed (3: Bound, Released)" in result_line(proc)["detail"]
    assert not claimed.created
    none = FakeKube([], policies=[])
    none.volumes = volumes()
    proc = run_driver(tmp_path, none, **env)
    assert proc.returncode == 1 and "no PersistentVolume of StorageClass tier1-nvme" in result_line(proc)["detail"]
    free = FakeKube(
        [], policies=[], run_worker=lambda c: ("Succeeded", record("storage-tier1", "", "900", "100", "MiB/s"))
    )
    free.volumes = volumes("Bound", "Available")
    assert run_driver(tmp_path, free, **env).returncode == 0


@pytest.mark.parametrize(
    ("log", "status"),
    [
        # A worker that claims a pass without a duration for its rate.
        (record("storage-tier1", "", "900", "100", "MiB/s", durations_ms={}), "unverified"),
        # One that wrote part of what was asked.
        (record("storage-tier1", "", "900", "100", "MiB/s", amounts={"bytes": "1"}, expected={"bytes": "2"}), "failed"),
        # One whose line is cut off.
        ('ACCEPTANCE {"check":"storage-tier1","claim":"pass', "failed"),
        # A decimal comma in the value.
        (record("storage-tier1", "", "900,5", "100", "MiB/s"), "unverified"),
    ],
)
def test_the_driver_judges_its_workers_by_their_evidence(tmp_path, log, status):
    kube = FakeKube([], policies=[], run_worker=lambda created: ("Succeeded", log + "\n"))
    proc = run_driver(tmp_path, kube, CHECK="storage-tier1", NODE="tier1-nvme", NODES="", GPUS="0")
    assert proc.returncode == {"failed": 1, "unverified": 3}[status], proc.stdout + proc.stderr
    assert f"acceptance check storage-tier1 {status}" in proc.stderr
