"""Field types shared by every area, each with its own check, and the base model.

Each check raises ValueError with the fix in the message; `settings.root` turns those into
`path: problem; fix` lines. Each check's docstring is the constraint that the generated settings
reference (docs/settings.md, `make docs`) shows for the fields of its type.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from settings.declare import Claim
from settings.quantities import (
    DURATION_ORDER,
    IMAGE_ORDER,
    QUANTITY_ORDER,
    VERSION_ORDER,
    _byte_size,
    _duration,
    _quantity,
)

_UNPINNED = {"", "latest", "stable", "main", "master", "head", "edge", "nightly", "trunk", "*"}


def _moving(tag: str) -> bool:
    """A tag with a moving part (`ubuntu-7.0-latest`, `3.21-stable`): it names another build tomorrow."""
    return any(part in _UNPINNED - {""} for part in re.split(r"[-_.+:]", tag.strip().lower()))


def _pinned(value: str) -> str:
    """A pinned version: no `latest`, range or wildcard, and no moving tag such as `ubuntu-7.0-latest`."""
    if value.strip().lower() in _UNPINNED or any(c in value for c in "*^~<>! |") or _moving(value):
        raise ValueError(f"{value!r} is not a pinned version; give an exact version such as '1.2.3'")
    if re.search(r"(^|\.)[xX](\.|$)", value):
        raise ValueError(f"{value!r} is a wildcard version; give an exact version such as '1.2.3'")
    return value


_SEMVER = re.compile(r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")


def _chart_version(value: str) -> str:
    """An exact chart version, `MAJOR.MINOR.PATCH` (SemVer 2; a leading `v` as the chart publishes it)."""
    _pinned(value)
    if not _SEMVER.match(value):
        # Helm reads the version as a constraint and, without an exact match, installs the newest release that
        # satisfies it (helm/helm pkg/repo/v1/index.go, IndexFile.Get: "falling back to closest available version").
        raise ValueError(
            f"{value!r} is not an exact chart version: Helm reads it as a range and installs the newest release it "
            "matches ('1.2' means any 1.2.x); give all three numbers, e.g. '1.2.3'"
        )
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


# Query parameters and path forms that carry a credential: Slack incoming webhooks
# (hooks.slack.com/services/T../B../<token>), Mattermost incoming webhooks (/hooks/<26-char id>), signed URLs.
_CREDENTIAL_QUERY = re.compile(r"[?&](token|access_token|key|apikey|api_key|secret|password|sig|signature)=", re.I)
_WEBHOOK_PATH = re.compile(r"^https?://(hooks\.slack\.com/services/|[^/]+/hooks/[a-z0-9]{26}\b)", re.I)


def url(value: str) -> str:
    """An `https://` URL (or `oci://` for OCI chart registries), carrying no credential."""
    match = re.match(r"^(https|oci|http)://([^\s/]+)", value)
    if not match:
        raise ValueError(f"{value!r} is not a URL; give 'https://host/path' (or 'oci://registry/path' for OCI charts)")
    if "@" in match[2] or _CREDENTIAL_QUERY.search(value) or _WEBHOOK_PATH.match(value):
        raise ValueError(
            "the URL carries a credential (user:password@, a token parameter or a webhook secret path), which would "
            "sit in plain text in the stack file and the state; give the URL without it and set the credential "
            "as a secret with `pulumi config set --secret` (see docs/settings.md, Secrets)"
        )
    if match[1] == "http":
        raise ValueError(
            f"{value!r} is plain http: what it serves (binaries, charts, keys, packages, alerts) could be read or "
            "changed on the way; give the https:// URL of the same server (an internal mirror with TLS)"
        )
    return value.rstrip("/")


# Bounds as robfig/cron v3 (ParseStandard) reads them: Kubernetes CronJob and RKE2 both use it; day of week
# 0-6 (Sunday 0), names case-insensitive.
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_CRON_FIELDS = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, {m: i for i, m in enumerate(_MONTHS, 1)}),
    ("day of week", 0, 6, {d: i for i, d in enumerate(_WEEKDAYS)}),
)
# The longest month of each month number, to refuse a day that never comes (`0 0 31 2 *`).
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _cron_values(text: str, name: str, low: int, high: int, names: dict[str, int]) -> set[int]:
    """The values one cron field selects; ValueError naming the field and the fix."""
    selected: set[int] = set()
    for part in text.split(","):
        span, _, step_text = part.partition("/")
        if step_text and not step_text.isdigit() or step_text == "0" or (not step_text and "/" in part):
            raise ValueError(f"{name} {part!r}: the step after '/' must be a whole number of at least 1")
        step = int(step_text) if step_text else 1
        if span == "*":
            first, last = low, high
        else:
            bounds = span.split("-")
            if len(bounds) > 2 or not all(bounds):
                raise ValueError(f"{name} {part!r} is not a number, a range 'a-b' or '*'")
            values = []
            for bound in bounds:
                number = names.get(bound.upper()) if not bound.isdigit() else int(bound)
                if number is None:
                    known = f" or a name ({', '.join(names)})" if names else ""
                    raise ValueError(f"{name} {bound!r} is not a number{known}")
                if not low <= number <= high:
                    raise ValueError(f"{name} {number} is out of range; use {low}-{high}")
                values.append(number)
            first, last = values[0], values[-1]
            if first > last:
                raise ValueError(f"{name} range {span!r} runs backwards; write it low-high")
            if step_text and len(bounds) == 1:
                last = high  # `5/15` means from 5 to the end, every 15
        selected.update(range(first, last + 1, step))
    return selected


def cron(value: str) -> str:
    """A five-field cron schedule (minute hour day-of-month month day-of-week; ranges, steps, lists, names)."""
    fields = value.split()
    if value.startswith("@") or len(fields) != 5:
        raise ValueError(
            f"{value!r} is not a five-field cron schedule (minute hour day-of-month month day-of-week), "
            "e.g. '30 1 * * *' for 01:30 every day; descriptors such as @daily and a seconds field are not "
            "read the same way by every scheduler that runs it (Kubernetes CronJob, RKE2)"
        )
    selected = []
    for text, (name, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        try:
            selected.append(_cron_values(text, name, low, high, names))
        except ValueError as exc:
            raise ValueError(f"{value!r}: {exc}") from None
    days, months = selected[2], selected[3]
    if fields[4] == "*" and fields[2] != "*" and all(min(days) > _MONTH_DAYS[m - 1] for m in months):
        raise ValueError(f"{value!r} never runs: no month it names has day {min(days)}; fix the day or the month")
    return value


def _image(value: str) -> str:
    """A container image pinned by tag or digest: `registry/repository:tag` or `...@sha256:<64 hex>`."""
    repository, at, digest = value.partition("@")
    if at:
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise ValueError(f"{value!r}: the digest after '@' must be 'sha256:' and 64 lower-case hex digits")
        _not_placeholder(digest.removeprefix("sha256:"), f"{value!r}: the digest")
    name, colon, tag = repository.rpartition(":") if ":" in repository.rsplit("/", 1)[-1] else (repository, "", "")
    if not re.fullmatch(r"[a-z0-9]+([._/-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*", name or repository):
        raise ValueError(f"{value!r} is not an image reference, e.g. 'quay.io/ceph/ceph:v20.2.4'")
    if not at and (not colon or tag.lower() in _UNPINNED or _moving(tag)):
        raise ValueError(
            f"{value!r} is not pinned: give a version tag or a digest (e.g. 'docker.io/rclone/rclone:1.75.0'), "
            "never 'latest', so the same settings run the same software"
        )
    return value


def _rke2_version(value: str) -> str:
    """An RKE2 release tag, `v1.<minor>.<patch>+rke2r<n>`."""
    _pinned(value)
    if not re.fullmatch(r"v1\.\d+\.\d+\+rke2r\d+", value):
        raise ValueError(f"{value!r} is not an RKE2 release; give a tag such as 'v1.35.7+rke2r1'")
    return value


def _not_placeholder(digest: str, what: str) -> None:
    """A digest nobody computed: one digit repeated, a short pattern repeated, or very few distinct digits
    (a real sha256 shows 9 or more of the 16 hex digits except with probability below 1e-15)."""
    periodic = any(len(digest) % n == 0 and digest == digest[:n] * (len(digest) // n) for n in range(1, 17))
    if periodic or len(set(digest)) < 9:
        raise ValueError(
            f"{what} looks like a placeholder, not a computed digest; give the real one "
            "(`sha256sum FILE`, or the digest the publisher lists)"
        )


def _sha256(value: str) -> str:
    """A sha256 digest: 64 lower-case hex digits, computed (not a placeholder such as all zeros)."""
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError(f"{value!r} is not a sha256; give the 64 lower-case hex digits `sha256sum FILE` prints")
    _not_placeholder(value, repr(value))
    return value


class SecretMark:
    """Marks a field as a credential: it is read only from a secret config key, never from plain config."""

    def __repr__(self) -> str:
        return "Secret"


SECRET = SecretMark()


def _matching(pattern: str, accepts: str, problem: str) -> AfterValidator:
    """A check that `pattern` matches the whole value. `accepts`, its docstring, is what the settings
    reference says it accepts; `problem` follows the value in the error."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.match(value):
            raise ValueError(f"{value!r} {problem}")
        return value

    check.__doc__ = accepts
    return AfterValidator(check)


