"""The whole configuration of one environment, validated before anything is created.

This module is the only place that knows the shape of `Pulumi.<stack>.yaml`. Every key lives under
the `ml-platform:` namespace, one top-level key per area (`cluster`, `ssh`, `nodes`, ...), camelCase
in YAML and snake_case here. `load()` turns the raw config into a frozen `Settings` object or raises
`SettingsError` listing every problem, one per line, each naming its path and the fix.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import typing
from collections import Counter
from typing import Annotated, Any, Literal, Optional

import pulumi
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

NAMESPACE = "ml-platform"

# Config keys that hold secrets. They are read with `require_secret`/`get_secret` and never enter
# the settings model, so their values cannot leak through validation messages.
SECRET_KEYS = {
    "sshPrivateKey": "the SSH private key (PEM/OpenSSH) that logs in to every node and NAS host",
    "rke2Token": "the RKE2 join token; when unset, one is generated and kept (secret) in the stack state",
}


class SettingsError(pulumi.RunError):
    """Invalid settings: every problem, one per line. Raised before any resource is registered."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid settings:\n" + "\n".join(f"  {p}" for p in problems))


# ---------------------------------------------------------------------------------------------
# Field types with their own checks. Each raises ValueError with the fix in the message.
# ---------------------------------------------------------------------------------------------

_UNPINNED = {"", "latest", "stable", "main", "master", "head", "edge", "nightly", "*"}


def _pinned(value: str) -> str:
    if value.strip().lower() in _UNPINNED or any(c in value for c in "*^~<> ") or value.endswith(".x"):
        raise ValueError(f"{value!r} is not a pinned version; give an exact version such as '1.2.3'")
    return value


def _ipv4(value: str) -> str:
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 address; write four numbers 0-255, e.g. '10.20.1.7'") from None
    return value


def _ipv4_network(value: str) -> str:
    try:
        ipaddress.IPv4Network(value, strict=True)
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 network in CIDR form, e.g. '10.42.0.0/16'") from None
    return value


_DEVICE = re.compile(r"^/dev/[A-Za-z0-9][A-Za-z0-9._:+@/-]*$")


def _device_path(value: str) -> str:
    if not _DEVICE.match(value) or "/../" in value or value.endswith("/.."):
        raise ValueError(
            f"{value!r} is not a device path; give an absolute path under /dev, "
            "e.g. '/dev/nvme1n1' or '/dev/disk/by-id/wwn-0x5002538f4200a1b1'"
        )
    return value


_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _dns_label(value: str) -> str:
    if not _DNS_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a valid name; use lower-case letters, digits and '-', "
            "starting and ending with a letter or digit (RFC 1123, at most 63 characters)"
        )
    return value


_HOSTNAME = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")


def _host(value: str) -> str:
    if _looks_like_ipv4(value):
        return _ipv4(value)
    if not _HOSTNAME.match(value):
        raise ValueError(f"{value!r} is neither an IPv4 address nor a DNS name, e.g. 'api.ml.example.internal'")
    return value


def _looks_like_ipv4(value: str) -> bool:
    return bool(re.fullmatch(r"[0-9.]+", value))


_HOST_KEY = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+={0,2}$")


def _host_key(value: str) -> str:
    if not _HOST_KEY.match(value.strip()):
        raise ValueError(
            "not an SSH public host key; give '<type> <base64>' as in the host's "
            "/etc/ssh/ssh_host_ed25519_key.pub, e.g. 'ssh-ed25519 AAAAC3Nza...'"
        )
    return value.strip()


def _url(value: str) -> str:
    if not re.match(r"^(https?|oci)://[^\s/]+", value):
        raise ValueError(f"{value!r} is not a URL; give 'https://host/path' (or 'oci://registry/path' for OCI charts)")
    return value.rstrip("/")


def _rke2_version(value: str) -> str:
    _pinned(value)
    if not re.fullmatch(r"v1\.\d+\.\d+\+rke2r\d+", value):
        raise ValueError(f"{value!r} is not an RKE2 release; give a tag such as 'v1.35.7+rke2r1'")
    return value


_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _label_key(value: str) -> str:
    if not _LABEL_KEY.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes label key, e.g. 'example.com/team'")
    return value


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


