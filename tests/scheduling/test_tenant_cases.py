"""A team member's manifests and calls, judged by every admission policy the prod plan binds to the namespace
(cel-python), and the rights computed from the rendered RBAC plus the Roles operators create there. Each refused
case names its rule; the allowed cases show the policies do not refuse ordinary work.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.scheduling import surface
from tests.scheduling.test_surface import judge
from tests.scheduling.test_tenancy import _can, account_identity, effective_rights

CI = "system:serviceaccount:llm-train:llm-ci"
LIMITS = {"limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}}


def container(**extra: Any) -> dict[str, Any]:
    return {"name": "main", "image": "nvcr.io/nvidia/pytorch:25.01-py3", "resources": copy.deepcopy(LIMITS), **extra}


def pod_spec(**extra: Any) -> dict[str, Any]:
    return {"restartPolicy": "Never", "containers": [container()], **extra}


def job(spec: dict[str, Any] | None = None, meta: dict[str, Any] | None = None, **job_spec: Any) -> dict[str, Any]:
    template = {"metadata": meta or {}, "spec": spec or pod_spec()}
    return {"metadata": {"name": "train"}, "spec": {"suspend": True, "template": template, **job_spec}}


def pod(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", **meta}, "spec": spec or pod_spec()}


def raycluster(**spec: Any) -> dict[str, Any]:
    template = {"spec": pod_spec()}
    return {
        "metadata": {"name": "rc"},
        "spec": {
            "headGroupSpec": {"template": copy.deepcopy(template)},
            "workerGroupSpecs": [{"groupName": "w", "template": copy.deepcopy(template)}],
            **spec,
        },
    }


def rules(refusals: list[str]) -> set[str]:
    return {r.split("rule ", 1)[1].split(":")[0].split(" ")[0] for r in refusals if "rule " in r}


def test_ordinary_work_is_admitted(prod_plan):
    """A GPU Job as a team submits it, with the fields the API server defaults in, and its pod: nothing refused."""
    spec = pod_spec(hostNetwork=False, hostPID=False, hostIPC=False, schedulerName="volcano", dnsPolicy="ClusterFirst")
    spec["containers"][0]["env"] = [
        {"name": "CUDA_VISIBLE_DEVICES", "value": "0"},
        {"name": "NCCL_DEBUG", "value": "INFO"},
    ]
    spec["volumes"] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "shm", "emptyDir": {}},
    ]
    meta = {"labels": {"app.kubernetes.io/name": "train", "kueue.x-k8s.io/queue-name": "default"}}
    assert judge(prod_plan, job(spec, meta, parallelism=2), "jobs", "batch") == []
    assert judge(prod_plan, pod(spec, labels=meta["labels"]), "pods") == []
    assert judge(prod_plan, {"metadata": {"name": "c"}, "data": {"CONFIG": "x"}}, "configmaps") == []
    assert judge(prod_plan, {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}, "services") == []
    assert judge(prod_plan, raycluster(), "rayclusters", "ray.io") == []
    # A plain pod as Kueue's mutating webhook leaves it (label, gate, pod-group hash), and a TrainJob with the
    # managedBy its CRD defaults: both as the admission policies see them, after mutation and defaulting.
    kueued = pod(
        pod_spec(schedulingGates=[{"name": "kueue.x-k8s.io/admission"}]),
        labels={"kueue.x-k8s.io/managed": "true", "kueue.x-k8s.io/queue-name": "default"},
        annotations={"kueue.x-k8s.io/role-hash": "abc", "kueue.x-k8s.io/pod-group-total-count": "2"},
    )
    assert judge(prod_plan, kueued, "pods") == []
    trainjob = {
        "metadata": {"name": "tj"},
        "spec": {
            "managedBy": "trainer.kubeflow.org/trainjob-controller",
            "suspend": False,
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"resourcesPerNode": {"limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}}},
        },
    }
    assert judge(prod_plan, trainjob, "trainjobs", "trainer.kubeflow.org") == []
    trainjob["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    assert "managed-by" in rules(judge(prod_plan, trainjob, "trainjobs", "trainer.kubeflow.org"))


def _gpu_job() -> dict[str, Any]:
    """The issue's Job: the nvidia runtime class, a CUDA image's variable, no nvidia.com/gpu."""
    spec = pod_spec(runtimeClassName="nvidia")
    spec["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    spec["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    return job(spec)


GPU_CASES = {
    "the issue's Job": (_gpu_job(), "jobs", "batch"),
    # Cases the issue does not name:
    "capabilities variable in a JobSet": (
        {
            "metadata": {"name": "js"},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "w",
                        "template": {
                            "spec": {
                                "template": {
                                    "spec": pod_spec(
                                        containers=[
                                            container(env=[{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"}])
                                        ]
                                    )
                                }
                            }
                        },
                    }
                ]
            },
        },
        "jobsets",
        "jobset.x-k8s.io",
    ),
    "envFrom prefix that builds NVIDIA_ in a RayCluster worker": (
        raycluster(
            workerGroupSpecs=[
                {
                    "groupName": "w",
                    "template": {
                        "spec": pod_spec(
                            containers=[container(envFrom=[{"prefix": "NVI", "configMapRef": {"name": "c"}}])]
                        )
                    },
                }
            ]
        ),
        "rayclusters",
        "ray.io",
    ),
    "CDI annotation on a RayJob's head template": (
        {
            "metadata": {"name": "rj"},
            "spec": {
                "submitterPodTemplate": {"spec": pod_spec()},
                "rayClusterSpec": {
                    "headGroupSpec": {
                        "template": {
                            "metadata": {"annotations": {"cdi.k8s.io/gpus": "nvidia.com/gpu=all"}},
                            "spec": pod_spec(),
                        }
                    }
                },
            },
        },
        "rayjobs",
        "ray.io",
    ),
    "TrainJob trainer variable": (
        {
            "metadata": {"name": "tj"},
            "spec": {
                "trainer": {
                    "resourcesPerNode": {"limits": {"cpu": "1", "memory": "1Gi"}},
                    "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                }
            },
        },
        "trainjobs",
        "trainer.kubeflow.org",
    ),
    "ConfigMap carrying the variable for envFrom": (
        {"metadata": {"name": "c"}, "data": {"NVIDIA_VISIBLE_DEVICES": "all"}},
        "configmaps",
        "",
    ),
    "DRA claim in a pod": (pod(pod_spec(resourceClaims=[{"name": "gpu", "resourceClaimName": "x"}])), "pods", ""),
    "NRI device annotation on a pod": (
        pod(annotations={"nvidia.cdi.k8s.io/container.main": "nvidia.com/gpu=all"}),
        "pods",
        "",
    ),
}


@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_gpus_only_through_the_device_plugin(prod_plan, case):
    obj, resource, group = GPU_CASES[case]
    refusals = judge(prod_plan, obj, resource, group)
    assert rules(refusals) & {"gpu-devices", "runtime-env", "device-claims", "controller-key"}, (case, refusals)
    # Whoever creates the pod (the job controller from a template, an operator): the pod-devices policy judges it.
    if resource == "jobs":
        made = pod(obj["spec"]["template"]["spec"])
        assert any(
            "pod-devices" in r
            for r in judge(prod_plan, made, "pods", user="system:serviceaccount:kube-system:job-controller")
        )


REFUSED = {
    "nfs volume mounted by the node (reaches the NAS past NetworkPolicy)": (
        job(pod_spec(volumes=[{"name": "n", "nfs": {"server": "10.0.0.5", "path": "/"}}])),
        "jobs",
        "batch",
        "volumes",
    ),
    "gitRepo volume": (pod(pod_spec(volumes=[{"name": "g", "gitRepo": {"repository": "x"}}])), "pods", "", "volumes"),
    "inline CSI volume": (pod(pod_spec(volumes=[{"name": "c", "csi": {"driver": "x"}}])), "pods", "", "volumes"),
    "hostPort": (
        pod(pod_spec(containers=[container(ports=[{"containerPort": 80, "hostPort": 80}])])),
        "pods",
        "",
        "host-namespaces",
    ),
    "hostNetwork in a Job template": (job(pod_spec(hostNetwork=True)), "jobs", "batch", "host-namespaces"),
    "another scheduler": (pod(pod_spec(schedulerName="my-scheduler")), "pods", "", "scheduler"),
    "Job handed to another controller": (job(managedBy="example.com/other"), "jobs", "batch", "managed-by"),
    "Job with a hand-written selector": (job(manualSelector=True), "jobs", "batch", "own-pods"),
    "KubeRay ingress": (
        raycluster(headGroupSpec={"enableIngress": True, "template": {"spec": pod_spec()}}),
        "rayclusters",
        "ray.io",
        "no-ingress",
    ),
    "KubeRay NetworkPolicy": (raycluster(networkPolicy={"mode": "DenyAll"}), "rayclusters", "ray.io", "no-ingress"),
    "RayJob on an existing cluster": (
        {"metadata": {"name": "r"}, "spec": {"clusterSelector": {"a": "b"}}},
        "rayjobs",
        "ray.io",
        "managed-by",
    ),
    "autoscaler without limits": (
        raycluster(enableInTreeAutoscaling=True),
        "rayclusters",
        "ray.io",
        "operator-injected",
    ),
    "history collector without limits": (
        raycluster(historyServerOptions={"collectorOptions": {"image": "x"}}),
        "rayclusters",
        "ray.io",
        "operator-injected",
    ),
    "Kueue prebuilt workload label": (job(), "jobs", "batch", "controller-key"),
    "another team's IPoIB network": (
        pod(annotations={"k8s.v1.cni.cncf.io/networks": "vision/ib-net-vision"}),
        "pods",
        "",
        "team-network",
    ),
    "the networks annotation in its JSON form": (
        pod(annotations={"k8s.v1.cni.cncf.io/networks": '[{"name":"x"}]'}),
        "pods",
        "",
        "team-network",
    ),
    "ExternalName Service": (
        {"metadata": {"name": "s"}, "spec": {"type": "ExternalName", "externalName": "minio.example"}},
        "services",
        "",
        "services",
    ),
    "NodePort Service": (
        {"metadata": {"name": "s"}, "spec": {"type": "NodePort", "ports": [{"port": 1}]}},
        "services",
        "",
        "services",
    ),
    "Secret key for envFrom": (
        {"metadata": {"name": "s"}, "stringData": {"NVIDIA_REQUIRE_CUDA": "x"}},
        "secrets",
        "",
        "runtime-env",
    ),
}
REFUSED["Kueue prebuilt workload label"][0]["metadata"]["labels"] = {"kueue.x-k8s.io/prebuilt-workload-name": "w"}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_the_classification_refuses_is_refused(prod_plan, case):
    obj, resource, group, rule = REFUSED[case]
    refusals = judge(prod_plan, obj, resource, group)
    assert rule in rules(refusals), (case, refusals)


def test_operator_granted_resize_and_other_subresources_are_refused(prod_plan):
    """KubeRay's autoscaler Role grants pods/resize to the head's ServiceAccount in the team namespace; a team pod
    may run as that account. RBAC (rendered rules plus the operator's Role) lets it; admission refuses it."""
    autoscaler = account_identity("llm-train", "rc")
    rbac = effective_rights(prod_plan, *autoscaler) | {
        ("llm-train", group, resource, verb) for group, resource, verb in surface.OPERATOR_GRANTS["kuberay"]
    }
    assert _can(rbac, "llm-train", "", "pods/resize", "patch")
    for sub in ("resize", "ephemeralcontainers", "eviction", "attach", "binding"):
        op = {"attach": "CONNECT", "eviction": "CREATE", "binding": "CREATE"}.get(sub, "UPDATE")
        for user, groups in (autoscaler, (CI, ()), ("jane", ("oidc:ml-llm-engineers",))):
            refusals = judge(prod_plan, pod(), "pods", operation=op, sub=sub, user=user, groups=tuple(groups))
            assert "subresource" in rules(refusals), (sub, user, refusals)
    # Kubelet or a platform controller is not a team identity: not this policy's.
    assert judge(prod_plan, pod(), "pods", operation="UPDATE", sub="resize", user="system:node:gpu-01") == []


def test_a_team_identity_cannot_unsuspend_or_ungate(prod_plan):
    queued = job()
    running = copy.deepcopy(queued)
    running["spec"]["suspend"] = False
    refusals = judge(prod_plan, running, "jobs", "batch", operation="UPDATE", old=queued)
    assert "kueue-suspend" in rules(refusals)
    for kind, group, obj in (
        ("rayclusters", "ray.io", raycluster(suspend=True)),
        ("jobsets", "jobset.x-k8s.io", {"metadata": {"name": "j"}, "spec": {"suspend": True}}),
    ):
        flipped = copy.deepcopy(obj)
        flipped["spec"]["suspend"] = False
        assert "kueue-suspend" in rules(judge(prod_plan, flipped, kind, group, operation="UPDATE", old=obj)), kind
    # Kueue itself unsuspends: not refused.
    assert (
        judge(
            prod_plan,
            running,
            "jobs",
            "batch",
            operation="UPDATE",
            old=queued,
            user="system:serviceaccount:kueue-system:kueue-controller-manager",
        )
        == []
    )
    gated = pod(pod_spec(schedulingGates=[{"name": "kueue.x-k8s.io/admission"}]))
    assert "kueue-gates" in rules(judge(prod_plan, pod(), "pods", operation="UPDATE", old=gated))


def test_rke2s_bundled_ingress_is_off_unless_the_settings_enable_it():
    """An Ingress a team (or KubeRay for it) made would be served from kube-system, past every team NetworkPolicy."""
    from components.cluster.config import rke2_config
    from settings import load
    from tests.conftest import stack_doc

    settings = load(stack_doc("prod"))
    server = next(n for n in settings.nodes if n.control_plane)
    config = rke2_config(server, True, settings.cluster, settings.network)
    assert config["disable"] == ["rke2-ingress-nginx", "rke2-traefik"]
    enabled = settings.cluster.model_copy(update={"bundled_ingress": True})
    assert "disable" not in rke2_config(server, True, enabled, settings.network)
    agent = next(n for n in settings.nodes if not n.control_plane)
    assert "disable" not in rke2_config(agent, False, settings.cluster, settings.network)


def test_a_team_attaches_only_its_own_ipoib_networks(prod_plan):
    nets = {
        r["inputs"]["metadata"]["name"]: r["inputs"]["spec"]
        for r in prod_plan.by_type("kubernetes:mellanox.com/v1alpha1:IPoIBNetwork")
    }
    pools = {
        r["inputs"]["metadata"]["name"]: r["inputs"]["spec"]["subnet"]
        for r in prod_plan.by_type("kubernetes:nv-ipam.nvidia.com/v1alpha1:IPPool")
    }
    # A pool per team with a range, a network per namespace of that team, in that namespace, on that pool.
    assert pools == {"ib-net": "10.31.0.0/16", "ib-net-llm": "10.34.0.0/20", "ib-net-vision": "10.34.16.0/20"}
    for ns, team in (("llm-train", "llm"), ("llm-eval", "llm"), ("vision", "vision")):
        assert nets[f"ib-net-{ns}"]["networkNamespace"] == ns
        assert f'"poolName": "ib-net-{team}"' in nets[f"ib-net-{ns}"]["ipam"]
    admitted = ("ib-net-llm-train", "llm-eval/ib-net-llm-eval@ib1", "ib-net-llm-train, llm-train/ib-net-llm-train")
    for value in admitted:
        assert judge(prod_plan, pod(annotations={"k8s.v1.cni.cncf.io/networks": value}), "pods") == [], value
    refused = ("default/ib-net", "ib-net", "vision/ib-net-vision", "ib-net-llm-train,default/ib-net", "ib-net-vision")
    for value in refused:
        refusals = judge(prod_plan, pod(annotations={"k8s.v1.cni.cncf.io/networks": value}), "pods")
        assert "team-network" in rules(refusals), value
    # A team without a range has no network at all.
    research = pod(annotations={"k8s.v1.cni.cncf.io/networks": "research/ib-net-research"})
    assert "team-network" in rules(
        judge(prod_plan, research, "pods", ns="research", user="system:serviceaccount:research:x")
    )


def test_rdma_slots_are_capped_per_pod_and_in_the_quota(prod_plan):
    def rdma_pod(limits):
        return pod(pod_spec(containers=[container(resources={"limits": limits})]))

    gpu = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}
    assert judge(prod_plan, rdma_pod({**gpu, "rdma/ib": "1"}), "pods") == []
    for limits in ({"cpu": "1", "memory": "1Gi", "rdma/ib": "1"}, {**gpu, "rdma/ib": "2"}):
        assert "gpu-devices" in rules(judge(prod_plan, rdma_pod(limits), "pods")), limits
    quotas = {
        (q["inputs"]["metadata"]["namespace"]): q["inputs"]["spec"]["hard"]
        for q in prod_plan.by_type("kubernetes:core/v1:ResourceQuota")
        if q["inputs"]["metadata"]["name"] == "compute"
    }
    assert quotas["llm-train"]["requests.rdma/ib"] == quotas["llm-train"]["requests.nvidia.com/gpu"]
    assert quotas["research"]["requests.rdma/ib"] == "0"  # no rdma: no slot
    objects = next(
        q["inputs"]["spec"]["hard"]
        for q in prod_plan.by_type("kubernetes:core/v1:ResourceQuota")
        if q["inputs"]["metadata"]["name"] == "objects"
    )
    for counted in ("count/services", "count/configmaps", "count/secrets", "count/events", "count/jobs.batch"):
        assert int(objects[counted]) > 0, counted


