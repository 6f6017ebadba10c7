"""Acceptance checks: the Jobs in the plan, the check scripts run by the shell against stubbed tools and
fabricated outputs (and s3.sh against a real S3 server through rclone), and the post-`up` report."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from components.acceptance.component import CHECKS, CHECKS_CONFIGMAP, SCRIPTS, check_program
from stacks import acceptance_report, engine
from stacks.plan import summary
from tests.conftest import evaluate, problems
from tests.hosts.test_scripts import _shellcheck
from tests.minio.s3server import serve_s3

JOB = "kubernetes:batch/v1:Job"


def jobs(plan) -> dict[str, dict]:
    return {r["inputs"]["metadata"]["name"]: r for r in plan.by_type(JOB)}


# ---------------------------------------------------------------------------------------------- the plan


def test_the_preview_lists_every_check_with_its_wait_and_the_drift_probe(prod_plan):
    # What `make plan` prints: each acceptance Job, what the engine waits for and how long, the probe.
    text = summary(prod_plan)
    section = text.split("Workloads the program runs itself")[1].split("\n\n")[0]
    for job in jobs(prod_plan).values():
        meta = job["inputs"]["metadata"]
        timeout = meta["annotations"]["pulumi.com/timeoutSeconds"]
        assert f"Job        {meta['namespace']}/{meta['name']}: until Complete, at most {timeout} s" in section
    assert "DaemonSet  ml-platform-acceptance/drift-probe: until rolled out" in section
    assert "CronJob    llm-train/datasets: created, not awaited" in section


def test_every_check_is_a_job_the_engine_waits_for_with_a_bounded_timeout(prod_plan):
    found = jobs(prod_plan)
    gpu_nodes = [n.removeprefix("acceptance-gpu-") for n in found if n.startswith("acceptance-gpu-")]
    assert gpu_nodes == prod_plan.outputs["gpuNodes"]
    assert {"acceptance-nccl-ib", "acceptance-nccl-nvlink", "acceptance-monitoring", "acceptance-storage-s3"} <= set(
        found
    )
    assert {"acceptance-storage-tier1", "acceptance-storage-tier2block", "acceptance-storage-tier2shared"} <= set(found)
    teams = prod_plan.outputs["teamLocalQueues"]
    assert {f"acceptance-gang-{team}" for team in teams} <= set(found)
    for name, job in found.items():
        spec = job["inputs"]["spec"]
        # The engine's wait and the Job's own deadline are the same bound; a failure is never retried.
        assert job["inputs"]["metadata"]["annotations"]["pulumi.com/timeoutSeconds"] == "600", name
        assert spec["activeDeadlineSeconds"] == 600 and spec["backoffLimit"] == 0, name
        assert prod_plan.options[job["urn"]]["deleteBeforeReplace"] is True
        container = spec["template"]["spec"]["containers"][0]
        assert container["command"][0] == "sh" and container["command"][1].startswith("/checks/"), name
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["ADVISORY"] == "false" and env["CHECK"] == name.removeprefix("acceptance-")
    # Every check waits for the platform it exercises: through its namespace, which waits for every
    # component (the engine waits for dependencies transitively).
    namespace = prod_plan.named("acceptance-namespace")
    scripts = prod_plan.named("acceptance-scripts-ml-platform-acceptance")
    assert scripts["urn"] in found["acceptance-monitoring"]["dependencies"]
    assert namespace["urn"] in scripts["dependencies"]  # the namespace's name flows into the ConfigMap
    for component in ("ZabbixMonitoring", "CephTier", "GpuPool", "SchedulingStack", "MinioTier"):
        assert any(f":{component}$" in d for d in namespace["dependencies"]), component


def test_gpu_node_check_requests_the_inventory_gpus_and_rdma(prod_plan):
    job = jobs(prod_plan)["acceptance-gpu-gpu-01"]["inputs"]["spec"]["template"]["spec"]
    assert job["nodeSelector"] == {"kubernetes.io/hostname": "gpu-01"}
    limits = job["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "8", "rdma/ib": "1"}
    assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in job["tolerations"]


def test_nccl_between_two_nodes_is_gang_admitted_through_kueue_with_a_floor_from_the_link_rate(prod_plan):
    job = jobs(prod_plan)["acceptance-nccl-ib"]
    spec = job["inputs"]["spec"]
    assert (
        job["inputs"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == prod_plan.outputs["teamLocalQueues"]["llm"]
    )
    assert spec["suspend"] is True and spec["completions"] == 2 and spec["parallelism"] == 2
    assert spec["completionMode"] == "Indexed"
    anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"  # two different nodes
    env = {e["name"]: e.get("value") for e in spec["template"]["spec"]["containers"][0]["env"]}
    assert env["FLOOR_GBS"] == "40.0"  # 400 Gb/s / 8 x 0.8
    assert env["NNODES"] == "2" and env["MASTER"] == "acceptance-nccl-ib-0.acceptance-nccl-ib"

    def faster_links(raw):
        raw["acceptance"] = {"nccl": {"ibLinkRateGbps": 800, "ibFloorFraction": 0.9}}

    env = {
        e["name"]: e.get("value")
        for e in jobs(evaluate("prod", faster_links))["acceptance-nccl-ib"]["inputs"]["spec"]["template"]["spec"][
            "containers"
        ][0]["env"]
    }
    assert env["FLOOR_GBS"] == "90.0"


def test_checks_are_switched_and_tuned_from_settings():
    def tune(raw):
        raw["acceptance"] = {
            "gpuNodes": {"enabled": False},
            "storage": {"advisory": True, "timeoutSeconds": 1200},
            "drift": {"enabled": False},
        }

    plan = evaluate("prod", tune)
    found = jobs(plan)
    assert not any(name.startswith("acceptance-gpu-") for name in found)
    storage = found["acceptance-storage-tier2block"]
    assert storage["inputs"]["metadata"]["annotations"]["pulumi.com/timeoutSeconds"] == "1200"
    env = {e["name"]: e.get("value") for e in storage["inputs"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["ADVISORY"] == "true"
    assert plan.outputs["acceptance"]["storage-tier2block"]["advisory"] == "true"
    assert not plan.by_type("kubernetes:apps/v1:DaemonSet") or all(
        r["inputs"]["metadata"]["name"] != "drift-probe" for r in plan.by_type("kubernetes:apps/v1:DaemonSet")
    )
    assert any(
        "acceptance.storage.timeoutSeconds" in p
        for p in problems("prod", lambda raw: raw.update(acceptance={"storage": {"timeoutSeconds": 5}}))
    )


def test_unchanged_settings_rerun_nothing_and_a_change_reruns_the_checks(prod_plan):
    again = evaluate("prod")
    assert jobs(again)["acceptance-monitoring"]["inputs"] == jobs(prod_plan)["acceptance-monitoring"]["inputs"]
    rerun = evaluate("prod", lambda raw: raw.update(acceptance={"run": 1}))
    before = jobs(prod_plan)["acceptance-monitoring"]["inputs"]["spec"]["template"]["metadata"]["annotations"]
    after = jobs(rerun)["acceptance-monitoring"]["inputs"]["spec"]["template"]["metadata"]["annotations"]
    assert before != after


def test_scripts_configmap_holds_the_static_files(prod_plan):
    maps = [
        r
        for r in prod_plan.by_type("kubernetes:core/v1:ConfigMap")
        if r["inputs"]["metadata"]["name"] == CHECKS_CONFIGMAP
    ]
    assert maps
    for cm in maps:
        assert cm["inputs"]["data"]["nccl.sh"] == check_program("nccl.sh")
        assert cm["inputs"]["data"]["allreduce.py"] == (CHECKS / "allreduce.py").read_text()


def test_images_are_pinned_settings():
    assert any(
        "acceptance.gpuImage" in p
        for p in problems("prod", lambda raw: raw.update(acceptance={"gpuImage": "docker.io/pytorch/pytorch:latest"}))
    )


# ------------------------------------------------------------------------------------------ the scripts


@pytest.mark.parametrize("script", SCRIPTS)
def test_check_programs_are_shellcheck_clean_posix_sh(script, tmp_path):
    program = tmp_path / script
    program.write_text(check_program(script))
    result = subprocess.run([_shellcheck(), "-s", "sh", str(program)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def run_check(script: str, tmp_path: Path, stubs: dict[str, str], **env: str) -> subprocess.CompletedProcess:
    """Run a check's program with POSIX sh (dash), stub commands first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in stubs.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    program = tmp_path / script
    program.write_text(check_program(script))
    return subprocess.run(
        ["sh", str(program)],
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "CHECKS_DIR": str(CHECKS), **env},
        capture_output=True,
        text=True,
    )


