"""The check programs run as their Jobs run them: BusyBox sh and applets (tests/acceptance/busybox.py), the
real dd on this machine's disk, the real rclone against `rclone serve s3`; stubs only for what needs a GPU
(nvidia-smi, torchrun)."""

from __future__ import annotations

import re
import subprocess
import threading

import pytest

from components.acceptance.component import CHECKS, SCRIPTS, check_program
from tests.acceptance.busybox import result_line, run_check
from tests.hosts.test_scripts import _shellcheck
from tests.minio.s3server import rclone_binary, serve_s3


@pytest.mark.parametrize("script", SCRIPTS)
def test_check_programs_are_shellcheck_clean_posix_sh(script, tmp_path):
    program = tmp_path / script
    program.write_text(check_program(script))
    result = subprocess.run([_shellcheck(), "-s", "sh", str(program)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# ------------------------------------------------------------------------------------------ storage


def storage(tmp_path, **env):
    base = dict(CHECK="storage-tier1", NODE="tier1-nvme", DIR=str(tmp_path), SIZE_MIB="64", FLOOR_MIB_S="1")
    return run_check("storage.sh", tmp_path, **{**base, **env})


def test_storage_with_busybox_dd_measures_direct_io(tmp_path):
    # BusyBox dd on this machine's disk (ext4 or xfs honour O_DIRECT for aligned 1 MiB blocks): the check
    # saw O_DIRECT on dd's file while it ran, timed it itself, and cleaned up.
    proc = storage(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = result_line(proc)
    assert result["status"] == "passed" and float(result["value"]) > 0
    assert "(direct I/O)" in result["detail"] and "buffered" not in result["detail"], result
    assert not (tmp_path / "acceptance.bin").exists()


def test_storage_reports_o_direct_refused(tmp_path):
    # Blocks that are not a multiple of the logical block size: the kernel refuses the O_DIRECT write with
    # EINVAL and BusyBox dd silently clears O_DIRECT and goes on (coreutils/dd.c, clear_O_DIRECT). The
    # check sees the flag gone, says the run was buffered, and fails: a page-cache read measures nothing.
    proc = storage(tmp_path, BLOCK="1000000", SIZE_MIB="512")  # long enough for the check to look at dd
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = result_line(proc)
    assert "(buffered I/O)" in result["detail"]
    assert "the file system refused O_DIRECT" in proc.stderr


def test_storage_fails_when_its_time_cannot_be_read(tmp_path):
    # BusyBox's date here has no %N; without /proc/uptime the check has no clock: it fails naming that,
    # instead of dividing by a made-up time.
    no_clock = storage(tmp_path, PROC=str(tmp_path / "no-proc"))
    assert no_clock.returncode == 1
    assert "the write's time could not be read (clock readings '' and ''" in no_clock.stderr
    # A clock that does not move (a run shorter than its resolution) is no time either.
    frozen = tmp_path / "frozen-proc"
    frozen.mkdir()
    (frozen / "uptime").write_text("1234.56 100.00\n")
    proc = storage(tmp_path, PROC=str(frozen))
    assert proc.returncode == 1 and "clock readings '1234560' and '1234560', resolution 10 ms" in proc.stderr


def test_storage_fails_below_the_floor_and_when_dd_fails(tmp_path):
    slow = storage(tmp_path, FLOOR_MIB_S="10000000")
    assert slow.returncode == 1 and "below the floor of 10000000 MiB/s" in slow.stderr
    missing = storage(tmp_path, DIR=str(tmp_path / "not-mounted"))
    assert missing.returncode == 1 and f"write to {tmp_path}/not-mounted failed" in missing.stderr


# ----------------------------------------------------------------------------------------------- S3


@pytest.mark.real_server  # make test-fast leaves it out (a real rclone S3 server)
def test_s3_round_trip_against_a_real_s3_server_timed_in_milliseconds(tmp_path):
    with serve_s3(tmp_path, buckets=("cephfs-backup",)) as s3:
        work = tmp_path / "work"
        work.mkdir()

        def s3_check(node: str, bucket: str, size_mib: str) -> subprocess.CompletedProcess:
            env = dict(PREFIX="datasets", SIZE_MIB=size_mib, FLOOR_MIB_S="0.1", WORK=str(work), **s3.env)
            tools = {"rclone": rclone_binary()}
            return run_check("s3.sh", tmp_path, tools=tools, CHECK="storage-s3", NODE=node, BUCKET=bucket, **env)

        proc = s3_check("cephfs-backup", "cephfs-backup", "4")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        result = result_line(proc)
        assert result["status"] == "passed"
        # A 4 MiB put on loopback takes well under a second: timed in milliseconds, the rate is the size
        # over that time (whole seconds made it 0 s, then 4000 MiB/s or a division by zero).
        put = re.search(r"put ([0-9.]+) MiB/s \(([0-9]+) ms\), get ([0-9.]+) MiB/s \(([0-9]+) ms\)", result["detail"])
        assert put, result
        put_rate, put_ms, get_rate, get_ms = float(put[1]), int(put[2]), float(put[3]), int(put[4])
        assert 0 < put_ms < 1000 and 0 < get_ms < 1000, result
        assert put_rate == pytest.approx(4 * 1000 / put_ms, abs=0.1) and get_rate == pytest.approx(
            4 * 1000 / get_ms, abs=0.1
        )
        assert float(result["value"]) == min(put_rate, get_rate)
        assert not any(p.is_file() for p in (s3.root / "cephfs-backup").rglob("*"))  # deleted again
        missing = s3_check("no-bucket", "no-such-bucket", "1")
        assert missing.returncode == 1 and "acceptance check storage-s3 failed on no-bucket: put of" in missing.stderr


# ---------------------------------------------------------------------------------------------- GPU

SMI = """case "$*" in
  *--query-gpu=index,uuid,name,driver_version*) i=0; while [ $i -lt ${STUB_GPUS} ]; do
      echo "$i, GPU-1d2b6f5a-7c3e-4b8e-9a1f-0000000000$((10 + i)), NVIDIA H100 80GB HBM3, ${STUB_DRIVER}"
      i=$((i+1)); done ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
"""


def gpu_check(tmp_path, smi=SMI, ready=("driver", "toolkit", "cuda", "plugin"), **env):
    tmp_path.mkdir(exist_ok=True)
    uverbs = tmp_path / "dev-ib"
    uverbs.mkdir(exist_ok=True)
    (uverbs / "uverbs0").touch()
    folder = tmp_path / "validations"
    folder.mkdir(exist_ok=True)
    for name in ready:
        (folder / f"{name}-ready").touch()
    base = dict(CHECK="gpu-gpu-07", NODE="gpu-07", EXPECTED_GPUS="8", EXPECTED_DRIVER="595.91.07", RDMA="true")
    base.update(DEV_INFINIBAND=str(uverbs), VALIDATIONS=str(folder), STUB_GPUS="8", STUB_DRIVER="595.91.07")
    return run_check("gpu-node.sh", tmp_path, {"nvidia-smi": smi}, **{**base, **env})


def test_gpu_node_check_passes_with_every_gpu_on_the_set_driver(tmp_path):
    ok = gpu_check(tmp_path)
    assert ok.returncode == 0 and result_line(ok)["status"] == "passed", ok.stderr
    assert "driver 595.91.07" in result_line(ok)["detail"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"STUB_GPUS": "7"}, "the pod sees 7 GPUs, the inventory gives 8"),
        ({"STUB_DRIVER": "580.95.05"}, "driver 580.95.05 runs, gpu.driver.version is 595.91.07"),
        ({"DEV_INFINIBAND": "/nonexistent"}, "the RDMA resource was allocated but /nonexistent has no uverbs device"),
    ],
)
def test_gpu_node_check_fails_naming_the_node_and_the_cause(tmp_path, env, message):
    proc = gpu_check(tmp_path, **env)
    assert proc.returncode == 1 and f"acceptance check gpu-gpu-07 failed on gpu-07: {message}" in proc.stderr