def _label_value(value: str) -> str:
    if not _LABEL_VALUE.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes label value; at most 63 of letters, digits, '-', '_', '.'")
    return value


Version = Annotated[str, AfterValidator(_pinned)]
IPv4 = Annotated[str, AfterValidator(_ipv4)]
IPv4Network = Annotated[str, AfterValidator(_ipv4_network)]
DevicePath = Annotated[str, AfterValidator(_device_path)]
Name = Annotated[str, AfterValidator(_dns_label)]
Host = Annotated[str, AfterValidator(_host)]
HostKey = Annotated[str, AfterValidator(_host_key)]
Url = Annotated[str, AfterValidator(_url)]
Port = Annotated[int, Field(ge=1, le=65535)]
LabelKey = Annotated[str, AfterValidator(_label_key)]


class Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        frozen=True,
        strict=True,
    )


# ---------------------------------------------------------------------------------------------
# ml-platform:cluster
# ---------------------------------------------------------------------------------------------


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
    rke2_version: Annotated[str, AfterValidator(_rke2_version)]
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


# ---------------------------------------------------------------------------------------------
# ml-platform:ssh
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# ml-platform:nodes and ml-platform:nas
# ---------------------------------------------------------------------------------------------


class GpuSpec(Model):
    model: str = Field(min_length=1)
    count: int = Field(ge=1, le=16)


class InfinibandSpec(Model):
    interface: Name
    address: IPv4
    prefix_length: int = Field(default=24, ge=8, le=30)


class NvmeDevice(Model):
    device: DevicePath
    # Formatting is destructive: only devices marked here are ever formatted, and a device that
    # already holds a filesystem is left alone unless `force` is also true.
    format: bool = False
    force: bool = False


class OsdDevice(Model):
    device: DevicePath
    # Wiping is destructive: only devices marked here are ever wiped for Ceph.
    wipe: bool = False


class NodeSettings(Model):
    name: Name
    address: IPv4
    role: Literal["gpu", "cpu"]
    control_plane: bool = False
    host_key: Optional[HostKey] = None
    gpu: Optional[GpuSpec] = None
    infiniband: Optional[InfinibandSpec] = None
    nvme: list[NvmeDevice] = []
    osd_devices: list[OsdDevice] = []
    labels: dict[LabelKey, Annotated[str, AfterValidator(_label_value)]] = {}

    @property
    def storage_host(self) -> bool:
        return bool(self.osd_devices)


class NasHost(Model):
    name: Name
    address: IPv4
    host_key: Optional[HostKey] = None
    drives: list[DevicePath] = Field(min_length=1)


class NasSettings(Model):
    hosts: list[NasHost] = []


# ---------------------------------------------------------------------------------------------
# ml-platform:network, gpu, storage, scheduling, monitoring
# ---------------------------------------------------------------------------------------------


class IpoibNetwork(Model):
    """A secondary IPoIB network (Multus) for pods that want an address on the IB fabric."""

    enabled: bool = False
    name: Name = "ib-net"
    namespace: Name = "default"
    range: IPv4Network = "192.168.200.0/24"
    # nv-ipam hands each GPU node a block of this many addresses from `range`.
    per_node_block_size: int = Field(default=64, ge=2, le=65536)


_CNIS = ("cilium", "calico")


def _cni(value: Any) -> Any:
    # Before the Literal check, so that a wrong value gets the whole story, not just the choices.
    if value not in _CNIS:
        raise ValueError(
            f"{value!r} is not allowed; use 'cilium' or 'calico'. Choose it before the cluster's first "
            "`pulumi up`: switching the CNI of a running cluster is unsupported upstream, and the CNI release "
            "is protected, so a preview that would switch it fails (README: Network fabric)"
        )
    return value


def _rdma_resource(value: str) -> str:
    prefix, _, name = value.partition("/")
    if not _HOSTNAME.match(prefix) or not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", name):
        raise ValueError(
            f"{value!r} is not an extended resource name; give '<prefix>/<name>', e.g. 'rdma/ib' "
            "(the RDMA device plugin's resourcePrefix and resourceName)"
        )
    return value


