"""The driver of a check that takes a node's GPUs or a local disk: it runs in the check's Job (no GPU, no volume
but its own program's, the platform's `acceptance-driver` ServiceAccount), looks at the cluster first, then
runs the check itself as worker pods it creates, relays their result and deletes them.

Before taking GPUs (NODES given): a node that is cordoned (`spec.unschedulable`) or whose GPUs a pod that has
not ended holds (the `nvidia.com/gpu` requests of the pods bound to it) is skipped, with the reason; a node
with fewer allocatable GPUs than the check takes (from the Node object) fails; the GPU Operator's
ClusterPolicy must reach `status.state: ready` (its CRD, nvidia.com_clusterpolicies.yaml: enum ignored,
ready, notReady) within POLICY_WAIT seconds, or the check fails naming it. The workers of other acceptance
checks are not a reason to skip (the scheduler runs them one after the other on a node). A worker still
pending after SCHEDULE_WAIT seconds makes the driver look again (GPUs taken meanwhile: skipped; else it
waits on, until the Job's time is nearly up: failed).
With RENDEZVOUS (the NCCL pairs), worker i is pinned to the i-th node with the hostname `RENDEZVOUS-i` under
the headless Service RENDEZVOUS_SERVICE, which every pair's workers share (it selects them by the label
`ml-platform.io/rendezvous`); a pair with one node skipped is skipped.

Each worker pod is WORKER (a pod spec, JSON) with the worker's NODE and JOB_COMPLETION_INDEX, owned by this
pod (deleted with it), bounded by the time the Job has left. Its log, with its `ACCEPTANCE` line, is printed
here, where the report reads it. The workers are deleted at the end, whatever the result (a generic
ephemeral volume goes with its pod: the claim on a disk ends with the check).

With STORAGE_CLASS (the tier-1 check), a check whose every local volume of that class is claimed is skipped
before a worker is made (its claim could not bind). The verdict is derived from the workers' evidence records
(evidence.py, pasted before this file): skipped and unverified exit 3, so the Job is not Complete.

With EACH (a JSON list of {node, gpus, env, limits}: the GPU node and NVLink checks of a node group), the check
runs on every node in turn, as each becomes free (run_each); a cordoned node is skipped at once.

Parameters: EACH NODE_TIMEOUT CHECK NODE ADVISORY NAMESPACE POD_NAME POD_UID WORKER NODES GPUS RENDEZVOUS
  RENDEZVOUS_SERVICE STORAGE_CLASS
  DEADLINE POLICY_WAIT SCHEDULE_WAIT RETRY_EVERY API TOKEN_FILE CA_FILE (the last three: the in-cluster defaults)
"""

import json
import os
import signal
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional

if "verdict" not in globals():  # run on its own, not as drivers.driver_program() assembles it
    from evidence import EXIT, records, verdict, worst

GPU = "nvidia.com/gpu"
WORKER_LABEL = "ml-platform.io/acceptance"
SA = "/var/run/secrets/kubernetes.io/serviceaccount"
ENV = os.environ


