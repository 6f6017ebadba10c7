"""Acceptance checks in the plan: every check a Job the engine waits for, replaced when unready, in the
platform namespace with its program inline, with requests; none can wait suspended past its deadline."""

from __future__ import annotations

import hashlib
import json

import pytest

from components.acceptance.checks import GANG_PODS, VOLCANO_GROUP_ANNOTATION
from components.acceptance.component import REPLACE_UNREADY, check_program
from components.acceptance.drivers import CLUSTER_RULES, NAMESPACE_RULES, SERVICE_ACCOUNT, driver_program
from components.acceptance.gpu_checks import GPU_RESOURCES, ib_pairs
from components.acceptance.programs import MOUNT, VERIFY, VOLUME
from components.monitoring.config import node_groups
from components.monitoring.reader import READ_METHODS, READER
from components.scheduling.config import MANAGED_LABEL
from settings import load
from settings.scheduling import quantity_value
from stacks import engine
from stacks.plan import summary
from tests.conftest import evaluate, problems, stack_doc

JOB = "kubernetes:batch/v1:Job"
CR = "kubernetes:kueue.x-k8s.io/v1beta2:{}"
HOME = "ml-platform-acceptance"


def jobs(plan) -> dict[str, dict]:
    return {r["inputs"]["metadata"]["name"]: r for r in plan.by_type(JOB)}


def custom(plan, kind: str) -> list[dict]:
    return [r for r in plan.resources if r["type"].endswith(f":{kind}") and "inputs" in r]


def pod_spec(job: dict) -> dict:
    return job["inputs"]["spec"]["template"]["spec"]


def env_of(job: dict) -> dict[str, str]:
    """The check container's environment (a driven check's: its worker's)."""
    return {e["name"]: e.get("value") for e in worker_of(job)["containers"][0]["env"]}


def driver_env(job: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod_spec(job)["containers"][0]["env"]}


def worker_of(job: dict) -> dict:
    """The pod that runs the check: a driven check's worker pod spec (the driver's WORKER), else the Job's pod."""
    pod = pod_spec(job)
    if pod.get("serviceAccountName") != SERVICE_ACCOUNT:
        return pod
    return json.loads(driver_env(job)["WORKER"])


def test_the_preview_lists_every_check_with_its_wait_and_the_drift_probe(prod_plan):
    # What `make plan` prints: each acceptance Job, what the engine waits for and how long, the probe.
    text = summary(prod_plan)
    section = text.split("Workloads the program runs itself")[1].split("\n\n")[0]
    for job in jobs(prod_plan).values():
        meta = job["inputs"]["metadata"]
        timeout = meta["annotations"]["pulumi.com/timeoutSeconds"]
        assert f"Job        {meta['namespace']}/{meta['name']}: until Complete, at most {timeout} s" in section
    assert "DaemonSet  ml-platform-acceptance/drift-probe: until rolled out" in section


