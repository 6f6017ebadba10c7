"""Checks of our Helm values and custom-resource specs against the real upstream files (`make reference`).

Helm silently ignores a values key the chart does not have, and the API server silently prunes a
custom-resource field its CRD does not declare: neither shows an error, so the tests check every key
path we write against the pinned upstream values.yaml / CRD schema. Loading a file that is absent skips
the test with the reason (`requires_upstream`).

Paths name list items by index (`tolerations[0].key`). A `skip` set holds paths that are checked
elsewhere or are known to be absent upstream for a stated reason; list items are written `[]` there
(`cephBlockPools[].spec`) and match every index. A skipped path is not checked, nor anything below it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any, Optional

import jsonschema
import yaml

from tests.conftest import requires_upstream

# What a Kubernetes toleration may hold (core/v1 Toleration): the items of any `...tolerations` list.
TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def upstream_values(chart: str, version: str) -> Any:
    """The chart's values.yaml at `version` (charts/<chart>/<version>/values.yaml)."""
    return yaml.safe_load(requires_upstream("charts", chart, version, "values.yaml").read_text())


def crd_schema(*parts: str, crd_version: str, kind: Optional[str] = None) -> dict[str, Any]:
    """The openAPIV3Schema of a CRD under crds/<parts...>, at the CRD version named `crd_version`.

    The file may hold one CRD or many (a multi-document bundle such as Rook's crds.yaml); `kind` picks
    one and is required when there are several.
    """
    path = requires_upstream("crds", *parts)
    crds = [
        doc for doc in yaml.safe_load_all(path.read_text()) if doc and doc.get("kind") == "CustomResourceDefinition"
    ]
    if kind is not None:
        crds = [crd for crd in crds if crd["spec"]["names"]["kind"] == kind]
    if len(crds) != 1:
        raise AssertionError(f"{len(crds)} CRDs of kind {kind or 'any'} in {path}: name exactly one")
    served = [v for v in crds[0]["spec"]["versions"] if v["name"] == crd_version]
    if not served:
        raise AssertionError(f"{crds[0]['spec']['names']['kind']} in {path} has no version {crd_version}")
    return served[0]["schema"]["openAPIV3Schema"]


def spec_schema(*parts: str, crd_version: str, kind: Optional[str] = None) -> dict[str, Any]:
    """The schema of `spec` in the CRD `crd_schema` loads."""
    return crd_schema(*parts, crd_version=crd_version, kind=kind)["properties"]["spec"]


# ---------------------------------------------------------------------------------------------
# Helm values
# ---------------------------------------------------------------------------------------------


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _pattern(path: str) -> str:
    """`a[3].b` -> `a[].b`: how skip sets name list items."""
    return re.sub(r"\[\d+\]", "[]", path)


def _item_template(path: str, upstream: list[Any]) -> Optional[dict[str, Any]]:
    """What one of our list items is checked against: every key any upstream item has (a key's value
    from the first item that has it), plus the toleration fields for a tolerations list. None when
    upstream's list says nothing about its items (`[]`, scalars): anything goes."""
    template: dict[str, Any] = {}
    for item in upstream:
        if isinstance(item, dict):
            template = {**item, **template}
    if path.rsplit(".", 1)[-1].lower().endswith("tolerations"):
        template = {**dict.fromkeys(TOLERATION_KEYS), **template}
    return template or None


def unknown_value_paths(ours: Any, upstream: Any, path: str = "", skip: Iterable[str] = ()) -> list[str]:
    """Key paths in `ours` (Helm values) that the upstream values.yaml does not have.

    Maps are compared key by key. Where upstream leaves a value open (null, `{}`, `[]`), anything below it
    is accepted. A list of maps is compared item by item with the keys upstream's items use (or, for a
    tolerations list, the fields of a Kubernetes toleration). A map or list where upstream has something
    else is reported. Paths in `skip` are not checked.
    """
    skip = frozenset(skip)
    if _pattern(path) in skip:
        return []
    if isinstance(ours, dict):
        if upstream is None or upstream == {}:
            return []
        if not isinstance(upstream, dict):
            return [f"{path} (upstream is {type(upstream).__name__}, not a map)"]
        found: list[str] = []
        for key, value in ours.items():
            here = _join(path, key)
            if key in upstream:
                found += unknown_value_paths(value, upstream[key], here, skip)
            elif _pattern(here) not in skip:
                found.append(here)
        return found
    if isinstance(ours, list):
        if upstream is not None and not isinstance(upstream, list):
            return [f"{path} (upstream is {type(upstream).__name__}, not a list)"]
        template = _item_template(path, upstream or [])
        if template is None:
            return []
        return [
            unknown
            for i, item in enumerate(ours)
            for unknown in unknown_value_paths(item, template, f"{path}[{i}]", skip)
        ]
    return []


