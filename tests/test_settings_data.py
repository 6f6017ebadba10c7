"""Settings refused by data: versions bounded by the compatibility table (settings/compatibility.py), Kueue values that
pass their own bounds but mean nothing or the opposite, an upgrade that drains a whole pool, alert thresholds beyond
what they watch; memory and storage amounts need their unit. Each refusal names the field and the fix."""

from __future__ import annotations

import pytest

from settings.compatibility import CHART_COMPONENTS, CUDA_DRIVERS, IPOIB_MODES, OS_INSTALL
from tests.conftest import node_index, problems, stack_doc

PYTORCH_CUDA12 = "docker.io/pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"


def driver(version: str):
    return lambda raw: raw.setdefault("gpu", {}).setdefault("driver", {}).update(version=version)


def cuda12_images(raw: dict) -> None:
    raw.setdefault("acceptance", {}).update(gpuImage=PYTORCH_CUDA12)
    raw["scheduling"].setdefault("trainingOperators", {}).update(trainerRuntimeImage=PYTORCH_CUDA12)


def team(raw: dict, index: int = 0) -> dict:
    return raw["scheduling"]["teams"][index]


def gpu_quota(raw: dict, index: int = 0) -> dict:
    return next(q for name, q in team(raw, index)["quotas"].items() if name != "cpu")


def refused(mutate, stack: str, field: str, *fragments: str) -> str:
    found = [p for p in problems(stack, mutate) if p.startswith(field) and all(f in p for f in fragments)]
    assert found, problems(stack, mutate)
    return found[0]


# ---------------------------------------------------------------------------------------------
# The compatibility table
# ---------------------------------------------------------------------------------------------


def test_every_row_cites_its_upstream_source():
    rows = [*CUDA_DRIVERS, *CHART_COMPONENTS, *OS_INSTALL, *IPOIB_MODES]
    assert rows and all(row.source.startswith(("https://", "Mellanox/", "NVIDIA/")) for row in rows)


@pytest.mark.parametrize("version", ["570.195.03", "535.274.02", "550.163.01"])
def test_a_driver_too_old_for_the_cuda_of_the_images_is_refused(version):
    line = refused(driver(version), "prod", "gpu.driver.version", "CUDA 13.0", "580")
    assert "pytorch" in line and "docs.nvidia.com" in line


def test_the_same_driver_with_images_built_for_an_older_cuda_is_accepted():
    def mutate(raw):
        driver("570.195.03")(raw)
        cuda12_images(raw)

    assert problems("prod", mutate) == []


def test_a_cuda_12_image_refuses_a_driver_of_the_cuda_11_branch():
    def mutate(raw):
        driver("470.256.02")(raw)
        cuda12_images(raw)

    refused(mutate, "prod", "gpu.driver.version", "CUDA 12.8", "525")


@pytest.mark.parametrize("tag", ["doca3.1.0-25.07-0.9.7.0-0", "doca2.9.3-24.10-3.2.5.0-1", "doca3.4.1-25.10-1.1.0.0-1"])
def test_a_doca_driver_from_another_release_than_the_chart_is_refused(tag):
    def mutate(raw):
        raw["network"].setdefault("infiniband", {}).update(hostStack="ofed", docaDriverVersion=tag)

    refused(mutate, "prod", "network.infiniband.docaDriverVersion", "26.4.1", "doca3.4.1-26.04")


def test_the_charts_own_doca_driver_is_accepted_and_inbox_is_not_judged():
    def ofed(raw):
        raw["network"].setdefault("infiniband", {}).update(hostStack="ofed")

    assert problems("prod", ofed) == []
    inbox = lambda raw: raw["network"].setdefault("infiniband", {}).update(docaDriverVersion="doca3.1.0-25.07-1")  # noqa: E731
    assert problems("prod", inbox) == []


def test_the_rpm_install_method_on_debian_hosts_is_refused():
    refused(lambda raw: raw["cluster"].setdefault("install", {}).update(method="rpm"), "prod", "cluster.install.method")
    rhel = lambda raw: raw["cluster"].update(osFamily="rhel", install={"method": "rpm"})  # noqa: E731
    assert problems("prod", rhel) == []


