"""How long a fresh `pulumi up` takes, modeled from the plan's dependency graph and `--parallel`.

List scheduling of the plan's graph, with two refinements over a uniform model:

- Durations by kind of step, each with the reason it is plausible (DURATIONS below), instead of one
  figure for every SSH step: a CA-hash read is one sha256sum, not two minutes of package installation.
  A host step with nothing to run at create (a node's membership: only its delete drains) takes no time
  and opens no SSH connection. A joining server waits on its host for the servers before it
  (JOIN_AFTER), so its step lasts one server join per server in front of it, plus its own.
- The queue is first come, first served. The engine starts a step only when the program registers
  it, and the SDK registers a resource only once everything it depends on is done (pulumi/pulumi,
  pkg/resource/deploy/step_executor.go: "language hosts can only invoke the resource monitor once
  all of their dependencies have resolved"); the registrations then wait on one channel for
  `--parallel` workers, in arrival order. Steps that become ready at the same moment go in URN order.

Durations are assumptions for a site with a package mirror and a registry mirror near the hosts,
not measurements. What the model tells reliably is the shape: how far the schedule is from the
graph's own limit (unbounded parallelism) and how it grows with the node count.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import yaml

from stacks.diff import command_env

COMMAND = "command:remote:Command"
COPY = "command:remote:CopyToRemote"
CNI_CHARTS = ("cilium", "tigera-operator")

# kind of step -> (seconds, why that figure is plausible)
DURATIONS: dict[str, tuple[int, str]] = {
    "prepare-host.sh": (
        120,
        "apt/dnf update and ~10 packages from a near mirror (30-90 s), sysctls, modules, chrony restart",
    ),
    "rke2-install.sh init": (
        300,
        "installer and tarball download, first etcd and API server start, pulls of the control-plane "
        "images, then waits until the VIP answers: 'a first server start takes a few minutes'",
    ),
    "rke2-install.sh server": (
        240,
        "as the init server, plus etcd member join and learner promotion; a server with others before it "
        "in JOIN_AFTER waits for them first: 240 s per server in front of it",
    ),
    "rke2-install.sh agent": (
        120,
        "installer and ~40 MB tarball, rke2-agent start, runtime image pull, kubelet registration (60-120 s); "
        "then the certificate watch (three small files, a systemd reload: seconds)",
    ),
    "pre-upgrade.sh": (
        20,
        "version check and `rke2 etcd-snapshot save` of a small etcd (tens of MB) on the init server",
    ),
    "rke2-node-versions.sh": (10, "one SSH login to the init server and one `kubectl get nodes`"),
    "read-kubeconfig.sh": (10, "reads rke2.yaml and checks the API through the endpoint, which is already up"),
    "read-ca-hash.sh": (5, "one SSH login to the init server and a sha256sum of one certificate"),
    "infiniband-host.sh": (90, "rdma-core and infiniband-diags from the mirror (30-60 s), IPoIB interface up"),
    "nvme-tier1.sh": (60, "mkfs.xfs on two NVMe devices (discard of a few TB takes seconds to tens), mounts"),
    "ceph-osd-devices.sh": (30, "blkid/wipefs checks of 4 devices; wiping only where settings say so"),
    "minio-nas.sh": (
        180,
        "MinIO binary (~100 MB) from the site mirror, XFS on the NAS drives, service start, then its wait for "
        "write quorum while the other NAS hosts start in parallel",
    ),
    "zabbix-agent2-nas.sh": (
        45,
        "zabbix-agent2 package (~10 MB) from the site mirror, config and PSK files, service restart",
    ),
    "host-script bundle": (5, "one SFTP upload of the bundle of host scripts (about 130 KB) to the host"),
    "other host script": (120, "a host step this model does not know: the conservative figure"),
    "helm release": (
        180,
        "chart install and Helm's wait for its Deployments/DaemonSets, images from a near registry mirror",
    ),
    "CNI release": (
        300,
        "the CNI DaemonSet must roll out on every node (image pull on each) before Helm's wait ends",
    ),
    "acceptance check": (
        180,
        "a Job the engine waits for: its image from a near registry mirror (the GPU checks' PyTorch image is "
        "several GB: about a minute), then seconds (storage, scheduling) to a few minutes (NCCL sweep)",
    ),
    "API object": (5, "one API request: a Kubernetes object, or a MinIO bucket/user/policy (dynamic provider)"),
    "no work": (0, "components, providers, generated passwords and TLS keys take no time to speak of"),
}


def step_kind(resource: Mapping[str, Any]) -> str:
    """The DURATIONS key of a plan resource."""
    type_ = resource["type"]
    if not resource.get("custom", True) or type_.startswith(("pulumi:", "random:", "tls:")):
        return "no work"
    if type_ == COMMAND:
        create = resource["inputs"].get("create", "")
        if not create:
            return "no work"  # pulumi-command connects only to run a command
        script = create.rsplit(" ", 1)[-1] if isinstance(create, str) else ""
        if script == "rke2-install.sh":
            return f"rke2-install.sh {rke2_role(create)}"
        return script if script in DURATIONS else "other host script"
    if type_ == COPY:
        return "host-script bundle"
    if type_ == "kubernetes:batch/v1:Job":
        return "acceptance check"
    if type_.startswith("kubernetes:helm.sh/"):
        return "CNI release" if resource["inputs"].get("chart") in CNI_CHARTS else "helm release"
    return "API object"


def step_seconds(resource: Mapping[str, Any]) -> int:
    """The modeled duration of one step: its kind's figure; a joining server's times the servers it
    waits for on its host plus itself."""
    kind = step_kind(resource)
    seconds = DURATIONS[kind][0]
    if kind == "rke2-install.sh server":
        seconds *= 1 + len(command_env(resource["inputs"]["create"]).get("JOIN_AFTER", "").split())
    return seconds


def opens_ssh(resource: Mapping[str, Any]) -> bool:
    """A host step that connects at create (one without a create command does not; a copy does)."""
    return resource["type"] == COPY or (resource["type"] == COMMAND and bool(resource["inputs"].get("create")))


def rke2_role(create: str) -> str:
    """agent, server (joins: its config.yaml names the registration address) or init."""
    params = command_env(create)
    if params.get("RKE2_TYPE") == "agent":
        return "agent"
    return "server" if "server" in yaml.safe_load(params.get("RKE2_CONFIG") or "{}") else "init"


def graph(plan: Mapping[str, Any]) -> tuple[dict[str, dict], dict[str, set[str]]]:
    """Resources by URN and what each waits for: its dependencies (a component stands for everything
    inside it) and its provider."""
    res = {r["urn"]: r for r in plan["resources"]}
    children: dict[str, list[str]] = {}
    for r in plan["resources"]:
        if r.get("parent"):
            children.setdefault(r["parent"], []).append(r["urn"])

    def expand(urn: str) -> list[str]:
        out = [urn]
        for child in children.get(urn, []):
            out.extend(expand(child))
        return out

    deps = {}
    for urn, r in res.items():
        waits: set[str] = set()
        provider = r.get("provider") or ""
        for d in [*r.get("dependencies", []), provider]:
            if d in res:
                waits.update(x for x in expand(d) if x != urn)
        deps[urn] = waits
    return res, deps


@dataclass
class Schedule:
    makespan: float
    """Seconds until the last step is done."""
    peak_ssh: int = 0
    """Most host steps running at once: SSH connections from the machine running Pulumi (and, with a
    bastion, to the bastion: pulumi-command dials the bastion once per step)."""
    peak_by_target: dict[str, int] = field(default_factory=dict)
    """Most host steps running at once against each host."""
    order: list[str] = field(default_factory=list)
    """URNs in the order they finish: what the state grows by (benchmarks/state.py)."""


def simulate(
    res: Mapping[str, dict],
    deps: Mapping[str, set[str]],
    parallel: int,
    targets: Optional[Mapping[str, str]] = None,
    without: Collection[str] = (),
) -> Schedule:
    """First come, first served list scheduling under `parallel` (0: unbounded).

    `targets`: the host each host step connects to, by URN, for the peak-connection counts.
    `without`: kinds of step taken as instant (e.g. the acceptance checks, to compare bring-ups)."""
    targets = targets or {}
    duration = {u: 0 if step_kind(r) in without else step_seconds(r) for u, r in res.items()}
    waiting = {u: set(ds) for u, ds in deps.items()}
    dependents: dict[str, list[str]] = {}
    for u, ds in deps.items():
        for d in ds:
            dependents.setdefault(d, []).append(u)
    ready = deque(sorted(u for u, ds in waiting.items() if not ds))
    running: list[tuple[float, str]] = []
    now, done = 0.0, 0
    ssh: dict[str, int] = {}
    schedule = Schedule(makespan=0.0)
    while ready or running:
        while ready and (parallel <= 0 or len(running) < parallel):
            u = ready.popleft()
            heapq.heappush(running, (now + duration[u], u))
            if opens_ssh(res[u]):
                host = targets.get(u, "?")
                ssh[host] = ssh.get(host, 0) + 1
                schedule.peak_by_target[host] = max(schedule.peak_by_target.get(host, 0), ssh[host])
                schedule.peak_ssh = max(schedule.peak_ssh, sum(ssh.values()))
        now, u = heapq.heappop(running)
        finished = [u]
        while running and running[0][0] == now:  # everything done at this instant, before new starts
            finished.append(heapq.heappop(running)[1])
        newly_ready = []
        for u in finished:
            done += 1
            schedule.order.append(u)
            if opens_ssh(res[u]):
                ssh[targets.get(u, "?")] -= 1
            for v in dependents.get(u, []):
                waiting[v].discard(u)
                if not waiting[v]:
                    newly_ready.append(v)
        ready.extend(sorted(newly_ready))
    if done != len(res):
        raise ValueError(f"cycle or dangling dependency: {len(res) - done} steps never became ready")
    schedule.makespan = now
    return schedule


def longest_host_chain(plan: Mapping[str, Any]) -> int:
    """The most host commands that must run one after another at create (through any resources between
    them); one with nothing to run at create does not count."""
    by_urn = {r["urn"]: r for r in plan["resources"]}
    depth: dict[str, int] = {}

    def visit(urn: str) -> int:
        if urn not in depth:
            r = by_urn.get(urn)
            own = 1 if r is not None and opens_ssh(r) else 0
            below = [visit(d) for d in (r["dependencies"] if r else [])]
            depth[urn] = own + max(below, default=0)
        return depth[urn]

    return max(visit(u) for u in by_urn)


def duration_table() -> str:
    lines = ["| step | modeled s | why |", "|---|---:|---|"]
    lines += [f"| {kind} | {seconds} | {why} |" for kind, (seconds, why) in DURATIONS.items()]
    return "\n".join(lines)


def node_of(command_name: str, nodes: Collection[str]) -> Optional[str]:
    """The node a per-node host step is named after (`<node>-<step>`), or None for cluster-wide steps."""
    parts = command_name.split("-")
    owners = ["-".join(parts[:k]) for k in range(len(parts) - 1, 0, -1)]
    return next((name for name in owners if name in nodes), None)
