"""`ml-platform:cluster` (RKE2 and the API endpoint) and `ml-platform:ssh` (how hosts are reached)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from settings.types import Host, HostKey, Model, Name, Port, Rke2Version, Url


class Rke2Install(Model):
    """Where RKE2 comes from: the install script at `installerUrl` downloads the release tarball
    and checksums from `artifactUrl` (INSTALL_RKE2_ARTIFACT_URL; the GitHub releases when unset).
    Air-gapped sites point both at an internal HTTP mirror."""

    installer_url: Url = "https://get.rke2.io"
    artifact_url: Optional[Url] = None
    method: Literal["tar", "rpm"] = "tar"


class VirtualIp(Model):
    """A virtual IP for the API and registration address, held by kube-vip on the servers (ARP)."""

    interface: Name
    kube_vip_image: str = "ghcr.io/kube-vip/kube-vip:v1.0.4"


class EtcdSnapshots(Model):
    schedule_cron: str = "0 */6 * * *"
    retention: int = Field(default=28, ge=1, le=1000)


class ClusterSettings(Model):
    name: Name
    rke2_version: Rke2Version
    install: Rke2Install = Rke2Install()
    api_endpoint: Host
    virtual_ip: Optional[VirtualIp] = None
    init_server: Optional[Name] = None
    os_family: Literal["debian", "rhel"] = "debian"
    cis_profile: bool = False
    etcd_snapshots: EtcdSnapshots = EtcdSnapshots()
    drain_timeout_seconds: int = Field(default=900, ge=30, le=86400)
    # Drain a node before it is deleted. Turn off only to tear a whole environment down.
    drain_on_remove: bool = True
    time_servers: list[Host] = []
    system_default_registry: Optional[Host] = None
    registry_mirrors: dict[str, list[Url]] = {}


class Bastion(Model):
    host: Host
    port: Port = 22
    user: str = "root"
    host_key: Optional[HostKey] = None


class SshSettings(Model):
    user: str = "root"
    port: Port = 22
    bastion: Optional[Bastion] = None
    allow_unpinned_host_keys: bool = False
    dial_error_limit: int = Field(default=10, ge=1, le=100)
    per_dial_timeout_seconds: int = Field(default=15, ge=1, le=600)
