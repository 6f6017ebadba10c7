"""`ml-platform:cluster` (RKE2 and the API endpoint) and `ml-platform:ssh` (how hosts are reached)."""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal, Optional
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, Field, model_validator

from settings.declare import (
    Change,
    Claim,
    Uses,
    destroys_on_decrease,
    none,
    rebuilds_cluster,
    replaces,
    rerender,
    restarts,
    restricts,
)
from settings.types import Cron, Host, HostKey, Image, Model, Name, Port, Rke2Version, Url

RKE2_RESTART = "rke2-server / rke2-agent (config.yaml rewritten)"


def rke2_restart(detail: str, nodes: str) -> Change:
    """A change of RKE2's config.yaml: the review's host Danger names the restart with its node count."""
    return restarts(RKE2_RESTART + detail, nodes, by="hosts")


class Rke2Install(Model):
    """Where RKE2 comes from: the install script at `installerUrl` downloads the release tarball
    and checksums from `artifactUrl` (INSTALL_RKE2_ARTIFACT_URL; the GitHub releases when unset).
    Air-gapped sites point both at an internal HTTP mirror."""

    installer_url: Url = "https://get.rke2.io"
    """The RKE2 install script each host downloads; point it at an internal mirror for air-gapped sites."""
    artifact_url: Optional[Url] = None
    """`INSTALL_RKE2_ARTIFACT_URL`: where the installer downloads the release tarball and checksums; unset: the GitHub
    releases."""
    method: Literal["tar", "rpm"] = "tar"
    """`INSTALL_RKE2_METHOD`. `rpm` also installs `rke2-selinux` (needed on RHEL with SELinux enforcing); `tar`
    installs no SELinux policy."""

    CHANGES: ClassVar = {
        "installer_url": none("read only when a host installs RKE2: fresh hosts and reinstalls"),
        "artifact_url": none("read only when a host installs RKE2"),
        "method": none("read only when a host installs RKE2"),
    }


class VirtualIp(Model):
    """A virtual IP for the API and registration address, held by kube-vip on the servers (ARP)."""

    interface: Name
    """The servers' interface on which kube-vip holds `cluster.apiEndpoint` (which must then be a free IPv4 address) by
    ARP."""
    kube_vip_image: Image = "ghcr.io/kube-vip/kube-vip:v1.0.4"
    """The pinned kube-vip image of the servers' static pod; point it at a mirror for air-gapped sites."""

    CHANGES: ClassVar = {
        "interface": restarts("the kube-vip static pod", "servers"),
        "kube_vip_image": restarts("the kube-vip static pod (the API address moves while it restarts)", "servers"),
    }


class EtcdSnapshots(Model):
    schedule_cron: Cron = "0 */6 * * *"
    """RKE2 `etcd-snapshot-schedule-cron`."""
    retention: int = Field(default=28, ge=1, le=1000)
    """RKE2 `etcd-snapshot-retention`: snapshots kept."""
    s3: bool = True
    """Also upload snapshots to the MinIO tier's etcd bucket when `nas.hosts` is set (`etcd-s3` +
    `etcd-s3-config-secret`)."""

    CHANGES: ClassVar = {
        "schedule_cron": rke2_restart("", "servers"),
        "retention": destroys_on_decrease(
            "etcd snapshots beyond the new count, the oldest first, locally and in the etcd bucket (RKE2 prunes "
            "at the next snapshot); rke2-server restarts on every server"
        ),
        "s3": rke2_restart("; off: new snapshots stay on the servers only", "servers"),
    }


