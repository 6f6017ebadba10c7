"""Every settings field declares what it claims and what changing it does (settings/declare.py), and the rules and
the review follow the declarations: completeness over every field of every model, then the claims checker."""

from __future__ import annotations

import re
import typing
from typing import Annotated, ClassVar, Optional

import pytest
from pydantic import BaseModel

from settings import Settings, StackSecrets
from settings.declare import RERENDER, Claim, changes_of, claims_of, every_model, models_in
from settings.rules.claims import RESERVED_NAMESPACES
from settings.types import DevicePath, Host, IPv4, IPv4Network, Model
from stacks.namespaces import platform_created
from tests.conftest import node_index, problems

MODELS = [*every_model(Settings), StackSecrets]

# Field names that say the value is something shared (a namespace, a range, an address, a disk, a bucket, a port, a
# host), and field types that are such things: either needs a claim (`Claim`, or `Uses` for a reference).
CLAIM_NAMES = re.compile(r"(^|_)(namespaces?|cidr|range|address|device|bucket|port|endpoint|host|servers?|registry)$")
CLAIM_TYPES = (IPv4, IPv4Network, DevicePath, Host)
# Named like a claim but holding none, each with the reason.
NOT_CLAIMS = {
    ("Oidc", "username_claim"): "an OIDC token claim's name",
    ("ClusterUpgrade", "upgrade_image"): "an image repository",
    ("Team", "egress_cidrs"): "destinations outside the cluster a team may reach (0.0.0.0/0 included); the team's "
    "egress NetworkPolicy excepts the cluster's own ranges, so they claim no range",
}


def _is_section(info) -> bool:
    """A field typed by a section (not a list, dict or optional one): its own fields declare what changes."""
    return isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)


def undeclared_changes(models: list[type[BaseModel]]) -> list[str]:
    missing = []
    for model in models:
        declared = changes_of(model)
        for name, info in model.model_fields.items():
            if name not in declared and not _is_section(info):
                missing.append(f"{model.__name__}.{name}")
        missing += [
            f"{model.__name__}.{name} (declared, no such field)" for name in declared if name not in model.model_fields
        ]
    return missing


def _typed_as_claim(info) -> bool:
    metadata = {id(m) for m in _metadata(info.annotation)} | {id(m) for m in info.metadata}
    return any(all(id(m) in metadata for m in getattr(t, "__metadata__", ())) for t in CLAIM_TYPES)


def _metadata(tp) -> list:
    found = list(getattr(tp, "__metadata__", ()))
    for arg in typing.get_args(tp):
        found += _metadata(arg)
    return found


def unclaimed(models: list[type[BaseModel]]) -> list[str]:
    missing = []
    for model in models:
        for name, info in model.model_fields.items():
            if models_in(info.annotation) or (model.__name__, name) in NOT_CLAIMS or model is StackSecrets:
                continue
            if (CLAIM_NAMES.search(name) or _typed_as_claim(info)) and not claims_of(info):
                missing.append(f"{model.__name__}.{name}")
    return missing


def test_every_field_of_every_model_declares_what_changing_it_does():
    assert undeclared_changes(MODELS) == []


def test_every_field_that_names_a_shared_thing_declares_its_claim():
    assert unclaimed(MODELS) == []


def test_a_new_field_without_change_semantics_fails_the_completeness_test():
    class Extended(Model):
        existing: int = 1
        added: int = 2

        CHANGES: ClassVar = {"existing": RERENDER}

    assert undeclared_changes([Extended]) == ["Extended.added"]


@pytest.mark.parametrize(
    ("annotation", "name"),
    [
        (str, "quota_namespace"),  # by its name
        (IPv4Network, "overlay"),  # by its type
        (Optional[Host], "syslog"),  # by its type, optional
        (list[DevicePath], "journal"),  # by its item type
        (int, "metrics_port"),  # by its name
    ],
)
def test_a_new_field_of_a_claim_type_without_its_claim_fails_the_completeness_test(annotation, name):
    extended = type("Extended", (Model,), {"__annotations__": {name: annotation}})
    assert unclaimed([extended]) == [f"Extended.{name}"]
    claimed = type("Claimed", (Model,), {"__annotations__": {name: Annotated[annotation, Claim("namespace")]}})
    assert unclaimed([claimed]) == []


# --- the claims checker: cases the per-field rules let through --------------------------------------------------


def _set(raw: dict, path: str, value) -> None:
    *parents, last = path.split(".")
    for key in parents:
        raw = raw.setdefault(key, {})
    raw[last] = value


