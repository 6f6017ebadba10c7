"""The Pod Security Standards' baseline and restricted checks, applied to a pod spec as Pod Security
admission applies them to the pods a workload creates.

Each check is one control of the upstream policy list, https://kubernetes.io/docs/concepts/security/pod-security-standards/
(sections "Baseline" and "Restricted", the controls named in each function's docstring, Kubernetes v1.35).
Only Linux pods: the Windows-only fields (`windowsOptions.hostProcess`) are checked as the baseline says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

Spec = dict[str, Any]
Meta = dict[str, Any]

# Baseline "Capabilities": the only capabilities `add` may name.
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
        "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
    }
)  # fmt: skip
# Baseline "Sysctls": the safe set.
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)  # fmt: skip
# Baseline "SELinux": the allowed `seLinuxOptions.type` values.
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
# Restricted "Volume Types": the only volume sources allowed.
RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)


def _containers(spec: Spec) -> list[dict[str, Any]]:
    return [
        *(spec.get("initContainers") or []),
        *(spec.get("containers") or []),
        *(spec.get("ephemeralContainers") or []),
    ]


def _ctx(container: dict[str, Any]) -> dict[str, Any]:
    return container.get("securityContext") or {}


def _each(spec: Spec, bad: Callable[[dict[str, Any]], bool], message: str) -> list[str]:
    return [f"container {c.get('name')}: {message}" for c in _containers(spec) if bad(c)]


def host_process(spec: Spec, meta: Meta) -> list[str]:
    """Baseline, HostProcess: windowsOptions.hostProcess undefined or false."""
    pod = ((spec.get("securityContext") or {}).get("windowsOptions") or {}).get("hostProcess")
    found = ["spec.securityContext.windowsOptions.hostProcess"] if pod else []
    return found + _each(spec, lambda c: (_ctx(c).get("windowsOptions") or {}).get("hostProcess"), "hostProcess")


def host_namespaces(spec: Spec, meta: Meta) -> list[str]:
    """Baseline, Host Namespaces: spec.hostNetwork, hostPID, hostIPC undefined or false."""
    return [f"spec.{key}: true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]


def privileged(spec: Spec, meta: Meta) -> list[str]:
    """Baseline, Privileged Containers: securityContext.privileged undefined or false."""
    return _each(spec, lambda c: _ctx(c).get("privileged"), "privileged: true")


def capabilities_baseline(spec: Spec, meta: Meta) -> list[str]:
    """Baseline, Capabilities: `capabilities.add` only from the baseline list."""
    found = []
    for c in _containers(spec):
        extra = set((_ctx(c).get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if extra:
            found.append(f"container {c.get('name')}: adds capabilities {sorted(extra)}")
    return found


def host_path(spec: Spec, meta: Meta) -> list[str]:
    """Baseline, HostPath Volumes: spec.volumes[*].hostPath undefined."""
    return [
        f"volume {v.get('name')}: hostPath {v['hostPath'].get('path')}"
        for v in spec.get("volumes") or []
        if v.get("hostPath")
    ]


def host_ports(spec: Spec, meta: Meta) -> list[str]:
    """Baseline, Host Ports: ports[*].hostPort undefined or 0."""
    return [
        f"container {c.get('name')}: hostPort {p['hostPort']}"
        for c in _containers(spec)
        for p in c.get("ports") or []
        if p.get("hostPort")
    ]


def apparmor(spec: Spec, meta: Meta) -> list[str]:
    """Baseline, AppArmor: appArmorProfile.type undefined, RuntimeDefault or Localhost; the annotations
    runtime/default or localhost/*."""
    allowed = (None, "RuntimeDefault", "Localhost")
    found = []
    if ((spec.get("securityContext") or {}).get("appArmorProfile") or {}).get("type") not in allowed:
        found.append("spec.securityContext.appArmorProfile: Unconfined")
    found += _each(
        spec, lambda c: (_ctx(c).get("appArmorProfile") or {}).get("type") not in allowed, "AppArmor Unconfined"
    )
    for key, value in ((meta or {}).get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            found.append(f"annotation {key}: {value}")
    return found


def selinux(spec: Spec, meta: Meta) -> list[str]:
    """Baseline, SELinux: seLinuxOptions.type from the allowed list; user and role undefined."""

    def bad(options: dict[str, Any]) -> bool:
        return options.get("type", "") not in SELINUX_TYPES or bool(options.get("user")) or bool(options.get("role"))

    found = (
        ["spec.securityContext.seLinuxOptions"]
        if bad((spec.get("securityContext") or {}).get("seLinuxOptions") or {})
        else []
    )
    return found + _each(spec, lambda c: bad(_ctx(c).get("seLinuxOptions") or {}), "seLinuxOptions")


def proc_mount(spec: Spec, meta: Meta) -> list[str]:
    """Baseline, /proc Mount Type: procMount undefined or Default."""
    return _each(spec, lambda c: _ctx(c).get("procMount") not in (None, "Default"), "procMount Unmasked")


def seccomp_baseline(spec: Spec, meta: Meta) -> list[str]:
    """Baseline, Seccomp: seccompProfile.type not Unconfined."""
    found = []
    if ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type") == "Unconfined":
        found.append("spec.securityContext.seccompProfile: Unconfined")
    return found + _each(
        spec, lambda c: (_ctx(c).get("seccompProfile") or {}).get("type") == "Unconfined", "seccomp Unconfined"
    )


def sysctls(spec: Spec, meta: Meta) -> list[str]:
    """Baseline, Sysctls: only the safe set."""
    names = [s.get("name") for s in (spec.get("securityContext") or {}).get("sysctls") or []]
    return [f"sysctl {n}" for n in names if n not in SAFE_SYSCTLS]


def volume_types(spec: Spec, meta: Meta) -> list[str]:
    """Restricted, Volume Types: only configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim,
    projected, secret."""
    found = []
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if kinds - RESTRICTED_VOLUMES:
            found.append(f"volume {v.get('name')}: {sorted(kinds - RESTRICTED_VOLUMES)}")
    return found


def privilege_escalation(spec: Spec, meta: Meta) -> list[str]:
    """Restricted, Privilege Escalation: allowPrivilegeEscalation false."""
    return _each(
        spec, lambda c: _ctx(c).get("allowPrivilegeEscalation") is not False, "allowPrivilegeEscalation not false"
    )


def run_as_non_root(spec: Spec, meta: Meta) -> list[str]:
    """Restricted, Running as Non-root: runAsNonRoot true on the pod (and not false on a container) or on
    every container."""
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot")
    return _each(spec, lambda c: _ctx(c).get("runAsNonRoot", pod) is not True, "runAsNonRoot not true")


def run_as_user(spec: Spec, meta: Meta) -> list[str]:
    """Restricted, Running as Non-root user: runAsUser undefined or non-zero."""
    found = ["spec.securityContext.runAsUser: 0"] if (spec.get("securityContext") or {}).get("runAsUser") == 0 else []
    return found + _each(spec, lambda c: _ctx(c).get("runAsUser") == 0, "runAsUser: 0")


def seccomp_restricted(spec: Spec, meta: Meta) -> list[str]:
    """Restricted, Seccomp: seccompProfile.type RuntimeDefault or Localhost, on the pod or every container."""
    pod = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    allowed = ("RuntimeDefault", "Localhost")
    return _each(
        spec, lambda c: (_ctx(c).get("seccompProfile") or {}).get("type", pod) not in allowed, "no seccomp profile"
    )


def capabilities_restricted(spec: Spec, meta: Meta) -> list[str]:
    """Restricted, Capabilities: drop ALL; add only NET_BIND_SERVICE."""

    def bad(c: dict[str, Any]) -> bool:
        caps = _ctx(c).get("capabilities") or {}
        return "ALL" not in (caps.get("drop") or []) or bool(set(caps.get("add") or []) - {"NET_BIND_SERVICE"})

    return _each(spec, bad, "capabilities: must drop ALL and add at most NET_BIND_SERVICE")


BASELINE = (
    host_process, host_namespaces, privileged, capabilities_baseline, host_path, host_ports, apparmor, selinux,
    proc_mount, seccomp_baseline, sysctls,
)  # fmt: skip
RESTRICTED = (
    *BASELINE, volume_types, privilege_escalation, run_as_non_root, run_as_user, seccomp_restricted,
    capabilities_restricted,
)  # fmt: skip
LEVELS: dict[str, Iterable[Callable[[Spec, Meta], list[str]]]] = {
    "privileged": (),
    "baseline": BASELINE,
    "restricted": RESTRICTED,
}


def violations(level: str, spec: Spec, meta: Meta) -> list[str]:
    """What Pod Security admission at `level` refuses in a pod with this spec and metadata."""
    return [f"{check.__name__}: {v}" for check in LEVELS[level] for v in check(spec, meta)]
