"""A corpus of stand-in tool outputs, each run through the real check program in BusyBox sh (busybox.py): every one
must end failed or in a non-green state (unverified, skipped), never passed. The cases the checks must survive:
nothing written, partial writes, empty output, garbage, other units, a decimal comma, junk lines, zero counts and
stale data. The shell's verdict (lib.sh) and the report's (evidence.py) must agree on every record."""

from __future__ import annotations

import pytest

from stacks.acceptance_report import evidence
from tests.acceptance.busybox import BUSYBOX, result_line, run_check
from tests.acceptance.test_scripts import HEALTHY, gpu_check, nccl, nccl_output, storage

NOT_GREEN = {"failed", "unverified", "skipped"}


def judged(proc) -> dict:
    """The record, with the check's own status checked against the report's rule."""
    record = result_line(proc)
    assert record["status"] == evidence.verdict(record)[0], record
    assert proc.returncode == {"passed": 0, "failed": 1}.get(record["status"], 3), proc.stderr
    return record


# ------------------------------------------------------------------------------------------ storage

# A stand-in dd: the real BusyBox dd for every call but the check's write (of=.../acceptance.bin), which does what
# the case says. $@ is dd's arguments.
REAL_DD = f'exec {BUSYBOX} dd "$@"'
STORAGE_DD = {
    # Exits 0, writes nothing, says nothing.
    "nothing written": 'case "$*" in *of=*acceptance.bin*) exit 0 ;; esac\n' + REAL_DD,
    # Writes 1 MiB of the 64 asked and says it wrote it all.
    "partial write": (
        'case "$*" in *of=*acceptance.bin*) head -c 1048576 <"${1#if=}" >"$DIR/acceptance.bin"\n'
        '  echo "64+0 records in" >&2; echo "64+0 records out" >&2; exit 0 ;; esac\n' + REAL_DD
    ),
    # Writes everything, prints no counts (empty output).
    "empty output": 'case "$*" in *of=*acceptance.bin*) '
    + f'{BUSYBOX} dd "$@" 2>/dev/null; exit $? ;; esac\n'
    + REAL_DD,
    # Writes everything, prints counts in another form (a locale's, a build's).
    "garbage counts": (
        'case "$*" in *of=*acceptance.bin*) ' + f'{BUSYBOX} dd "$@" 2>/dev/null\n'
        '  echo "64,0 Datensätze ein" >&2; echo "6.4e+01+0 records out" >&2; exit 0 ;; esac\n' + REAL_DD
    ),
    # Writes zeros instead of the data (a device that drops writes reads zeros back).
    "zeros read back": (
        f'case "$*" in *of=*acceptance.bin*) shift; {BUSYBOX} dd if=/dev/zero "$@"; exit $? ;; esac\n' + REAL_DD
    ),
}


@pytest.mark.parametrize("case", sorted(STORAGE_DD))
def test_storage_is_never_passed_on_a_dd_that_did_not_do_the_work(tmp_path, case):
    proc = run_check(
        "storage.sh",
        tmp_path,
        {"dd": STORAGE_DD[case]},
        CHECK="storage-tier1",
        NODE="tier1-nvme",
        DIR=str(tmp_path),
        SIZE_MIB="64",
        FLOOR_MIB_S="1",
    )
    record = judged(proc)
    assert record["status"] in NOT_GREEN, (case, record)


def test_storage_is_not_fooled_by_a_stale_file_of_an_earlier_run(tmp_path):
    # The file an earlier run left, and a dd that does nothing: sizes and digests could match, dd's counts do not.
    first = storage(tmp_path)
    assert judged(first)["status"] == "passed"
    stale = run_check(
        "storage.sh",
        tmp_path,
        {"dd": 'case "$*" in *of=*acceptance.bin*) exit 0 ;; esac\n' + REAL_DD},
        CHECK="storage-tier1",
        NODE="tier1-nvme",
        DIR=str(tmp_path),
        SIZE_MIB="64",
        FLOOR_MIB_S="1",
    )
    assert judged(stale)["status"] == "failed"


# --------------------------------------------------------------------------------------------- GPU node

UUID = "GPU-1d2b6f5a-7c3e-4b8e-9a1f-0000000000"


