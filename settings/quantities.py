"""Quantities, byte sizes, durations and versions: one parser each, shared by the settings checks (`settings.types`
gives the field types) and the review's diff (`stacks.diff`), which compares two values of a field by what they mean,
not as text: a quota lowered from `100Ti` to `20Ti` is a decrease, `v20.2.4` -> `v19.2.3` a downgrade.

Each field type declares its order (`Ordered`); tests/test_declarations.py fails on a version field without one.
"""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Optional

from pydantic.fields import FieldInfo

# Kubernetes' quantity suffixes (k8s.io/apimachinery/pkg/api/resource/suffix.go: decimal SI `m` .. `E`, binary
# `Ki` .. `Ei`, and a decimal exponent `e`/`E`).
QUANTITY_SUFFIXES: dict[str, Fraction] = {
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    **{s: Fraction(2 ** (10 * i)) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1)},
}
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei))?$"
)


def parse_quantity(value: str) -> Fraction:
    """A Kubernetes quantity as an exact number (`100Ti` -> 109951162777600, `500m` -> 1/2); ValueError otherwise."""
    match = _QUANTITY.match(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity; write e.g. '512Gi', '2Ti', '500m' or '64'")
    number, exponent, suffix = match.groups()
    if exponent:
        return Fraction(number) * Fraction(10) ** int(exponent[1:])
    return Fraction(number) * QUANTITY_SUFFIXES[suffix or ""]


def _quantity(value: str) -> str:
    """A Kubernetes quantity: a number with an optional unit (`m`, `k`, `M`, `G`, `T`, `P`, `Ki` ... `Ei`)."""
    if parse_quantity(value) < 0:
        raise ValueError(f"{value!r} is negative; a quantity here is an amount, write e.g. '512Gi'")
    return value


BYTE_UNITS = ("k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def _byte_size(value: str) -> str:
    """An amount of memory or storage with its unit (`Ki` ... `Ei` or `k` ... `E`), e.g. `512Gi`; a bare number would
    be bytes and `m` thousandths of a byte."""
    _quantity(value)
    match = _QUANTITY.match(value.strip())
    assert match is not None
    if match[3] not in BYTE_UNITS and parse_quantity(value) != 0:  # nothing is nothing in any unit
        read = "thousandths of a byte" if match[3] == "m" else "bytes"
        raise ValueError(
            f"{value!r} has no byte unit: Kubernetes reads it as {parse_quantity(value)} {read}; write the unit, "
            f"e.g. '{match[1]}Gi' (binary: Ki, Mi, Gi, Ti, Pi) or '{match[1]}G' (decimal)"
        )
    return value


# Go's time.ParseDuration units (what Kubernetes and Kueue read in a duration field).
DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?)(ns|us|µs|ms|s|m|h)")


def parse_duration(value: str) -> float:
    """A Go duration (`90s`, `1h30m`, `15m`) in seconds; ValueError otherwise."""
    text = value.strip() if isinstance(value, str) else ""
    if not text or _DURATION.sub("", text) != "":
        raise ValueError(f"{value!r} is not a duration; write e.g. '90s', '15m' or '1h30m' (units ns us ms s m h)")
    return sum(float(n) * DURATION_UNITS[u] for n, u in _DURATION.findall(text))


def _duration(value: str) -> str:
    """A duration with its units, e.g. `90s`, `15m`, `1h30m` (Go's `time.ParseDuration`)."""
    parse_duration(value)
    return value


@dataclass(frozen=True)
class Ordered:
    """The field's values have an order, so that the review names a change down it (a version downgrade, a
    quantity lowered): `key(value)` is a comparable key, or None where a value has no place in the order (an image
    pinned by digest alone). `what` words a step down (`downgrade`, `lowered`)."""

    key: Any
    what: str

    def __repr__(self) -> str:
        return f"Ordered({self.what})"


def version_key(value: Any) -> Optional[tuple[int, ...]]:
    """A version's order: its numbers in turn (`v1.35.7+rke2r1` -> (1, 35, 7, 1); an epoch `1:7.0.16-1` first);
    None without one. Two versions of one component are written alike, so the numbers compare in place."""
    if not isinstance(value, str):
        return None
    numbers = tuple(int(n) for n in re.findall(r"[0-9]+", value))
    return numbers or None


def image_version_key(value: Any) -> Optional[tuple[int, ...]]:
    """An image's tag order (`quay.io/ceph/ceph:v20.2.4` -> (20, 2, 4)); None for a digest-only reference."""
    if not isinstance(value, str):
        return None
    repository = value.partition("@")[0]
    last = repository.rsplit("/", 1)[-1]
    return version_key(last.rpartition(":")[2]) if ":" in last else None


def quantity_key(value: Any) -> Optional[Fraction]:
    try:
        return parse_quantity(value)
    except (ValueError, TypeError):
        return None


def duration_key(value: Any) -> Optional[float]:
    try:
        return parse_duration(value)
    except ValueError:
        return None


VERSION_ORDER = Ordered(version_key, "downgrade")
IMAGE_ORDER = Ordered(image_version_key, "downgrade")
QUANTITY_ORDER = Ordered(quantity_key, "lowered")
DURATION_ORDER = Ordered(duration_key, "shortened")


def ordered_by(info: FieldInfo) -> Optional[Ordered]:
    """The order a field's type declares (on the field, its items or a dict's values), if any."""
    found = [m for m in info.metadata if isinstance(m, Ordered)]
    stack = [info.annotation]
    while stack and not found:
        tp = stack.pop()
        found = [m for m in getattr(tp, "__metadata__", ()) if isinstance(m, Ordered)]
        stack += list(typing.get_args(tp))
    return found[0] if found else None


def compared(order: Ordered, old: Any, new: Any) -> Optional[int]:
    """-1 when `new` is below `old` in the order, 1 above, 0 equal, None when either has no place in it."""
    a, b = order.key(old), order.key(new)
    if a is None or b is None:
        return None
    return (b > a) - (b < a)