class InfinibandSettings(Model):
    mode: Literal["datagram", "connected"] = "datagram"
    mtu: int = Field(default=2044, ge=576, le=65520)
    # `inbox`: the distribution's rdma-core. `ofed`: NVIDIA's DOCA-OFED driver container, managed
    # by the Network Operator.
    host_stack: Literal["inbox", "ofed"] = "inbox"
    # Tag of nvcr.io/nvidia/mellanox/doca-driver for host_stack `ofed` (the release's own, hack/release.yaml).
    doca_driver_version: Version = "doca3.4.1-26.04-1.1.0.0-1"
    rdma_resource_name: Annotated[str, AfterValidator(_rdma_resource)] = "rdma/ib"
    ipoib_network: IpoibNetwork = IpoibNetwork()


class NetworkSettings(Model):
    cni: Annotated[Literal["cilium", "calico"], BeforeValidator(_cni)] = "cilium"
    cluster_cidr: IPv4Network = "10.42.0.0/16"
    service_cidr: IPv4Network = "10.43.0.0/16"
    kube_proxy_replacement: bool = True
    infiniband: InfinibandSettings = InfinibandSettings()


class GpuDriver(Model):
    # `operator`: the GPU Operator's driver container. `host`: drivers installed on the hosts.
    managed_by: Literal["operator", "host"] = "operator"
    version: Version = "595.91.07"


class TimeSlicing(Model):
    enabled: bool = False
    replicas: int = Field(default=4, ge=2, le=64)


class Tier1Settings(Model):
    storage_class_name: Name = "tier1-nvme"
    mount_root: str = Field(default="/mnt/local-nvme", pattern=r"^/[A-Za-z0-9._/-]+$")
    fs_type: Literal["xfs", "ext4"] = "xfs"
    # Namespace of the local static provisioner (privileged: it mounts host paths and cleans volumes).
    namespace: Name = "tier1-storage"


class GpuSettings(Model):
    namespace: Name = "gpu-operator"
    driver: GpuDriver = GpuDriver()
    time_slicing: TimeSlicing = TimeSlicing()
    tier1: Tier1Settings = Tier1Settings()


class CephSettings(Model):
    namespace: Name = "rook-ceph"
    mon_count: int = Field(default=3, ge=1, le=9)
    block_storage_class: Name = "tier2-block"
    shared_storage_class: Name = "tier2-shared"
    filesystem_name: Name = "tier2fs"
    ceph_image: str = "quay.io/ceph/ceph:v20.2.4"


class MinioSettings(Model):
    version: Version = "RELEASE.2025-09-07T16-13-09Z"


class StorageSettings(Model):
    ceph: CephSettings = CephSettings()
    minio: MinioSettings = MinioSettings()


class SchedulingSettings(Model):
    volcano_namespace: Name = "volcano-system"
    kueue_namespace: Name = "kueue-system"


class MonitoringSettings(Model):
    namespace: Name = "monitoring"


class Chart(Model):
    """A Helm chart at a pinned version. `repository` may point at an internal mirror."""

    name: str = Field(min_length=1)
    version: Version
    repository: Url


class Charts(Model):
    cilium: Chart = Chart(name="cilium", version="1.19.6", repository="https://helm.cilium.io")
    tigera_operator: Chart = Chart(
        name="tigera-operator", version="v3.31.7", repository="https://docs.tigera.io/calico/charts"
    )
    network_operator: Chart = Chart(
        name="network-operator", version="26.4.1", repository="https://helm.ngc.nvidia.com/nvidia"
    )
    gpu_operator: Chart = Chart(name="gpu-operator", version="v26.7.0", repository="https://helm.ngc.nvidia.com/nvidia")
    local_static_provisioner: Chart = Chart(
        name="local-static-provisioner",
        version="2.9.0",
        repository="https://kubernetes-sigs.github.io/sig-storage-local-static-provisioner",
    )
    # Rook v1.19: its operator chart still sets the CSI node plugins' tolerations (csi.pluginTolerations);
    # v1.20 moved them to the separate ceph-csi-drivers chart (components/ceph_tier.py, README "Tier 2").
    rook_ceph: Chart = Chart(name="rook-ceph", version="v1.19.10", repository="https://charts.rook.io/release")
    rook_ceph_cluster: Chart = Chart(
        name="rook-ceph-cluster", version="v1.19.10", repository="https://charts.rook.io/release"
    )
    volcano: Chart = Chart(name="volcano", version="1.15.1", repository="https://volcano-sh.github.io/helm-charts")
    kueue: Chart = Chart(name="kueue", version="0.19.2", repository="oci://registry.k8s.io/kueue/charts")
    zabbix: Chart = Chart(name="zabbix", version="7.0.12", repository="https://zabbix-community.github.io/helm-zabbix")


