"""What the charts really run: every Helm release of a plan rendered by real Helm, offline.

A plan (`stacks.engine.Plan`, or its JSON) records each `helm.v3.Release` with the chart, version, release
name, namespace and values that `pulumi up` hands to Helm. This module renders each one from the chart's
own directory in the reference location (`stacks.reference`: `charts-src/<chart>/<version>/`), as an
install, for the Kubernetes version the plan deploys, and returns the objects Helm would create.

Secrets and preview unknowns in the values (`[secret]`, `[unknown]` in a plan) become placeholders of
the type the chart's default has at the same path, so a template that does arithmetic on a number or
tests a boolean renders as it will with the real value.

The renderer is Helm 4's Go SDK through PyPI's `helm-python-sdk` (a review and test dependency, not a
runtime one); with `MLP_HELM=/path/to/helm` the `helm template` command of a site's own Helm CLI renders
instead (`render_chart`). docs/rendering.md says what this can and cannot show.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

import yaml

from stacks.cli import emit
from stacks.reference import FETCH_COMMAND, ReferenceMissingError, reference_dir

RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
COMMAND_TYPE = "command:remote:Command"
SECRET, UNKNOWN = "[secret]", "[unknown]"
# What a secret or unknown string value renders as: recognisable in manifests, masked in review diffs.
PLACEHOLDER = {SECRET: "placeholder-secret", UNKNOWN: "placeholder-unknown"}
# Hooks that run on an install; other hooks (upgrade, delete, rollback, test) are not part of one.
INSTALL_HOOKS = {"pre-install", "post-install"}
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class RenderError(Exception):
    """A release that cannot be rendered: the message names it and the fix."""


@dataclass(frozen=True)
class Release:
    """A Helm release as the plan registers it."""

    resource: str  # the Pulumi resource name, e.g. `network-cni`
    chart: str  # the chart's name (last part of an OCI reference)
    version: str
    name: str  # the Helm release name
    namespace: str
    values: Mapping[str, Any] = field(hash=False, compare=False)

    @property
    def label(self) -> str:
        return f"{self.resource} (chart {self.chart} {self.version}, release {self.namespace}/{self.name})"


@dataclass
class Rendered:
    release: Release
    objects: list[dict[str, Any]]  # every object an install creates, in template order

    def of_kind(self, *kinds: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o.get("kind") in kinds]


def resources(plan: Any) -> list[dict[str, Any]]:
    return plan["resources"] if isinstance(plan, Mapping) else plan.resources


def releases(plan: Any) -> list[Release]:
    """The Helm releases of a plan (an `engine.Plan` or its JSON), in plan order."""
    found = []
    for r in resources(plan):
        if r["type"] != RELEASE_TYPE:
            continue
        inputs = r["inputs"]
        found.append(
            Release(
                resource=r["name"],
                chart=str(inputs["chart"]).rsplit("/", 1)[-1],
                version=str(inputs["version"]),
                name=str(inputs.get("name") or r["name"]),
                namespace=str(inputs.get("namespace") or "default"),
                values=inputs.get("values") or {},
            )
        )
    return found


def kube_version(plan: Any) -> str:
    """The Kubernetes version the cluster runs (`v1.35.7`): the RKE2 release its nodes' install steps
    install (`RKE2_VERSION`, the deployed release while an upgrade is pending), without `+rke2rN`."""
    found = set()
    for r in resources(plan):
        command = r["inputs"].get("create") if r["type"] == COMMAND_TYPE and r["name"].endswith("-rke2") else None
        match = re.search(r"\bRKE2_VERSION=(v[0-9][^\s+']*)", command) if isinstance(command, str) else None
        if match:
            found.add(match.group(1))
    if not found:
        raise RenderError("the plan installs no RKE2 node: no Kubernetes version to render for")
    return min(found, key=lambda v: tuple(int(n) for n in re.findall(r"\d+", v)))


def chart_dir(release: Release) -> Path:
    """The chart's directory in the reference location; a missing one names the command that fetches it."""
    path = reference_dir() / "charts-src" / release.chart / release.version
    if not (path / "Chart.yaml").is_file():
        raise ReferenceMissingError(f"{release.label}: chart source {path} is missing; run `{FETCH_COMMAND}`")
    return path


