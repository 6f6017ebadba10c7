"""The stack level: compose the components in order and return the stack outputs.

Order (docs/design.md): hosts are prepared in parallel, the cluster is bootstrapped, its kubeconfig feeds
the Kubernetes provider, the CNI makes nodes Ready, then operators and charts install in parallel
where they are independent. Each component receives its slice of the settings and explicit
dependencies; none reads the config itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pulumi
import pulumi_random as random

from components.acceptance.component import AcceptanceChecks, AcceptanceChecksArgs, S3Target, exercised_settings
from components.ceph.tier import CephTier, CephTierArgs
from components.cluster.bootstrap import ClusterBootstrap, ClusterBootstrapArgs, ClusterReference
from components.cluster.node_credential import node_kubeconfig
from components.cluster.upgrades import ClusterUpgrades, ClusterUpgradesArgs
from components.common import HostSteps, InCluster, Scope, Wiring
from components.gpu.pool import GpuPool, GpuPoolArgs
from components.hosts.remote import host_accesses
from components.minio.tier import MinioTier, MinioTierArgs, etcd_s3_server_config
from components.monitoring.component import ZabbixMonitoring, ZabbixMonitoringArgs, ZabbixSecrets
from components.network.fabric import NetworkFabric, NetworkFabricArgs
from components.network.team_ipoib import team_ib_networks
from components.public_contract import PublicContract, PublicContractArgs
from components.scheduling.network import tenant_network
from components.scheduling.stack import SchedulingStack, SchedulingStackArgs
from components.training_operators import TrainingOperators, TrainingOperatorsArgs
from settings import (
    NAMESPACE,
    SECRET_KEYS,
    Settings,
    SettingsError,
    config_file,
    load,
    plain_secret_problems,
    settings_warnings,
)
from settings.config_file import STACK_FILE_ENV, copy_problems, namespace_problems
from stacks import layers, outputs


@dataclass(frozen=True)
class Secrets:
    ssh_private_key: pulumi.Output[str]
    rke2_token: Optional[pulumi.Output[str]]
    zabbix: ZabbixSecrets = ZabbixSecrets()


def run() -> dict[str, Any]:
    """What `__main__.py` does: settings from the stack config, then the platform."""
    try:
        settings = load(read_config())
        problems = secret_problems(settings) + namespace_problems(config_keys(), NAMESPACE) + file_copy_problems()
        if problems:
            raise SettingsError(problems)
        env, scope = layers.scope_of(pulumi.get_stack(), settings)
    except SettingsError as exc:
        raise placed(exc) from None
    for warning in settings_warnings(settings):
        pulumi.log.warn(warning)
    config = pulumi.Config(NAMESPACE)
    secrets = Secrets(
        ssh_private_key=config.require_secret("sshPrivateKey"),
        rke2_token=config.get_secret("rke2Token"),
        zabbix=ZabbixSecrets(
            admin_password=config.get_secret("zabbixAdminPassword"),
            agent_psk=config.get_secret("zabbixAgentPsk"),
            slack_bot_token=config.get_secret("zabbixSlackBotToken"),
            mattermost_bot_token=config.get_secret("zabbixMattermostBotToken"),
        ),
    )
    return build(settings, secrets, scope, env)


def secret_problems(settings: Settings) -> list[str]:
    """Credential keys set as plain config (they would sit unencrypted in the stack file and state), and
    the bot tokens that the configured alert channels need but the config lacks."""
    runtime = pulumi.runtime.config
    problems = plain_secret_problems(NAMESPACE, lambda k: runtime.get_config(k) is not None, runtime.is_config_secret)
    needed = {"slack": "zabbixSlackBotToken", "mattermost": "zabbixMattermostBotToken"}
    for kind in sorted({c.type for c in settings.monitoring.alerting.channels}):
        full = f"{NAMESPACE}:{needed[kind]}"
        if runtime.get_config(full) is None:
            problems.append(
                f"{full}: required by the {kind} alert channel(s); set it with `pulumi config set --secret`"
            )
    return problems


def config_keys() -> list[str]:
    """Every config key the engine handed the program, of any namespace."""
    return sorted(set(pulumi.runtime.config.CONFIG.get()) | set(pulumi.runtime.config.get_config_env()))


def file_copy_problems() -> list[str]:
    """The CLI hands the program values with YAML aliases and merge keys already expanded: the stack file itself
    shows which entries were copied (`config_file.copy_problems`)."""
    name = os.environ.get(STACK_FILE_ENV)
    path = Path(name) if name else None
    return copy_problems(path.read_text(), path.name) if path is not None and path.is_file() else []


def placed(exc: SettingsError) -> SettingsError:
    """`exc` with `file:line` in front of each problem, when the stack file is known (STACK_FILE_ENV:
    `__main__.py` names `Pulumi.<stack>.yaml`, the offline preview the file it read)."""
    name = os.environ.get(STACK_FILE_ENV)
    path = Path(name) if name else None
    if path is None or not path.is_file():
        return exc
    located, _ = config_file.read(path, NAMESPACE)
    if located is None:
        return exc
    return SettingsError(
        config_file.place(exc.problems, located, path.name), config_file.place(exc.shown, located, path.name)
    )


def read_config() -> dict[str, Any]:
    """Every non-secret `ml-platform:` key of the stack config, objects parsed from their JSON form."""
    raw: dict[str, Any] = {}
    for full_key in config_keys():
        namespace, _, key = full_key.partition(":")
        if namespace != NAMESPACE or key in SECRET_KEYS:
            continue
        value = pulumi.runtime.config.get_config(full_key)
        try:
            raw[key] = json.loads(value)
        except (TypeError, ValueError):
            raw[key] = value
    return raw


def init_server_record(name: str) -> random.RandomId:
    """`cluster.initServer` as protected state. Settings cannot see the previous value, the engine can:
    a change replaces this record, which Pulumi refuses at preview ("marked for protection"), and so
    does the offline diff. docs/runbook.md section 3 moves the init server on purpose."""
    return random.RandomId(
        "cluster-init-server",
        byte_length=4,
        keepers={"initServer": name},
        opts=pulumi.ResourceOptions(protect=True),
    )


SINGLE = Scope()


def build(settings: Settings, secrets: Secrets, scope: Scope = SINGLE, env: str = "") -> dict[str, Any]:
    """Create every component from validated settings (with `layout: layered`, the part `scope` holds); return
    the stack outputs."""
    hosts = host_accesses(settings, secrets.ssh_private_key, layers.script_hosts(settings, scope))
    upstream: dict[str, pulumi.Output[Any]] = {}
    reference = None
    if scope.cluster_base:
        token = secrets.rke2_token
        if token is None:
            # Generated once and kept (secret) in the stack state; set ml-platform:rke2Token to bring your own.
            token = random.RandomPassword("rke2-token", length=48, special=False).result
        init_server_record(settings.cluster.init_server)
        # What agents join with instead of the (admin-equivalent) server token; kept (secret) in the state.
        agent_token = random.RandomPassword("rke2-agent-token", length=48, special=False).result
    else:  # a layered node-group or platform stack: from the cluster stack (a node group never sees the server token)
        if scope.layer == "nodes":
            upstream = layers.node_inputs(env)
        else:
            upstream = layers.read_cluster(env, (*layers.PLATFORM_INPUTS, "caHash"))
        token = upstream.get("rke2Token", "")
        agent_token = upstream.get("agentToken", "")
        kubeconfig = upstream["nodeKubeconfig" if scope.layer == "nodes" else "kubeconfig"]
        reference = ClusterReference(ca_hash=upstream["caHash"], kubeconfig=kubeconfig)

    cluster = ClusterBootstrap(
        "cluster",
        ClusterBootstrapArgs(
            cluster=settings.cluster,
            network=settings.network,
            nodes=settings.nodes,
            hosts={n.name: hosts[n.name] for n in settings.nodes},
            token=token,
            agent_token=agent_token,
            server_config=etcd_s3_server_config(settings.cluster.etcd_snapshots, settings.nas),
            taint_platform_hosts=settings.scheduling.tenant_nodes_only,
            scope=scope,
            upstream=reference,
        ),
    )
    wiring = Wiring(
        settings.charts, HostSteps(hosts, cluster.prepared), InCluster(cluster.provider, cluster.ready), scope
    )
    network = NetworkFabric(
        "network",
        NetworkFabricArgs(
            network=settings.network,
            cluster=settings.cluster,
            gpu_nodes=settings.gpu_nodes,
            wiring=wiring,
            teams=settings.scheduling.teams,
        ),
    )
    # Everything else in the cluster also waits for pod networking.
    wiring = wiring.waiting_for(network.ready)
    in_cluster = wiring.in_cluster
    if scope.cluster_base:
        ClusterUpgrades(
            "upgrades",
            ClusterUpgradesArgs(
                cluster=settings.cluster,
                nodes=settings.nodes,
                init_host=hosts[settings.cluster.init_server],
                init_joined=cluster.joined[settings.cluster.init_server],
                in_cluster=in_cluster,
            ),
        )
    # One NFD per cluster: the Network Operator's (NetworkFabric, deployed whenever there are GPU nodes)
    # labels the NVIDIA GPUs the GPU Operator schedules its operands on.
    gpu = GpuPool("gpu", GpuPoolArgs(gpu=settings.gpu, gpu_nodes=settings.gpu_nodes, wiring=wiring, deploy_nfd=False))
    ceph = CephTier(
        "ceph", CephTierArgs(ceph=settings.storage.ceph, storage_hosts=settings.storage_hosts, wiring=wiring)
    )
    if scope.layer == "cluster":
        return {
            "apiEndpoint": cluster.api_url,
            "caHash": cluster.ca_hash,
            "agentToken": pulumi.Output.secret(agent_token),
            "nodeKubeconfig": node_kubeconfig("cluster", cluster.kubeconfig, cluster.provider, cluster),
            "kubeconfig": cluster.kubeconfig,
            "rke2Token": pulumi.Output.secret(token),
        }
    if scope.layer == "nodes":
        return {  # what the orchestrator reads: the group is up to date (digest), whose it is, which nodes it holds
            layers.DIGEST_OUTPUT: layers.digest(upstream),
            "environment": env,
            "group": scope.group,
            "nodes": [n.name for n in settings.nodes if scope.holds_host(n)],
        }
    scheduling = SchedulingStack(
        "scheduling",
        SchedulingStackArgs(
            scheduling=settings.scheduling,
            nodes=settings.nodes,
            oidc=settings.cluster.oidc,
            unaccounted_resources=[network.rdma_resource_name] if network.rdma_resource_name else [],
            rdma_resource=network.rdma_resource_name or None,
            team_ib_networks=team_ib_networks(settings.network, settings.gpu_nodes, settings.scheduling.teams),
            network=tenant_network(
                settings.network,
                settings.cluster,
                settings.nodes,
                settings.nas.hosts,
                settings.scheduling.training_operators,
            ),
            storage_classes=sorted({*gpu.storage_classes.values(), *ceph.storage_classes.values()}),
            wiring=wiring,
        ),
    )
    minio = MinioTier(
        "minio",
        MinioTierArgs(
            minio=settings.storage.minio,
            nas=settings.nas,
            hosts=hosts,
            etcd=settings.cluster.etcd_snapshots,
            cluster_name=settings.cluster.name,
            in_cluster=in_cluster,
            ceph=settings.storage.ceph,
            # The sources' PVCs live in team namespaces: the backup objects there wait for them.
            team_namespaces=scheduling.namespace_resources,
        ),
    )
    TrainingOperators(
        "training", TrainingOperatorsArgs(operators=settings.scheduling.training_operators, wiring=wiring)
    )
    monitoring = ZabbixMonitoring(
        "monitoring",
        ZabbixMonitoringArgs(
            monitoring=settings.monitoring,
            cluster_name=settings.cluster.name,
            api_endpoint=settings.cluster.api_endpoint,
            nodes=settings.nodes,
            nas_hosts=settings.nas.hosts,
            block_storage_class=ceph.storage_classes.get("tier2Block"),
            storage_ready=[ceph.storage_class_release] if ceph.storage_class_release else [],
            ceph_namespace=ceph.namespace or None,
            wiring=wiring,
            secrets=dataclasses.replace(secrets.zabbix, minio_metrics_token=minio.metrics_token),
            backup=settings.storage.minio.backup,
            etcd_snapshots=settings.cluster.etcd_snapshots,
            minio_port=settings.storage.minio.port,
            teams=settings.scheduling.teams,
            kueue_namespace=settings.scheduling.kueue_namespace,
            acceptance_reader=settings.acceptance.monitoring.enabled,
        ),
    )
    backup_sources = settings.storage.minio.backup.sources
    inventory_hosts = {n.name for n in settings.nodes} | {h.name for h in settings.nas.hosts}
    storage_classes = {**gpu.storage_classes, **ceph.storage_classes}
    acceptance = AcceptanceChecks(
        "acceptance",
        AcceptanceChecksArgs(
            acceptance=settings.acceptance,
            nodes=settings.nodes,
            monitored_hosts=[h for h in monitoring.monitored_hosts if h in inventory_hosts],
            rdma_resource_name=network.rdma_resource_name,
            driver_version=settings.gpu.driver.version if settings.gpu.driver.managed_by == "operator" else None,
            storage_classes=storage_classes,
            s3=S3Target(
                settings.storage.minio.cephfs_backup_bucket,
                settings.storage.minio.backup.image,
                backup_sources[0].name,
                minio.backup_rclone_env[backup_sources[0].name],
                minio.ca_cert,
                delete=not settings.storage.minio.object_lock_days,
            )
            if backup_sources and backup_sources[0].name in minio.backup_rclone_env
            else None,
            zabbix_url=monitoring.url,
            zabbix_token=monitoring.reader_token,
            zabbix_ca=monitoring.ca_cert,
            kueue_wait_seconds=settings.scheduling.wait_for_pods_ready.timeout_seconds,
            exercised=exercised_settings(settings),
            provider=cluster.provider,
            platform_ready=[*network.ready, *gpu.ready, *ceph.ready, *minio.ready, scheduling, *monitoring.ready],
            node_ready=cluster.node_patches,
            monitoring_ready=[monitoring],
        ),
    )
    oidc = settings.cluster.oidc
    values = {
        "apiEndpoint": cluster.api_url,
        "kubeconfig": cluster.kubeconfig,
        "gpuNodes": gpu.gpu_nodes,
        "gpuTotal": gpu.gpu_total,
        "gpuSchedulable": gpu.gpu_schedulable,
        # One map for every tier's classes; each storage component contributes its keys.
        "storageClasses": storage_classes,
        "cephNamespace": ceph.namespace,
        "cephFaultTolerance": ceph.fault_tolerance,
        "cni": network.cni,
        "rdmaResourceName": network.rdma_resource_name,
        "ibNetworkName": network.ib_network_name,
        "minioReadToleranceHosts": minio.read_tolerance_hosts,
        "minioWriteToleranceHosts": minio.write_tolerance_hosts,
        "minioUsableFraction": minio.usable_fraction,
        "minioCaCert": minio.ca_cert,
        "minioRestoreCredentials": minio.restore_credentials,
        "rke2Token": token,
        "teamNamespaces": scheduling.team_namespaces,
        "teamLocalQueues": scheduling.team_local_queues,
        "teamClusterQueues": scheduling.team_cluster_queues,
        "oidcLogin": {"issuerUrl": oidc.issuer_url, "clientId": oidc.client_id} if oidc else {},
        "workloadPriorityClasses": scheduling.priority_classes,
        "zabbixUrl": monitoring.url,
        "zabbixCaCert": monitoring.ca_cert,
        "zabbixApiUser": monitoring.api_user,
        "zabbixApiToken": monitoring.api_token,
        "zabbixAdminPassword": monitoring.admin_password,
        "monitoredHosts": monitoring.monitored_hosts,
        "acceptance": acceptance.results,
    }
    PublicContract(
        "contract",
        PublicContractArgs(
            values={name: values[name] for name in outputs.PUBLIC},
            in_cluster=in_cluster,
        ),
    )
    return outputs.finalize(values)
