"""How a check's pods get their programs: once per namespace and version, not inline in every Job.

A check program (`checks/`, as `check_program` assembles it) and the driver (`checks/driver.py`) are each an
immutable ConfigMap in the check's namespace, named by the program's SHA-256 (`acceptance-<program>-<first 10
hex digits>`). A changed program is a new ConfigMap, so a new Job template, and the check runs again as it did
when the program was inline; nobody can change a ConfigMap in place (`immutable: true`). The pod mounts it
read-only, and its command first checks the file against the SHA-256 that the Job's template carries (which
the API server lets nobody change): a ConfigMap deleted and created again with other content, by someone with
rights in the platform namespace, fails the check instead of running.

Why: each GPU node's check and each NCCL pair's carried the driver (about 12 KB) and its worker's program
(about 6 KB) inline, some 20 KB per Job, in the plan and twice in the state: at 1000 nodes about 450 Jobs,
some 9 MB of a 37 MB plan. Now a Job carries the digests and paths only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

LABEL = "ml-platform.io/acceptance"
MOUNT = "/acceptance/programs"
VOLUME = "check-program"
# sh -c VERIFY NAME SHA256 FILE COMMAND...: run COMMAND only when FILE has that SHA-256 (BusyBox's sha256sum
# in the check images, coreutils' in the GPU image).
VERIFY = (
    'h=$1 f=$2; shift 2; echo "$h  $f" | sha256sum -c - >/dev/null 2>&1 || '
    '{ echo "check program $f does not match its SHA-256 $h: not run" >&2; exit 1; }; exec "$@"'
)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def config_map_name(key: str, text: str) -> str:
    stem = key.rsplit(".", 1)[0]
    return f"acceptance-{stem}-{digest(text)[:10]}"


@dataclass(frozen=True)
class Delivered:
    """A program in its ConfigMap, and what a pod needs to run it."""

    config_map: pulumi.Resource
    key: str
    text: str

    @property
    def path(self) -> str:
        return f"{MOUNT}/{self.key}"

    @property
    def volume(self) -> dict[str, Any]:
        name = config_map_name(self.key, self.text)
        return {"name": VOLUME, "configMap": {"name": name, "defaultMode": 0o444}}

    @property
    def mount(self) -> dict[str, Any]:
        return {"name": VOLUME, "mountPath": MOUNT, "readOnly": True}

    def command(self, interpreter: str) -> list[str]:
        """The container's command: the program's digest checked, then the program run by `interpreter`."""
        return ["sh", "-c", VERIFY, self.key, digest(self.text), self.path, interpreter, self.path]


def with_program(pod_spec: dict[str, Any], delivered: Delivered, interpreter: str) -> dict[str, Any]:
    """`pod_spec` whose only container runs the mounted program with `interpreter`."""
    (container,) = pod_spec["containers"]
    container = {
        **container,
        "command": delivered.command(interpreter),
        "volumeMounts": [*container.get("volumeMounts", []), delivered.mount],
    }
    return {**pod_spec, "containers": [container], "volumes": [*pod_spec.get("volumes", []), delivered.volume]}


class Programs:
    """The program ConfigMaps of one AcceptanceChecks, in its home namespace (where every check runs): one per
    program, created when a check first needs it."""

    def __init__(self, resource_name: str, home: pulumi.Input[str], opts: pulumi.ResourceOptions) -> None:
        self._resource_name = resource_name
        self._home = home
        self._opts = opts
        self._made: dict[str, Delivered] = {}

    def deliver(self, key: str, text: str) -> Delivered:
        found = self._made.get(key)
        if found is not None:
            if found.text != text:
                raise ValueError(f"acceptance program {key}: two different texts")
            return found
        config_map = k8s.core.v1.ConfigMap(
            f"{self._resource_name}-program-{key.rsplit('.', 1)[0]}",
            # The namespace's name (an Output) makes it wait for the namespace, as the Jobs do.
            metadata={"name": config_map_name(key, text), "namespace": self._home, "labels": {LABEL: "program"}},
            data={key: text},
            immutable=True,
            opts=self._opts,
        )
        self._made[key] = Delivered(config_map, key, text)
        return self._made[key]
