"""What a rule is: a check over the validated settings, with the areas it reads (settings.partial)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from settings.root import Settings

Add = Callable[[str], None]


@dataclass(frozen=True)
class Rule:
    """A group of rules. `reads`: the top-level areas it looks at; `whole`: those whose lists it counts or
    compares as a whole (a count, a sum, "none has...", "which one is..."); `checks`: what it checks,
    said when it waits because an item or area it needs failed validation (settings.partial)."""

    check: Callable[[Settings, Callable[[str], None]], None]
    checks: str
    reads: frozenset[str]
    whole: frozenset[str] = frozenset()


EVERY_AREA = frozenset({"*"})


def rule(check, checks: str, reads: str, whole: str = "") -> Rule:
    return Rule(check, checks, EVERY_AREA if reads == "*" else frozenset(reads.split()), frozenset(whole.split()))