@lru_cache(maxsize=64)
def _defaults(directory: Path) -> dict[str, Any]:
    return yaml.load((directory / "values.yaml").read_text(), Loader=_LOADER) or {}


def with_placeholders(values: Any, defaults: Any) -> Any:
    """`values` with `[secret]` / `[unknown]` replaced by a placeholder of the default's type at that path."""
    if isinstance(values, dict):
        sub = defaults if isinstance(defaults, dict) else {}
        return {k: with_placeholders(v, sub.get(k)) for k, v in values.items()}
    if isinstance(values, list):
        return [with_placeholders(v, None) for v in values]
    if values in PLACEHOLDER:
        if isinstance(defaults, bool):
            return defaults
        if isinstance(defaults, (int, float)):
            return defaults or 1
        if isinstance(defaults, (dict, list)):
            return type(defaults)()
        return PLACEHOLDER[values]
    return values


def render_chart(
    directory: Path, values: Mapping[str, Any], *, name: str, namespace: str, kube_version: str
) -> dict[str, str]:
    """Helm's install-time rendering of the chart at `directory`: template path -> manifest text.

    The one place that calls a renderer: Helm 4's Go SDK (helm-python-sdk), or `helm template` of the Helm
    CLI named by `$MLP_HELM`. Raises RenderError with Helm's message when a template fails.
    """
    helm_cli = os.environ.get("MLP_HELM")
    if helm_cli:
        return _render_cli(helm_cli, directory, values, name=name, namespace=namespace, kube_version=kube_version)
    try:
        from helm_python import Chart, HelmError, _native
    except ImportError:
        raise RenderError(
            "helm-python-sdk is not installed: `pip install -r requirements-dev.lock` (or set MLP_HELM to a helm CLI)"
        ) from None

    options = {"name": name, "namespace": namespace, "is_install": True, "kube_version": kube_version}
    try:
        with Chart.load(directory) as chart:
            # `Chart.render` does not pass `kube_version` on; helm-c-sdk's `helm_render` takes it with the
            # other render options (.Capabilities.KubeVersion, like `helm template --kube-version`).
            text = _native.call_string("helm_render", chart._raw(), json.dumps(values), json.dumps(options))
    except HelmError as exc:
        raise RenderError(str(exc).strip()) from None
    return json.loads(text)


def _render_cli(
    helm: str, directory: Path, values: Mapping[str, Any], *, name: str, namespace: str, kube_version: str
) -> dict[str, str]:
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(values, file)
        file.flush()
        command = [helm, "template", name, str(directory), "--namespace", namespace, "--values", file.name]
        run = subprocess.run([*command, "--kube-version", kube_version], capture_output=True, text=True)
    if run.returncode != 0:
        raise RenderError(run.stderr.strip())
    manifests: dict[str, str] = {}
    for doc in run.stdout.split("\n---\n"):
        lines = doc.strip("-\n").splitlines()
        if lines and lines[0].startswith("# Source: "):
            source = lines[0].removeprefix("# Source: ")
            manifests[source] = manifests.get(source, "") + "\n---\n" + "\n".join(lines[1:])
    return manifests


def _installed(obj: Mapping[str, Any]) -> bool:
    hooks = ((obj.get("metadata") or {}).get("annotations") or {}).get("helm.sh/hook")
    return hooks is None or bool(INSTALL_HOOKS & {h.strip() for h in hooks.split(",")})


def parse(manifests: Mapping[str, str]) -> list[dict[str, Any]]:
    """The objects of rendered manifests an install creates (no NOTES, no test or upgrade-only hooks)."""
    objects = []
    for source, text in manifests.items():
        if source.endswith("NOTES.txt"):
            continue
        for doc in yaml.load_all(text, Loader=_LOADER):
            if isinstance(doc, dict) and doc.get("kind") and _installed(doc):
                objects.append(doc)
    return objects