def test_two_components_claiming_one_namespace_are_refused():
    found = problems("prod", lambda raw: _set(raw, "gpu.tier1.namespace", "monitoring"))
    assert any(
        p.startswith("monitoring.namespace: namespace 'monitoring' is also claimed by gpu.tier1.namespace")
        or p.startswith("gpu.tier1.namespace: namespace 'monitoring' is also claimed by monitoring.namespace")
        for p in found
    ), found


@pytest.mark.parametrize("namespace", ["system-upgrade", "ml-backup", "kube-node-lease", "calico-system"])
def test_a_namespace_the_system_or_platform_owns_is_refused_for_any_component(namespace):
    found = problems("prod", lambda raw: _set(raw, "acceptance.namespace", namespace))
    assert any(p.startswith(f"acceptance.namespace: namespace {namespace!r} is reserved") for p in found), found


def test_one_disk_as_tier1_and_as_an_osd_on_one_node_is_refused():
    def mutate(raw):
        gpu = raw["nodes"][node_index(raw, "gpu-01")]
        cpu = raw["nodes"][node_index(raw, "cpu-04")]
        cpu["osdDevices"].append({"device": "/dev/disk/by-id/nvme-dup-on-cpu-04"})
        cpu["osdDevices"].append({"device": "/dev/disk/by-id/nvme-dup-on-cpu-04"})
        gpu["nvme"][0]["device"] = cpu["osdDevices"][0]["device"]

    found = problems("prod", mutate)
    assert any("is also claimed by" in p and "(another host:" in p for p in found), found
    assert any(
        re.match(r"nodes\[\d+\]\.osdDevices\[\d+\]\.device: device .* also claimed by nodes\[\d+\]\.osd", p)
        for p in found
    ), found


def test_a_by_id_disk_on_two_nas_hosts_is_refused():
    def mutate(raw):
        raw["nas"]["hosts"][1]["drives"][0]["device"] = raw["nas"]["hosts"][0]["drives"][0]["device"]

    found = problems("prod", mutate)
    assert any(
        p.startswith("nas.hosts[1].drives[0].device: device") and "another host: nas.hosts[0]" in p for p in found
    ), found


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        # the IPoIB pods' range over the service range
        ("network.infiniband.ipoibNetwork", {"enabled": True, "range": "10.43.0.0/24"}, "overlaps 10.43.0.0/16"),
        # the pod range over the GPU nodes' InfiniBand subnet
        ("network.clusterCidr", "10.30.0.0/16", "overlaps 10.30.0.0/24 of nodes[35].infiniband.prefixLength"),
        # an NTP server inside the service range
        ("cluster.timeServers", ["10.43.0.10"], "lies inside 10.43.0.0/16, the service range"),
    ],
)
def test_ranges_of_any_two_networks_and_addresses_inside_another_network_are_refused(path, value, expected):
    def mutate(raw):
        if path.endswith("ipoibNetwork"):
            raw["network"].setdefault("infiniband", {})["ipoibNetwork"] = {**value}
        else:
            _set(raw, path, value)

    found = problems("prod", mutate)
    assert any(expected in p for p in found), found


def test_a_disabled_ipoib_network_claims_nothing():
    def mutate(raw):
        raw["network"].setdefault("infiniband", {})["ipoibNetwork"] = {"enabled": False, "range": "10.43.0.0/24"}

    assert problems("prod", mutate) == []


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("storage.minio.port", 10050, "port 10050 is where the Zabbix agent listens"),
        ("storage.minio.port", 22, "port 22 is also claimed by ssh.port"),
        ("ssh.port", 9345, "port 9345 is where the RKE2 supervisor listens"),
    ],
)
def test_ports_are_claims_too(path, value, expected):
    found = problems("prod", lambda raw: _set(raw, path, value))
    assert any(expected in p for p in found), found


def test_every_namespace_the_plans_create_outside_the_settings_is_reserved(prod_plan, lab_plan):
    """The reserved set is checked against what the program and its charts really create: a namespace a
    component adds under a fixed name must be reserved, or a setting could claim it."""
    for plan, stack in ((prod_plan, "prod"), (lab_plan, "lab")):
        settings_claims = {
            str(h.value)
            for h in __import__("settings.declare", fromlist=["claims"]).claims(_settings(stack))
            if h.claim.kind == "namespace"
        }
        fixed = set(platform_created(plan.resources)) - settings_claims
        assert fixed <= RESERVED_NAMESPACES, fixed - RESERVED_NAMESPACES


def _settings(stack: str) -> Settings:
    from settings import load
    from tests.conftest import stack_doc

    return load(stack_doc(stack))
