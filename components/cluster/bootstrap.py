"""ClusterBootstrap: bare-metal hosts to an HA RKE2 cluster, over SSH, and each Node's labels and
taints through the Kubernetes API.

Per node, two host steps at create, each a separately re-runnable unit:
  1. `<node>-prepare`    on the node: OS preparation (swap, kernel modules, sysctls, time, packages).
  2. `<node>-rke2`       on the node: RKE2 config, join token (stdin, 0600), install (fresh hosts
                         only; upgrades are components/cluster/upgrades.py's Plans), start
                         without blocking, wait (bounded, journal on failure) until the node is
                         registered, or Ready again when it was Ready before; then the certificate
                         watch: a systemd timer (root) that writes the expiry date of each RKE2
                         certificate file where the Zabbix agent reads it.
                         Delete: stops the timer and removes its files; uninstalls RKE2, only from a
                         host that still runs this node name.
     `<name>-ca-hash`   once, on the init server after its RKE2 step: the SHA-256 of the cluster CA,
                         which pins the CA in every other node's join token.
Then, per node, through the Kubernetes API (no SSH):
  `<node>-labels-taints` a server-side-apply patch of the Node (`kubernetes.core.v1.NodePatch`): its
                         labels and taints as the settings give them. RKE2 applies node-label and
                         node-taint only at registration (kubernetes#59314); the patch keeps them
                         right afterwards, and server-side apply removes what the settings dropped.
And one guard per node that runs only at delete:
  `<node>-membership`   no command at create or update (no SSH session); its delete, on the init
                         server: cordon, drain (honouring PodDisruptionBudgets, bounded by a
                         timeout), delete the Node.

Least-privilege join (RKE2 token docs, "secure" format): the servers hold the server token and an
agent token (`agent-token-file`); agents get only `K10<CA sha256>::node:<agent token>`, joining
servers `K10<CA sha256>::server:<server token>`; the init server keeps the bare server token (the
first server of a cluster cannot take the secure form: its CA does not exist yet).

Order: the init server starts the cluster; every other node (servers and agents) waits for it and the
CA hash only. The further servers still join one at a time (upstream warns against concurrent server
joins: rancher/rke2#642, #1600), but the order is kept on the hosts: each joining server's step waits
until the servers before it answer (JOIN_AFTER), so the graph does not grow with the number of servers.
The longest chain is prepare -> init -> CA hash -> RKE2 step of any other node -> its Node patch, the
same for 1, 3 or 5 servers and any number of nodes.

The membership's triggers depend on the RKE2 step's id, so the engine replaces the membership
whenever the RKE2 step is replaced, and deletes it first: a replace drains and deletes the Node,
uninstalls and reinstalls, in that order; the Node patch carries the RKE2 step's id in an annotation,
so it is applied again to the re-registered Node. Removing a node runs the same deletes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.cluster.config import (
    API_PORT,
    INSTALL_ANNOTATION,
    agent_stdin,
    kubeconfig_params,
    managed_labels,
    node_taints,
    parse_ca_hash,
    platform_host_taints,
    prepare_params,
    rke2_params,
    server_stdin,
    taint_object,
)
from components.common import Scope
from components.hosts.remote import HostAccess, fingerprint, host_script
from settings import ClusterSettings, NetworkSettings, NodeSettings


@dataclass(frozen=True)
class ClusterBootstrapArgs:
    cluster: ClusterSettings
    network: NetworkSettings
    nodes: Sequence[NodeSettings]
    hosts: Mapping[str, HostAccess]
    token: pulumi.Input[str]
    """The server token (admin-equivalent): only servers receive it."""
    agent_token: pulumi.Input[str]
    """The agent token: all that agents receive (with the CA hash)."""
    # Extra keys for the servers' RKE2 config from other components (e.g. MinioTier's etcd-s3 keys).
    server_config: Mapping[str, Any] = field(default_factory=dict)
    # Taint the servers and storage hosts (`platform_host_taints`) so that only the platform's pods run there
    # (`scheduling.tenantNodesOnly`).
    taint_platform_hosts: bool = False
    scope: Scope = Scope()
    """The part this stack holds: every node, or (layered) the servers or one group's agents (stacks/layers.py)."""
    upstream: Optional[ClusterReference] = None
    """In a layered node-group or platform stack: what it reads from the cluster stack."""