# ---------------------------------------------------------------------------------------------
# The whole environment
# ---------------------------------------------------------------------------------------------


class Settings(Model):
    cluster: ClusterSettings
    ssh: SshSettings = SshSettings()
    nodes: list[NodeSettings] = Field(min_length=1)
    nas: NasSettings = NasSettings()
    network: NetworkSettings = NetworkSettings()
    gpu: GpuSettings = GpuSettings()
    storage: StorageSettings = StorageSettings()
    scheduling: SchedulingSettings = SchedulingSettings()
    monitoring: MonitoringSettings = MonitoringSettings()
    charts: Charts = Charts()

    @property
    def servers(self) -> list[NodeSettings]:
        return [n for n in self.nodes if n.control_plane]

    @property
    def init_server(self) -> NodeSettings:
        """The server that initialises the cluster (and whose kubeconfig the program reads)."""
        name = self.cluster.init_server or self.servers[0].name
        return next(n for n in self.nodes if n.name == name)

    @property
    def gpu_nodes(self) -> list[NodeSettings]:
        return [n for n in self.nodes if n.role == "gpu"]

    @property
    def cpu_nodes(self) -> list[NodeSettings]:
        return [n for n in self.nodes if n.role == "cpu"]

    @property
    def storage_hosts(self) -> list[NodeSettings]:
        return [n for n in self.nodes if n.storage_host]


# ---------------------------------------------------------------------------------------------
# Loading and cross-field rules
# ---------------------------------------------------------------------------------------------


def load(raw: dict[str, Any]) -> Settings:
    """Validate the raw config (area key -> parsed YAML value) and return the settings.

    Raises SettingsError with every problem found: first the shape and types of every key; when
    those are right, the rules that relate several fields.
    """
    problems = [_unknown_area(key) for key in raw if key not in Settings.model_fields and _alias_field(key) is None]
    known = {k: v for k, v in raw.items() if k not in SECRET_KEYS}
    known = {k: v for k, v in known.items() if _alias_field(k) is not None}
    try:
        settings = Settings.model_validate(known, by_alias=True)
    except ValidationError as exc:
        raise SettingsError(problems + [_describe(err) for err in exc.errors()]) from None
    problems += cross_field_problems(settings)
    if problems:
        raise SettingsError(problems)
    return settings


def _alias_field(alias: str) -> Optional[str]:
    return _aliases(Settings).get(alias)


def _aliases(model: type[BaseModel]) -> dict[str, str]:
    return {(f.alias or name): name for name, f in model.model_fields.items()}


def _unknown_area(key: str) -> str:
    valid = sorted(set(_aliases(Settings)) | set(SECRET_KEYS))
    return f"{NAMESPACE}:{key}: unknown key{_suggest(key, valid)}; valid keys are {', '.join(valid)}"