def rows(n: int, model: str = "NVIDIA H100 80GB HBM3", driver: str = "595.91.07") -> str:
    return "".join(f"{i}, {UUID}{10 + i}, {model}, {driver}\\n" for i in range(n))


SMI_CASES = {
    # The issue's: 7 GPUs and a warning on stderr (merged in, it counted as 8).
    "infoROM warning": f"printf '{rows(7)}'; echo 'WARNING: infoROM is corrupted at gpu 0000:1B:00.0' >&2",
    # A warning on stdout among the rows (junk line).
    "junk line": f"printf '{rows(8)}'; echo 'WARNING: infoROM is corrupted at gpu 0000:1B:00.0'",
    "empty output": "exit 0",
    "header row": f"echo 'index, uuid, name, driver_version'; printf '{rows(8)}'",
    # The same GPU listed twice (8 lines, 7 GPUs).
    "repeated GPU": f"printf '{rows(7)}'; echo '6, {UUID}16, NVIDIA H100 80GB HBM3, 595.91.07'",
    "other model": f"printf '{rows(8, model='NVIDIA H100 PCIe')}'",
    "driver with a decimal comma": f"printf '{rows(8, driver='595,91,07')}'",
    "no driver version": "printf '"
    + "".join(f"{i}, {UUID}{10 + i}, NVIDIA H100 80GB HBM3, [N/A]\\n" for i in range(8))
    + "'",
    "zero GPUs": "echo 'No devices were found'",
}


@pytest.mark.parametrize("case", sorted(SMI_CASES))
def test_gpu_node_check_is_never_passed_on_bad_nvidia_smi_output(tmp_path, case):
    proc = gpu_check(tmp_path, smi=SMI_CASES[case] + "\n", EXPECTED_MODEL="NVIDIA H100 80GB HBM3")
    record = judged(proc)
    assert record["status"] in NOT_GREEN, (case, record)


def test_gpu_node_check_passes_clean_output_and_keeps_stderr_apart(tmp_path):
    warned = gpu_check(tmp_path, smi=f"printf '{rows(8)}'; echo 'WARNING: clocks throttled' >&2\n")
    record = judged(warned)
    assert record["status"] == "passed" and record["evidence"]["amounts"]["gpus"] == "8"
    assert "nvidia-smi warned: WARNING: clocks throttled" in record["detail"]


# ------------------------------------------------------------------------------------------------ NCCL


def ib_sys(tmp_path, *ports: tuple[str, str]):
    """A sysfs tree of HCA ports: (state, rate) each, as the kernel prints them."""
    root = tmp_path / "sys"
    for i, (state, rate) in enumerate(ports):
        port = root / "class" / "infiniband" / f"mlx5_{i}" / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        (port / "rate").write_text(rate + "\n")
    return str(root)


NCCL_CASES = {
    # The plateau in another unit (MB/s, as some builds print it): a number the floor was never meant for.
    "other unit": nccl_output(HEALTHY).replace(
        "# Plateau bus bandwidth : 42.533", "# Plateau bus bandwidth : 42533 MB/s"
    ),
    # A decimal comma.
    "decimal comma": nccl_output(HEALTHY).replace("42.533", "42,533"),
    # Zero elements checked: nothing was compared.
    "zero elements": nccl_output(HEALTHY).replace("# Elements checked :", "# Elements checked : 0 #"),
    # Fewer ranks than asked (one node's GPUs not in the run).
    "ranks missing": nccl_output(HEALTHY, ranks=8),
    # The plateau line without its table (no time measured).
    "no table": "\n".join(line for line in nccl_output(HEALTHY).splitlines() if not line.strip()[:1].isdigit()),
    # Empty output from a run that exited 0.
    "empty": "",
}


@pytest.mark.parametrize("case", sorted(NCCL_CASES))
def test_nccl_is_never_passed_on_bad_all_reduce_output(tmp_path, case):
    proc = nccl(tmp_path, NCCL_CASES[case])
    record = judged(proc)
    assert record["status"] in NOT_GREEN, (case, record)


