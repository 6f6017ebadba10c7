"""The stack outputs: the operators' view of the platform, and the public contract with the teams.

The platform stack holds platform secrets (its config, its state, the secret outputs below) and is read
by the platform operators only. The non-secret outputs are the public contract: the program also writes
them to the cluster (`components/public_contract.py`), and each team reads them from its own stack of
the `teams/` program, which holds no platform secret (docs/outputs.md, docs/teams.md). A team never
references the platform stack: a StackReference copies every output of the stack it reads, secret ones
included, into the referencing stack's state.

Renaming or removing an output, or changing its type or secrecy, breaks consumers silently: every output
is declared here once, the outputs table of docs/outputs.md is checked against this list, and
`tests/test_outputs_contract.py` pins it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi


@dataclass(frozen=True)
class OutputSpec:
    name: str
    type: str  # "string", "integer", "number", "list[string]", "map[string]"
    secret: bool
    description: str


CONTRACT: tuple[OutputSpec, ...] = (
    OutputSpec("apiEndpoint", "string", False, "The Kubernetes API address: `https://<endpoint>:6443`."),
    OutputSpec(
        "kubeconfig",
        "string",
        True,
        "Admin kubeconfig for the cluster, pointing at `apiEndpoint`. Secret, operators only: read with "
        "`--show-secrets`.",
    ),
    OutputSpec("gpuNodes", "list[string]", False, "Names of the GPU nodes."),
    OutputSpec("gpuTotal", "integer", False, "Physical GPUs over all GPU nodes (sum of `nodes[].gpu.count`)."),
    OutputSpec(
        "gpuSchedulable",
        "integer",
        False,
        "`nvidia.com/gpu` the scheduler offers: `gpuTotal`, times `gpu.timeSlicing.replicas` when time-slicing is on.",
    ),
    OutputSpec(
        "storageClasses",
        "map[string]",
        False,
        "StorageClass names by tier key; `tier1`: local NVMe on the GPU nodes (WaitForFirstConsumer, Delete); "
        "`tier2Block`: Ceph RBD, ReadWriteOnce, expandable, cluster default (Retain); `tier2Shared`: CephFS, "
        "ReadWriteMany, expandable (Retain). Tier-2 keys are absent when no node has `osdDevices`.",
    ),
    OutputSpec("cephNamespace", "string", False, "Namespace of Rook and the Ceph cluster (tier 2); empty without it."),
    OutputSpec(
        "cephFaultTolerance",
        "string",
        False,
        "What tier 2 survives: one and two storage host losses, MON quorum (from the settings in force).",
    ),
    OutputSpec("cni", "string", False, "The pod network (Ethernet) CNI: `cilium` or `calico`."),
    OutputSpec(
        "rdmaResourceName",
        "string",
        False,
        "Extended resource GPU pods request for RDMA over InfiniBand, e.g. `rdma/ib`; empty without GPU nodes.",
    ),
    OutputSpec(
        "ibNetworkName",
        "string",
        False,
        "Multus reference `<namespace>/<name>` of the secondary IPoIB network, for the pod annotation "
        "`k8s.v1.cni.cncf.io/networks`; empty (never absent) when `network.infiniband.ipoibNetwork.enabled` is false.",
    ),
    OutputSpec(
        "minioReadToleranceHosts",
        "integer",
        False,
        "NAS hosts tier 3 can lose with every object still readable, computed from hosts x drives x erasure set "
        "x parity (0 without NAS hosts).",
    ),
    OutputSpec(
        "minioWriteToleranceHosts",
        "integer",
        False,
        "NAS hosts tier 3 can lose and still accept writes (backups keep running); at parity = set/2 one less "
        "than reads.",
    ),
    OutputSpec(
        "minioUsableFraction", "number", False, "Share of raw NAS capacity that holds data: (set - parity) / set."
    ),
    OutputSpec(
        "minioCaCert",
        "string",
        False,
        "PEM of the CA that signed the NAS servers' TLS certificate, for S3 clients (`--ca-cert`); empty without NAS.",
    ),
    OutputSpec(
        "minioRestoreCredentials",
        "map[map[string]]",
        True,
        "Per backup source, and `etcd` for the etcd snapshots: `{accessKey, secretKey}` of its read-only MinIO "
        "restore identity (docs/runbook.md sections 9 and 10); empty without NAS. Secret: read with "
        "`pulumi stack output --json --show-secrets minioRestoreCredentials`.",
    ),
    OutputSpec(
        "rke2Token",
        "string",
        True,
        "The RKE2 server token: restoring an etcd snapshot (cluster-reset) needs it. Keep a copy offline.",
    ),
    OutputSpec("teamNamespaces", "map[list[string]]", False, "Per team (`scheduling.teams`), its namespaces."),
    OutputSpec(
        "teamLocalQueues",
        "map[string]",
        False,
        "Per team, the LocalQueue in each of its namespaces (`default`; jobs without a queue label land there).",
    ),
    OutputSpec("teamClusterQueues", "map[string]", False, "Per team, its Kueue ClusterQueue (quota, cohort)."),
    OutputSpec(
        "oidcLogin",
        "map[string]",
        False,
        "How people log in (`cluster.oidc`): `issuerUrl` and `clientId` of the site's OIDC provider, for "
        "`kubectl oidc-login`; empty without OIDC (each team's CI credential then comes from its `teams/` stack).",
    ),
    OutputSpec(
        "workloadPriorityClasses",
        "list[string]",
        False,
        "Kueue WorkloadPriorityClasses jobs may name in the label `kueue.x-k8s.io/priority-class`.",
    ),
    OutputSpec(
        "zabbixUrl",
        "string",
        False,
        "Zabbix web UI over HTTPS; its API is `<zabbixUrl>/api_jsonrpc.php` (from `monitoring.web`: NodePort or "
        "ingress host).",
    ),
    OutputSpec(
        "zabbixCaCert",
        "string",
        False,
        "PEM of the CA the Zabbix web UI's certificate chains to (the program's own, or `monitoring.web.caCert`); "
        "`curl --cacert`. Empty with the lab-only plain HTTP.",
    ),
    OutputSpec("zabbixApiUser", "string", False, "The Zabbix user this program works as (Super admin, token auth)."),
    OutputSpec("zabbixApiToken", "string", True, "API token of `zabbixApiUser` (`Authorization: Bearer`). Secret."),
    OutputSpec(
        "zabbixAdminPassword",
        "string",
        True,
        "Password of the Zabbix `Admin` user (the chart's default is replaced on the first up). Secret.",
    ),
    OutputSpec("monitoredHosts", "list[string]", False, "Hosts Zabbix monitors: every node, NAS host, cluster, Ceph."),
    OutputSpec(
        "acceptance",
        "map[map[string]]",
        False,
        "The acceptance checks this `up` ran, by check id: `job`, `namespace`, `node` (or what it covers), "
        "`advisory` and `timeoutSeconds`; their results: `python -m stacks.acceptance_report` (docs/acceptance.md).",
    ),
)


# Not secret, but the operators' alone: the inventory (node names, GPU counts, storage host counts, the
# Zabbix host list naming every machine, NAS hosts included). It changes with each node, and the
# contract's ConfigMap would be replaced on every node added or removed (ConfigMap data is replace-on-change).
OPERATORS_ONLY = frozenset(
    {"gpuNodes", "gpuTotal", "gpuSchedulable", "cephFaultTolerance", "monitoredHosts", "acceptance"}
)
PUBLIC: tuple[str, ...] = tuple(spec.name for spec in CONTRACT if not spec.secret and spec.name not in OPERATORS_ONLY)
"""The public contract: what every team may read (the cluster's ConfigMap and each team's stack)."""


def finalize(outputs: Mapping[str, Any]) -> dict[str, Any]:
    """The outputs to export: exactly the declared ones, in contract order, the secret ones wrapped
    as secrets whatever they hold."""
    declared = [spec.name for spec in CONTRACT]
    if set(outputs) != set(declared):
        missing, extra = sorted(set(declared) - set(outputs)), sorted(set(outputs) - set(declared))
        raise ValueError(f"stack outputs do not match stacks/outputs.py: missing {missing}, undeclared {extra}")
    return {
        spec.name: pulumi.Output.secret(outputs[spec.name]) if spec.secret else outputs[spec.name] for spec in CONTRACT
    }
