"""Stacks deployed before the components became packages still run `pulumi up`.

Pulumi stores each dynamic resource's provider in its `__provider` input: the provider object pickled by
reference (module and class name). The provider process unpickles it from the state to run `diff`,
`update`, `read` and `delete`, so the module a deployed state names must stay importable, and a plan made
now must store the same text (else every Zabbix and MinIO object shows a change).
"""

from __future__ import annotations

import base64
import pickle

import dill
import pytest

from components.minio import objects as minio_objects
from components.monitoring import host_set, reader
from components.monitoring import objects as zabbix_objects

# `__provider` as the plans made before the move stored it (the prod plan of the commit before it).
SAVED_ZABBIX = {
    "ZabbixObjectProvider": (
        "gASVOQAAAAAAAACMGWNvbXBvbmVudHMuemFiYml4X29iamVjdHOUjBRaYWJiaXhPYmplY3RQcm92aWRlcpSTlCmBlC4="
    ),
    "BootstrapProvider": "gASVNgAAAAAAAACMGWNvbXBvbmVudHMuemFiYml4X29iamVjdHOUjBFCb290c3RyYXBQcm92aWRlcpSTlCmBlC4=",
}


def saved_under(module: str, name: str) -> bytes:
    """A provider instance pickled by reference under `module`, opcode by opcode (protocol 4, as Pulumi's
    dill writes it): GLOBAL module.name, NEWOBJ with no arguments, STOP."""
    short = lambda text: b"\x8c" + bytes([len(text)]) + text.encode() + b"\x94"  # noqa: E731
    return b"\x80\x04" + short(module) + short(name) + b"\x93\x94)\x81\x94."


def test_the_saved_zabbix_providers_load_from_the_old_module_path():
    for name, text in SAVED_ZABBIX.items():
        raw = base64.b64decode(text)
        assert b"components.zabbix_objects" in raw
        provider = dill.loads(raw)  # what pulumi's dynamic provider process does with the state's value
        assert type(provider) is getattr(zabbix_objects, name)
        # The hand-made pickle is the same program: the opcode helper below writes what Pulumi wrote.
        assert pickle.loads(saved_under("components.zabbix_objects", name)).__class__ is type(provider)


@pytest.mark.parametrize("name", ["BucketProvider", "UserProvider"])
def test_the_saved_minio_providers_load_from_the_old_module_path(name):
    provider = dill.loads(saved_under("components.minio_objects", name))
    assert type(provider) is getattr(minio_objects, name)


def test_new_plans_store_the_providers_under_the_same_names(prod_plan):
    stored = {
        r["inputs"]["__provider"]
        for r in prod_plan.resources
        if r["type"].startswith("pulumi-python:dynamic/zabbix:") and "__provider" in r["inputs"]
    }
    # The read-only API user's token came after the move: its provider is stored under the same module.
    assert set(SAVED_ZABBIX.values()) <= stored
    # Since then: the reader's token, and the node groups' host sets with their claims, each a module path of ours.
    added = [base64.b64decode(value) for value in stored - set(SAVED_ZABBIX.values())]
    kinds = {type(dill.loads(raw)) for raw in added}
    assert kinds == {reader.ApiTokenProvider, host_set.HostSetProvider, host_set.HostClaimProvider}
    assert all(b"components.zabbix_objects" in raw or b"components.monitoring.host_set" in raw for raw in added)
    for provider in (minio_objects.BucketProvider(), minio_objects.UserProvider()):
        assert (
            dill.dumps(provider, protocol=pickle.DEFAULT_PROTOCOL, recurse=True).find(b"components.minio_objects") > 0
        )