def test_gpu_node_check_waits_for_the_validations_of_a_restarted_operator(tmp_path):
    # The validator writes plugin-ready again a moment after the check started (a driver upgrade's end).
    folder = tmp_path / "validations"
    timer = threading.Timer(1.5, lambda: (folder / "plugin-ready").touch())
    timer.start()
    try:
        proc = gpu_check(tmp_path, ready=("driver", "toolkit", "cuda"), WAIT="30", RETRY_EVERY="1")
    finally:
        timer.cancel()
    assert proc.returncode == 0 and result_line(proc)["status"] == "passed", proc.stderr


def test_gpu_node_check_bounds_a_hung_nvidia_smi_and_reads_the_validations(tmp_path):
    hung = gpu_check(tmp_path, smi="exec sleep 30\n", SMI_TIMEOUT="1")
    assert hung.returncode == 1 and "nvidia-smi failed or hung (more than 1s)" in hung.stderr
    unvalidated = gpu_check(tmp_path / "other", ready=("driver", "toolkit", "cuda"))
    assert unvalidated.returncode == 1
    assert "GPU Operator validations not passed: plugin (no *-ready file in" in unvalidated.stderr
    host_driver = gpu_check(tmp_path / "host", EXPECTED_DRIVER="", STUB_DRIVER="550.1")  # drivers on the host
    assert host_driver.returncode == 0 and "driver" not in result_line(host_driver)["detail"]