def result_line(proc: subprocess.CompletedProcess) -> dict:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ACCEPTANCE ")]
    assert len(lines) == 1, proc.stdout + proc.stderr
    return json.loads(lines[0].removeprefix("ACCEPTANCE "))


NCCL_OUTPUT = """# Nodes : gpu-03,gpu-07
#       size    algbw(GB/s)  busbw(GB/s)
     8388608          21.10        21.10
  1073741824          {bw}        {bw}
# Avg bus bandwidth    : {bw}
"""


@pytest.mark.parametrize(
    ("busbw", "advisory", "code", "status"),
    [("45.2", "false", 0, "passed"), ("31.7", "false", 1, "failed"), ("31.7", "true", 0, "failed")],
)
def test_nccl_compares_the_bus_bandwidth_with_the_floor(tmp_path, busbw, advisory, code, status):
    torchrun = f"cat <<'EOF'\n{NCCL_OUTPUT.format(bw=busbw)}EOF\n"
    proc = run_check(
        "nccl.sh",
        tmp_path,
        {"torchrun": torchrun},
        CHECK="nccl-ib",
        ADVISORY=advisory,
        FLOOR_GBS="40.0",
        NPROC="8",
        NNODES="2",
        MASTER="acceptance-nccl-ib-0.acceptance-nccl-ib",
        JOB_COMPLETION_INDEX="0",
    )
    assert proc.returncode == code, proc.stderr
    result = result_line(proc)
    assert result["status"] == status and result["value"] == busbw and result["floor"] == "40.0"
    assert result["node"] == "gpu-03,gpu-07"  # both nodes of the all-reduce
    if status == "failed":
        # The failure names the check and the nodes; it fails the Job (and the up) unless advisory.
        assert (
            f"acceptance check nccl-ib failed on gpu-03,gpu-07: all-reduce bus bandwidth {busbw} GB/s is below"
            in proc.stderr
        )
        assert result["advisory"] is (advisory == "true")


