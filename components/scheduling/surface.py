"""What a team may set: every field of the objects it writes, classified as allowed, constrained (by a named
rule) or refused. Data only; `admission.py` turns the refusals and constraints into admission policy, and
docs/teams.md's tenant matrix is generated from it (`tenant_matrix`).

Derived, not enumerated: tests/scheduling/test_surface.py walks the pinned schemas (Kubernetes' own, through
kubernetes-validate at the cluster's minor, and the operators' CRDs in the upstream reference) and fails on any
field, pod-template path, environment path or operator grant that this module does not classify. A Kubernetes
or operator bump that adds a field fails until someone decides what it is.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from components.scheduling.paths import (  # noqa: F401 (part of the classification's data)
    ANNOTATION_MAPS,
    EXTRA_ENV,
    INJECTED_CONTAINERS,
    METADATA_ONLY,
    METADATA_PATHS,
    PARTIAL_POD_SPECS,
    POD_SPECS,
    RAY_CLUSTER_SPECS,
)


class Verdict(NamedTuple):
    verdict: str  # "allowed", "constrained" or "refused"
    rule: str  # the rule (a key of RULES)


def allowed(rule: str = "allowed") -> Verdict:
    return Verdict("allowed", rule)


def constrained(rule: str) -> Verdict:
    return Verdict("constrained", rule)


def refused(rule: str) -> Verdict:
    return Verdict("refused", rule)


A = allowed()

# Each rule, and why: the message admission gives names the rule, docs/teams.md explains it.
RULES = {
    "allowed": "harmless to other teams and the platform",
    "placement": "policy team-placement: no servers, storage hosts or named nodes",
    "resources": "policy <team>-workload-resources: CPU and memory limits, requests equal to them (what Kueue and the "
    "quota count)",
    "priority": "policy <team>-priority-classes: Kueue priority by label only, no PriorityClass",
    "pod-security": "the namespace's Pod Security Standard (baseline or restricted) judges it when the pod is created",
    "gpu-devices": "GPUs only through the device plugin (nvidia.com/gpu, counted by Kueue and the quota): the NVIDIA "
    "runtime classes, the toolkit's variables and CDI device annotations hand out GPUs nobody counted",
    "runtime-env": "no NVIDIA_* variable (env, envFrom prefixes, ConfigMap and Secret keys): the container toolkit "
    "reads them (NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES, NVIDIA_REQUIRE_*, NVIDIA_MIG_*, "
    "NVIDIA_IMEX_CHANNELS)",
    "volumes": "only volume sources that stay inside the namespace (PVC, ephemeral, configMap, secret, projected, "
    "downwardAPI, emptyDir, image): in-tree network and host volumes are mounted by the node, outside every "
    "NetworkPolicy",
    "host-namespaces": "no host network, PID or IPC namespace, no host port",
    "device-claims": "no DRA ResourceClaims: devices outside Kueue and the quota",
    "team-identity": "every ServiceAccount of the team's namespaces is the team for the team's policies",
    "scheduler": "the default scheduler or Volcano only",
    "kueue-suspend": "policy <team>-tenant-surface: a team identity may not unsuspend (Kueue admits by unsuspending)",
    "kueue-gates": "policy <team>-tenant-surface: a team identity may not remove a pod's scheduling gates (Kueue's "
    "admission gate)",
    "managed-by": "no managedBy: a workload handed to another controller is not queued by Kueue",
    "own-pods": "no hand-written selector: a Job adopts only the pods it makes",
    "team-network": "only the team's own IPoIB network (annotation k8s.v1.cni.cncf.io/networks)",
    "services": "policy team-services: ClusterIP or headless Services only, no external IPs or names",
    "no-ingress": "no Ingress or NetworkPolicy made for the team by an operator (KubeRay enableIngress, networkPolicy)",
    "operator-injected": "a container an operator adds from these fields: its resources, env and image are judged "
    "like the team's own",
    "controller-key": "a key some controller acts on: only those listed as allowed",
    "subresource": "a subresource no team identity may call, whoever granted it",
    "platform-runtime": "a runtime the platform installs (ClusterTrainingRuntime)",
}

# ---------------------------------------------------------------------------------------------
# Kubernetes core/v1 (kubernetes-validate's schemas at the cluster's minor)
# ---------------------------------------------------------------------------------------------

POD_SPEC = {
    "activeDeadlineSeconds": A,
    "affinity": constrained("placement"),
    "automountServiceAccountToken": A,
    "containers": constrained("resources"),
    "dnsConfig": A,
    "dnsPolicy": A,
    "enableServiceLinks": A,
    "ephemeralContainers": refused("subresource"),
    "hostAliases": A,
    "hostIPC": refused("host-namespaces"),
    "hostNetwork": refused("host-namespaces"),
    "hostPID": refused("host-namespaces"),
    "hostUsers": A,
    "hostname": A,
    "hostnameOverride": A,
    "imagePullSecrets": A,
    "initContainers": constrained("resources"),
    "nodeName": constrained("placement"),
    "nodeSelector": constrained("placement"),
    "os": A,
    "overhead": refused("gpu-devices"),  # set from a RuntimeClass only
    "preemptionPolicy": A,
    "priority": constrained("priority"),  # the Priority admission plugin sets it from the class
    "priorityClassName": constrained("priority"),
    "readinessGates": A,
    "resourceClaims": refused("device-claims"),
    "resources": constrained("resources"),
    "restartPolicy": A,
    "runtimeClassName": refused("gpu-devices"),
    "schedulerName": constrained("scheduler"),
    "schedulingGates": constrained("kueue-gates"),
    "securityContext": constrained("pod-security"),
    "serviceAccount": constrained("team-identity"),
    "serviceAccountName": constrained("team-identity"),
    "setHostnameAsFQDN": A,
    "shareProcessNamespace": A,
    "subdomain": A,
    "terminationGracePeriodSeconds": A,
    "tolerations": constrained("placement"),
    "topologySpreadConstraints": A,
    "volumes": constrained("volumes"),
    "workloadRef": refused("kueue-gates"),  # gang scheduling by the Workload API, outside Kueue's admission
}

# Pod spec fields of a newer Kubernetes than the cluster's, that an operator's CRD already carries (JobSet v0.12.0:
# `schedulingGroup`, the Workload API's gang scheduling, outside Kueue's admission). The cluster drops them; refused.
NEWER_POD_SPEC = {"schedulingGroup": refused("kueue-gates")}

CONTAINER = {
    "args": A,
    "command": A,
    "env": constrained("runtime-env"),
    "envFrom": constrained("runtime-env"),
    "image": A,
    "imagePullPolicy": A,
    "lifecycle": A,
    "livenessProbe": A,
    "name": A,
    "ports": constrained("host-namespaces"),  # hostPort, hostIP
    "readinessProbe": A,
    "resizePolicy": A,
    "resources": constrained("resources"),  # and no `claims` (device-claims)
    "restartPolicy": A,
    "restartPolicyRules": A,
    "securityContext": constrained("pod-security"),
    "startupProbe": A,
    "stdin": A,
    "stdinOnce": A,
    "terminationMessagePath": A,
    "terminationMessagePolicy": A,
    "tty": A,
    "volumeDevices": A,
    "volumeMounts": A,
    "workingDir": A,
}
# Ephemeral containers come only through the pods/ephemeralcontainers subresource, which no team identity may call.
EPHEMERAL_CONTAINER = {field: refused("subresource") for field in [*CONTAINER, "targetContainerName"]}

VOLUME = {
    "name": A,
    **{s: A for s in ("configMap", "secret", "projected", "downwardAPI", "emptyDir", "ephemeral", "image")},
    "persistentVolumeClaim": A,
    **{
        s: refused("volumes")
        for s in (
            "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "csi", "fc", "flexVolume",
            "flocker", "gcePersistentDisk", "gitRepo", "glusterfs", "hostPath", "iscsi", "nfs",
            "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos", "vsphereVolume",
        )
    },
}  # fmt: skip

# Fields of a refused-when-set kind whose harmless value the API server may default in: refused means "unset or this".
HARMLESS = {"hostIPC": "false", "hostNetwork": "false", "hostPID": "false", "runtimeClassName": "''"}
SCHEDULERS = ["default-scheduler", "volcano"]

JOB_SPEC = {
    "activeDeadlineSeconds": A,
    "backoffLimit": A,
    "backoffLimitPerIndex": A,
    "completionMode": A,
    "completions": A,
    "managedBy": refused("managed-by"),
    "manualSelector": refused("own-pods"),
    "maxFailedIndexes": A,
    "parallelism": A,
    "podFailurePolicy": A,
    "podReplacementPolicy": A,
    "selector": constrained("own-pods"),  # the API server generates it unless manualSelector
    "successPolicy": A,
    "suspend": constrained("kueue-suspend"),
    "template": constrained("resources"),
    "ttlSecondsAfterFinished": A,
}
CRON_JOB_SPEC = {
    "concurrencyPolicy": A,
    "failedJobsHistoryLimit": A,
    "jobTemplate": constrained("resources"),
    "schedule": A,
    "startingDeadlineSeconds": A,
    "successfulJobsHistoryLimit": A,
    "suspend": A,  # a CronJob's suspend stops new Jobs; each Job it makes is queued by Kueue
    "timeZone": A,
}
SERVICE_SPEC = {
    "allocateLoadBalancerNodePorts": refused("services"),
    "clusterIP": A,
    "clusterIPs": A,
    "externalIPs": refused("services"),
    "externalName": refused("services"),
    "externalTrafficPolicy": A,
    "healthCheckNodePort": refused("services"),
    "internalTrafficPolicy": A,
    "ipFamilies": A,
    "ipFamilyPolicy": A,
    "loadBalancerClass": refused("services"),
    "loadBalancerIP": refused("services"),
    "loadBalancerSourceRanges": refused("services"),
    "ports": A,  # nodePort only with type NodePort, refused
    "publishNotReadyAddresses": A,
    "selector": A,
    "sessionAffinity": A,
    "sessionAffinityConfig": A,
    "trafficDistribution": A,
    "type": constrained("services"),
}
SERVICE_TYPES = ["ClusterIP"]

# ---------------------------------------------------------------------------------------------
# The operators' kinds a team may create (CRDs in the upstream reference), top-level spec fields
# ---------------------------------------------------------------------------------------------

CRD_SPEC = {
    "jobsets": {
        "coordinator": A,
        "failurePolicy": A,
        "managedBy": refused("managed-by"),
        "network": A,
        "replicatedJobs": constrained("resources"),
        "startupPolicy": A,
        "successPolicy": A,
        "suspend": constrained("kueue-suspend"),
        "ttlSecondsAfterFinished": A,
        "volumeClaimPolicies": A,  # PVCs, counted by the storage quota
    },
    "rayclusters": {
        "authOptions": A,
        "autoscalerOptions": constrained("operator-injected"),
        "enableInTreeAutoscaling": A,  # its Role's pods/resize is refused (OPERATOR_GRANTS)
        "gcsFaultToleranceOptions": A,
        "headGroupSpec": constrained("no-ingress"),
        "headServiceAnnotations": constrained("controller-key"),
        "historyServerOptions": constrained("operator-injected"),
        "managedBy": refused("managed-by"),
        "networkPolicy": refused("no-ingress"),
        "rayVersion": A,
        "suspend": constrained("kueue-suspend"),
        "tlsOptions": A,
        "upgradeStrategy": A,
        "workerGroupSpecs": constrained("resources"),
    },
    "rayjobs": {
        "activeDeadlineSeconds": A,
        "backoffLimit": A,
        "clusterSelector": refused("managed-by"),  # runs on a cluster Kueue admitted for something else
        "deletionStrategy": A,
        "entrypoint": A,
        "entrypointNumCpus": A,
        "entrypointNumGpus": A,
        "entrypointResources": A,
        "jobId": A,
        "managedBy": refused("managed-by"),
        "metadata": A,  # Ray's job metadata (strings the Ray job carries), not Kubernetes labels
        "preRunningDeadlineSeconds": A,
        "rayClusterSpec": constrained("no-ingress"),  # judged as a RayCluster's spec
        "runtimeEnvYAML": A,
        "shutdownAfterJobFinishes": A,
        "submissionMode": constrained("resources"),
        "submitterConfig": A,
        "submitterPodTemplate": constrained("resources"),
        "suspend": constrained("kueue-suspend"),
        "ttlSecondsAfterFinished": A,
    },
    "trainjobs": {
        "activeDeadlineSeconds": A,
        "initializer": constrained("runtime-env"),
        "managedBy": refused("managed-by"),
        "runtimePatches": constrained("resources"),
        "runtimeRef": constrained("platform-runtime"),
        "suspend": constrained("kueue-suspend"),
        "trainer": constrained("resources"),
    },
}
# A refused field may hold the value its CRD defaults it to (the API server writes it in before admission).
DEFAULTED = {"trainjobs": {"managedBy": "trainer.kubeflow.org/trainjob-controller"}}
# Fields below the top level that an operator turns into objects or containers (judged where they are).
RAY_HEAD_GROUP = {
    "enableIngress": refused("no-ingress"),
    "headService": constrained("services"),  # KubeRay creates it; team-services judges every Service
    "ingressOptions": refused("no-ingress"),
    "labels": A,
    "rayStartParams": A,
    "resources": A,  # Ray's logical resources, not the pod's
    "serviceType": constrained("services"),
    "template": constrained("resources"),
}
RAY_AUTOSCALER = {
    "args": A,
    "command": A,
    "env": constrained("runtime-env"),
    "envFrom": constrained("runtime-env"),
    "idleTimeoutSeconds": A,
    "image": A,
    "imagePullPolicy": A,
    "resources": constrained("resources"),
    "securityContext": constrained("pod-security"),
    "upscalingMode": A,
    "version": A,
    "volumeMounts": A,
}


# ---------------------------------------------------------------------------------------------
# Keys controllers act on (labels and annotations), environment variables runtimes read
# ---------------------------------------------------------------------------------------------

# Each controller's domains (a key `<domain>/<name>` or `<sub>.<domain>/<name>`): any key there a team writes is
# refused unless CONTROLLER_KEYS allows it. Sources: Multus (k8snetworkplumbingwg network-attachment-definition spec),
# CDI (cdi.k8s.io annotation prefix the device plugin and toolkit read; GPU Operator v26.7.0 object_controls.go
# `CDI_ANNOTATION_PREFIX`, NRI `nvidia.cdi.k8s.io`), Kueue v0.19.2, Volcano v1.15.1, KubeRay v1.7.0 (ray.io),
# JobSet v0.12.0, Trainer v2.3.0, NVIDIA operators, Cilium. The Kueue and KubeRay keys allowed below are string
# constants of their sources at those tags (Kueue pkg/ and apis/, KubeRay ray-operator/.../utils/constant.go).
CONTROLLER_DOMAINS = {
    "k8s.v1.cni.cncf.io": "Multus",
    # Multus also reads `v1.multus-cni.io/default-network` (k8sclient `defaultNetAnnot`): a pod's main interface
    # on another network, outside every NetworkPolicy.
    "multus-cni.io": "Multus",
    "cni.cncf.io": "CNI plugins",
    # Kubernetes' own domains: `scheduling.k8s.io/group-name` (Volcano's PodGroup of a pod),
    # `kubernetes.io/egress-bandwidth` (the bandwidth CNI plugin), the kubelet's and the API server's keys.
    "kubernetes.io": "Kubernetes",
    "k8s.io": "Kubernetes",
    "projectcalico.org": "Calico (`cni.projectcalico.org/ipAddrs` picks a pod's address)",
    "mellanox.com": "NVIDIA Network Operator",
    "rook.io": "Rook",
    "kubeflow.org": "Kubeflow",
    "cdi.k8s.io": "CDI (container device interface)",
    "kueue.x-k8s.io": "Kueue",
    "volcano.sh": "Volcano",
    "ray.io": "KubeRay",
    "jobset.sigs.k8s.io": "JobSet",
    "trainer.kubeflow.org": "Kubeflow Trainer",
    "nvidia.com": "NVIDIA GPU and Network Operators",
    "cilium.io": "Cilium",
}
CONTROLLER_KEYS = {
    "k8s.v1.cni.cncf.io/networks": constrained("team-network"),
    "kueue.x-k8s.io/queue-name": A,  # the namespace's LocalQueues only exist: `default`
    "kueue.x-k8s.io/priority-class": constrained("priority"),
    "kueue.x-k8s.io/pod-group-name": A,
    "kueue.x-k8s.io/pod-group-total-count": A,
    "kueue.x-k8s.io/pod-group-pod-index-label": A,
    "kueue.x-k8s.io/retriable-in-group": A,
    # Set by Kueue's own mutating webhook on the pods a team creates (pkg/controller/jobs/pod/pod_webhook.go
    # `Default`), before admission policies see them; Kueue validates the managed label's value itself.
    "kueue.x-k8s.io/managed": A,
    "kueue.x-k8s.io/role-hash": A,
    "kueue.x-k8s.io/pod-group-pod-index": A,
    "kueue.x-k8s.io/podset-required-topology": A,
    "kueue.x-k8s.io/podset-preferred-topology": A,
    "kueue.x-k8s.io/podset-unconstrained-topology": A,
    "kueue.x-k8s.io/podset-slice-required-topology": A,
    "kueue.x-k8s.io/podset-slice-size": A,
    "kueue.x-k8s.io/job-min-parallelism": A,
    "ray.io/overwrite-container-cmd": A,
    "ray.io/disable-provisioned-head-restart": A,
    # Kubernetes' recommended labels (its docs: common labels) and kubectl's keys: only display tools read them.
    "app.kubernetes.io/name": A,
    "app.kubernetes.io/instance": A,
    "app.kubernetes.io/version": A,
    "app.kubernetes.io/component": A,
    "app.kubernetes.io/part-of": A,
    "app.kubernetes.io/managed-by": A,
    "kubectl.kubernetes.io/last-applied-configuration": A,
    "kubectl.kubernetes.io/restartedAt": A,
    "kubectl.kubernetes.io/default-container": A,
    # The Job registry sets these in a Job's template before validating admission runs (pkg/registry/batch/job
    # strategy.go `PrepareForCreate`), and the job controller on the Job's pods.
    "batch.kubernetes.io/controller-uid": A,
    "batch.kubernetes.io/job-name": A,
    "batch.kubernetes.io/job-completion-index": A,
}
# The variable prefixes container runtimes read from a container's environment (NVIDIA container toolkit v1.20.0,
# internal/config/image/envvars.go and cuda_image.go `VisibleDevices`).
RUNTIME_ENV_PREFIXES = ["NVIDIA_"]

# ---------------------------------------------------------------------------------------------
# Rights operators grant in a team namespace, and the subresources a team identity may call
# ---------------------------------------------------------------------------------------------

# (apiGroup, resource, verb) granted by a Role an operator creates in a team namespace, with its source. KubeRay
# v1.7.0 creates, for a RayCluster with in-tree autoscaling, a Role and RoleBinding named like the cluster for the
# head group's ServiceAccount (ray-operator/controllers/ray/common/rbac.go `BuildRole`, `BuildRoleBinding`). Of the
# other operators teams use, none may create Roles or RoleBindings (no `rolebindings` in their charts' templates).
OPERATOR_GRANTS = {
    "kuberay": [
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods", "patch"),
        ("", "pods/resize", "patch"),
        ("ray.io", "rayclusters", "get"),
        ("ray.io", "rayclusters", "patch"),
    ]
}
# Every pod subresource (Kubernetes 1.35), and what a team identity may do with it, whoever grants it.
POD_SUBRESOURCES = {
    "pods/attach": refused("subresource"),
    "pods/binding": refused("placement"),
    "pods/ephemeralcontainers": refused("subresource"),
    "pods/eviction": refused("subresource"),
    "pods/exec": A,
    "pods/log": A,
    "pods/portforward": A,
    "pods/proxy": refused("subresource"),
    "pods/resize": refused("subresource"),
    "pods/status": refused("subresource"),
}
# A team's own rights on its workloads' status: Kueue and the operators write them.
STATUS_SUBRESOURCES = ["jobs/status", "jobsets/status", "rayjobs/status", "rayclusters/status", "trainjobs/status"]


def classify(table: dict[str, Verdict], field: str) -> Optional[Verdict]:
    return table.get(field)


def refused_fields(table: dict[str, Verdict]) -> list[str]:
    return sorted(f for f, v in table.items() if v.verdict == "refused")


def controller_domain(key: str) -> Optional[str]:
    """The controller domain a label or annotation key belongs to, if any."""
    prefix = key.split("/", 1)[0] if "/" in key else ""
    found = [d for d in CONTROLLER_DOMAINS if prefix == d or prefix.endswith("." + d)]
    return max(found, key=len) if found else None  # the most specific: cdi.k8s.io before k8s.io