def render_release(release: Release, kube: str) -> Rendered:
    directory = chart_dir(release)
    values = with_placeholders(copy.deepcopy(dict(release.values)), _defaults(directory))
    try:
        manifests = render_chart(directory, values, name=release.name, namespace=release.namespace, kube_version=kube)
        objects = parse(manifests)
    except (RenderError, yaml.YAMLError) as exc:
        raise RenderError(f"{release.label} does not render: {exc}") from None
    for obj in objects:
        metadata = obj.setdefault("metadata", {})
        if _namespaced(obj):
            metadata.setdefault("namespace", release.namespace)
    return Rendered(release, objects)


# Kinds that live outside namespaces, of the ones these charts create (the rest are namespaced).
CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "StorageClass", "PriorityClass",
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "APIService", "VolumeSnapshotClass",
    "CSIDriver", "RuntimeClass", "ClusterPolicy", "NicClusterPolicy", "NodeFeatureRule", "IngressClass",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ClusterQueue", "ResourceFlavor",
    "Cohort", "WorkloadPriorityClass", "Queue", "HyperNode", "PersistentVolume",
}  # fmt: skip


def _namespaced(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") not in CLUSTER_SCOPED


def render_plan(plan: Any, only: Optional[Iterable[str]] = None) -> list[Rendered]:
    """Every Helm release of `plan` rendered (or only the releases whose resource names are in `only`)."""
    kube = kube_version(plan)
    wanted = None if only is None else set(only)
    return [render_release(r, kube) for r in releases(plan) if wanted is None or r.resource in wanted]


# --- values the templates never read ----------------------------------------------------------------------


def _leaves(values: Any, path: tuple = ()) -> Iterable[tuple]:
    """Paths of the values to probe: dict keys down to scalars; a list is probed as a whole."""
    if isinstance(values, dict) and values:
        for key, value in values.items():
            yield from _leaves(value, (*path, key))
    elif path:
        yield path


def _probe(value: Any) -> Any:
    """A different value of the same type, that a template reading the key renders differently."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7
    if isinstance(value, str):
        return value + "-probe"
    if isinstance(value, list):
        return [] if value else ["probe"]
    if isinstance(value, dict):
        return {"probe": "probe"}
    return "probe"


def unread_keys(release: Release, kube: str) -> list[str]:
    """Value paths of `release` whose change leaves the rendered manifests the same: keys no template reads
    (misspelt, moved upstream, or switched off by another value). Helm itself renders them silently."""
    directory = chart_dir(release)
    values = with_placeholders(copy.deepcopy(dict(release.values)), _defaults(directory))

    def render(vals: dict) -> Optional[dict[str, str]]:
        try:
            return render_chart(directory, vals, name=release.name, namespace=release.namespace, kube_version=kube)
        except RenderError:
            return None  # the template reads the key (it fails on the probe value)

    baseline = render(values)
    unread = []
    for path in _leaves(values):
        probed = copy.deepcopy(values)
        node = probed
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = _probe(node[path[-1]])
        if render(probed) == baseline:
            unread.append(".".join(path))
    return unread


# --- what the rendered objects run ------------------------------------------------------------------------

POD_OWNERS = {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"}


def pod_spec(obj: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The pod spec an object runs (workloads, CronJobs, bare Pods); None for other objects."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind in POD_OWNERS:
        return (spec.get("template") or {}).get("spec")
    if kind == "CronJob":
        return (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec")
    if kind == "Pod":
        return spec
    return None


def containers(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def images(rendered: Rendered) -> list[str]:
    """Every image the release's pods run, plus those its custom resources name (an `image` reference, or a
    `repository`/`image`/`version` triple as the GPU Operator's ClusterPolicy gives them) and those of
    ceph-csi-operator image sets (ConfigMaps `*image-set*`, component -> image), sorted."""
    found: set[str] = set()
    for obj in rendered.objects:
        spec = pod_spec(obj)
        if spec is not None:
            found.update(c["image"] for c in containers(spec) if c.get("image"))
        elif obj["kind"] == "ConfigMap" and "image-set" in obj["metadata"].get("name", ""):
            found.update(v for v in (obj.get("data") or {}).values() if isinstance(v, str))
        elif "." in str(obj.get("apiVersion", "")).split("/")[0] and obj.get("kind") != "CustomResourceDefinition":
            found.update(_cr_images(obj.get("spec")))
    return sorted(found)


def _cr_images(value: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(value, dict):
        if value.get("enabled") is False:
            return found  # a component the operator does not deploy
        repo, image, version = value.get("repository"), value.get("image"), value.get("version")
        if isinstance(image, str) and isinstance(version, str):
            ref = f"{repo}/{image}" if isinstance(repo, str) and repo else image
            found.add(f"{ref}@{version}" if version.startswith("sha256:") else f"{ref}:{version}")
        elif isinstance(image, str) and "/" in image and tag(image):
            found.add(image)
        for item in value.values():
            found |= _cr_images(item)
    elif isinstance(value, list):
        for item in value:
            found |= _cr_images(item)
    return found


# --- images and the registry override -----------------------------------------------------------------------


def registry(image: str) -> str:
    """The registry an image reference pulls from (Docker's rule: a first part without `.`/`:` that is not
    `localhost` is a Docker Hub path)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def tag(image: str) -> str:
    """The tag (or `sha256:` digest) of an image reference; "" when it has neither."""
    if "@" in image:
        return image.split("@", 1)[1]
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def images_outside(rendered: Iterable[Rendered], mirrors: Mapping[str, Any]) -> dict[str, list[str]]:
    """Per release, the images whose registry has no entry in `cluster.registryMirrors` (what an air-gapped
    site would fail to pull)."""
    found = {}
    for result in rendered:
        outside = [i for i in images(result) if registry(i) not in mirrors]
        if outside:
            found[result.release.resource] = outside
    return found


def images_markdown(by_stack: Mapping[str, Iterable[Rendered]]) -> str:
    """docs/images.md: every image each release runs, per stack, and the registries to mirror."""
    lines = [
        "# Images the Helm releases run",
        "",
        "<!-- Generated by `make images` (stacks/render.py) from the releases of each stack, rendered by Helm: "
        "do not edit by hand. -->",
        "",
        "What an air-gapped site mirrors: every image below, from the registries listed, each named in",
        "`cluster.registryMirrors` (docs/air-gap.md). Images the operators start from their custom resources",
        "(the GPU Operator's ClusterPolicy) are listed as the resource names them: the operator appends the",
        "OS to the driver's tag (`<version>-<os>`), and the sandbox and vGPU components run only on nodes",
        "configured for them. Host steps, the RKE2 images and the images set by a key are in docs/air-gap.md.",
    ]
    for stack, results in by_stack.items():
        results = list(results)
        all_images = sorted({i for r in results for i in images(r)})
        registries = sorted({registry(i) for i in all_images})
        lines += ["", f"## `{stack}`", "", f"{len(all_images)} images from {', '.join(f'`{r}`' for r in registries)}."]
        lines += ["", "| release | chart | images |", "|---|---|---|"]
        for r in results:
            shown = "<br>".join(f"`{i}`" for i in images(r)) or "none"
            lines.append(f"| `{r.release.resource}` | {r.release.chart} {r.release.version} | {shown} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    from stacks.engine import evaluate_stack

    parser = argparse.ArgumentParser(prog="python -m stacks.render", description="The images every release runs.")
    parser.add_argument("stacks", nargs="*", default=["prod", "lab"], help="stacks (default: prod lab)")
    parser.add_argument("--out", type=Path, help="write the Markdown list here (docs/images.md)")
    args = parser.parse_args(argv)
    try:
        text = images_markdown({s: render_plan(evaluate_stack(s)) for s in args.stacks})
    except (RenderError, ReferenceMissingError) as exc:
        print(exc, file=sys.stderr)
        return 1
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