def test_nccl_without_a_result_or_a_run_fails(tmp_path):
    def nvlink_check(torchrun: str) -> subprocess.CompletedProcess:
        env = dict(CHECK="nccl-nvlink", NODE="gpu-01", FLOOR_GBS="100", NPROC="8")
        return run_check("nccl.sh", tmp_path, {"torchrun": torchrun}, **env)

    broken = nvlink_check("echo 'NCCL WARN net/IB : no device'; exit 1\n")
    assert (
        broken.returncode == 1
        and "acceptance check nccl-nvlink failed on gpu-01: the all-reduce did not run" in broken.stderr
    )
    silent = nvlink_check("echo hello\n")
    assert silent.returncode == 1 and "no '# Avg bus bandwidth' line" in silent.stderr
    # The second pod of a two-node run does not report (rank 0's pod does).
    peer = run_check(
        "nccl.sh",
        tmp_path,
        {"torchrun": "echo ok\n"},
        CHECK="nccl-ib",
        FLOOR_GBS="40",
        NPROC="8",
        NNODES="2",
        MASTER="m",
        JOB_COMPLETION_INDEX="1",
    )
    assert peer.returncode == 0 and "ACCEPTANCE" not in peer.stdout


def _validations(tmp_path: Path, *ready: str) -> Path:
    folder = tmp_path / "validations"
    folder.mkdir()
    for name in ready:
        (folder / f"{name}-ready").touch()
    return folder