@pytest.mark.parametrize(
    ("ports", "why"),
    [
        ((("4: ACTIVE", "200 Gb/sec (4X HDR)"),), "0 of 1 InfiniBand ports active at 400 Gb/s"),
        ((("1: DOWN", "400 Gb/sec (4X NDR)"),), "(active: none)"),
        ((("4: ACTIVE", "garbage"),), "0 of 1"),
        ((), "(active: none)"),  # no HCA visible
    ],
)
def test_nccl_fails_a_port_below_its_rate_before_measuring(tmp_path, ports, why):
    proc = nccl(tmp_path, nccl_output(HEALTHY), SYS=ib_sys(tmp_path, *ports), IB_RATE_GBPS="400", IB_PORTS="1")
    assert judged(proc)["status"] == "failed" and why in proc.stderr


def test_nccl_passes_with_ports_at_rate_and_is_unverified_without_a_floor(tmp_path):
    ok = nccl(
        tmp_path, nccl_output(HEALTHY), SYS=ib_sys(tmp_path, ("4: ACTIVE", "400 Gb/sec (4X NDR)")), IB_RATE_GBPS="400"
    )
    assert judged(ok)["status"] == "passed"
    (tmp_path / "x").mkdir()
    no_floor = nccl(tmp_path / "x", nccl_output(HEALTHY), FLOOR_GBS="", EXPECT_TRANSPORT="")
    assert judged(no_floor)["status"] == "unverified" and "hardware table" in no_floor.stderr


# ------------------------------------------------------------------------------------------------ gang

GANG_LOOKUPS = {
    # A resolver that answers nothing for anyone (empty output, exit 0 is still a failure to resolve? no: exit 1).
    "nobody placed": "exit 1",
    # Garbage from nslookup and a failure status.
    "garbage": 'echo "*** Can\'t find $1: No answer"; exit 1',
    # Only one of two peers.
    "one peer": 'case "$1" in acceptance-gang-1.*) exit 0 ;; *) exit 1 ;; esac',
}


@pytest.mark.parametrize("case", sorted(GANG_LOOKUPS))
def test_gang_is_never_passed_without_every_peer(tmp_path, case):
    env = dict(CHECK="gang", QUEUE="acceptance", PODS="3", SCHEDULER="volcano", JOB_NAME="acceptance-gang")
    proc = run_check("gang.sh", tmp_path, {"nslookup": GANG_LOOKUPS[case] + "\n"}, WAIT="1", RETRY_EVERY="1", **env)
    assert judged(proc)["status"] in NOT_GREEN


def test_a_gang_of_one_pod_has_nothing_to_prove_but_its_count(tmp_path):
    # PODS=1 cannot happen (GANG_PODS is 2), but the rule holds: no peers asked, none seen, the count is the evidence.
    env = dict(CHECK="gang", QUEUE="acceptance", PODS="1", SCHEDULER="volcano", JOB_NAME="acceptance-gang")
    proc = run_check("gang.sh", tmp_path, {"nslookup": "exit 1\n"}, **env)
    assert judged(proc)["status"] == "passed"


# A stand-in curl for the monitoring check: writes BODY as the API's answer to the file after -o.
def _curl(body: str) -> str:
    return f'out=""; while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done\nprintf \'%s\' \'{body}\' >"$out"\n'


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ('{"jsonrpc":"2.0","result":[],"id":1}', "lists no monitored host the check may read"),
        ('{"jsonrpc":"2.0","error":{"code":-32602,"message":"No permissions"},"id":1}', "refused host.get"),
        ("<html>502 Bad Gateway</html>", "lists no monitored host"),
    ],
)
def test_monitoring_is_never_passed_when_zabbix_lists_no_host(tmp_path, answer, why):
    """The Job names no host: the check asks Zabbix which hosts to judge, and an empty or refused answer is nothing
    measured, a failure."""
    (tmp_path / "token").write_text("t")
    proc = run_check(
        "zabbix.sh",
        tmp_path,
        stubs={"curl": _curl(answer)},
        CHECK="monitoring",
        ZABBIX_URL="https://zabbix.test",
        MAX_AGE="600",
        TOKEN_FILE=str(tmp_path / "token"),
    )
    assert proc.returncode == 1 and why in proc.stderr, proc.stdout + proc.stderr
    assert judged(proc)["status"] == "failed"