@pytest.mark.parametrize(
    ("key", "fix"),
    [("https://docker.io", "'docker.io'"), ("nvcr.io/nvidia", "'nvcr.io'"), ("oci://quay.io", "'quay.io'")],
)
def test_a_registry_mirror_keyed_by_a_url_is_refused_naming_the_registry(key, fix):
    def mutate(raw):
        raw["cluster"]["registryMirrors"] = {key: ["https://mirror.example.internal"]}

    assert fix in refused(mutate, "prod", f"cluster.registryMirrors.{key}")


def test_registry_names_with_a_port_and_the_wildcard_are_mirror_keys():
    def mutate(raw):
        raw["cluster"]["registryMirrors"] = {
            "registry.example.internal:5000": ["https://m.example"],
            "*": ["https://m.example"],
        }

    assert problems("prod", mutate) == []


# ---------------------------------------------------------------------------------------------
# Units and bounds
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda raw: gpu_quota(raw).update(memory="15360"), "memory"),
        (lambda raw: team(raw).update(ephemeralStorage="500"), "ephemeralStorage"),
        (lambda raw: team(raw).update(storage={"tier2-shared": "50"}), "storage"),
        (lambda raw: gpu_quota(raw).update(memory="512m"), "memory"),
    ],
)
def test_memory_and_storage_without_a_byte_unit_are_refused(mutate, field):
    found = [p for p in problems("prod", mutate) if field in p and "has no byte unit" in p]
    assert found and "Gi" in found[0], problems("prod", mutate)


def test_zero_memory_needs_no_unit():
    assert not [p for p in problems("prod", lambda raw: team(raw).update(ephemeralStorage="0")) if "byte unit" in p]


# ---------------------------------------------------------------------------------------------
# Kueue semantics
# ---------------------------------------------------------------------------------------------


def test_lending_that_leaves_nothing_to_borrow_is_refused():
    def mutate(raw):
        for t in raw["scheduling"]["teams"]:
            for name, quota in t["quotas"].items():
                if name != "cpu":
                    quota["lendingLimit"] = {"gpus": 0}

    refused(mutate, "prod", "scheduling.teams[", "lendingLimit", "nothing in the cohort to borrow")


def test_a_fair_sharing_weight_of_zero_is_refused():
    refused(lambda raw: team(raw, 1).update(fairSharingWeight=0), "prod", "scheduling.teams[1].fairSharingWeight")


@pytest.mark.parametrize(("a", "b"), [(0, 1), (1, 2), (0, 2)])
def test_two_priority_classes_of_one_value_are_refused(a, b):
    def mutate(raw):
        classes = raw["scheduling"]["priorityClasses"]
        classes[b]["value"] = classes[a]["value"]

    refused(mutate, "prod", f"scheduling.priorityClasses[{b}].value", "distinct values")


def test_a_backoff_base_above_its_maximum_is_refused():
    def mutate(raw):
        raw["scheduling"]["waitForPodsReady"] = {"backoffBaseSeconds": 7200, "backoffMaxSeconds": 3600}

    refused(mutate, "prod", "scheduling.waitForPodsReady.backoffBaseSeconds", "raise the maximum")


# ---------------------------------------------------------------------------------------------
# Time, capacity and what thresholds watch
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("pool", "concurrency"), [("gpu", 15), ("gpu", 16), ("cpu", 20), ("cpu", 35)])
def test_an_upgrade_concurrency_that_drains_a_whole_pool_is_refused(pool, concurrency):
    def mutate(raw):
        raw["cluster"]["upgrade"][pool]["concurrency"] = concurrency

    refused(mutate, "prod", f"cluster.upgrade.{pool}.concurrency", "at once")


def test_borrowed_gpus_above_the_inventory_are_refused():
    gpus = sum(n["gpu"]["count"] for n in stack_doc("prod")["nodes"] if n.get("gpu"))

    def mutate(raw):
        raw.setdefault("monitoring", {}).setdefault("thresholds", {})["queueBorrowedGpus"] = gpus + 1

    refused(mutate, "prod", "monitoring.thresholds.queueBorrowedGpus", f"{gpus} schedulable GPUs")


def test_a_certificate_warning_as_long_as_the_certificate_lives_is_refused():
    def mutate(raw):
        raw.setdefault("monitoring", {}).setdefault("thresholds", {})["certificateExpiryDays"] = 365

    refused(mutate, "prod", "monitoring.thresholds.certificateExpiryDays", "365 days")


def test_a_whole_pool_of_one_node_is_no_problem():
    raw = stack_doc("lab")
    assert node_index(raw, "lab-gpu") >= 0
    assert (
        problems(
            "lab", lambda raw: raw["cluster"].setdefault("upgrade", {}).setdefault("gpu", {}).update(concurrency=1)
        )
        == []
    )


