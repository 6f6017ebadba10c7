"""The upstream checkers (tests/upstream.py) themselves: every component test that says "our keys exist
upstream" is only as good as these, so each rule is shown to report the mistake it is there for."""

from __future__ import annotations

import textwrap

import pytest

import tests.conftest as conftest
from tests.upstream import (
    crd_schema,
    crd_schema_errors,
    helm_merge,
    spec_schema,
    unknown_fields,
    unknown_value_paths,
    upstream_values,
    values_schema_errors,
)

# ---------------------------------------------------------------------------------------------
# Helm values: unknown_value_paths
# ---------------------------------------------------------------------------------------------


def test_a_misspelt_key_is_reported_with_its_path():
    upstream = {"ipam": {"mode": "kubernetes", "operator": {"clusterPoolIPv4MaskSize": 24}}}
    ours = {"ipam": {"mdoe": "cluster-pool", "operator": {"clusterPoolIPv4MaskSize": 24, "maskSize": 24}}}
    assert unknown_value_paths(ours, upstream) == ["ipam.mdoe", "ipam.operator.maskSize"]
    assert unknown_value_paths({"ipam": {"mode": "cluster-pool"}}, upstream) == []


@pytest.mark.parametrize("open_value", [None, {}, []], ids=["null", "empty-map", "empty-list"])
def test_an_open_upstream_value_accepts_anything_below_it(open_value):
    upstream = {"nodeSelector": open_value, "image": {"tag": "v1"}}
    ours = {"nodeSelector": {"ml-platform.io/role": "gpu"}, "image": {"tga": "v2"}}
    if open_value == []:
        ours["nodeSelector"] = [{"anything": 1}]
    # Only the sibling typo: the open value takes whatever we put there.
    assert unknown_value_paths(ours, upstream) == ["image.tga"]


def test_a_filled_upstream_map_is_not_open():
    upstream = {"nodeSelector": {"kubernetes.io/os": "linux"}}
    assert unknown_value_paths({"nodeSelector": {"role": "gpu"}}, upstream) == ["nodeSelector.role"]


def test_a_map_or_list_where_upstream_has_something_else_is_reported():
    upstream = {"image": "nginx:1.27", "env": {"A": "1"}, "version": "1.0"}
    found = unknown_value_paths({"image": {"tag": "1.28"}, "env": [{"name": "A"}], "version": "2.0"}, upstream)
    assert found == ["image (upstream is str, not a map)", "env (upstream is dict, not a list)"]


def test_list_items_are_checked_key_by_key_and_below():
    upstream = {"pools": [{"name": "a", "spec": {"size": 3}}, {"name": "b", "storageClass": {"enabled": True}}]}
    ours = {
        "pools": [
            {"name": "x", "spec": {"size": 3, "sise": 2}},  # typo one level down
            {"name": "y", "storageClass": {"enabeld": True}, "extra": 1},  # keys of upstream's second item
        ]
    }
    assert unknown_value_paths(ours, upstream) == [
        "pools[0].spec.sise",
        "pools[1].storageClass.enabeld",
        "pools[1].extra",
    ]


@pytest.mark.parametrize("upstream_list", [None, [], [{"operator": "Exists"}]], ids=["null", "empty", "one-item"])
@pytest.mark.parametrize("key", ["tolerations", "pluginTolerations"])
def test_toleration_items_may_hold_exactly_the_fields_of_a_toleration(key, upstream_list):
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}
    upstream = {key: upstream_list}
    assert unknown_value_paths({key: [toleration, {"value": "true"}]}, upstream) == []
    assert unknown_value_paths({key: [toleration, {"opertor": "Exists"}]}, upstream) == [f"{key}[1].opertor"]


def test_skipped_paths_and_everything_below_them_are_not_checked():
    upstream = {"spec": {"a": 1}, "pools": [{"name": "p", "spec": {"b": 1}}]}
    ours = {"spec": {"zz": 1}, "pools": [{"name": "p", "spec": {"zz": 1}, "nmae": "q"}], "typo": 1}
    assert unknown_value_paths(ours, upstream) == ["spec.zz", "pools[0].spec.zz", "pools[0].nmae", "typo"]
    # `[]` in a skip path stands for every item; siblings of a skipped path are still checked.
    assert unknown_value_paths(ours, upstream, skip={"spec", "pools[].spec"}) == ["pools[0].nmae", "typo"]
    # A skip path that is not in upstream at all is not reported either: it is checked elsewhere.
    assert unknown_value_paths({"chartOnly": {"x": 1}}, {}, skip={"chartOnly"}) == []
    assert unknown_value_paths({"chartOnly": {"x": 1}}, {"other": 1}, skip={"chartOnly"}) == []