def test_gpu_node_check(tmp_path):
    smi = (
        'i=0; while [ $i -lt ${STUB_GPUS} ]; do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)"; i=$((i+1)); done\n'
    )
    uverbs = tmp_path / "dev-ib"
    uverbs.mkdir()
    (uverbs / "uverbs0").touch()
    common = dict(CHECK="gpu-gpu-07", NODE="gpu-07", EXPECTED_GPUS="8", RDMA="true", DEV_INFINIBAND=str(uverbs))
    folder = _validations(tmp_path, "driver", "toolkit", "cuda", "plugin")
    ok = run_check("gpu-node.sh", tmp_path, {"nvidia-smi": smi}, VALIDATIONS=str(folder), STUB_GPUS="8", **common)
    assert ok.returncode == 0 and result_line(ok)["status"] == "passed", ok.stderr
    fewer = run_check("gpu-node.sh", tmp_path, {"nvidia-smi": smi}, VALIDATIONS=str(folder), STUB_GPUS="7", **common)
    assert fewer.returncode == 1
    assert "acceptance check gpu-gpu-07 failed on gpu-07: the pod sees 7 GPUs, the inventory gives 8" in fewer.stderr
    (folder / "plugin-ready").unlink()
    unvalidated = run_check(
        "gpu-node.sh", tmp_path, {"nvidia-smi": smi}, VALIDATIONS=str(folder), STUB_GPUS="8", **common
    )
    assert unvalidated.returncode == 1 and "GPU Operator validations not passed: plugin" in unvalidated.stderr
    (folder / "plugin-ready").touch()
    (uverbs / "uverbs0").unlink()
    no_rdma = run_check("gpu-node.sh", tmp_path, {"nvidia-smi": smi}, VALIDATIONS=str(folder), STUB_GPUS="8", **common)
    assert no_rdma.returncode == 1 and "has no uverbs device" in no_rdma.stderr


@pytest.mark.parametrize(
    ("dd_line", "rate", "code"),
    [
        ("1073741824 bytes (1.1 GB, 1.0 GiB) copied, 2.0 s, 537 MB/s", "512.0", 0),  # GNU coreutils
        ("1073741824 bytes (1.0GB) copied, 20.48 seconds, 50.0MB/s", "50.0", 1),  # BusyBox
    ],
)
def test_storage_parses_dd_and_compares_with_the_floor(tmp_path, dd_line, rate, code):
    dd = f"echo '1024+0 records in'; echo '1024+0 records out'; echo '{dd_line}' >&2\n"
    env = dict(CHECK="storage-tier2block", NODE="tier2-block", DIR=str(tmp_path), SIZE_MIB="1024", FLOOR_MIB_S="100")
    proc = run_check("storage.sh", tmp_path, {"dd": dd}, **env)
    assert proc.returncode == code, proc.stderr
    assert result_line(proc)["value"] == rate