@dataclass(frozen=True)
class ClusterReference:
    """What a layered node-group or platform stack reads from its environment's cluster stack."""

    ca_hash: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    """A node-group stack's: a credential that may only read and patch Nodes; the platform stack's: admin."""


class ClusterBootstrap(pulumi.ComponentResource):
    """Prepared hosts, an HA RKE2 cluster, its kubeconfig and a Kubernetes provider."""

    prepared: dict[str, pulumi.Resource]
    """The preparation step of each node, for other host steps on that node to wait for."""
    joined: dict[str, pulumi.Resource]
    """The RKE2 step of each node (done: RKE2 runs and the node is registered)."""
    ready: list[pulumi.Resource]
    """What in-cluster resources wait for: the API answers through the endpoint."""
    kubeconfig: pulumi.Output[str]
    ca_hash: pulumi.Output[str]
    """SHA-256 of the cluster's server CA certificate (public), read from the init server."""
    provider: k8s.Provider
    api_url: str

    def __init__(self, name: str, args: ClusterBootstrapArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:cluster:ClusterBootstrap", name, None, opts)
        cluster = args.cluster
        servers = [n for n in args.nodes if n.control_plane]
        init = next(n for n in servers if n.name == cluster.init_server)
        init_host = args.hosts[init.name]
        self.api_url = f"https://{cluster.api_endpoint}:{API_PORT}"
        held = [n for n in args.nodes if args.scope.holds_host(n)]

        self.prepared = {
            node.name: host_script(
                f"{node.name}-prepare",
                args.hosts[node.name],
                "prepare-host.sh",
                prepare_params(node, cluster, args.network),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for node in held
        }

        # The init server first; then every other node once it runs and its CA hash is known. The
        # further servers keep their one-at-a-time order on the hosts (JOIN_AFTER), not in the graph.
        # A layered node-group stack runs after its cluster stack and reads the CA hash from it.
        self.joined = {}
        if args.scope.cluster_base:
            self._rke2(init, args, [self.prepared[init.name]], join_stdin(args, None, init), [])
            # Replaced along with the init server's RKE2 step: a rebuilt single server is a new CA.
            ca_read = host_script(
                f"{name}-ca-hash",
                init_host,
                "read-ca-hash.sh",
                replaced_with=self.joined[init.name],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.joined[init.name]]),
            )
            self.ca_hash = ca_read.stdout.apply(parse_ca_hash)
        else:
            self.ca_hash = upstream(args).ca_hash
        init_joined = [self.joined[init.name]] if init.name in self.joined else []
        further_servers = [s for s in servers if s is not init]
        for node in held:
            if node is not init:
                earlier = further_servers[: further_servers.index(node)] if node.control_plane else []
                waits = [self.prepared[node.name], *init_joined]
                self._rke2(node, args, waits, join_stdin(args, self.ca_hash, node), earlier)

        if args.scope.cluster_base:
            read = host_script(
                f"{name}-kubeconfig",
                init_host,
                "read-kubeconfig.sh",
                kubeconfig_params(cluster),
                secret_output=True,
                opts=pulumi.ResourceOptions(parent=self, depends_on=init_joined),
            )
            self.kubeconfig = pulumi.Output.secret(read.stdout)
            self.ready: list[pulumi.Resource] = [read]
        else:  # the cluster stack read it; this stack runs once that stack is up
            self.kubeconfig = pulumi.Output.secret(upstream(args).kubeconfig)
            self.ready = []
        # cluster_identifier: a re-read (rotated) kubeconfig updates the provider in place instead
        # of replacing it, which would replace every Kubernetes object.
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            cluster_identifier=cluster.name,
            opts=pulumi.ResourceOptions(parent=self),
        )

        self.node_patches: dict[str, k8s.core.v1.NodePatch] = {}
        for node in held:
            self.node_patches[node.name] = self._labels_and_taints(node, args.taint_platform_hosts)
            # Nothing at create (no SSH session); at delete, on the init server: cordon, drain, delete
            # the Node. Its trigger keeps the value it was deployed with when this step also labelled
            # the node, so stacks deployed before see an in-place update, not a drain of every node.
            host_script(
                f"{node.name}-membership",
                init_host,
                None,
                delete_script="node-remove.sh",
                delete_params={
                    "NODE_NAME": node.name,
                    "DRAIN": "true" if cluster.drain_on_remove else "false",
                    "DRAIN_TIMEOUT": str(cluster.drain_timeout_seconds),
                },
                trigger_parts=["node-membership.sh", "node-remove.sh", node.name],
                replaced_with=self.joined[node.name],
                opts=pulumi.ResourceOptions(parent=self, depends_on=init_joined),
            )

        self.register_outputs({"apiUrl": self.api_url, "kubeconfig": self.kubeconfig})

    def _rke2(
        self,
        node: NodeSettings,
        args: ClusterBootstrapArgs,
        waits: list[pulumi.Resource],
        stdin: pulumi.Output[str],
        join_after: Sequence[NodeSettings],
    ) -> pulumi.Resource:
        cluster = args.cluster
        is_init = node.name == cluster.init_server
        step = host_script(
            f"{node.name}-rke2",
            args.hosts[node.name],
            "rke2-install.sh",
            rke2_params(node, is_init, cluster, args.network, args.server_config, join_after),
            stdin=stdin,
            delete_script="rke2-uninstall.sh",
            delete_params={"NODE_NAME": node.name},
            identity=[node.name, node.address, "server" if node.control_plane else "agent"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=waits),
        )
        self.joined[node.name] = step
        return step

    def _labels_and_taints(self, node: NodeSettings, taint_platform_hosts: bool) -> k8s.core.v1.NodePatch:
        """The Node's labels and taints, server-side applied once its RKE2 step has registered it.

        The taint list of a Node is atomic (kubernetes#128866): applying it replaces the whole list,
        so only nodes whose settings give taints apply one, forced (`pulumi.com/patchForce`), since the
        kubelet registered the list; the node lifecycle controller re-adds its own condition taints.
        `retain_on_delete`: a removed node's Node is deleted by its membership's delete; there is
        nothing to take back. The annotation holds the RKE2 step's id: when that step is replaced
        (the Node deleted and registered again) the patch changes and is applied to the new Node."""
        joined = self.joined[node.name]
        taints = [*node_taints(node), *(platform_host_taints(node) if taint_platform_hosts else [])]
        spec = {"taints": [taint_object(t) for t in taints]} if taints else None
        return k8s.core.v1.NodePatch(
            f"{node.name}-labels-taints",
            metadata=k8s.meta.v1.ObjectMetaPatchArgs(
                name=node.name,
                labels=managed_labels(node),
                annotations={
                    "pulumi.com/patchForce": "true",
                    INSTALL_ANNOTATION: joined.id.apply(lambda step_id: fingerprint(step_id)),
                },
            ),
            spec=spec,
            opts=pulumi.ResourceOptions(
                parent=self, provider=self.provider, depends_on=[joined], retain_on_delete=True
            ),
        )


def upstream(args: ClusterBootstrapArgs) -> ClusterReference:
    if args.upstream is None:
        raise ValueError(f"a {args.scope.layer} stack reads the cluster stack's outputs: none given")
    return args.upstream


def join_stdin(
    args: ClusterBootstrapArgs, ca_hash: Optional[pulumi.Output[str]], node: NodeSettings
) -> pulumi.Output[str]:
    """What a node's RKE2 step reads on stdin, built only from the secrets that node may hold: an
    agent's input never depends on the server token."""
    if not node.control_plane:
        return pulumi.Output.secret(
            pulumi.Output.all(ca_hash, args.agent_token).apply(lambda v: agent_stdin(v[0], v[1]))
        )
    return pulumi.Output.secret(
        pulumi.Output.all(ca_hash, args.token, args.agent_token).apply(lambda v: server_stdin(v[0], v[1], v[2]))
    )
