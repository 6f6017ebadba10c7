"""Field types shared by every area, each with its own check, and the base model.

Each check raises ValueError with the fix in the message; `settings.root` turns those into
`path: problem; fix` lines. Each check's docstring is the constraint that the generated settings
reference (docs/settings.md, `make docs`) shows for the fields of its type.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

_UNPINNED = {"", "latest", "stable", "main", "master", "head", "edge", "nightly", "*"}


def _pinned(value: str) -> str:
    """A pinned version: no `latest`, range or wildcard."""
    if value.strip().lower() in _UNPINNED or any(c in value for c in "*^~<> ") or value.endswith(".x"):
        raise ValueError(f"{value!r} is not a pinned version; give an exact version such as '1.2.3'")
    return value


def _ipv4(value: str) -> str:
    """An IPv4 address."""
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 address; write four numbers 0-255, e.g. '10.20.1.7'") from None
    return value


def _ipv4_network(value: str) -> str:
    """An IPv4 network in CIDR form, e.g. `10.42.0.0/16`."""
    try:
        ipaddress.IPv4Network(value, strict=True)
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 network in CIDR form, e.g. '10.42.0.0/16'") from None
    return value


_DEVICE = re.compile(r"^/dev/[A-Za-z0-9][A-Za-z0-9._:+@/-]*$")


def _device_path(value: str) -> str:
    """An absolute device path under `/dev`."""
    if not _DEVICE.match(value) or "/../" in value or value.endswith("/.."):
        raise ValueError(
            f"{value!r} is not a device path; give an absolute path under /dev, "
            "e.g. '/dev/nvme1n1' or '/dev/disk/by-id/wwn-0x5002538f4200a1b1'"
        )
    return value


# Names the kernel hands out in probe order (/dev/sdb, /dev/nvme1n1, /dev/vdc, ...): after a reboot, a
# disk added, removed or probed later can take another disk's name. /dev/disk/by-id names carry the
# model and serial (or WWN) and always point at the same disk.
_KERNEL_NAME = re.compile(r"^/dev/((sd|hd|vd|xvd)[a-z]+\d*|nvme\d+n\d+(p\d+)?|dm-\d+|md\d+)$")


def is_kernel_name(path: str) -> bool:
    """True for a probe-order kernel name such as /dev/sdb or /dev/nvme1n1."""
    return bool(_KERNEL_NAME.match(path))


def kernel_name_problem(field_path: str, path: str, action: str) -> str:
    """The error for a kernel name on a device the program destroys (`action`: 'format: true', 'wipe: true').
    Reusable for any device list (tier-1 NVMe, Ceph OSDs, NAS drives)."""
    name = path.rsplit("/", 1)[1]
    return (
        f"{field_path}: {path!r} is a kernel name and the device is marked {action}; kernel names follow probe "
        "order and can point at another disk after a reboot, which would then be destroyed. Use its stable "
        f"/dev/disk/by-id path (on the host: ls -l /dev/disk/by-id/ | grep -w {name}), e.g. "
        "'/dev/disk/by-id/nvme-<model>_<serial>' or '/dev/disk/by-id/wwn-0x...'"
    )


def kernel_name_warning(field_path: str, path: str) -> str:
    """The warning for a kernel name on a device the program only reads or mounts."""
    return (
        f"{field_path}: {path!r} is a kernel name that can change across reboots; prefer its /dev/disk/by-id path "
        "(nothing is destroyed through it, so this is a warning)"
    )


_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _dns_label(value: str) -> str:
    """An RFC 1123 name: lower-case letters, digits and `-`, at most 63 characters."""
    if not _DNS_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a valid name; use lower-case letters, digits and '-', "
            "starting and ending with a letter or digit (RFC 1123, at most 63 characters)"
        )
    return value


HOSTNAME = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")


def _host(value: str) -> str:
    """An IPv4 address or a DNS name."""
    if looks_like_ipv4(value):
        return _ipv4(value)
    if not HOSTNAME.match(value):
        raise ValueError(f"{value!r} is neither an IPv4 address nor a DNS name, e.g. 'api.ml.example.internal'")
    return value


def looks_like_ipv4(value: str) -> bool:
    return bool(re.fullmatch(r"[0-9.]+", value))


_HOST_KEY = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+={0,2}$")


def _host_key(value: str) -> str:
    """An SSH public host key, `<type> <base64>`."""
    if not _HOST_KEY.match(value.strip()):
        raise ValueError(
            "not an SSH public host key; give '<type> <base64>' as in the host's "
            "/etc/ssh/ssh_host_ed25519_key.pub, e.g. 'ssh-ed25519 AAAAC3Nza...'"
        )
    return value.strip()


def url(value: str) -> str:
    """An `https://`, `http://` or `oci://` URL."""
    if not re.match(r"^(https?|oci)://[^\s/]+", value):
        raise ValueError(f"{value!r} is not a URL; give 'https://host/path' (or 'oci://registry/path' for OCI charts)")
    return value.rstrip("/")


def _rke2_version(value: str) -> str:
    """An RKE2 release tag, `v1.<minor>.<patch>+rke2r<n>`."""
    _pinned(value)
    if not re.fullmatch(r"v1\.\d+\.\d+\+rke2r\d+", value):
        raise ValueError(f"{value!r} is not an RKE2 release; give a tag such as 'v1.35.7+rke2r1'")
    return value


_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _label_key(value: str) -> str:
    """A Kubernetes label key, e.g. `example.com/team`."""
    if not _LABEL_KEY.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes label key, e.g. 'example.com/team'")
    return value


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


def _label_value(value: str) -> str:
    """A Kubernetes label value: at most 63 letters, digits, `-`, `_`, `.`."""
    if not _LABEL_VALUE.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes label value; at most 63 of letters, digits, '-', '_', '.'")
    return value


def _sha256(value: str) -> str:
    """A sha256 digest: 64 lower-case hex digits."""
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError(f"{value!r} is not a sha256; give the 64 lower-case hex digits `sha256sum FILE` prints")
    return value


Version = Annotated[str, AfterValidator(_pinned)]
Sha256 = Annotated[str, AfterValidator(_sha256)]
IPv4 = Annotated[str, AfterValidator(_ipv4)]
IPv4Network = Annotated[str, AfterValidator(_ipv4_network)]
DevicePath = Annotated[str, AfterValidator(_device_path)]
Name = Annotated[str, AfterValidator(_dns_label)]
Host = Annotated[str, AfterValidator(_host)]
HostKey = Annotated[str, AfterValidator(_host_key)]
Url = Annotated[str, AfterValidator(url)]
Port = Annotated[int, Field(ge=1, le=65535)]
LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]
Rke2Version = Annotated[str, AfterValidator(_rke2_version)]


class Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        frozen=True,
        strict=True,
    )