def test_storage_with_the_real_dd(tmp_path):
    # Direct I/O on this machine's disk: the write and the read-back run, the rates are measured.
    env = dict(CHECK="storage-tier1", NODE="tier1-nvme", DIR=str(tmp_path), SIZE_MIB="16", FLOOR_MIB_S="1")
    proc = run_check("storage.sh", tmp_path, {}, **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = result_line(proc)
    assert result["status"] == "passed" and float(result["value"]) > 0
    assert not (tmp_path / "acceptance.bin").exists()


@pytest.mark.real_server  # make test-fast leaves it out (a real rclone S3 server)
def test_s3_round_trip_against_a_real_s3_server(tmp_path):
    with serve_s3(tmp_path, buckets=("cephfs-backup",)) as s3:
        work = tmp_path / "work"
        work.mkdir()

        def s3_check(node: str, bucket: str, size_mib: str) -> subprocess.CompletedProcess:
            env = dict(PREFIX="datasets", SIZE_MIB=size_mib, FLOOR_MIB_S="0.1", WORK=str(work), **s3.env)
            return run_check("s3.sh", tmp_path, {}, CHECK="storage-s3", NODE=node, BUCKET=bucket, **env)

        proc = s3_check("cephfs-backup", "cephfs-backup", "2")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert result_line(proc)["status"] == "passed"
        assert not list((s3.root / "cephfs-backup").rglob("*.*")) and not any(
            p.is_file() for p in (s3.root / "cephfs-backup").rglob("*")
        )  # deleted again
        missing = s3_check("no-bucket", "no-such-bucket", "1")
        assert missing.returncode == 1 and "acceptance check storage-s3 failed on no-bucket: put of" in missing.stderr


@pytest.mark.real_server  # a real rclone S3 server
def test_s3_round_trip_keeps_one_object_when_the_identity_may_not_delete(tmp_path):
    # Object locking (prod): the backup identity has no delete. The check must pass without deleting, and
    # reuse one key, so repeated runs add versions of one object (which the lifecycle expires), not objects.
    with serve_s3(tmp_path, buckets=("cephfs-backup",)) as s3:
        work = tmp_path / "work"
        work.mkdir()
        env = dict(PREFIX="datasets", SIZE_MIB="1", FLOOR_MIB_S="0.1", WORK=str(work), DELETE="false", **s3.env)
        for _ in range(2):
            proc = run_check(
                "s3.sh", tmp_path, {}, CHECK="storage-s3", NODE="cephfs-backup", BUCKET="cephfs-backup", **env
            )
            assert proc.returncode == 0, proc.stdout + proc.stderr
            result = result_line(proc)
            assert result["status"] == "passed" and "kept (object locking)" in result["detail"], result
        stored = [p for p in (s3.root / "cephfs-backup").rglob("*") if p.is_file()]
        assert [p.relative_to(s3.root / "cephfs-backup").as_posix() for p in stored] == ["datasets/.acceptance"]


def test_the_s3_check_runs_in_ml_backup_and_knows_whether_it_may_delete(prod_plan):
    job = jobs(prod_plan)["acceptance-storage-s3"]["inputs"]
    assert job["metadata"]["namespace"] == "ml-backup"  # where the backup identities' keys are
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DELETE"] == "false"  # prod locks the bucket


CLOCKS = {"gpu-01": "1000", "nas-01": "1500", "cpu-04": "0"}  # cpu-04: never collected
# The start of a stubbed `wget --post-file FILE`: the JSON-RPC request is in $request.
WGET_REQUEST = """for a in "$@"; do [ "${next:-}" = 1 ] && request=$a; next=; [ "$a" = --post-file ] && next=1; done"""


def monitoring_check(tmp_path: Path, wget: str, hosts: str, **env: str) -> subprocess.CompletedProcess:
    """zabbix.sh for `hosts` at clock 1500 against a stubbed Zabbix API (`wget`), the API token in a file."""
    (tmp_path / "token").write_text("secret-api-token")
    return run_check(
        "zabbix.sh",
        tmp_path,
        {"wget": wget},
        CHECK="monitoring",
        ZABBIX_URL="http://zabbix:31080",
        HOSTS=hosts,
        MAX_AGE="600",
        TOKEN_FILE=str(tmp_path / "token"),
        NOW="1500",
        **env,
    )


@pytest.mark.parametrize(
    ("hosts", "code", "named"),
    [("gpu-01 nas-01", 0, None), ("gpu-01 nas-01 cpu-04", 1, "cpu-04"), ("gpu-01 cpu-99", 1, "cpu-99")],
)
def test_monitoring_finds_hosts_without_fresh_data(tmp_path, hosts, code, named):
    answers = " ".join(f"{host}={clock}" for host, clock in CLOCKS.items())
    # The stub answers as the Zabbix API does (compact JSON); a host it does not know has no item.
    wget = (
        WGET_REQUEST
        + f"""
cp "$request" "{tmp_path}/request"
host=$(sed -n 's/.*"host":"\\([^"]*\\)".*/\\1/p' "$request")
for pair in {answers}; do
  if [ "${{pair%%=*}}" = "$host" ]; then
    printf '{{"jsonrpc":"2.0","result":[{{"itemid":"7","lastclock":"%s"}}],"id":1}}' "${{pair#*=}}"; exit 0
  fi
done
printf '{{"jsonrpc":"2.0","result":[],"id":1}}'
"""
    )
    proc = monitoring_check(tmp_path, wget, hosts)
    assert proc.returncode == code, proc.stderr
    if named:
        assert (
            f"acceptance check monitoring failed on {named}: no agent.ping in the last 600s from: {named}"
            in proc.stderr
        )
    # The token travels in the request body, never on the command line.
    assert '"auth":"secret-api-token"' in (tmp_path / "request").read_text()


@pytest.mark.parametrize(("wait", "code"), [("30", 0), ("0", 1)])
def test_monitoring_asks_again_for_a_host_that_registers_late(tmp_path, wait, code):
    # cpu-05 has no data at the first question and fresh data from the second on: with time left
    # (WAIT) the check asks again and passes; without, it fails naming the host.
    wget = (
        WGET_REQUEST
        + f"""
echo x >>"{tmp_path}/asked"
if grep -q '"host":"cpu-05"' "$request" && [ "$(grep -c x "{tmp_path}/asked")" -le 2 ]; then
  printf '{{"jsonrpc":"2.0","result":[],"id":1}}'
else
  printf '{{"jsonrpc":"2.0","result":[{{"itemid":"7","lastclock":"1400"}}],"id":1}}'
fi
"""
    )
    proc = monitoring_check(tmp_path, wget, "gpu-01 cpu-05", WAIT=wait, RETRY_EVERY="0")
    assert proc.returncode == code, proc.stderr
    asked = (tmp_path / "asked").read_text().count("x")
    if code:
        assert asked == 2 and "failed on cpu-05" in proc.stderr
    else:  # the second round asks only for the host that was missing
        assert asked == 3 and result_line(proc)["status"] == "passed"


def test_gang_check_reports_the_queue(tmp_path):
    proc = run_check("gang.sh", tmp_path, {}, CHECK="gang-vision", NODE="vision", QUEUE="team-queue", PODS="2")
    assert proc.returncode == 0 and "LocalQueue team-queue" in result_line(proc)["detail"]


# ------------------------------------------------------------------------------------------- the report


def _fabricated(tmp_path: Path, advisory: bool) -> tuple[Path, Path]:
    checks = {
        "gpu-gpu-07": {
            "job": "acceptance-gpu-gpu-07",
            "namespace": "ml-platform-acceptance",
            "node": "gpu-07",
            "advisory": "true" if advisory else "false",
            "timeoutSeconds": "600",
        },
        "nccl-ib": {
            "job": "acceptance-nccl-ib",
            "namespace": "llm-train",
            "node": "",
            "advisory": "false",
            "timeoutSeconds": "600",
        },
        "gpu-gpu-08": {
            "job": "acceptance-gpu-gpu-08",
            "namespace": "ml-platform-acceptance",
            "node": "gpu-08",
            "advisory": "false",
            "timeoutSeconds": "600",
        },
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    result = {"check": "gpu-gpu-07", "node": "gpu-07", "status": "failed", "value": "7", "floor": "8", "unit": "GPUs"}
    result.update(advisory=advisory, detail="the pod sees 7 GPUs, the inventory gives 8")
    line = "ACCEPTANCE " + json.dumps(result)
    (logs / "gpu-gpu-07.log").write_text(f"some output\n{line}\n")
    (logs / "nccl-ib.log").write_text(
        'ACCEPTANCE {"check":"nccl-ib","node":"gpu-03,gpu-04","status":"passed","value":"45.2","floor":"40.0",'
        '"unit":"GB/s","advisory":false,"detail":"ok"}\n'
    )
    (logs / "gpu-gpu-08.log").write_text(
        'ACCEPTANCE {"check":"gpu-gpu-08","node":"gpu-08","status":"passed","value":"8","floor":"8",'
        '"unit":"GPUs","advisory":false,"detail":"ok"}\n'
    )
    path = tmp_path / "checks.json"
    path.write_text(json.dumps(checks))
    return path, logs


def test_report_fails_naming_the_check_and_the_node(tmp_path, capsys):
    checks, logs = _fabricated(tmp_path, advisory=False)
    out = tmp_path / "report.md"
    assert acceptance_report.main(["--checks", str(checks), "--logs", str(logs), "--out", str(out)]) == 1
    assert "acceptance check gpu-gpu-07 failed on gpu-07: the pod sees 7 GPUs" in capsys.readouterr().err
    text = out.read_text()
    assert text.startswith("# Acceptance checks\n\n2 passed, 1 failed, 0 failed (advisory) of 3.")
    assert "| gpu-gpu-07 | gpu-07 | failed | 7 GPUs | 8 GPUs |" in text
    assert "| nccl-ib | gpu-03,gpu-04 | passed | 45.2 GB/s | 40.0 GB/s |" in text


def test_report_advisory_failure_does_not_fail(tmp_path, capsys):
    checks, logs = _fabricated(tmp_path, advisory=True)
    assert acceptance_report.main(["--checks", str(checks), "--logs", str(logs)]) == 0
    captured = capsys.readouterr()
    assert "| gpu-gpu-07 | gpu-07 | failed (advisory) |" in captured.out and captured.err == ""


def test_a_check_without_a_result_counts_as_failed(tmp_path, capsys):
    checks, logs = _fabricated(tmp_path, advisory=False)
    (logs / "gpu-gpu-08.log").unlink()  # its pod never ran (e.g. the GPUs were not allocatable)
    assert acceptance_report.main(["--checks", str(checks), "--logs", str(logs)]) == 1
    assert (
        "acceptance check gpu-gpu-08 failed on gpu-08: no result from Job ml-platform-acceptance/acceptance-gpu-gpu-08"
        in capsys.readouterr().err
    )


def test_checks_in_team_and_backup_namespaces_meet_the_restricted_pod_security_standard(prod_plan):
    # A team's namespaces may enforce `restricted`: its checks must be admitted there.
    outside = [j for j in jobs(prod_plan).values() if j["inputs"]["metadata"]["namespace"] != "ml-platform-acceptance"]
    assert {j["inputs"]["metadata"]["name"] for j in outside} >= {"acceptance-nccl-ib", "acceptance-storage-s3"}
    for job in outside:
        context = job["inputs"]["spec"]["template"]["spec"]["containers"][0]["securityContext"]
        assert context["runAsNonRoot"] is True and context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]} and context["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "hostPath" not in json.dumps(job["inputs"]["spec"])


def test_a_failed_check_fails_the_run_naming_the_check_and_the_node(monkeypatch):
    # What the engine does when the provider reports the Job failed (its pod exited 1, as the scripts do
    # on a failure above): the run fails at that resource, whose name carries the check and the node.
    echo = engine._RecordingMonitor._echo

    def failing(self, request):
        if request.type == JOB and request.name == "gpu-07-acceptance-gpu":
            raise RuntimeError('Job "ml-platform-acceptance/acceptance-gpu-gpu-07" failed: BackoffLimitExceeded')
        return echo(self, request)

    monkeypatch.setattr(engine._RecordingMonitor, "_echo", failing)
    with pytest.raises(Exception, match="acceptance-gpu-gpu-07"):
        evaluate("prod")  # the resource (gpu-07-acceptance-gpu) and its Job name the node

    # Advisory: the script exits 0 on a failure, the Job completes, the run goes on (the report lists it).
    monkeypatch.setattr(engine._RecordingMonitor, "_echo", echo)
    plan = evaluate("prod", lambda raw: raw.update(acceptance={"gpuNodes": {"advisory": True}}))
    env = jobs(plan)["acceptance-gpu-gpu-07"]["inputs"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "ADVISORY", "value": "true"} in env