BAD_SETTINGS = {
    "a team range inside the platform's IPoIB range": (
        lambda raw: raw["scheduling"]["teams"][2].update(ipoibRange="10.31.128.0/20"),
        "scheduling.teams[2].ipoibRange: 10.31.128.0/20 overlaps 10.31.0.0/16 of network.infiniband.ipoibNetwork.range",
    ),
    "two teams' ranges overlap": (
        lambda raw: raw["scheduling"]["teams"][2].update(ipoibRange="10.34.8.0/21"),
        "scheduling.teams[2].ipoibRange: 10.34.8.0/21 overlaps 10.34.0.0/20 of scheduling.teams[0].ipoibRange",
    ),
    "a range too small for a block per GPU node": (
        lambda raw: raw["scheduling"]["teams"][2].update(ipoibRange="10.35.0.0/24"),
        "fewer than one block of network.infiniband.ipoibNetwork.perNodeBlockSize (256) for each of the 15 GPU nodes",
    ),
    "a web Ingress nothing serves": (
        lambda raw: raw["monitoring"]["web"].update(ingressHost="zabbix.example.org", nodePort=None),
        "monitoring.web.ingressHost: no ingress controller serves it",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SETTINGS))
def test_bad_tenant_network_settings_name_the_field_and_the_fix(case):
    from tests.conftest import problems

    mutate, message = BAD_SETTINGS[case]
    found = problems("prod", mutate)
    assert any(message in p for p in found), found