Version = Annotated[str, AfterValidator(_pinned), VERSION_ORDER]
Sha256 = Annotated[str, AfterValidator(_sha256)]
IPv4 = Annotated[str, AfterValidator(_ipv4)]
IPv4Network = Annotated[str, AfterValidator(_ipv4_network)]
DevicePath = Annotated[str, AfterValidator(_device_path)]
Name = Annotated[
    str,
    _matching(
        r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
        "An RFC 1123 name: lower-case letters, digits and `-`, at most 63 characters.",
        "is not a valid name; use lower-case letters, digits and '-', "
        "starting and ending with a letter or digit (RFC 1123, at most 63 characters)",
    ),
]
Host = Annotated[str, AfterValidator(_host)]
HostKey = Annotated[str, AfterValidator(_host_key)]
Url = Annotated[str, AfterValidator(url)]
Cron = Annotated[str, AfterValidator(cron)]
Image = Annotated[str, AfterValidator(_image), IMAGE_ORDER]
# A credential: declared in `settings.secrets`, set with `pulumi config set --secret`, never in the model's values.
Secret = Annotated[Optional[str], SECRET]
Port = Annotated[int, Field(ge=1, le=65535)]
LabelKey = Annotated[
    str,
    _matching(
        r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
        "A Kubernetes label key, e.g. `example.com/team`.",
        "is not a Kubernetes label key, e.g. 'example.com/team'",
    ),
]
LabelValue = Annotated[
    str,
    _matching(
        r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$",
        "A Kubernetes label value: at most 63 letters, digits, `-`, `_`, `.`.",
        "is not a Kubernetes label value; at most 63 of letters, digits, '-', '_', '.'",
    ),
]
Rke2Version = Annotated[str, AfterValidator(_rke2_version), VERSION_ORDER]
# Claim types: a field typed by one of these holds its claim without writing one (`settings.declare`).
Namespace = Annotated[Name, Claim("namespace")]
Bucket = Annotated[Name, Claim("bucket")]
StorageClassName = Annotated[Name, Claim("storage-class")]
ChartVersion = Annotated[str, AfterValidator(_chart_version), VERSION_ORDER]
# Amounts: compared by value in the rules and in the review (a quota lowered from 100Ti to 20Ti is a decrease).
Quantity = Annotated[str, AfterValidator(_quantity), QUANTITY_ORDER]
ByteSize = Annotated[str, AfterValidator(_byte_size), QUANTITY_ORDER]
Duration = Annotated[str, AfterValidator(_duration), DURATION_ORDER]