class CheckEnd(Exception):  # noqa: N818 (an end, not an error)
    """The check's end: a status (passed, failed, skipped) and why."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


class Api:
    def __init__(self) -> None:
        self.base = ENV.get("API", "https://kubernetes.default.svc").rstrip("/")
        with open(ENV.get("TOKEN_FILE", f"{SA}/token")) as token:
            self.token = token.read().strip()
        ca = ENV.get("CA_FILE", f"{SA}/ca.crt")
        self.tls = ssl.create_default_context(cafile=ca) if self.base.startswith("https") else None

    def call(self, method: str, path: str, body: object = None, raw: bool = False) -> object:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30, context=self.tls) as response:
            text = response.read().decode(errors="replace")
        return text if raw else json.loads(text)

    def get(self, path: str, what: str) -> dict:
        """GET, failing the check with what could not be read (never a pass by default)."""
        try:
            return self.call("GET", path)  # type: ignore[return-value]
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[:300]
            raise CheckEnd("failed", f"cannot read {what}: HTTP {error.code} {detail}") from None
        except (OSError, ValueError) as error:
            raise CheckEnd("failed", f"cannot read {what}: {error}") from None


def exit_status(status: str) -> int:
    """lib.sh's rule: passed 0, failed 1, skipped and unverified 3 (the Job is not Complete: the next `up` runs
    it again); an advisory check exits 0."""
    return 0 if ENV.get("ADVISORY") == "true" else EXIT[status]


def finish(status: str, detail: str) -> int:
    """The driver's own record (a check it ended before any worker reported: skipped or failed), in lib.sh's
    format, and its exit status."""
    advisory = status != "passed" and ENV.get("ADVISORY") == "true"
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    row = {"check": ENV["CHECK"], "node": ENV.get("NODE", ""), "claim": status, "status": status}
    row.update(value="", floor="", unit="", advisory=advisory, detail=detail)
    row["evidence"] = {"measured": "", "at": now, "ended": now, "amounts": {}, "durations_ms": {}, "digests": {}}
    print("ACCEPTANCE " + json.dumps(row, separators=(",", ":")))
    if status != "passed":
        print(f"acceptance check {ENV['CHECK']} {status} on {ENV.get('NODE') or '?'}: {detail}", file=sys.stderr)
    return exit_status(status)


def gpus_of(pod: dict) -> int:
    """GPUs a pod holds: its containers' sum, or its largest init container (the scheduler's rule)."""

    def one(container: dict) -> int:
        res = container.get("resources", {})
        return max(int(res.get(kind, {}).get(GPU, 0) or 0) for kind in ("requests", "limits"))

    spec = pod.get("spec", {})
    return max([sum(one(c) for c in spec.get("containers", []))] + [one(c) for c in spec.get("initContainers", [])])


def is_check_worker(pod: dict) -> bool:
    """A worker of an acceptance check (this one's or another's on the same node, e.g. the NVLink check and the
    node's own): not a reason to skip, the scheduler runs them one after the other."""
    meta = pod["metadata"]
    return meta["namespace"] == ENV["NAMESPACE"] and meta.get("labels", {}).get(WORKER_LABEL) == "worker"


def node_state(api: Api, node: str, needed: int) -> None:
    """Raises CheckEnd when `node` cannot give the check its GPUs now."""
    obj = api.get(f"/api/v1/nodes/{urllib.parse.quote(node)}", f"Node {node}")
    if obj.get("spec", {}).get("unschedulable"):
        raise CheckEnd("skipped", f"{node} is cordoned (spec.unschedulable): its GPUs were not taken")
    allocatable = int(obj.get("status", {}).get("allocatable", {}).get(GPU, 0) or 0)
    if allocatable < needed:
        raise CheckEnd("failed", f"{node} has {allocatable} {GPU} allocatable (Node status), the check takes {needed}")
    query = urllib.parse.urlencode({"fieldSelector": f"spec.nodeName={node}"})
    pods = api.get(f"/api/v1/pods?{query}", f"the pods on {node}").get("items", [])
    holders = [
        f"{p['metadata']['namespace']}/{p['metadata']['name']} ({gpus_of(p)})"
        for p in pods
        if p.get("status", {}).get("phase") not in ("Succeeded", "Failed") and not is_check_worker(p) and gpus_of(p) > 0
    ]
    if holders:
        raise CheckEnd("skipped", f"GPUs of {node} in use by {', '.join(sorted(holders))}: not taken")


def wait_for_policy(api: Api) -> None:
    """Until a ClusterPolicy is `ready` (POLICY_WAIT seconds at most)."""
    started, wait = time.monotonic(), int(ENV.get("POLICY_WAIT", "300"))
    while True:
        items = api.get("/apis/nvidia.com/v1/clusterpolicies", "the GPU Operator's ClusterPolicy").get("items", [])
        states = {p["metadata"]["name"]: p.get("status", {}).get("state", "") for p in items}
        if "ready" in states.values():
            return
        if time.monotonic() - started >= wait:
            seen = ", ".join(f"{n} state {s or 'unset'}" for n, s in sorted(states.items())) or "none exists"
            raise CheckEnd(
                "failed", f"ClusterPolicy not ready after {wait}s ({seen}): the GPU Operator has not finished"
            )
        time.sleep(int(ENV.get("RETRY_EVERY", "10")))


def free_volumes(api: Api, storage_class: str) -> None:
    """Raises CheckEnd (skipped) when every local volume of `storage_class` is claimed: the worker's claim could
    not bind until one is released, so the check cannot run now (it runs again on the next `up`)."""
    items = api.get("/api/v1/persistentvolumes", "the PersistentVolumes").get("items", [])
    volumes = [v for v in items if v.get("spec", {}).get("storageClassName") == storage_class]
    phases = [v.get("status", {}).get("phase", "") for v in volumes]
    if not volumes:
        raise CheckEnd("failed", f"no PersistentVolume of StorageClass {storage_class}: no local disk was discovered")
    if "Available" not in phases:
        raise CheckEnd(
            "skipped", f"every {storage_class} volume is claimed ({len(volumes)}: {', '.join(sorted(set(phases)))})"
        )


def worker_pod(index: int, node: str, deadline: float, task: Optional[dict] = None) -> dict:
    """Worker `index` on `node`; `task` (EACH): its GPUs and the environment it sets for this node."""
    spec = json.loads(ENV["WORKER"])
    spec["activeDeadlineSeconds"] = max(1, int(deadline - time.monotonic()))
    container = spec["containers"][0]
    own = dict((task or {}).get("env", {}))
    own.update(NODE=node, JOB_COMPLETION_INDEX=str(0 if task else index))
    env = [e for e in container.get("env", []) if e["name"] not in own]
    container["env"] = [*env, *({"name": k, "value": str(v)} for k, v in own.items())]
    if task:
        limits = container.setdefault("resources", {}).setdefault("limits", {})
        limits.update({GPU: str(task["gpus"]), **task.get("limits", {})})
    labels = {WORKER_LABEL: "worker", "ml-platform.io/check": ENV["CHECK"]}
    rendezvous = ENV.get("RENDEZVOUS", "")
    if node:
        spec["nodeSelector"] = {**spec.get("nodeSelector", {}), "kubernetes.io/hostname": node}
    if rendezvous:
        service = ENV["RENDEZVOUS_SERVICE"]
        spec.update(hostname=f"{rendezvous}-{index}", subdomain=service)
        labels["ml-platform.io/rendezvous"] = service
    owner = {"apiVersion": "v1", "kind": "Pod", "name": ENV["POD_NAME"], "uid": ENV["POD_UID"]}
    name = f"{ENV['POD_NAME']}"[:55].rstrip("-") + f"-w{index}"
    return {"metadata": {"name": name, "labels": labels, "ownerReferences": [owner]}, "spec": spec}


def collect(api: Api, pods: str, names: list) -> list:
    """The records the ended workers `names` printed (their logs relayed here for the report)."""
    found = []
    for name in names:
        log = str(api.call("GET", f"{pods}/{name}/log", raw=True))
        sys.stdout.write(log if log.endswith("\n") or not log else log + "\n")
        found += records(log)
    return found


def run_each(api: Api, created: list) -> int:
    """EACH (a JSON list of {node, gpus, env, limits}): the check on every node of a group, one worker per node,
    pinned to it. A node is taken when it is free (no other pod holding GPUs); a busy one is looked at again
    every RETRY_EVERY seconds while the others run, until the Job's time is nearly up. Each worker's deadline
    counts from when the driver admits it (creates it), not from the Job's start. A node never free, or cordoned,
    is skipped, named in its own record; the verdict is the worst of all."""
    each = json.loads(ENV["EACH"])
    deadline = time.monotonic() + int(ENV.get("DEADLINE", "540"))
    per_node = int(ENV.get("NODE_TIMEOUT", "600"))
    wait_for_policy(api)
    pods = f"/api/v1/namespaces/{ENV['NAMESPACE']}/pods"
    waiting, running, found, why = list(each), {}, [], {}
    while waiting or running:
        for task in list(waiting):
            try:
                node_state(api, task["node"], int(task["gpus"]))
            except CheckEnd as busy:
                # Failed (too few GPUs) or cordoned (taken out on purpose): said at once. Busy: looked at again.
                if busy.status == "failed" or "cordoned" in busy.detail:
                    waiting.remove(task)
                    found.append(own_record(busy.status, busy.detail, task["node"]))
                why[task["node"]] = busy.detail
                continue
            waiting.remove(task)
            pod = worker_pod(len(created), task["node"], min(deadline, time.monotonic() + per_node), task)
            try:
                api.call("POST", pods, pod)
            except (urllib.error.HTTPError, OSError) as error:
                found.append(own_record("failed", f"cannot create the worker pod: {error}", task["node"]))
                continue
            created.append(pod["metadata"]["name"])
            running[pod["metadata"]["name"]] = (task, time.monotonic() + per_node)
        for name, (task, ends) in list(running.items()):
            phase = api.get(f"{pods}/{name}", f"worker pod {name}").get("status", {}).get("phase", "Pending")
            if phase in ("Succeeded", "Failed"):
                del running[name]
                got = collect(api, pods, [name])
                found += got or [own_record("failed", f"worker {name} printed no result ({phase})", task["node"])]
            elif time.monotonic() >= min(ends, deadline):
                del running[name]
                found.append(own_record("failed", f"worker {name} did not end within its time ({phase})", task["node"]))
        if time.monotonic() >= deadline:
            for task in waiting:
                detail = f"{why.get(task['node'], 'not taken')}, all through the check's time: not checked"
                found.append(own_record("skipped", detail, task["node"]))
            break
        if waiting or running:
            time.sleep(int(ENV.get("RETRY_EVERY", "10")))
    verdicts = [verdict(r) for r in found]
    for (status, reason), record in zip(verdicts, found, strict=True):
        if status != "passed":
            node, detail = record.get("node", "?"), reason or record.get("detail")
            print(f"acceptance check {ENV['CHECK']} {status} on {node}: {detail}", file=sys.stderr)
    return exit_status(worst(v for v, _ in verdicts))


def own_record(status: str, detail: str, node: str) -> dict:
    """A record the driver writes for one node of a group (printed as it is made)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    row = {"check": ENV["CHECK"], "node": node, "claim": status, "status": status, "value": "", "floor": "", "unit": ""}
    row.update(advisory=status != "passed" and ENV.get("ADVISORY") == "true", detail=detail)
    row["evidence"] = {"measured": "", "at": now, "ended": now, "amounts": {}, "durations_ms": {}, "digests": {}}
    print("ACCEPTANCE " + json.dumps(row, separators=(",", ":")))
    return row


def run(api: Api, created: list) -> int:
    nodes, needed = ENV.get("NODES", "").split(), int(ENV.get("GPUS", "0"))
    deadline = time.monotonic() + int(ENV.get("DEADLINE", "540"))
    if nodes:
        for node in nodes:
            node_state(api, node, needed)
        wait_for_policy(api)
        for node in nodes:
            node_state(api, node, needed)
    if ENV.get("STORAGE_CLASS"):
        free_volumes(api, ENV["STORAGE_CLASS"])
    namespace = ENV["NAMESPACE"]
    pods = f"/api/v1/namespaces/{namespace}/pods"
    for index, node in enumerate(nodes or [""]):
        pod = worker_pod(index, node, deadline)
        try:
            api.call("POST", pods, pod)
        except (urllib.error.HTTPError, OSError) as error:
            raise CheckEnd("failed", f"cannot create the worker pod {pod['metadata']['name']}: {error}") from None
        created.append(pod["metadata"]["name"])
    started, phases, looked = time.monotonic(), {}, False
    while True:
        phases = {n: api.get(f"{pods}/{n}", f"worker pod {n}").get("status", {}) for n in created}
        if all(s.get("phase") in ("Succeeded", "Failed") for s in phases.values()):
            break
        pending = [n for n, s in phases.items() if s.get("phase", "Pending") == "Pending"]
        if pending and nodes and not looked and time.monotonic() - started >= int(ENV.get("SCHEDULE_WAIT", "120")):
            looked = True  # once: the GPUs may have been taken between the look and the create
            for node in nodes:
                node_state(api, node, needed)
        if time.monotonic() >= deadline:
            why = "; ".join(f"{n}: {s.get('phase', 'Pending')}" for n, s in sorted(phases.items()))
            raise CheckEnd("failed", f"the worker pods did not end within the check's time ({why})")
        time.sleep(int(ENV.get("RETRY_EVERY", "10")))
    found = []
    for name in created:
        log = str(api.call("GET", f"{pods}/{name}/log", raw=True))
        sys.stdout.write(log if log.endswith("\n") or not log else log + "\n")
        found += records(log)
    failed = sorted(n for n, s in phases.items() if s.get("phase") == "Failed")
    if not found:
        raise CheckEnd("failed", f"the worker pods printed no result ({', '.join(failed) or 'none'} failed)")
    # The verdict from the workers' evidence (evidence.py), not from their exit status or their own claim.
    verdicts = [verdict(r) for r in found]
    status = worst(v for v, _ in verdicts)
    for (found_status, why), record in zip(verdicts, found, strict=True):
        if found_status != "passed":
            name = record.get("check", ENV["CHECK"])
            print(f"acceptance check {name} {found_status}: {why or record.get('detail', '')}", file=sys.stderr)
    if status == "passed" and failed:
        raise CheckEnd("failed", f"worker pods {', '.join(failed)} failed after reporting")
    return exit_status(status)


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the Job's deadline: delete the workers first
    created: list = []
    api = None
    try:
        api = Api()
        return run_each(api, created) if ENV.get("EACH") else run(api, created)
    except CheckEnd as done:
        return finish(done.status, done.detail)
    except OSError as error:
        return finish("failed", f"cannot talk to the Kubernetes API: {error}")
    finally:
        for name in created:
            try:
                api.call("DELETE", f"/api/v1/namespaces/{ENV['NAMESPACE']}/pods/{name}")  # type: ignore[union-attr]
            except (urllib.error.HTTPError, OSError) as error:
                print(f"could not delete worker pod {name}: {error} (its owner's deletion removes it)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