_DAYS = Literal["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_CLOCK = re.compile(r"^([01][0-9]|2[0-3]):[0-5][0-9]$")


def _clock(value: str) -> str:
    """A time of day, `HH:MM` (24 hours)."""
    if not _CLOCK.match(value):
        raise ValueError(f"{value!r} is not a time of day; write HH:MM (24 hours), e.g. '02:00'")
    return value


def _time_zone(value: str) -> str:
    """An IANA time zone name, e.g. `Europe/Berlin` or `UTC`."""
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{value!r} is not an IANA time zone; give a name such as 'Europe/Berlin' or 'UTC'") from None
    return value


def _untagged_image(value: str) -> str:
    """An image repository without tag or digest (the controller appends the version as the tag)."""
    last = value.rsplit("/", 1)[-1]
    if "@" in value or ":" in last or not value or value != value.strip():
        raise ValueError(
            f"{value!r} carries a tag or digest; give the repository only, e.g. 'docker.io/rancher/rke2-upgrade': "
            "the system-upgrade-controller tags it with cluster.rke2Version, a fixed tag would upgrade every node "
            "to the image's release whatever rke2Version says"
        )
    return value


class UpgradeWindow(Model):
    """When a pool's upgrade Jobs may start (the Plan's `window`): the controller creates no Job outside
    it and lets a started Job run to its end. An end before the start spans midnight."""

    days: list[_DAYS] = Field(min_length=1)
    """The days the window opens, e.g. `[saturday, sunday]`."""
    start_time: Annotated[str, AfterValidator(_clock)]
    """Opening time, `HH:MM` (24 hours)."""
    end_time: Annotated[str, AfterValidator(_clock)]
    """Closing time, `HH:MM` (24 hours)."""
    time_zone: Annotated[str, AfterValidator(_time_zone)] = "UTC"
    """The IANA time zone of the times, e.g. `Europe/Berlin`."""

    CHANGES: ClassVar = {
        "days": rerender("the upgrade Plan's window"),
        "start_time": rerender("the upgrade Plan's window"),
        "end_time": rerender("the upgrade Plan's window"),
        "time_zone": rerender("the upgrade Plan's window"),
    }

    @model_validator(mode="after")
    def _not_empty(self) -> UpgradeWindow:
        if self.start_time == self.end_time:
            raise ValueError(f"endTime: {self.end_time!r} equals startTime; the window would never be open")
        return self


class UpgradeDrain(Model):
    """How a pool's nodes are drained before RKE2 is upgraded on them (the Plan's `drain`, `kubectl drain`
    with evictions: PodDisruptionBudgets hold, DaemonSet pods stay, emptyDir data is lost)."""

    timeout_seconds: int = Field(default=900, ge=30, le=86400)
    """How long one node's drain may take (`kubectl drain --timeout`). A drain that runs out (a PodDisruptionBudget
    that allows no eviction) fails and is retried until the Job's deadline, then the Job fails and the node stays
    cordoned (docs/runbook.md, retry)."""
    force: bool = False
    """Also delete pods without a controller (`kubectl drain --force`); they are lost for good. Unset, such a pod stops
    the drain and fails that node's Job."""
    grace_period_seconds: Optional[int] = Field(default=None, ge=0, le=86400)
    """Overrides each pod's termination grace period during the drain; unset: the pods' own."""

    CHANGES: ClassVar = {
        "timeout_seconds": rerender("the upgrade Plan's drain"),
        "force": rerender("the upgrade Plan's drain: pods without a controller are deleted for good"),
        "grace_period_seconds": rerender("the upgrade Plan's drain"),
    }

    @model_validator(mode="after")
    def _grace_within_timeout(self) -> UpgradeDrain:
        if self.grace_period_seconds is not None and self.grace_period_seconds >= self.timeout_seconds:
            raise ValueError(
                f"gracePeriodSeconds: {self.grace_period_seconds} is not below timeoutSeconds "
                f"{self.timeout_seconds}; every drain would time out while its pods terminate"
            )
        return self


class UpgradePool(Model):
    """One agent pool's upgrade Plan: how many of its nodes at once, when, and how they are drained."""

    concurrency: int = Field(default=1, ge=1, le=100)
    """How many of the pool's nodes are drained and upgraded at the same time (the Plan's `concurrency`). Keep it
    within what the PodDisruptionBudgets and the spare capacity allow."""
    window: Optional[UpgradeWindow] = None
    """When the pool's upgrade Jobs may start; unset: at any time."""
    drain: UpgradeDrain
    """How the pool's nodes are drained."""

    CHANGES: ClassVar = {
        "concurrency": rerender("the upgrade Plan's concurrency: how many nodes are drained at once"),
        "window": rerender("the upgrade Plan's window"),
        "drain": rerender("the upgrade Plan's drain"),
    }


def _one_osd_host(value: int) -> int:
    """Exactly 1: Rook's PodDisruptionBudgets let one OSD host (the failure domain) go down at a time."""
    if value != 1:
        raise ValueError(
            f"{value} storage hosts at a time: use 1; Rook's PodDisruptionBudgets allow one OSD host down at a "
            "time, so a second concurrent drain waits until its timeout and fails its upgrade Job"
        )
    return value


class StorageUpgradePool(UpgradePool):
    """The Ceph storage hosts' upgrade Plan: always one host at a time."""

    concurrency: Annotated[int, AfterValidator(_one_osd_host)] = 1
    """Must be 1: one OSD host down at a time, as Rook's PodDisruptionBudgets allow."""

    CHANGES: ClassVar = {
        "concurrency": rerender("the storage hosts' upgrade Plan (always 1)"),
    }


class ClusterUpgrade(Model):
    """How a `rke2Version` bump reaches running nodes: while an upgrade is pending (`deployedRke2Version`
    set and different), Rancher's system-upgrade-controller applies one Plan for the servers (one at a
    time, cordoned) and one per agent pool (GPU nodes, Ceph storage hosts, the other CPU nodes), each
    drained with its own concurrency, window and drain settings (docs/upgrades.md)."""

    gpu: UpgradePool
    """The GPU nodes' Plan (default: one at a time)."""
    storage: StorageUpgradePool
    """The Ceph storage (OSD) hosts' Plan: one at a time."""
    cpu: UpgradePool = UpgradePool(concurrency=2)
    """The other CPU agents' Plan (default: two at a time)."""
    server_post_complete_delay_seconds: int = Field(default=120, ge=0, le=3600)
    """The server Plan's `postCompleteDelay`: after a server's upgrade Job completed, how long the controller waits
    before the next server (its etcd member catches up meanwhile)."""
    wait_timeout_seconds: int = Field(default=0, ge=0, le=7 * 86400)
    """0: `pulumi up` returns once the Plans are applied and the rollout goes on in the cluster. Otherwise `up` waits
    for every Plan to report Complete (servers first, then the agent pools) and fails after this many seconds per
    Plan; cover the pools' windows."""
    controller_image: Image = "docker.io/rancher/system-upgrade-controller:v0.20.1"
    """The system-upgrade-controller image; its manifest is vendored at the same release
    (components/cluster/manifests/system-upgrade-controller/). Point it at a mirror for air-gapped sites."""
    kubectl_image: Image = "docker.io/rancher/kubectl:v1.30.3"
    """The image the upgrade Jobs cordon and drain with (the controller's `SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE`,
    upstream's pin); point it at a mirror for air-gapped sites."""
    upgrade_image: Annotated[str, AfterValidator(_untagged_image)] = "docker.io/rancher/rke2-upgrade"
    """The rke2-upgrade image repository, without a tag or digest: the controller tags it with `rke2Version` (`+`
    written as `-`). Point it at a mirror for air-gapped sites."""

    CHANGES: ClassVar = {
        "gpu": rerender("the GPU nodes' upgrade Plan"),
        "storage": rerender("the storage hosts' upgrade Plan"),
        "cpu": rerender("the CPU agents' upgrade Plan"),
        "server_post_complete_delay_seconds": rerender("the servers' upgrade Plan"),
        "wait_timeout_seconds": none("how long `up` waits for the Plans"),
        "controller_image": restarts("the system-upgrade-controller pod", "cluster"),
        "kubectl_image": rerender("the image the next upgrade Jobs drain with"),
        "upgrade_image": rerender("the image the next upgrade Jobs run"),
    }


def _issuer_url(value: str) -> str:
    """An `https://` URL, kept exactly as given."""
    # kube-apiserver refuses to start with a non-https issuer, and compares it with the tokens' `iss`
    # claim character for character: kept exactly as given (no trailing slash removed).
    if not re.match(r"^https://[^\s/]+(/\S*)?$", value):
        raise ValueError(
            f"{value!r} is not an https URL; the API server accepts only https issuers, e.g. 'https://sso.example.com/realms/ml'"
        )
    return value


def _pem(value: str) -> str:
    """A PEM certificate (bundle)."""
    if "-----BEGIN CERTIFICATE-----" not in value or "-----END CERTIFICATE-----" not in value:
        raise ValueError("not a PEM certificate; paste the CA bundle, BEGIN CERTIFICATE to END CERTIFICATE lines")
    return value.strip() + "\n"


class Oidc(Model):
    """The site's OpenID Connect identity provider, trusted by the API server (kube-apiserver `--oidc-*`
    flags): people log in as themselves, and each team's RBAC binds its identity-provider groups."""

    issuer_url: Annotated[str, AfterValidator(_issuer_url)]
    """The provider's issuer URL, exactly as in the tokens' `iss` claim (https only)."""
    client_id: str = Field(min_length=1)
    """The client id the tokens are issued for (their `aud`)."""
    username_claim: str = Field(default="email", min_length=1)
    """The claim that names the user."""
    groups_claim: str = Field(default="groups", min_length=1)
    """The claim that lists the user's groups."""
    username_prefix: str = "oidc:"
    """Prepended to every OIDC user name, so none can pose as a built-in user."""
    groups_prefix: str = "oidc:"
    """Prepended to every OIDC group (`oidc:ml-vision`), so no token can claim `system:masters`; team RoleBindings name
    the prefixed groups."""
    ca_pem: Optional[Annotated[str, AfterValidator(_pem)]] = None
    """PEM of the CA that signed the provider's TLS certificate; unset: the servers' system trust."""

    CHANGES: ClassVar = {
        "issuer_url": rke2_restart(": kube-apiserver's --oidc flags", "servers"),
        "client_id": rke2_restart(": kube-apiserver's --oidc flags", "servers"),
        "username_claim": rke2_restart(": kube-apiserver's --oidc flags", "servers"),
        "groups_claim": rke2_restart(": kube-apiserver's --oidc flags", "servers"),
        "username_prefix": restricts(
            "every OIDC user name changes (kube-apiserver restarts on the servers): bindings naming the old names stop "
            "matching",
            narrows="any",
        ),
        "groups_prefix": restricts(
            "every OIDC group changes (kube-apiserver restarts on the servers): until the team RoleBindings carry the "
            "new prefix, tokens match none of them",
            narrows="any",
        ),
        "ca_pem": rke2_restart(": kube-apiserver's --oidc-ca-file", "servers"),
    }


class ClusterSettings(Model):
    name: Name
    """The cluster's name: kubeconfig names and the Kubernetes provider's `cluster_identifier`."""
    rke2_version: Rke2Version
    """The pinned RKE2 release, e.g. `v1.35.7+rke2r1`: the `version` of the upgrade Plans, and what a fresh host
    installs (`INSTALL_RKE2_VERSION`) unless `deployedRke2Version` is set. Bumping it upgrades running nodes through
    the system-upgrade-controller, servers first, when `deployedRke2Version` names the release they run
    (docs/upgrades.md)."""
    install: Rke2Install
    """Where RKE2 is installed from."""
    upgrade: ClusterUpgrade
    """How a `rke2Version` bump rolls over the running nodes."""
    api_endpoint: Annotated[Host, Uses("ipv4", network="ethernet")]
    """The fixed API and registration address: a virtual IP (with `virtualIp`) or a load balancer or DNS name the site
    provides; in every server's `tls-san`."""
    virtual_ip: Optional[VirtualIp] = None
    """When set, kube-vip on the servers holds `apiEndpoint`; unset: the site provides the address."""
    init_server: Annotated[Name, Uses("hostname")]
    """The control-plane node that started the cluster and whose kubeconfig is read. Required (no default to the first
    server listed): only its first install may initialise etcd; a reinstall joins the running cluster
    (docs/runbook.md, section 14)."""
    deployed_rke2_version: Optional[Rke2Version] = None
    """The RKE2 release the cluster runs now. While it differs from `rke2Version` an upgrade is pending: the
    pre-upgrade step and the upgrade Plans exist (and only then), settings refuse a downgrade and a jump of more
    than one minor version from it, and a fresh host installs it (the Plans take it further). Unset: `rke2Version`,
    nothing pending. Set it to the new release once every node runs it: the next `up` first checks the nodes'
    reported versions on the init server and fails, naming the nodes, when any differs."""
    join_timeout_seconds: int = Field(default=900, ge=60, le=7200)
    """How long an RKE2 step waits for the unit to be active and the node registered (or, on a node that was Ready,
    Ready again) before it fails with the unit's journal."""
    certificate_rotation: int = Field(default=0, ge=0)
    """A counter: raise it (1, 2, ...) after rotating the servers' certificates with `rke2 certificate rotate` to
    re-read the admin kubeconfig; nothing else changes (docs/runbook.md, section 18)."""
    os_family: Literal["debian", "rhel"] = "debian"
    """The hosts' distribution family: package manager and chrony paths."""
    cis_profile: bool = False
    """RKE2 `profile: cis`, with the etcd user and sysctls it requires."""
    bundled_ingress: bool = False
    """RKE2's bundled ingress controller (ingress-nginx or Traefik, by version). Off: it runs in kube-system with
    rights over every namespace, and an Ingress a team or an operator makes in a team namespace would open a path
    to anything it reaches (docs/teams.md)."""
    oidc: Optional[Oidc] = None
    """The site's OIDC identity provider, trusted by the API server: teams log in as themselves (docs/teams.md). Unset:
    each team's CI credential comes from its own stack of the `teams/` program."""
    etcd_snapshots: EtcdSnapshots
    """RKE2's scheduled etcd snapshots."""
    drain_timeout_seconds: int = Field(default=900, ge=30, le=86400)
    """How long a removed node's drain may take before the `up` fails."""
    drain_on_remove: bool = True
    """Drain a node before it is deleted; set `false` only to tear a whole environment down."""
    time_servers: list[Annotated[Host, Uses("ipv4")]] = []
    """NTP servers for chrony; empty: the distribution's default."""
    system_default_registry: Optional[Annotated[Host, Uses("hostname")]] = None
    """RKE2 `system-default-registry`: the registry RKE2's own images are pulled from (air-gapped sites)."""
    registry_mirrors: dict[str, list[Url]] = {}
    """containerd mirrors per registry, e.g. `{"nvcr.io": ["https://mirror.example"]}`, written to
    `/etc/rancher/rke2/registries.yaml`."""

    CHANGES: ClassVar = {
        "name": rebuilds_cluster(
            "the Kubernetes provider's cluster_identifier: pulumi-kubernetes replaces the provider and with it every "
            "Kubernetes object bound to it (delete and create: releases, PVC-backed workloads, storage classes)",
            by="membership",
        ),
        "rke2_version": restarts(
            "RKE2 on every node, through the upgrade Plans (drained pool by pool)", "every node", by="upgrades"
        ),
        "api_endpoint": rke2_restart(
            ": tls-san and every agent's server address; the kubeconfig is re-read", "every node"
        ),
        "virtual_ip": restarts("kube-vip on the servers (added, moved or removed)", "servers"),
        "init_server": rebuilds_cluster(
            "only the first install of the init server may initialise etcd; naming another server re-points the "
            "kubeconfig read and the host steps that run there (docs/runbook.md, section 14)"
        ),
        "deployed_rke2_version": rerender("the pre-upgrade check and the upgrade Plans exist only while it differs"),
        "join_timeout_seconds": none("how long an RKE2 step waits"),
        "certificate_rotation": rerender("the admin kubeconfig is read again"),
        "os_family": replaces("every host's prepare step (packages and chrony paths), re-run on every host"),
        "cis_profile": rke2_restart(" with the CIS profile's etcd user and sysctls", "every node"),
        "bundled_ingress": rke2_restart(": the bundled ingress chart is deployed, or removed", "servers"),
        "oidc": rke2_restart(": kube-apiserver's --oidc flags", "servers"),
        "drain_timeout_seconds": none("how long a removed node's drain may take"),
        "drain_on_remove": rerender("a removed node's delete step: false deletes it without draining its pods"),
        "time_servers": restarts("chronyd (the prepare step re-runs)", "every node"),
        "system_default_registry": rke2_restart("; every RKE2 system image is pulled again", "every node"),
        "registry_mirrors": rke2_restart(" (registries.yaml)", "every node"),
    }

    @property
    def upgrade_pending(self) -> bool:
        """An upgrade is under way: the Plans exist only then (no node is drained when nothing is pending)."""
        return self.deployed_rke2_version is not None and self.deployed_rke2_version != self.rke2_version


class Bastion(Model):
    host: Annotated[Host, Uses("ipv4", network="ethernet")]
    """The jump host's address or DNS name."""
    port: Annotated[Port, Uses("port", scope="bastion")] = 22
    """The jump host's SSH port."""
    user: str = "root"
    """The user on the jump host (same private key as the nodes)."""
    host_key: Optional[HostKey] = None
    """The jump host's pinned SSH host key (required unless `ssh.allowUnpinnedHostKeys`)."""

    CHANGES: ClassVar = {
        "host": none("how the program reaches the hosts"),
        "port": none("how the program reaches the hosts"),
        "user": none("how the program reaches the hosts"),
        "host_key": none("how the program reaches the hosts"),
    }


class SshSettings(Model):
    user: str = "root"
    """Login user on every host; any other user runs scripts with `sudo -n`."""
    port: Annotated[Port, Claim("port", scope="host")] = 22
    """SSH port of every node and NAS host."""
    bastion: Optional[Bastion] = None
    """An optional jump host."""
    allow_unpinned_host_keys: bool = False
    """Without it, every node, NAS host and the bastion must pin `hostKey` (pulumi-command otherwise accepts any host
    key)."""
    dial_error_limit: int = Field(default=10, ge=1, le=100)
    """Connection attempts before a host step fails."""
    per_dial_timeout_seconds: int = Field(default=15, ge=1, le=600)
    """Timeout of one connection attempt, in seconds."""

    CHANGES: ClassVar = {
        "user": none("how the program reaches the hosts; host steps whose connection changes are updated"),
        "port": none("how the program reaches the hosts (sshd's own port is the site's)"),
        "bastion": none("how the program reaches the hosts"),
        "allow_unpinned_host_keys": none("how the program reaches the hosts"),
        "dial_error_limit": none("how the program reaches the hosts"),
        "per_dial_timeout_seconds": none("how the program reaches the hosts"),
    }