# --------------------------------------------------------------------------------------------- NCCL

# What torchrun prints with NCCL_DEBUG=INFO (the connection lines as NCCL's src/transport/net.cc and
# p2p.cc write them) around allreduce.py's table.
NCCL_INFO = {
    "ib": [
        "gpu-03:41:88 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.3<0>",
        "gpu-03:41:90 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA",
        "gpu-03:41:90 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA",
        "gpu-03:41:91 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via P2P/CUMEM/read",
    ],
    "socket": [
        "gpu-03:41:88 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.3<0>",
        "gpu-03:41:90 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/Socket/0",
    ],
}


def nccl_output(rows: list[tuple[int, float]], wrong: int = 0, transport: str = "ib", ranks: int = 16) -> str:
    table = [f"{size:12d} {100.0:13.1f} {bw / 1.875:12.2f} {bw:12.2f} {0:7d}" for size, bw in rows]
    plateau = [bw for size, bw in rows if size >= 256 << 20]
    return "\n".join(
        [
            *NCCL_INFO[transport],
            "# Nodes : gpu-03,gpu-07",
            f"# Ranks : {ranks}",
            "#       size      time(us)  algbw(GB/s)  busbw(GB/s)  #wrong",
            *table,
            f"# Elements checked : {sum(size // 4 * ranks for size, _ in rows)}",
            f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
            f"# Avg bus bandwidth    : {sum(bw for _, bw in rows) / len(rows):.3f}",
            f"# Plateau bus bandwidth : {sum(plateau) / len(plateau):.3f} ({len(plateau)} sizes from 268435456 B)",
        ]
    )


# A healthy single-port NDR pair: latency-bound small messages, a plateau of 42-43 GB/s.
HEALTHY = [(8 << 20, 18.0), (16 << 20, 26.0), (32 << 20, 33.0), (64 << 20, 38.0), (128 << 20, 40.5)]
HEALTHY += [(256 << 20, 42.0), (512 << 20, 42.6), (1 << 30, 43.0)]


def nccl(tmp_path, output: str, index: str = "0", torchrun_status: int = 0, **env):
    torchrun = f"cat <<'EOF'\n{output}\nEOF\nexit {torchrun_status}\n"
    base = dict(CHECK="nccl-ib-gpu-03-gpu-07", FLOOR_GBS="40.0", NPROC="8", NNODES="2", JOB_COMPLETION_INDEX=index)
    base.update(MASTER="acceptance-nccl-ib-gpu-03-gpu-07-0.acceptance-nccl-ib-gpu-03-gpu-07", EXPECT_TRANSPORT="NET/IB")
    return run_check("nccl.sh", tmp_path, {"torchrun": torchrun}, **{**base, **env})


def test_nccl_compares_the_large_message_plateau_with_the_floor(tmp_path):
    # The 8M..1G average (33.0 GB/s) is below 40: it mixes latency-bound sizes in. The plateau (42.5) is what
    # nccl-tests' bandwidth is read from: a healthy pair passes, every sum was right, the transport is shown.
    proc = nccl(tmp_path, nccl_output(HEALTHY))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = result_line(proc)
    assert result["status"] == "passed" and result["value"] == "42.533" and result["node"] == "gpu-03,gpu-07"
    assert "sums right, transport NET/IB/GDRDMA P2P/CUMEM/read" in result["detail"]
    assert "NCCL INFO" not in proc.stdout  # the table is in the log, NCCL's chatter is not