def test_a_misspelt_key_in_real_upstream_values_is_reported():
    # The same rules on a real chart (skips without the reference files).
    values = upstream_values("rook-ceph", "v1.19.10")
    ours = {"csi": {"enableRbdDriver": True, "pluginToleration": [], "pluginTolerations": [{"efect": "NoSchedule"}]}}
    assert "enableRbdDriver" in values["csi"]
    assert unknown_value_paths(ours, values) == ["csi.pluginToleration", "csi.pluginTolerations[0].efect"]


# ---------------------------------------------------------------------------------------------
# Helm values: helm_merge and values.schema.json
# ---------------------------------------------------------------------------------------------


def test_helm_merge_merges_maps_replaces_the_rest_and_deletes_on_null():
    defaults = {"a": {"x": 1, "y": 2}, "list": [1, 2], "gone": {"z": 1}, "keep": "k"}
    merged = helm_merge(defaults, {"a": {"y": 3}, "list": [9], "gone": None, "new": {"n": 1}})
    assert merged == {"a": {"x": 1, "y": 3}, "list": [9], "keep": "k", "new": {"n": 1}}
    assert defaults == {"a": {"x": 1, "y": 2}, "list": [1, 2], "gone": {"z": 1}, "keep": "k"}  # untouched


def test_values_schema_errors_are_plain_json_schema():
    schema = {"type": "object", "properties": {"MTU": {"type": "integer"}, "mode": {"enum": ["a", "b"]}}}
    assert values_schema_errors({"MTU": 9000, "mode": "a", "other": 1}, schema) == []  # Helm allows extras here
    assert values_schema_errors({"MTU": "9000", "mode": "c"}, schema) == [
        "MTU: '9000' is not of type 'integer'",
        "mode: 'c' is not one of ['a', 'b']",
    ]


# ---------------------------------------------------------------------------------------------
# Custom resources: unknown_fields and crd_schema_errors
# ---------------------------------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "required": ["image"],
    "properties": {
        "image": {"type": "string"},
        "count": {"type": "integer", "minimum": 1},
        "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
        "note": {"type": "string", "nullable": True},
        "mode": {"type": "string", "enum": ["a", "b"]},
        "tolerations": {
            "type": "array",
            "items": {"type": "object", "properties": {"key": {"type": "string"}, "operator": {"type": "string"}}},
        },
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "resources": {"type": "object", "additionalProperties": {"type": "object", "properties": {"cpu": {}}}},
        "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "config": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}},
        },
        "empty": {"type": "object"},
        "either": {
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            # Branches only add checks to fields declared outside them: they must not refuse `b`.
            "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
            "allOf": [{"properties": {"a": {"minLength": 1}}}],
        },
    },
}

VALID = {
    "image": "x",
    "count": 2,
    "port": "http",
    "note": None,
    "mode": "a",
    "tolerations": [{"key": "k", "operator": "Exists"}],
    "labels": {"any": "thing"},
    "resources": {"limits": {"cpu": "1"}},
    "raw": {"whatever": {"deep": 1}},
    "config": {"free": 1, "known": {"a": "x"}},
    "empty": {},
    "either": {"a": "x", "b": "y"},
}


def test_a_valid_spec_has_no_unknown_fields_and_no_errors():
    assert unknown_fields(VALID, SCHEMA) == []
    assert crd_schema_errors(VALID, SCHEMA) == []
    assert crd_schema_errors({**VALID, "port": 8080}, SCHEMA) == []  # int-or-string takes both


def test_unknown_fields_are_reported_where_the_api_server_would_prune_them():
    spec = {
        **VALID,
        "imgae": "x",  # typo at the top
        "tolerations": [{"key": "k"}, {"opertor": "Exists"}],  # typo in a list item
        "resources": {"limits": {"cpu": "1", "mem": "1"}},  # typo under additionalProperties: {schema}
        "config": {"free": 1, "known": {"b": "x"}},  # kept unknown beside a declared field that is checked
        "empty": {"x": 1},  # an object that declares no properties keeps none
    }
    expected = ["tolerations[1].opertor", "resources.limits.mem", "config.known.b", "empty.x", "imgae"]
    assert unknown_fields(spec, SCHEMA) == expected
    errors = crd_schema_errors(spec, SCHEMA)
    assert ": Additional properties are not allowed ('imgae' was unexpected)" in errors
    assert "tolerations.1: Additional properties are not allowed ('opertor' was unexpected)" in errors
    assert "resources.limits: Additional properties are not allowed ('mem' was unexpected)" in errors
    assert "config.known: Additional properties are not allowed ('b' was unexpected)" in errors
    assert "empty: Additional properties are not allowed ('x' was unexpected)" in errors
    assert len(errors) == 5, errors


def test_skipped_fields_are_not_reported():
    spec = {**VALID, "chartOnly": 1, "tolerations": [{"key": "k", "chartOnly": 1}]}
    assert unknown_fields(spec, SCHEMA) == ["tolerations[0].chartOnly", "chartOnly"]
    assert unknown_fields(spec, SCHEMA, skip={"chartOnly", "tolerations[].chartOnly"}) == []