def delivered(plan, job: dict, pod: dict, key: str, text: str) -> list[str]:
    """The program `key` as `pod` gets it: its immutable ConfigMap in the Job's namespace, named by its SHA-256
    and holding exactly `text`, which the Job waits for, mounted read-only; the container's command checks the
    file's SHA-256 before it runs it. Returns what the command then runs."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    (container,) = pod["containers"]
    command = container["command"]
    assert command[:6] == ["sh", "-c", VERIFY, key, digest, f"{MOUNT}/{key}"], command[:6]
    volume = next(v for v in pod["volumes"] if v["name"] == VOLUME)
    config_maps = {r["inputs"]["metadata"]["name"]: r for r in plan.by_type("kubernetes:core/v1:ConfigMap")}
    config_map = config_maps[volume["configMap"]["name"]]
    assert volume["configMap"]["name"] == f"acceptance-{key.rsplit('.', 1)[0]}-{digest[:10]}"
    assert config_map["inputs"]["data"] == {key: text} and config_map["inputs"]["immutable"] is True
    assert config_map["inputs"]["metadata"]["namespace"] == job["inputs"]["metadata"]["namespace"]
    assert config_map["urn"] in job["dependencies"]
    assert {"name": VOLUME, "mountPath": MOUNT, "readOnly": True} in container["volumeMounts"]
    return command[6:]


def test_every_check_is_a_job_replaced_when_unready_with_a_bounded_timeout_and_requests(prod_plan):
    found = jobs(prod_plan)
    # The GPU nodes' checks: one driver per node group, which takes each of its nodes in turn (no Job per node).
    [gpu_group] = [j for n, j in found.items() if n.startswith("acceptance-gpu-")]
    assert [t["node"] for t in json.loads(driver_env(gpu_group)["EACH"])] == prod_plan.outputs["gpuNodes"]
    assert {"acceptance-nccl-nvlink-nodes", "acceptance-monitoring", "acceptance-storage-s3", "acceptance-gang"} <= set(
        found
    )
    assert {"acceptance-storage-tier1", "acceptance-storage-tier2block", "acceptance-storage-tier2shared"} <= set(found)
    for name, job in found.items():
        meta, spec = job["inputs"]["metadata"], job["inputs"]["spec"]
        # A failed Job (or one an `up` stopped waiting for) is replaced on the next `up`, not awaited again
        # (pulumi/pulumi-kubernetes#1575): the provider reads the live Job and replaces it when not ready.
        assert meta["annotations"][REPLACE_UNREADY] == "true", name
        # The engine's wait and the Job's own deadline are the same bound; a failure is never retried. A group's
        # NVLink driver has twice a node's time: free nodes at once, then those that were busy.
        seconds = 1200 if name.startswith(("acceptance-nccl-nvlink-", "acceptance-gpu-")) else 600
        assert meta["annotations"]["pulumi.com/timeoutSeconds"] == str(seconds), name
        assert spec["activeDeadlineSeconds"] == seconds and spec["backoffLimit"] == 0, name
        assert prod_plan.options[job["urn"]]["deleteBeforeReplace"] is True
        pod = worker_of(job)
        assert pod["automountServiceAccountToken"] is False, name
        if pod is not pod_spec(job):  # driven: the Job's pod is the driver, with requests too
            driver = pod_spec(job)["containers"][0]
            assert delivered(prod_plan, job, pod_spec(job), "driver.py", driver_program()) == [
                "python3",
                f"{MOUNT}/driver.py",
            ], name
            assert {"cpu", "memory"} <= set(driver["resources"]["requests"]) and "memory" in driver["resources"][
                "limits"
            ]
            assert "nvidia.com/gpu" not in json.dumps(driver["resources"])
            assert [v["name"] for v in pod_spec(job)["volumes"]] == [VOLUME]  # its program's, nothing else
            assert driver_env(job)["DEADLINE"] == str(seconds - 30), name  # the driver ends before the Job's deadline
        container = pod["containers"][0]
        # Requests on every check: none is BestEffort (a GPU check's GPUs are limits, so requests too).
        requests = container["resources"]["requests"]
        assert quantity_value(requests["cpu"]) > 0 and quantity_value(requests["memory"]) > 0, name
        assert "memory" in container["resources"]["limits"], name
        script = container["command"][3]
        assert delivered(prod_plan, job, pod, script, check_program(script)) == ["sh", f"{MOUNT}/{script}"], name
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["ADVISORY"] == "false" and env["CHECK"] == name.removeprefix("acceptance-")
    # Every check waits for the platform it exercises: the namespace's name flows into each Job (a data
    # dependency), and the namespace waits for every component.
    namespace = prod_plan.named("acceptance-namespace")
    assert namespace["urn"] in found["acceptance-monitoring"]["dependencies"]
    for component in ("ZabbixMonitoring", "CephTier", "GpuPool", "SchedulingStack", "MinioTier"):
        assert any(f":{component}$" in d for d in namespace["dependencies"]), component


def test_acceptance_objects_live_in_the_platform_namespace_only(prod_plan):
    # A team can change what is in its namespaces: no check, script, Secret or Service of the checks is there.
    teams = {ns for spaces in prod_plan.outputs["teamNamespaces"].values() for ns in spaces}
    acceptance = [
        r
        for r in prod_plan.resources
        if "acceptance" in r["name"] and isinstance(r.get("inputs", {}).get("metadata"), dict)
    ]
    namespaces = {r["inputs"]["metadata"].get("namespace") for r in acceptance} - {None}
    assert namespaces == {HOME}, namespaces
    assert not teams & namespaces
    # No scripts ConfigMap at all: each program is in its Job's pod template, which cannot change.
    assert not [
        r
        for r in prod_plan.by_type("kubernetes:core/v1:ConfigMap")
        if r["inputs"]["metadata"]["name"] == "acceptance-checks"
    ]
    home = prod_plan.named("acceptance-namespace")["inputs"]["metadata"]
    assert MANAGED_LABEL not in home.get("labels", {})  # Kueue manages no Job there unless it names a queue


def test_no_check_can_stay_suspended_past_its_deadline(prod_plan):
    """activeDeadlineSeconds does not count while a Job is suspended (Kubernetes Job docs, "Suspending a
    Job"). So: a Job without a queue is in a namespace Kueue does not manage (never suspended); a queued Job
    goes to a ClusterQueue of its own, in no cohort, whose quota admits it at once, and its deadline ends it
    before Kueue's waitForPodsReady timeout could evict and suspend it again."""
    settings = load(stack_doc("prod"))
    local_queues = {
        (q["inputs"]["metadata"]["namespace"], q["inputs"]["metadata"]["name"]): q["inputs"]["spec"]["clusterQueue"]
        for q in custom(prod_plan, "LocalQueue")
    }
    cluster_queues = {q["inputs"]["metadata"]["name"]: q["inputs"]["spec"] for q in custom(prod_plan, "ClusterQueue")}
    queued = 0
    for name, job in jobs(prod_plan).items():
        meta, spec = job["inputs"]["metadata"], job["inputs"]["spec"]
        queue = meta["labels"].get("kueue.x-k8s.io/queue-name")
        if queue is None:
            assert "suspend" not in spec and meta["namespace"] == HOME, name
            continue
        queued += 1
        cq = cluster_queues[local_queues[(meta["namespace"], queue)]]
        assert "cohortName" not in cq and "cohort" not in cq, name  # neither borrows nor reclaims
        quota = {
            r["name"]: quantity_value(r["nominalQuota"]) for r in cq["resourceGroups"][0]["flavors"][0]["resources"]
        }
        requests = pod_spec(job)["containers"][0]["resources"]["requests"]
        pods = spec.get("parallelism", 1)
        for resource, value in requests.items():
            assert quota[resource] >= pods * quantity_value(value), (name, resource)
        assert spec["activeDeadlineSeconds"] < settings.scheduling.wait_for_pods_ready.timeout_seconds, name
        # Only acceptance Jobs use that queue.
        users = [
            j
            for j in jobs(prod_plan).values()
            if j["inputs"]["metadata"]["labels"].get("kueue.x-k8s.io/queue-name") == queue
        ]
        assert len(users) == 1
    assert queued == 1  # the gang check alone goes through Kueue


def test_a_gang_check_deadline_not_shorter_than_kueues_wait_is_refused():
    def slow(raw):
        raw["acceptance"] = {"scheduling": {"timeoutSeconds": 900}}

    wanted = "acceptance.scheduling.timeoutSeconds: 900 s is not shorter than scheduling.waitForPodsReady"
    assert any(p.startswith(wanted) and "(900 s)" in p for p in problems("prod", slow))


def test_gang_check_goes_through_kueue_and_volcano(prod_plan):
    job = jobs(prod_plan)["acceptance-gang"]
    spec, pod = job["inputs"]["spec"], pod_spec(job)
    assert spec["suspend"] is True and spec["parallelism"] == spec["completions"] == GANG_PODS
    assert pod["schedulerName"] == "volcano"
    group = job["inputs"]["spec"]["template"]["metadata"]["annotations"][VOLCANO_GROUP_ANNOTATION]
    [podgroup] = [g for g in custom(prod_plan, "PodGroup") if g["inputs"]["metadata"]["name"] == group]
    assert podgroup["type"] == "kubernetes:scheduling.volcano.sh/v1beta1:PodGroup"
    assert podgroup["inputs"]["spec"] == {"minMember": GANG_PODS, "queue": "default"}
    assert podgroup["inputs"]["metadata"]["namespace"] == HOME


def test_gpu_node_check_requests_the_inventory_gpus_and_rdma_and_knows_the_driver(prod_plan):
    job = jobs(prod_plan)["acceptance-gpu-nodes"]
    pod = worker_of(job)
    # The driver pins a worker to each node once it saw the node free (not cordoned, no GPU in use), with the node's
    # GPUs, its RDMA device and what the inventory says of it.
    [first, *_] = json.loads(driver_env(job)["EACH"])
    assert first == {
        "node": "gpu-01",
        "gpus": 8,
        "env": {"EXPECTED_GPUS": "8", "EXPECTED_MODEL": "NVIDIA H100 80GB HBM3", "RDMA": "true"},
        "limits": {"rdma/ib": "1"},
    }
    assert "nodeSelector" not in pod and "nodeSelector" not in pod_spec(job)
    assert pod["containers"][0]["resources"]["limits"] == GPU_RESOURCES["gpu-node"]["limits"]  # + the node's, above
    # It waits for every node of its group to be a labelled, tainted member.
    patches = [r["urn"] for r in prod_plan.by_type("kubernetes:core/v1:NodePatch") if r["name"].startswith("gpu-")]
    assert patches and all(urn in job["dependencies"] for urn in patches)
    assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in pod["tolerations"]
    assert env_of(job)["EXPECTED_DRIVER"] == load(stack_doc("prod")).gpu.driver.version


def test_nccl_measures_every_ib_node_in_disjoint_pairs_with_a_floor_from_the_link_rate(prod_plan):
    settings = load(stack_doc("prod"))
    ib = [n for n in settings.nodes if n.gpu is not None and n.infiniband is not None]
    pairs = {n: j for n, j in jobs(prod_plan).items() if n.startswith("acceptance-nccl-ib-")}
    covered = [
        node for job in pairs.values() for node in job["inputs"]["metadata"]["name"].split("-ib-")[1].split("-gpu-")
    ]
    assert {f"gpu-{n.removeprefix('gpu-')}" for n in covered} == {n.name for n in ib}
    assert len(pairs) == (len(ib) + 1) // 2
    for name, job in pairs.items():
        spec = job["inputs"]["spec"]
        assert "kueue.x-k8s.io/queue-name" not in job["inputs"]["metadata"]["labels"] and "suspend" not in spec
        # One driver; it pins worker i to the pair's i-th node as `<job>-i` under the headless Service
        # `nccl-rendezvous`, which all pairs share and which selects the workers by the label the driver sets.
        assert "completions" not in spec and "parallelism" not in spec
        pair = driver_env(job)["NODES"].split()
        assert len(set(pair)) == 2 and driver_env(job)["RENDEZVOUS"] == name
        env = env_of(job)
        assert env["FLOOR_GBS"] == "40.0" and env["EXPECT_TRANSPORT"] == "NET/IB"  # 400 Gb/s / 8 x 0.8
        assert env["MASTER"] == f"{name}-0.nccl-rendezvous" and env["PLATEAU_BYTES"] == "256M"
    # One Service for every pair (not one each), named in every pair's driver; each pair's Job waits for it.
    [service] = [s for s in prod_plan.by_type("kubernetes:core/v1:Service") if "rendezvous" in s["name"]]
    assert {driver_env(job)["RENDEZVOUS_SERVICE"] for job in pairs.values()} == {service["inputs"]["metadata"]["name"]}
    assert all(service["urn"] in job["dependencies"] for job in pairs.values())
    assert service["inputs"]["spec"] == {
        "clusterIP": "None",
        "selector": {"ml-platform.io/rendezvous": "nccl-rendezvous"},
        "ports": [{"name": "rendezvous", "port": 29500}],
    }
    faster = jobs(
        evaluate("prod", lambda raw: raw.update(acceptance={"nccl": {"ibGeneration": "XDR", "ibFloorFraction": 0.9}}))
    )
    assert {env_of(j)["FLOOR_GBS"] for n, j in faster.items() if n.startswith("acceptance-nccl-ib-")} == {"90.0"}


@pytest.mark.parametrize(
    ("count", "expected"), [(2, [(0, 1)]), (4, [(0, 1), (2, 3)]), (5, [(0, 1), (2, 3), (4, 0)]), (1, [])]
)
def test_ib_pairs_cover_every_node(count, expected):
    nodes = list(range(count))
    assert ib_pairs(nodes) == [(nodes[a], nodes[b]) for a, b in expected]


def test_plateau_outside_the_sweep_is_refused():
    assert any(
        "acceptance.nccl" in p and "plateauFrom (2G) is larger than messageSize (1G)" in p
        for p in problems("prod", lambda raw: raw.update(acceptance={"nccl": {"plateauFrom": "2G"}}))
    )


def test_checks_are_switched_and_tuned_from_settings():
    def tune(raw):
        raw["acceptance"] = {
            "gpuNodes": {"enabled": False},
            "storage": {"advisory": True, "timeoutSeconds": 1200},
            "drift": {"enabled": False},
        }

    plan = evaluate("prod", tune)
    found = jobs(plan)
    assert not any(name.startswith("acceptance-gpu-") for name in found)
    storage = found["acceptance-storage-tier2block"]
    assert storage["inputs"]["metadata"]["annotations"]["pulumi.com/timeoutSeconds"] == "1200"
    assert env_of(storage)["ADVISORY"] == "true"
    assert plan.outputs["acceptance"]["storage-tier2block"]["advisory"] == "true"
    assert all(r["inputs"]["metadata"]["name"] != "drift-probe" for r in plan.by_type("kubernetes:apps/v1:DaemonSet"))
    assert any(
        "acceptance.storage.timeoutSeconds" in p
        for p in problems("prod", lambda raw: raw.update(acceptance={"storage": {"timeoutSeconds": 5}}))
    )


def test_unchanged_settings_rerun_nothing_and_a_change_reruns_the_checks(prod_plan):
    again = evaluate("prod")
    assert jobs(again)["acceptance-monitoring"]["inputs"] == jobs(prod_plan)["acceptance-monitoring"]["inputs"]
    rerun = evaluate("prod", lambda raw: raw.update(acceptance={"run": 1}))
    before = jobs(prod_plan)["acceptance-monitoring"]["inputs"]["spec"]["template"]["metadata"]["annotations"]
    after = jobs(rerun)["acceptance-monitoring"]["inputs"]["spec"]["template"]["metadata"]["annotations"]
    assert before != after
    assert rerun.outputs["acceptance"]["monitoring"]["run"] == "1"
    # The gang's PodGroup is one per run: a new run never lands in the PodGroup a finished run left behind.
    groups = [
        jobs(plan)["acceptance-gang"]["inputs"]["spec"]["template"]["metadata"]["annotations"][VOLCANO_GROUP_ANNOTATION]
        for plan in (prod_plan, again, rerun)
    ]
    assert groups[0] == groups[1] != groups[2]


def test_the_monitoring_check_trusts_the_zabbix_ca_and_keeps_the_token_in_a_secret(prod_plan):
    job = jobs(prod_plan)["acceptance-monitoring"]
    container = pod_spec(job)["containers"][0]
    assert container["image"] == load(stack_doc("prod")).acceptance.api_image
    env = env_of(job)
    assert env["CA_FILE"] == "/ca/ca.crt" and env["TOKEN_FILE"] == "/secret/token"
    volumes = {v["name"]: v for v in pod_spec(job)["volumes"]}
    assert volumes["ca"]["configMap"]["name"] == "acceptance-zabbix-ca"
    assert volumes["token"]["secret"]["secretName"] == "acceptance-zabbix-token"
    assert [e["name"] for e in container["env"] if "TOKEN" in e["name"]] == ["TOKEN_FILE"]  # the file, not the token


def test_images_are_pinned_settings():
    for field in ("gpuImage", "apiImage"):

        def unpinned(raw, field=field):
            raw.update(acceptance={field: "docker.io/curlimages/curl:latest"})

        assert any(f"acceptance.{field}" in p for p in problems("prod", unpinned))


def test_a_failed_check_fails_the_run_naming_the_check(monkeypatch):
    # What the engine does when the provider reports the Job failed (its pod exited 1 on a failure, 3 when skipped
    # or unverified): the run fails at that resource, named after the check and the node group; the Job's log and
    # the report name each node's result.
    echo = engine._RecordingMonitor._echo

    def failing(self, request):
        if request.type == JOB and request.name == "acceptance-gpu-nodes":
            raise RuntimeError('Job "ml-platform-acceptance/acceptance-gpu-nodes" failed: BackoffLimitExceeded')
        return echo(self, request)

    monkeypatch.setattr(engine._RecordingMonitor, "_echo", failing)
    with pytest.raises(Exception, match="acceptance-gpu-nodes"):
        evaluate("prod")

    # Advisory: the script exits 0 on a failure, the Job completes, the run goes on (the report lists it).
    monkeypatch.setattr(engine._RecordingMonitor, "_echo", echo)
    plan = evaluate("prod", lambda raw: raw.update(acceptance={"gpuNodes": {"advisory": True}}))
    assert env_of(jobs(plan)["acceptance-gpu-nodes"])["ADVISORY"] == "true"


def test_driven_checks_are_the_gpu_checks_and_tier1_and_their_driver_has_minimal_rights(prod_plan):
    driven = {n for n, j in jobs(prod_plan).items() if pod_spec(j).get("serviceAccountName") == SERVICE_ACCOUNT}
    gpu = {n for n in jobs(prod_plan) if n.startswith(("acceptance-gpu-", "acceptance-nccl-"))}
    assert driven == gpu | {"acceptance-storage-tier1"}
    for name in driven:
        assert pod_spec(jobs(prod_plan)[name])["automountServiceAccountToken"] is True
    # Namespaced rights in the platform namespace only: its own worker pods and their logs, nothing else.
    [role] = [
        r
        for r in prod_plan.by_type("kubernetes:rbac.authorization.k8s.io/v1:Role")
        if r["inputs"]["metadata"].get("namespace") == HOME
    ]
    assert role["inputs"]["metadata"] == {"name": SERVICE_ACCOUNT, "namespace": HOME}
    assert role["inputs"]["rules"] == NAMESPACE_RULES
    assert {v for r in NAMESPACE_RULES for v in r["verbs"]} == {"create", "get", "delete"}
    assert {res for r in NAMESPACE_RULES for res in r["resources"]} == {"pods", "pods/log"}
    # Cluster-wide: reads only (a Node, the pods bound to it, the ClusterPolicy), no write, no Secret.
    [cluster_role] = [
        r
        for r in prod_plan.by_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")
        if r["inputs"]["metadata"]["name"] == f"ml-platform-{SERVICE_ACCOUNT}"
    ]
    assert cluster_role["inputs"]["rules"] == CLUSTER_RULES
    assert {v for r in CLUSTER_RULES for v in r["verbs"]} <= {"get", "list"}
    assert {res for r in CLUSTER_RULES for res in r["resources"]} == {
        "nodes",
        "pods",
        "clusterpolicies",
        "persistentvolumes",
    }
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        [binding] = [
            b
            for b in prod_plan.by_type(f"kubernetes:rbac.authorization.k8s.io/v1:{kind}")
            if SERVICE_ACCOUNT in b["inputs"]["metadata"]["name"]
        ]
        assert binding["inputs"]["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": HOME}]
    [account] = [
        a
        for a in prod_plan.by_type("kubernetes:core/v1:ServiceAccount")
        if a["inputs"]["metadata"]["name"] == SERVICE_ACCOUNT
    ]
    assert account["inputs"]["metadata"]["namespace"] == HOME
    # Every driven Job waits for its rights.
    binding_urns = {
        b["urn"] for b in prod_plan.resources if b["type"].endswith("RoleBinding") and "driver" in b["name"]
    }
    for name in driven:
        assert binding_urns <= set(jobs(prod_plan)[name]["dependencies"]), name