@pytest.mark.parametrize(
    ("output", "advisory", "message"),
    [
        (
            nccl_output([(s, b * 0.85) for s, b in HEALTHY]),
            "false",
            "bus bandwidth 36.153 GB/s on the large-message plateau is below",
        ),
        (nccl_output(HEALTHY, wrong=4096), "false", "returned 4096 wrong elements"),
        (nccl_output(HEALTHY, transport="socket"), "false", "did not run over NET/IB (transport NET/Socket)"),
        (nccl_output(HEALTHY, wrong=1), "true", "returned 1 wrong elements"),
    ],
)
def test_nccl_fails_on_low_bandwidth_wrong_sums_or_the_wrong_transport(tmp_path, output, advisory, message):
    proc = nccl(tmp_path, output, ADVISORY=advisory)
    assert proc.returncode == (0 if advisory == "true" else 1), proc.stderr
    assert "acceptance check nccl-ib-gpu-03-gpu-07 failed on gpu-03,gpu-07: " in proc.stderr and message in proc.stderr
    assert result_line(proc)["advisory"] is (advisory == "true")


def test_nccl_without_a_result_or_a_run_fails_and_the_second_pod_does_not_report(tmp_path):
    broken = nccl(tmp_path, "NCCL WARN net/IB : no device", torchrun_status=1)
    assert broken.returncode == 1 and "the all-reduce did not run" in broken.stderr
    silent = nccl(tmp_path, "# Avg bus bandwidth    : 45.0")  # the old output: no plateau, no correctness
    assert silent.returncode == 1 and "no '# Plateau bus bandwidth' or '# Out of bounds values' line" in silent.stderr
    peer = nccl(tmp_path, nccl_output(HEALTHY), index="1")
    assert peer.returncode == 0 and "ACCEPTANCE" not in peer.stdout


# --------------------------------------------------------------------------------------------- gang


def gang(tmp_path, resolvable: str, **env):
    nslookup = f'case "$1" in {resolvable}) echo "Address: 10.42.0.9" ;; *) echo "no $1" >&2; exit 1 ;; esac\n'
    base = dict(CHECK="gang", QUEUE="acceptance", PODS="3", SCHEDULER="volcano", POD_GROUP="acceptance-gang")
    base.update(JOB_NAME="acceptance-gang", SUBDOMAIN="acceptance-gang", WAIT="1", RETRY_EVERY="1")
    return run_check("gang.sh", tmp_path, {"nslookup": nslookup}, **{**base, **env})


def test_gang_check_passes_only_when_it_sees_every_peer_placed(tmp_path):
    every = gang(tmp_path, "acceptance-gang-[12].acceptance-gang", JOB_COMPLETION_INDEX="0")
    detail = result_line(every)["detail"]
    assert every.returncode == 0 and "LocalQueue acceptance, placed by volcano as PodGroup acceptance-gang" in detail
    assert result_line(every)["evidence"]["amounts"]["peers_seen"] == "2"
    alone = gang(tmp_path, "acceptance-gang-1.acceptance-gang", JOB_COMPLETION_INDEX="0")
    assert alone.returncode == 1 and "ran without its peers: acceptance-gang-2.acceptance-gang" in alone.stderr


def test_the_nccl_program_carries_allreduce_py_to_torchrun(tmp_path):
    # The Job's program writes allreduce.py before nccl.sh runs torchrun on it: what torchrun gets is the file.
    copy = tmp_path / "given.py"
    torchrun = (
        f'for a in "$@"; do case $a in *allreduce.py) cp "$a" {copy} ;; esac; done\n'
        f"cat <<'END'\n{nccl_output(HEALTHY, ranks=8)}\nEND\n"
    )
    env = dict(CHECK="nccl-nvlink", NODE="gpu-01", FLOOR_GBS="100", NPROC="8", EXPECT_TRANSPORT="")
    proc = run_check("nccl.sh", tmp_path, {"torchrun": torchrun}, **env)
    assert copy.read_text() == (CHECKS / "allreduce.py").read_text()
    assert proc.returncode == 1 and "below the floor of 100 GB/s" in proc.stderr