def test_controller_keys_on_services_and_operator_annotation_maps(prod_plan):
    service = {"metadata": {"name": "s", "annotations": {"service.cilium.io/global": "true"}}, "spec": {}}
    assert "controller-key" in rules(judge(prod_plan, service, "services"))
    head = raycluster(headServiceAnnotations={"service.cilium.io/shared": "true"})
    assert "controller-key" in rules(judge(prod_plan, head, "rayclusters", "ray.io"))
    service_template = raycluster()
    service_template["spec"]["headGroupSpec"]["headService"] = {
        "metadata": {"annotations": {"service.cilium.io/global": "true"}}
    }
    assert "controller-key" in rules(judge(prod_plan, service_template, "rayclusters", "ray.io"))
    plain = raycluster(headServiceAnnotations={"example.com/owner": "me"})
    assert judge(prod_plan, plain, "rayclusters", "ray.io") == []


def test_a_template_naming_another_network_is_refused_at_submission(prod_plan):
    """Not only the pod KubeRay would make: the RayCluster itself, so that the operator does not loop on it."""
    rc = raycluster()
    rc["spec"]["workerGroupSpecs"][0]["template"]["metadata"] = {
        "annotations": {"k8s.v1.cni.cncf.io/networks": "default/ib-net"}
    }
    assert "team-network" in rules(judge(prod_plan, rc, "rayclusters", "ray.io"))
    rc["spec"]["workerGroupSpecs"][0]["template"]["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] = (
        "ib-net-llm-train"
    )
    assert judge(prod_plan, rc, "rayclusters", "ray.io") == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        # Multus's default network: the pod's main interface on another team's (or the platform's) IPoIB network.
        ("v1.multus-cni.io/default-network", "vision/ib-net-vision"),
        # Volcano puts the pod in another PodGroup of the namespace.
        ("scheduling.k8s.io/group-name", "someone-elses-gang"),
        # The bandwidth CNI plugin, and Calico's chosen address.
        ("kubernetes.io/egress-bandwidth", "100G"),
        ("cni.projectcalico.org/ipAddrs", '["10.42.0.10"]'),
    ],
)
def test_keys_in_kubernetes_or_a_platform_components_domain_are_refused_unless_allowed(prod_plan, key, value):
    """The keys controllers act on are judged by domain (Kubernetes' own and every component's the platform runs),
    not by a list of the ones someone thought of: a key there is refused unless allowed by name."""
    for meta in ({"annotations": {key: value}}, {"labels": {key: "x"}}):
        assert "controller-key" in rules(judge(prod_plan, job(meta=meta), "jobs", "batch")), meta
        assert "controller-key" in rules(judge(prod_plan, pod(**meta), "pods")), meta
    # A team's own domain and Kubernetes' recommended labels stay the team's.
    labels = {"example.com/experiment": "42", "app.kubernetes.io/part-of": "llm", "app.kubernetes.io/version": "1"}
    assert judge(prod_plan, job(meta={"labels": labels}), "jobs", "batch") == []


def test_an_rdma_slot_needs_a_gpu_in_the_same_container_not_a_zero(prod_plan):
    spec = pod_spec()
    spec["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": "0", "rdma/ib": "1"})
    assert "gpu-devices" in rules(judge(prod_plan, pod(spec), "pods"))
    spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    assert judge(prod_plan, pod(spec), "pods") == []


def test_pods_are_counted_per_team_namespace(prod_plan):
    """A RayCluster of 100000 tiny workers or an Indexed Job of that parallelism would store a pod each (held at
    Kueue's gate, each with a Volcano PodGroup) before Kueue refuses: the namespace's pods are capped."""
    quotas = [r for r in prod_plan.by_type("kubernetes:core/v1:ResourceQuota") if r["name"].endswith("-objects")]
    assert quotas and all(int(q["inputs"]["spec"]["hard"]["pods"]) > 0 for q in quotas)