def test_types_enums_and_required_fields_are_checked():
    spec = {k: v for k, v in VALID.items() if k != "image"}
    spec |= {"count": "two", "port": 1.5, "mode": "c", "labels": {"n": 1}, "either": {}}
    errors = crd_schema_errors(spec, SCHEMA)
    assert errors == [
        ": 'image' is a required property",
        "count: 'two' is not of type 'integer'",
        "either: {} is not valid under any of the given schemas",
        "labels.n: 1 is not of type 'string'",
        "mode: 'c' is not one of ['a', 'b']",
        "port: 1.5 is not valid under any of the given schemas",
    ]
    assert crd_schema_errors({**VALID, "count": 0}, SCHEMA) == ["count: 0 is less than the minimum of 1"]
    assert crd_schema_errors({**VALID, "image": None}, SCHEMA) == ["image: None is not of type 'string'"]
    assert crd_schema_errors({**VALID, "either": {"a": ""}}, SCHEMA) == ["either.a: '' should be non-empty"]


# ---------------------------------------------------------------------------------------------
# Loading: CRDs from single- and multi-document files, missing files skip
# ---------------------------------------------------------------------------------------------


def crd_document(kind: str, *versions: str) -> str:
    served = "".join(
        f"""
          - name: {version}
            schema:
              openAPIV3Schema:
                type: object
                properties:
                  spec:
                    type: object
                    properties:
                      {kind.lower()}In{version}: {{type: string}}
        """
        for version in versions
    )
    return textwrap.dedent(
        f"""\
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata:
          name: {kind.lower()}s.example.com
        spec:
          names:
            kind: {kind}
          versions:"""
    ) + textwrap.indent(textwrap.dedent(served), "  ")


@pytest.fixture
def upstream_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(conftest, "UPSTREAM", tmp_path)
    (tmp_path / "crds" / "demo").mkdir(parents=True)
    return tmp_path


def test_a_crd_schema_comes_from_a_single_document_file(upstream_dir):
    (upstream_dir / "crds" / "demo" / "one.yaml").write_text(crd_document("Widget", "v1alpha1", "v1"))
    assert set(spec_schema("demo", "one.yaml", crd_version="v1")["properties"]) == {"widgetInv1"}
    assert set(spec_schema("demo", "one.yaml", crd_version="v1alpha1")["properties"]) == {"widgetInv1alpha1"}
    assert crd_schema("demo", "one.yaml", crd_version="v1", kind="Widget")["type"] == "object"
    with pytest.raises(AssertionError, match="0 CRDs of kind Gadget"):
        crd_schema("demo", "one.yaml", crd_version="v1", kind="Gadget")
    with pytest.raises(AssertionError, match="has no version v2"):
        crd_schema("demo", "one.yaml", crd_version="v2")


def test_a_crd_schema_comes_from_a_multi_document_bundle_by_kind(upstream_dir):
    bundle = "---\n".join([crd_document("Widget", "v1"), "", crd_document("Gadget", "v1")])
    (upstream_dir / "crds" / "demo" / "bundle.yaml").write_text(bundle)
    assert set(spec_schema("demo", "bundle.yaml", crd_version="v1", kind="Gadget")["properties"]) == {"gadgetInv1"}
    assert set(spec_schema("demo", "bundle.yaml", crd_version="v1", kind="Widget")["properties"]) == {"widgetInv1"}
    with pytest.raises(AssertionError, match="2 CRDs of kind any"):
        crd_schema("demo", "bundle.yaml", crd_version="v1")


def test_missing_upstream_files_skip_naming_the_fetch_command(upstream_dir, monkeypatch):
    monkeypatch.delenv("MLP_REFERENCE_STRICT", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"reference file missing: .*values.yaml; run `make reference`"):
        upstream_values("no-such-chart", "1.0.0")
    with pytest.raises(pytest.skip.Exception, match=r"reference file missing: .*missing.yaml; run `make reference`"):
        crd_schema("demo", "missing.yaml", crd_version="v1")


def test_missing_upstream_files_fail_when_strict(upstream_dir, monkeypatch):
    monkeypatch.setenv("MLP_REFERENCE_STRICT", "1")
    with pytest.raises(pytest.fail.Exception, match=r"reference file missing: .*values.yaml; run `make reference`"):
        upstream_values("no-such-chart", "1.0.0")


def test_a_real_crd_bundle_is_read_by_kind():
    # Rook's crds.yaml holds about twenty CRDs (skips without the reference files).
    cluster = spec_schema("rook", "v1.19.10", "crds.yaml", kind="CephCluster", crd_version="v1")
    pool = spec_schema("rook", "v1.19.10", "crds.yaml", kind="CephBlockPool", crd_version="v1")
    assert {"mon", "storage", "cephVersion"} <= set(cluster["properties"])
    assert {"replicated", "failureDomain"} <= set(pool["properties"])
    assert unknown_fields({"storage": {"useAllNode": False}}, cluster) == ["storage.useAllNode"]