def test_the_tier1_check_claims_its_nvme_in_a_worker_the_driver_deletes(prod_plan):
    # The claim is a generic ephemeral volume of the worker pod (owned by it): when the driver deletes the worker
    # at the end of the check (tests/acceptance/test_driver.py), the claim goes, and the NVMe is free again.
    # Pulumi manages the Job only: the worker and its claim are not in the state, so nothing drifts.
    job = jobs(prod_plan)["acceptance-storage-tier1"]
    worker = worker_of(job)
    assert worker is not pod_spec(job)
    [volume] = [v for v in worker["volumes"] if v["name"] != VOLUME]  # and its program's
    template = volume["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert template["storageClassName"] == prod_plan.outputs["storageClasses"]["tier1"]
    assert worker["nodeSelector"] == {"ml-platform.io/role": "gpu"}
    assert [v["name"] for v in pod_spec(job)["volumes"]] == [VOLUME]  # the driver claims nothing
    assert driver_env(job)["NODES"] == ""  # no GPU taken: not skipped for a busy node
    claims = prod_plan.by_type("kubernetes:core/v1:PersistentVolumeClaim")
    assert not [c for c in claims if c["inputs"]["metadata"].get("namespace") == HOME]


def test_the_monitoring_check_holds_a_read_only_api_users_token_a_secret_end_to_end(prod_plan):
    # The monitoring component makes a role (API: an allow list of read methods), a user group reading the host
    # groups of the hosts the check reads, a user and its token; the check's Secret holds that token.
    dynamic = "pulumi-python:dynamic/zabbix:{}"
    [role] = prod_plan.by_type(dynamic.format("UserRole"))
    assert role["inputs"]["spec"] == {"name": READER, "type": 1, "api": sorted(READ_METHODS)}
    assert all(m.endswith(".get") for m in READ_METHODS)
    [group] = [g for g in prod_plan.by_type(dynamic.format("UserGroup")) if g["inputs"]["spec"]["name"] == READER]
    settings = load(stack_doc("prod"))
    read = {g for n in settings.nodes for g in node_groups(n)} | {"ml-platform/nas"}
    assert group["inputs"]["spec"]["host_groups"] == sorted(read)
    [user] = [u for u in prod_plan.by_type(dynamic.format("User")) if u["inputs"]["spec"]["username"] == READER]
    assert user["inputs"]["spec"] == {"username": READER, "role": READER, "group": READER}  # no media, no password
    [token] = prod_plan.by_type(dynamic.format("ApiToken"))
    assert prod_plan.options[token["urn"]]["additionalSecretOutputs"] == ["token"]
    assert token["inputs"]["connection"] == "[secret]" and user["urn"] in token["dependencies"]
    secret = prod_plan.named("acceptance-zabbix-token")
    assert secret["inputs"]["stringData"] == "[secret]" or secret["inputs"]["stringData"]["token"] == "[secret]"
    # The check's token comes from the reader's token, not from the program's Super admin bootstrap.
    assert token["urn"] in secret["dependencies"]
    assert not [d for d in secret["dependencies"] if d.endswith("::monitoring-api-bootstrap")]
    # No monitoring check, no reader.
    off = evaluate("prod", lambda raw: raw.update(acceptance={"monitoring": {"enabled": False}}))
    assert not off.by_type(dynamic.format("ApiToken")) and not off.by_type(dynamic.format("UserRole"))


def test_the_token_provider_is_pickled_under_the_providers_state_module():
    # Pulumi pickles a dynamic provider by reference: the new one lives where deployed states find the others.
    import pickle

    from components import zabbix_objects
    from components.monitoring.objects import STATE_MODULE
    from components.monitoring.reader import ApiTokenProvider

    assert ApiTokenProvider.__module__ == STATE_MODULE == zabbix_objects.__name__
    assert zabbix_objects.ApiTokenProvider is ApiTokenProvider
    assert STATE_MODULE.encode() in pickle.dumps(ApiTokenProvider())