class Model(BaseModel):
    """The base of every settings model. A field's description is the docstring under the field, one paragraph
    wrapped to the line length; the settings reference and the JSON Schema show it as one line. A field typed by
    a section whose keys all have defaults, and given no default of its own, defaults to that section's defaults
    (`ssh: SshSettings` means `ssh: SshSettings = SshSettings()`): leaving the section out means the defaults."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        frozen=True,
        strict=True,
        use_attribute_docstrings=True,
    )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        # pydantic keeps a wrapped docstring's line breaks (inspect.cleandoc): join the lines again, and rebuild
        # the model so that its JSON Schema, made from the schema built before this hook, says the same.
        wrapped = [field for field in cls.model_fields.values() if "\n" in (field.description or "")]
        for field in wrapped:
            field.description = field.description.replace("\n", " ")
        sections = [field for field in cls.model_fields.values() if _section_default(field) is not None]
        for field in sections:
            field.default = _section_default(field)
        if wrapped or sections:
            cls.model_rebuild(force=True)
        super().__pydantic_init_subclass__(**kwargs)


def _section_default(field: FieldInfo) -> Optional[Model]:
    """The default of a field without one whose type is a section that builds from its defaults alone."""
    section = field.annotation
    if not field.is_required() or not (isinstance(section, type) and issubclass(section, Model)):
        return None
    if any(f.is_required() for f in section.model_fields.values()):
        return None
    return section()