def _suggest(key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if not close:
        close = [v for v in valid if v.lower() == key.lower()]
    return f" (did you mean '{close[0]}'?)" if close else ""


def _path(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _describe(err: dict) -> str:
    loc = tuple(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        valid = sorted(_aliases(model)) if model else []
        hint = _suggest(str(loc[-1]), valid)
        listing = f"; valid keys here: {', '.join(valid)}" if valid else ""
        return f"{_path(loc)}: unknown key{hint}{listing}"
    if kind == "missing":
        return f"{_path(loc)}: required; add it"
    if kind == "literal_error":
        return f"{_path(loc)}: {err['input']!r} is not allowed; use {err['ctx']['expected']}"
    if kind == "value_error":
        return f"{_path(loc)}: {err['ctx']['error']}"
    if kind.endswith("_type") or kind in ("model_type", "model_attributes_type"):
        return f"{_path(loc)}: {err['msg'].lower()}, got {type(err['input']).__name__} {err['input']!r}"
    return f"{_path(loc)}: {err['msg']}"


def _model_at(loc: tuple) -> Optional[type[BaseModel]]:
    """The settings model that the config path `loc` points into (for unknown-key hints)."""
    current: Any = Settings
    for part in loc:
        current = _unwrap(current)
        if isinstance(part, int):
            args = typing.get_args(current)
            current = args[0] if args else None
        elif isinstance(current, type) and issubclass(current, BaseModel):
            field = _aliases(current).get(part)
            current = current.model_fields[field].annotation if field else None
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    if typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp


def cross_field_problems(s: Settings) -> list[str]:
    """Rules that relate several fields. Each problem names its path and the fix."""
    problems: list[str] = []
    add = problems.append

    names = Counter(n.name for n in s.nodes) + Counter(h.name for h in s.nas.hosts)
    addresses = Counter(n.address for n in s.nodes) + Counter(h.address for h in s.nas.hosts)
    for i, node in enumerate(s.nodes):
        if names[node.name] > 1:
            add(f"nodes[{i}].name: {node.name!r} is used by more than one host; names must be unique")
        if addresses[node.address] > 1:
            add(f"nodes[{i}].address: {node.address!r} is used by more than one host; addresses must be unique")
    for i, host in enumerate(s.nas.hosts):
        if names[host.name] > 1:
            add(f"nas.hosts[{i}].name: {host.name!r} is used by more than one host; names must be unique")
        if addresses[host.address] > 1:
            add(f"nas.hosts[{i}].address: {host.address!r} is used by more than one host; addresses must be unique")

    _control_plane_problems(s, add)
    _node_hardware_problems(s, add)
    _network_problems(s, add)
    _storage_problems(s, add)

    if not s.ssh.allow_unpinned_host_keys:
        for i, node in enumerate(s.nodes):
            if node.host_key is None:
                add(
                    f"nodes[{i}].hostKey: node {node.name!r} has no pinned host key; add the host's "
                    "'ssh-ed25519 AAAA...' key (ssh-keyscan -t ed25519 <address>), or set "
                    "ssh.allowUnpinnedHostKeys: true to accept any key (unsafe outside a lab)"
                )
        for i, host in enumerate(s.nas.hosts):
            if host.host_key is None:
                add(
                    f"nas.hosts[{i}].hostKey: NAS host {host.name!r} has no pinned host key; add it, or set "
                    "ssh.allowUnpinnedHostKeys: true"
                )
        if s.ssh.bastion is not None and s.ssh.bastion.host_key is None:
            add(
                "ssh.bastion.hostKey: the bastion has no pinned host key; add it, "
                "or set ssh.allowUnpinnedHostKeys: true"
            )

    return problems


def _control_plane_problems(s: Settings, add) -> None:
    servers = s.servers
    if len(servers) not in (1, 3, 5):
        add(
            f"nodes: {len(servers)} control-plane servers ({', '.join(n.name for n in servers) or 'none'}); "
            "etcd needs an odd number: set controlPlane: true on exactly 1, 3 or 5 CPU nodes "
            "(removing a server must leave an odd number)"
        )
    for i, node in enumerate(s.nodes):
        if node.control_plane and node.role != "cpu":
            add(f"nodes[{i}].controlPlane: {node.name!r} is a GPU node; control-plane servers must be CPU nodes")
    if s.cluster.init_server is not None and s.cluster.init_server not in {n.name for n in servers}:
        add(
            f"cluster.initServer: {s.cluster.init_server!r} is not a control-plane node; name one of "
            f"{', '.join(n.name for n in servers) or '(none)'}"
        )
    if s.cluster.virtual_ip is not None:
        if not _looks_like_ipv4(s.cluster.api_endpoint):
            add(
                "cluster.apiEndpoint: with cluster.virtualIp the endpoint is the virtual IP itself; "
                "give an IPv4 address"
            )
        elif s.cluster.api_endpoint in {n.address for n in s.nodes}:
            add("cluster.apiEndpoint: the virtual IP must not be a node's own address; pick a free address")


def _node_hardware_problems(s: Settings, add) -> None:
    ib_addresses = Counter(n.infiniband.address for n in s.nodes if n.infiniband)
    for i, node in enumerate(s.nodes):
        if node.role == "gpu":
            if node.infiniband is None:
                add(
                    f"nodes[{i}].infiniband: GPU node {node.name!r} has no InfiniBand settings; "
                    "add interface and address"
                )
            if node.gpu is None:
                add(f"nodes[{i}].gpu: GPU node {node.name!r} has no gpu settings; add model and count")
            if node.osd_devices:
                add(f"nodes[{i}].osdDevices: {node.name!r} is a GPU node; Ceph OSDs run on CPU nodes only, remove them")
        else:
            if node.infiniband is not None:
                add(
                    f"nodes[{i}].infiniband: {node.name!r} is a CPU node; "
                    "InfiniBand is configured on GPU nodes only, remove it"
                )
            if node.gpu is not None:
                add(f"nodes[{i}].gpu: {node.name!r} is a CPU node; remove gpu or set role: gpu")
            if node.nvme:
                add(
                    f"nodes[{i}].nvme: {node.name!r} is a CPU node; tier-1 NVMe volumes live on GPU nodes only, "
                    "remove them (use osdDevices for Ceph disks)"
                )
        if node.infiniband and ib_addresses[node.infiniband.address] > 1:
            add(
                f"nodes[{i}].infiniband.address: {node.infiniband.address!r} is used by more than one node; "
                "must be unique"
            )
        for field, devices in (
            ("nvme", [d.device for d in node.nvme]),
            ("osdDevices", [d.device for d in node.osd_devices]),
        ):
            seen = Counter(devices)
            for j, device in enumerate(devices):
                if seen[device] > 1:
                    add(f"nodes[{i}].{field}[{j}].device: {device!r} is listed twice on {node.name!r}; list it once")
        for j, dev in enumerate(node.nvme):
            if dev.force and not dev.format:
                add(f"nodes[{i}].nvme[{j}].force: force only applies with format: true; set format: true or drop force")
        # Each tier-1 device is mounted at gpu.tier1.mountRoot/<device basename>: basenames must differ.
        basenames = Counter(path.rsplit("/", 1)[1] for path in {d.device for d in node.nvme})
        for j, dev in enumerate(node.nvme):
            base = dev.device.rsplit("/", 1)[1]
            if basenames[base] > 1:
                add(
                    f"nodes[{i}].nvme[{j}].device: {dev.device!r} has the same name {base!r} as another device on "
                    f"{node.name!r}; both would mount at gpu.tier1.mountRoot/{base}; use paths whose last parts differ"
                )
    for i, host in enumerate(s.nas.hosts):
        seen = Counter(host.drives)
        for j, drive in enumerate(host.drives):
            if seen[drive] > 1:
                add(f"nas.hosts[{i}].drives[{j}]: {drive!r} is listed twice on {host.name!r}; list it once")


def _network_problems(s: Settings, add) -> None:
    cluster = ipaddress.IPv4Network(s.network.cluster_cidr)
    service = ipaddress.IPv4Network(s.network.service_cidr)
    if cluster.overlaps(service):
        add(f"network.serviceCidr: {service} overlaps network.clusterCidr {cluster}; choose disjoint ranges")
    for field, net in (("clusterCidr", cluster), ("serviceCidr", service)):
        inside = [n for n in s.nodes if ipaddress.IPv4Address(n.address) in net]
        if inside:
            add(
                f"network.{field}: {net} contains node {inside[0].name!r}'s address {inside[0].address} "
                f"({len(inside)} node(s) in all); choose a range the hosts do not use"
            )
    # RKE2 (kube-controller-manager) and Cilium's cluster-pool IPAM give every node a /24 of clusterCidr.
    if cluster.prefixlen > 24:
        add(f"network.clusterCidr: {cluster} is smaller than one node's /24 pod range; use e.g. a /16")
    elif len(s.nodes) > 2 ** (24 - cluster.prefixlen):
        add(
            f"network.clusterCidr: {cluster} holds {2 ** (24 - cluster.prefixlen)} per-node /24 pod ranges but "
            f"there are {len(s.nodes)} nodes; choose a larger range (e.g. a /{24 - (len(s.nodes) - 1).bit_length()})"
        )
    ib = s.network.infiniband
    if ib.mode == "datagram" and ib.mtu > 4092:
        add(
            f"network.infiniband.mtu: {ib.mtu} is above 4092, the largest IPoIB MTU in datagram mode; "
            "lower it (2044 for a 2K IB MTU, 4092 for 4K) or set network.infiniband.mode: connected"
        )
    ipoib = ib.ipoib_network
    if ipoib.enabled:
        net = ipaddress.IPv4Network(ipoib.range)
        for node in s.nodes:
            if node.infiniband and ipaddress.IPv4Address(node.infiniband.address) in net:
                add(
                    f"network.infiniband.ipoibNetwork.range: {net} contains the host IB address of {node.name!r} "
                    f"({node.infiniband.address}); pods would get addresses the hosts use"
                )
        gpu_nodes = s.gpu_nodes
        if len(gpu_nodes) * ipoib.per_node_block_size > net.num_addresses - 2:
            add(
                f"network.infiniband.ipoibNetwork.perNodeBlockSize: {len(gpu_nodes)} GPU nodes x "
                f"{ipoib.per_node_block_size} addresses do not fit in {net} ({net.num_addresses - 2} usable); "
                "lower the block size or widen the range"
            )
        interfaces = Counter(n.infiniband.interface for n in gpu_nodes if n.infiniband)
        if len(interfaces) > 1:
            common = interfaces.most_common(1)[0][0]
            for i, node in enumerate(s.nodes):
                if node.infiniband and node.role == "gpu" and node.infiniband.interface != common:
                    add(
                        f"nodes[{i}].infiniband.interface: {node.infiniband.interface!r} differs from {common!r} "
                        "on the other GPU nodes; the IPoIB network (network.infiniband.ipoibNetwork) attaches "
                        "pods through one interface name on every GPU node: rename it (udev) or disable the network"
                    )


def _storage_problems(s: Settings, add) -> None:
    if not s.storage_hosts:
        return  # no Ceph tier in this environment
    mons = s.storage.ceph.mon_count
    hosts = len(s.storage_hosts)
    if hosts < 3:
        add(
            f"nodes: {hosts} Ceph storage host(s); replicated pools of size 3 with failure domain 'host' need at "
            "least 3 CPU nodes with osdDevices"
        )
    if mons % 2 == 0 or mons < 3:
        add(f"storage.ceph.monCount: {mons}; MON quorum needs an odd count of at least 3 (3 or 5)")
    if mons > hosts:
        add(f"storage.ceph.monCount: {mons} MONs but only {hosts} storage hosts; MONs need distinct hosts, lower it")
    ceph = s.storage.ceph
    if ceph.block_storage_class == ceph.shared_storage_class:
        add(
            f"storage.ceph.sharedStorageClass: {ceph.shared_storage_class!r} is also the block storage class; "
            "give the CephFS and RBD storage classes different names"
        )
    for field, name in (
        ("blockStorageClass", ceph.block_storage_class),
        ("sharedStorageClass", ceph.shared_storage_class),
    ):
        if name == s.gpu.tier1.storage_class_name:
            add(f"storage.ceph.{field}: {name!r} is also gpu.tier1.storageClassName; give tier 2 its own name")
    if not re.fullmatch(r"([^\s@]+/)?[^\s@:/]+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", ceph.ceph_image):
        add(
            f"storage.ceph.cephImage: {ceph.ceph_image!r} is not '<repository>:<tag>'; give a pinned tag such as "
            "'quay.io/ceph/ceph:v20.2.4' (the Rook cluster chart takes repository and tag separately)"
        )
    # The CephTier values are written for the Rook v1.19 charts (CSI tolerations in the operator chart).
    for field, chart in (("rookCeph", s.charts.rook_ceph), ("rookCephCluster", s.charts.rook_ceph_cluster)):
        if not re.fullmatch(r"v?1\.19\.\d+", chart.version):
            add(
                f"charts.{field}.version: {chart.version!r} is not a Rook v1.19 release; this program configures "
                "Ceph-CSI through the v1.19 operator chart (v1.20 moved it to the ceph-csi-drivers chart), "
                "use e.g. 'v1.19.10'"
            )
    if s.charts.rook_ceph.version != s.charts.rook_ceph_cluster.version:
        add(
            f"charts.rookCephCluster.version: {s.charts.rook_ceph_cluster.version!r} differs from "
            f"charts.rookCeph.version {s.charts.rook_ceph.version!r}; install both charts of the same Rook release"
        )