@pytest.mark.parametrize(("ports", "threshold"), [(2, 500), (4, 401), (1, 800)])
def test_a_port_rate_threshold_above_one_ports_rate_is_refused_whatever_the_port_count(ports, threshold):
    def mutate(raw):
        raw.setdefault("acceptance", {}).setdefault("nccl", {}).update(ibGeneration="NDR", ibPortWidth=4, ibPorts=ports)
        raw.setdefault("monitoring", {}).setdefault("thresholds", {})["ibMinRateGbps"] = threshold

    refused(mutate, "prod", "monitoring.thresholds.ibMinRateGbps", "400 Gb/s", "one port's rate")


def test_the_settings_reference_shows_the_hardware_and_compatibility_tables_with_their_sources():
    from settings.hardware import GPU_MODELS
    from stacks import docs

    text = docs.settings_reference()
    assert "## Hardware table" in text and "## Compatibility table" in text
    for row in [*GPU_MODELS, *CUDA_DRIVERS, *CHART_COMPONENTS, *OS_INSTALL, *IPOIB_MODES]:
        assert row.source in text


# ---------------------------------------------------------------------------------------------
# Values that determine others
# ---------------------------------------------------------------------------------------------


def _racks(raw: dict, block_of) -> list[dict]:
    gpus = [n for n in raw["nodes"] if n["role"] == "gpu"]
    for i, n in enumerate(gpus):
        n["topology"] = {"block": block_of(i), "rack": f"rack-{i // 4}"}
    return gpus


@pytest.mark.parametrize("moved", [1, 5, 9])
def test_a_rack_in_two_blocks_is_refused(moved):
    def mutate(raw):
        gpus = _racks(raw, lambda i: "block-a")
        gpus[moved]["topology"]["block"] = "block-b"

    refused(mutate, "prod", "nodes[", "topology.block", "correct the block or the rack")


def test_racks_each_in_one_block_are_accepted():
    assert problems("prod", lambda raw: _racks(raw, lambda i: f"block-{i // 8}")) == []


def test_one_claim_backed_up_by_two_sources_is_refused():
    def mutate(raw):
        sources = raw["storage"]["minio"]["backup"]["sources"]
        sources.append({**sources[0], "name": f"{sources[0]['name']}-again"})

    refused(mutate, "prod", "storage.minio.backup.sources[", "keep one source per claim")


def test_an_rdma_team_under_restricted_pod_security_is_refused():
    def mutate(raw):
        next(t for t in raw["scheduling"]["teams"] if t.get("rdma"))["podSecurity"] = "restricted"

    refused(mutate, "prod", "scheduling.teams[", "podSecurity", "use 'baseline'")


@pytest.mark.parametrize(("wait", "ok"), [(3600, False), (86400, False), (7 * 86400, True)])
def test_the_upgrade_wait_covers_the_longest_closed_stretch_of_a_window(wait, ok):
    def mutate(raw):
        raw["cluster"]["upgrade"]["waitTimeoutSeconds"] = wait

    found = [p for p in problems("prod", mutate) if p.startswith("cluster.upgrade.waitTimeoutSeconds")]
    assert (found == []) is ok, found
    if found:
        assert "5 days, 18:00:00" in found[0] and "gpu pool" in found[0]


@pytest.mark.parametrize("speed", ["EDR", "HDR", "NDR"])
def test_connected_ipoib_on_hcas_that_run_enhanced_ipoib_is_refused(speed):
    def mutate(raw):
        raw["network"].setdefault("infiniband", {}).update(mode="connected")
        raw.setdefault("acceptance", {}).setdefault("nccl", {}).update(ibGeneration=speed)
        raw.setdefault("monitoring", {}).setdefault("thresholds", {})["ibMinRateGbps"] = 50

    refused(mutate, "prod", "network.infiniband.mode", speed, "use 'datagram'")


def test_connected_ipoib_on_an_fdr_fabric_is_accepted():
    def mutate(raw):
        raw["network"].setdefault("infiniband", {}).update(mode="connected")
        raw.setdefault("acceptance", {}).setdefault("nccl", {}).update(ibGeneration="FDR")
        raw.setdefault("monitoring", {}).setdefault("thresholds", {})["ibMinRateGbps"] = 50

    assert problems("prod", mutate) == []
