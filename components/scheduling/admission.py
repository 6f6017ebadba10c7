"""The tenant surface as admission policy, generated from the classification in `surface.py`: every refused field
becomes a `!has(...)` at each path where the kind holds it, every constraint its CEL, each validation's message
names its rule. Two policies per team:
- `<team>-tenant-surface`: what the team's identities write (its groups and every ServiceAccount of its namespaces,
  including those an operator created there): the objects' fields, their labels and annotations, the calls to
  subresources, and the transitions Kueue owns (unsuspending, removing scheduling gates);
- `<team>-pod-devices`: every pod in the team's namespaces, whoever creates it: no GPU outside the device plugin,
  no network but the team's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Optional

from components.scheduling.config import GPU_RESOURCE, PRIORITY_LABELLED, holds_at
from components.scheduling.surface import (
    ANNOTATION_MAPS,
    CONTROLLER_DOMAINS,
    CONTROLLER_KEYS,
    CRD_SPEC,
    DEFAULTED,
    EXTRA_ENV,
    HARMLESS,
    INJECTED_CONTAINERS,
    JOB_SPEC,
    METADATA_ONLY,
    METADATA_PATHS,
    NEWER_POD_SPEC,
    PARTIAL_POD_SPECS,
    POD_SPEC,
    POD_SPECS,
    POD_SUBRESOURCES,
    RAY_CLUSTER_SPECS,
    RAY_HEAD_GROUP,
    RULES,
    RUNTIME_ENV_PREFIXES,
    SCHEDULERS,
    STATUS_SUBRESOURCES,
    VOLUME,
    Verdict,
    refused_fields,
)
from components.scheduling.tenancy import _declared, team_identity
from settings.scheduling import Team

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
SUSPENDABLE = {"batch": ["jobs"], "jobset.x-k8s.io": ["jobsets"], "ray.io": ["rayjobs", "rayclusters"]}
SUSPENDABLE["trainer.kubeflow.org"] = ["trainjobs"]


def _list(values: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _shown(path: str) -> str:
    return path.replace("[]", "[*]")


def _cel(regex: str) -> str:
    """A regular expression as the body of a CEL single-quoted string literal."""
    return regex.replace("\\", "\\\\").replace("'", "\\'")


def _unset(expr: str, field: str) -> str:
    harmless = HARMLESS.get(field)
    return f"(!has({expr}.{field}) || {expr}.{field} == {harmless})" if harmless else f"!has({expr}.{field})"


def _prefixed(name: str) -> str:
    return "(" + " || ".join(f"{name}.startsWith('{p}')" for p in RUNTIME_ENV_PREFIXES) + ")"


def _env_ok(env: str) -> str:
    return f"{env}.all(e, !{_prefixed('e.name')})"


def _env_from_ok(env_from: str) -> str:
    """No envFrom prefix that makes a runtime variable of a key (a prefix of `NVIDIA_`, or one starting with it)."""
    bad = " || ".join(f"f.prefix.startsWith('{p}') || '{p}'.startsWith(f.prefix)" for p in RUNTIME_ENV_PREFIXES)
    return f"{env_from}.all(f, !has(f.prefix) || f.prefix == '' || !({bad}))"


def container_rules(c: str) -> dict[str, str]:
    """CEL per rule for one container (or a container-like object an operator turns into one) `c`."""
    return {
        "runtime-env": f"(!has({c}.env) || {_env_ok(c + '.env')}) && "
        f"(!has({c}.envFrom) || {_env_from_ok(c + '.envFrom')})",
        "host-namespaces": f"(!has({c}.ports) || {c}.ports.all(p, (!has(p.hostPort) || p.hostPort == 0) && "
        "(!has(p.hostIP) || p.hostIP == '')))",
        "device-claims": f"(!has({c}.resources) || !has({c}.resources.claims))",
    }


def pod_spec_rules(fields: Sequence[str]) -> dict[str, Callable[[str], str]]:
    """CEL (a function of the pod spec's expression) per rule, for a pod spec whose schema holds `fields`."""
    by_rule: dict[str, list[Callable[[str], str]]] = {}

    def add(rule: str, check: Callable[[str], str]) -> None:
        by_rule.setdefault(rule, []).append(check)

    every = {**POD_SPEC, **NEWER_POD_SPEC}
    for field in refused_fields({f: v for f, v in every.items() if f in fields}):
        add(every[field].rule, lambda s, f=field: _unset(s, f))
    for field in ("initContainers", "containers"):
        if field in fields:
            for rule, check in container_rules("c").items():
                add(rule, lambda s, f=field, ch=check: f"(!has({s}.{f}) || {s}.{f}.all(c, {ch}))")
    if "volumes" in fields:
        sources = " && ".join(f"!has(v.{x})" for x in refused_fields(VOLUME))
        add("volumes", lambda s: f"(!has({s}.volumes) || {s}.volumes.all(v, {sources}))")
    if "schedulerName" in fields:
        add("scheduler", lambda s: f"(!has({s}.schedulerName) || {s}.schedulerName in {_list(SCHEDULERS)})")
    return {rule: (lambda s, fs=fns: " && ".join(fn(s) for fn in fs)) for rule, fns in by_rule.items()}


def controller_key_ok(key: str) -> str:
    """CEL: the label or annotation key `key` belongs to no controller's domain, or is allowed there."""
    domains = "|".join(re.escape(d) for d in CONTROLLER_DOMAINS)
    allowed = [k for k, v in CONTROLLER_KEYS.items() if v.verdict != "refused"]
    return f"(!{key}.matches('{_cel('^([a-z0-9-]+[.])*(' + domains + ')/')}') || {key} in {_list(allowed)})"


def _metadata_ok(meta: str) -> str:
    return " && ".join(
        f"(!has({meta}.{m}) || {meta}.{m}.all(k, {controller_key_ok('k')}))" for m in ("labels", "annotations")
    )


def network_pattern(namespaces: Sequence[str], networks: Sequence[str]) -> str:
    """The Multus annotation's comma form naming only `networks` (optionally `<namespace>/`, `@<interface>`)."""
    if not networks:
        return "^$"
    item = f"(({'|'.join(map(re.escape, namespaces))})/)?({'|'.join(map(re.escape, networks))})(@[A-Za-z0-9_.-]+)?"
    return f"^{item}(\\s*,\\s*{item})*$"


def _template_metadata(path: str) -> str:
    return "metadata" if path == "spec" else path.removesuffix(".spec") + ".metadata"


def _present(path: str) -> str:
    """CEL: the field at dotted `path` below `object` is set (and every field on the way)."""
    parts = path.split(".")
    return " && ".join(f"has(object.{'.'.join(parts[: i + 1])})" for i in range(len(parts)))


def _validation(expression: str, message: str) -> dict[str, str]:
    return {"expression": expression, "message": message}


def _for_kind(kind: str, body: str) -> str:
    return f"request.resource.resource != '{kind}' || ({body})"


def networks_ok(meta: str, team: Team, networks: Sequence[str]) -> str:
    """CEL: the metadata `meta` names no IPoIB network but the team's own (or none)."""
    value = f"{meta}.annotations['{NETWORKS_ANNOTATION}']"
    return (
        f"!has({meta}.annotations) || !('{NETWORKS_ANNOTATION}' in {meta}.annotations) || "
        f"{value}.matches('{_cel(network_pattern(team.namespace_names, networks))}')"
    )


def surface_validations(team: Team, networks: Sequence[str] = ()) -> list[dict[str, str]]:
    """Every validation of `<team>-tenant-surface` but the subresource one."""
    out = []
    who = f"team {team.name}"
    for kind, paths in POD_SPECS.items():
        per_rule: dict[str, list[str]] = {}
        for path in paths:
            # A built-in kind's pod spec has the cluster's fields only; a CRD's may carry a newer Kubernetes's.
            newer = [] if kind in ("pods", "jobs", "cronjobs") else list(NEWER_POD_SPEC)
            fields = PARTIAL_POD_SPECS.get(path, [*POD_SPEC, *newer])
            for rule, check in pod_spec_rules(fields).items():
                per_rule.setdefault(rule, []).append(holds_at("object", path, check))
            if path != "spec":
                per_rule.setdefault("team-network", []).append(
                    holds_at("object", _template_metadata(path), lambda m: networks_ok(m, team, networks))
                )
        for path in INJECTED_CONTAINERS.get(kind, []):
            per_rule.setdefault("runtime-env", []).append(
                holds_at("object", path, lambda s: container_rules(s)["runtime-env"])
            )
        for path in EXTRA_ENV.get(kind, []):
            per_rule.setdefault("runtime-env", []).append(holds_at("object", path, _env_ok))
        for path in METADATA_PATHS[kind]:
            per_rule.setdefault("controller-key", []).append(holds_at("object", path, _metadata_ok))
        for path in ANNOTATION_MAPS.get(kind, []):
            per_rule.setdefault("controller-key", []).append(
                holds_at("object", path, lambda m: f"{m}.all(k, {controller_key_ok('k')})")
            )
        where = ", ".join(_shown(p) for p in paths)
        for rule, checks in sorted(per_rule.items()):
            out.append(
                _validation(
                    _for_kind(kind, " && ".join(f"({c})" for c in checks)),
                    f"{kind} of {who} ({where}): refused by rule {rule}: {RULES[rule]}",
                )
            )
    for kind in METADATA_ONLY:
        out.append(
            _validation(
                _for_kind(kind, holds_at("object", "metadata", _metadata_ok)),
                f"{kind} of {who}: refused by rule controller-key: {RULES['controller-key']}",
            )
        )
    return [*out, *_kind_validations(who), *_transition_validations(who)]


def _kind_validations(who: str) -> list[dict[str, str]]:
    """The kinds' own refused fields (managedBy, manualSelector, ingress, NetworkPolicy...), from the classification."""
    refused_at: list[tuple[str, str, str, Verdict]] = []  # (kind, path, field, verdict)
    for field in refused_fields(JOB_SPEC):
        for kind, path in (("jobs", "spec"), ("cronjobs", "spec.jobTemplate.spec")):
            refused_at.append((kind, path, field, JOB_SPEC[field]))
    for kind, table in CRD_SPEC.items():
        refused_at += [(kind, "spec", f, table[f]) for f in refused_fields(table)]
    for kind, spec in RAY_CLUSTER_SPECS.items():
        refused_at += [(kind, f"{spec}.headGroupSpec", f, RAY_HEAD_GROUP[f]) for f in refused_fields(RAY_HEAD_GROUP)]
        if spec != "spec":
            table = CRD_SPEC["rayclusters"]
            refused_at += [(kind, spec, f, table[f]) for f in refused_fields(table)]
    out = []
    for kind, path, field, verdict in refused_at:
        if field == "manualSelector":
            body = holds_at("object", path, lambda s: f"!has({s}.manualSelector) || {s}.manualSelector == false")
        elif field in DEFAULTED.get(kind, {}) and path == "spec":
            default = DEFAULTED[kind][field]
            body = holds_at("object", path, lambda s, f=field, d=default: f"!has({s}.{f}) || {s}.{f} == '{d}'")
        else:
            body = holds_at("object", path, lambda s, f=field: _unset(s, f))
        out.append(
            _validation(
                _for_kind(kind, body),
                f"{kind} of {who}: {path}.{field} is refused by rule {verdict.rule}: {RULES[verdict.rule]}",
            )
        )
    for kind, containers in INJECTED_CONTAINERS.items():
        for path, trigger in containers.items():
            field, _, value = trigger.partition(" == ")
            added = _present(field) + (f" && object.{field} == {value}" if value else "")
            declared = f"{_present(path + '.resources')} && {_declared('object.' + path + '.resources')}"
            out.append(
                _validation(
                    _for_kind(kind, f"!({added}) || ({declared})"),
                    f"{kind} of {who}: with {field} set, {path}.resources must set limits.cpu and .memory, any "
                    f"request equal to them: rule operator-injected: {RULES['operator-injected']}",
                )
            )
    return out


def _transition_validations(who: str) -> list[dict[str, str]]:
    suspendable = [k for kinds in SUSPENDABLE.values() for k in kinds]
    data_keys = " && ".join(
        f"(!has(object.{d}) || object.{d}.all(k, !{_prefixed('k')}))" for d in ("data", "binaryData", "stringData")
    )
    return [
        _validation(
            f"request.operation != 'UPDATE' || !(request.resource.resource in {_list(suspendable)}) || "
            "!has(oldObject.spec.suspend) || oldObject.spec.suspend != true || "
            "(has(object.spec.suspend) && object.spec.suspend == true)",
            f"{who} may not unsuspend a workload (spec.suspend true to false): rule kueue-suspend: "
            + RULES["kueue-suspend"],
        ),
        _validation(
            "request.operation != 'UPDATE' || request.resource.resource != 'pods' || "
            "!has(oldObject.spec.schedulingGates) || oldObject.spec.schedulingGates.all(g, "
            "has(object.spec.schedulingGates) && object.spec.schedulingGates.exists(h, h.name == g.name))",
            f"{who} may not remove a pod's scheduling gates: rule kueue-gates: {RULES['kueue-gates']}",
        ),
        _validation(
            f"!(request.resource.resource in ['configmaps', 'secrets']) || ({data_keys})",
            f"a ConfigMap or Secret of {who} may not hold a key starting with {', '.join(RUNTIME_ENV_PREFIXES)}: "
            "rule runtime-env (envFrom hands every key to the container's environment)",
        ),
    ]


def surface_policy_spec(team: Team, groups: Sequence[str], networks: Sequence[str] = ()) -> dict[str, Any]:
    """`<team>-tenant-surface`: for the team's identities only (operators' controllers build from what it wrote)."""
    refused_subresources = sorted(
        [s for s, v in POD_SUBRESOURCES.items() if v.verdict == "refused"] + STATUS_SUBRESOURCES
    )
    kinds = {**PRIORITY_LABELLED, "": [*PRIORITY_LABELLED[""], *METADATA_ONLY]}
    subresources: dict[str, list[str]] = {}
    for sub in refused_subresources:
        group = next(g for g, ks in PRIORITY_LABELLED.items() if sub.split("/")[0] in ks)
        subresources.setdefault(group, []).append(sub)
    rules = [
        {"apiGroups": [g], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": sorted(ks)}
        for g, ks in kinds.items()
    ]
    rules += [
        {"apiGroups": [g], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE", "CONNECT"], "resources": subs}
        for g, subs in sorted(subresources.items())
    ]
    subresource_check = _validation(
        "request.subResource == '' || !(request.resource.resource + '/' + request.subResource in "
        f"{_list(refused_subresources)})",
        f"team {team.name} may not call this subresource (rule subresource: pods/resize would resize a pod past what "
        "Kueue charged, pods/ephemeralcontainers add containers nobody declared; refused whoever granted it, KubeRay's "
        "autoscaler Role included)",
    )
    guarded = [
        {**v, "expression": f"request.subResource != '' || ({v['expression']})"}
        for v in surface_validations(team, networks)
    ]
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": rules},
        "matchConditions": [{"name": "team-identity", "expression": team_identity(team, groups)}],
        "validations": [subresource_check, *guarded],
    }


def _rdma_ok(rdma: str) -> str:
    """CEL: every container asks for at most one RDMA slot, and only with at least one GPU (limits; the API server
    copies an extended resource's limit into its request, refuses a request without a limit, and an extended
    resource's quantity must be a whole number): a pod holds no more slots than GPUs."""
    slot = f"c.resources.limits['{rdma}']"
    gpu = f"c.resources.limits['{GPU_RESOURCE}']"
    return (
        "object.spec.containers.all(c, !has(c.resources) || !has(c.resources.limits) || "
        f"!('{rdma}' in c.resources.limits) || (string({slot}) == '1' && '{GPU_RESOURCE}' in c.resources.limits "
        f"&& int(string({gpu})) >= 1))"
        " && (!has(object.spec.initContainers) || object.spec.initContainers.all(c, !has(c.resources) || "
        f"!has(c.resources.limits) || !('{rdma}' in c.resources.limits)))"
    )


def pod_devices_policy_spec(team: Team, networks: Sequence[str], rdma: Optional[str] = None) -> dict[str, Any]:
    """`<team>-pod-devices`: every pod in the team's namespaces: no runtime class, NVIDIA variable or CDI annotation
    (GPUs only through the device plugin), and only the team's own IPoIB networks."""
    spec_rules = pod_spec_rules(list(POD_SPEC))
    cdi_key = _cel("^([a-z0-9-]+[.])*cdi[.]k8s[.]io/")
    cdi = f"(!has(object.metadata.annotations) || object.metadata.annotations.all(k, !k.matches('{cdi_key}')))"
    rdma_check = (
        [
            _validation(
                _rdma_ok(rdma),
                f"a container of team {team.name} may ask for one {rdma} slot at most, and only with a "
                f"{GPU_RESOURCE}: rule gpu-devices (the RDMA slots of a node are shared by every team and outside "
                "Kueue)",
            )
        ]
        if rdma
        else []
    )
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}
            ]
        },
        "validations": [
            *rdma_check,
            _validation(
                f"{_unset('object.spec', 'runtimeClassName')} && {spec_rules['runtime-env']('object.spec')} && {cdi}",
                f"a pod of team {team.name} may not name a runtimeClassName, set an NVIDIA_* variable or a "
                "cdi.k8s.io annotation: rule gpu-devices: request nvidia.com/gpu, which Kueue and the quota count",
            ),
            _validation(
                networks_ok("object.metadata", team, networks),
                f"a pod of team {team.name} may attach only its own IPoIB networks "
                f"({', '.join(networks) or 'none'}) in the comma form of {NETWORKS_ANNOTATION}: rule team-network",
            ),
        ],
    }