def helm_merge(defaults: Any, override: Any) -> Any:
    """What Helm renders from chart defaults and user values: maps merge, a null deletes the key,
    anything else replaces."""
    if isinstance(defaults, dict) and isinstance(override, dict):
        merged = dict(defaults)
        for key, value in override.items():
            merged[key] = helm_merge(defaults.get(key), value) if value is not None else None
        return {k: v for k, v in merged.items() if v is not None}
    return copy.deepcopy(override)


def values_schema_errors(values: Any, schema: dict[str, Any]) -> list[str]:
    """Violations of a chart's values.schema.json, as Helm applies it (plain JSON Schema: a key the
    schema does not list is allowed there; `unknown_value_paths` catches those)."""
    return _errors(values, schema)


# ---------------------------------------------------------------------------------------------
# Custom resources
# ---------------------------------------------------------------------------------------------


def _keeps_unknown_fields(schema: dict[str, Any]) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields")) or schema.get("additionalProperties") is True


def unknown_fields(ours: Any, schema: dict[str, Any], path: str = "", skip: Iterable[str] = ()) -> list[str]:
    """Field paths in `ours` that an openAPIV3Schema does not declare: the API server prunes them.

    A map's keys must be in the schema's `properties` (an object without `properties` declares none),
    unless the schema keeps unknown fields (`x-kubernetes-preserve-unknown-fields`, `additionalProperties:
    true`) or types them (`additionalProperties: {schema}`). List items are checked against `items`.
    Paths in `skip` are not checked.
    """
    skip = frozenset(skip)
    if _pattern(path) in skip:
        return []
    if isinstance(ours, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        found: list[str] = []
        for key, value in ours.items():
            here = _join(path, key)
            if key in properties:
                found += unknown_fields(value, properties[key], here, skip)
            elif isinstance(extra, dict):
                found += unknown_fields(value, extra, here, skip)
            elif not _keeps_unknown_fields(schema) and _pattern(here) not in skip:
                found.append(here)
        return found
    if isinstance(ours, list) and not _keeps_unknown_fields(schema):
        items = schema.get("items", {})
        return [unknown for i, item in enumerate(ours) for unknown in unknown_fields(item, items, f"{path}[{i}]", skip)]
    return []


def strict(schema: dict[str, Any], in_junctor: bool = False) -> dict[str, Any]:
    """A Kubernetes structural schema as JSON Schema that also refuses unknown fields: the API server
    prunes them silently, which is the mistake these tests exist to catch. An object keeps only its
    `properties` (none when it lists none) unless it preserves unknown fields or has
    `additionalProperties`. Inside anyOf/allOf/oneOf a schema only adds checks to fields declared
    outside, so nothing is refused there."""
    out = {k: v for k, v in schema.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if "properties" in schema:
        out["properties"] = {k: strict(v, in_junctor) for k, v in schema["properties"].items()}
    is_object = "properties" in schema or schema.get("type") == "object"
    if is_object and not in_junctor and not _keeps_unknown_fields(schema) and "additionalProperties" not in schema:
        out["additionalProperties"] = False
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = strict(schema["additionalProperties"], in_junctor)
    if isinstance(schema.get("items"), dict):
        out["items"] = strict(schema["items"], in_junctor)
    for junctor in ("anyOf", "allOf", "oneOf"):
        if junctor in schema:
            out[junctor] = [strict(s, in_junctor=True) for s in schema[junctor]]
    return out


def crd_schema_errors(ours: Any, schema: dict[str, Any]) -> list[str]:
    """Type, enum, required-field and unknown-field violations of an openAPIV3Schema (through `strict`)."""
    return _errors(ours, strict(schema))


def _errors(instance: Any, schema: dict[str, Any]) -> list[str]:
    """`path: message` for every violation, sorted; the path is dotted from `instance`'s root."""
    return sorted(
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft7Validator(schema).iter_errors(instance)
    )
