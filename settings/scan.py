"""Credentials found by what a value looks like, not by the name of its key: every plain string of the settings
is run through detect-secrets' plugins (Yelp/detect-secrets, pinned in requirements.txt).

The plugins find private key blocks, known token formats (Slack, GitHub, GitLab, AWS, JWT, ...), basic-auth URLs
and high-entropy strings; each string is scanned whole and, for a URL, each query value and path segment on its
own (a presigned URL's signature, a token in a webhook path). A hit is refused naming the config path and the
plugin, never the value. Strings whose type is a public digest or key (a sha256, an image digest, an SSH host key,
a PEM certificate, a device path with its serial) are still scanned for token formats and key blocks, but not
judged by entropy alone.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel

from settings.declare import field_at

# Plugins judged by entropy alone: a digest or a public key is high-entropy by nature.
_ENTROPY = {"Base64HighEntropyString", "HexHighEntropyString"}
# Plugins that judge a `key: value` line by its key or by the file it is in, not by the value.
_NOT_BY_CONTENT = {"KeywordDetector", "IPPublicDetector"}
# Field types whose values are public and high-entropy by design (their validators' names); a field can say the
# same of itself with `PUBLIC` (a chat channel ID).
_PUBLIC = {"_sha256", "_host_key", "_image", "_pem", "_device_path"}
# Entropy alone judges only long strings: tokens, keys and signatures are 20 characters and more, while short
# identifiers (a Slack channel ID `C0123456789`) are random-looking by design.
_ENTROPY_MIN = 20


class PublicMark:
    """Marks a field whose values are public identifiers that look random (not judged by entropy alone)."""

    def __repr__(self) -> str:
        return "Public"


PUBLIC = PublicMark()

PLUGINS_DOC = (
    "every plain string of the settings is scanned by detect-secrets' plugins (private key blocks, Slack, GitHub, "
    "GitLab, AWS, Azure, Stripe, Twilio, JWT and other token formats, basic-auth URLs, high-entropy strings), "
    "whole and, for URLs, each query value and path segment (entropy alone only for 20 characters and more, and not "
    "for fields of public digests, keys, device paths or identifiers); a hit is refused naming the field, never the "
    "value"
)


@functools.cache
def _plugins() -> list[Any]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    found = []
    for plugin_class in get_mapping_from_secret_type_to_class().values():
        name = plugin_class.__name__
        if name in _NOT_BY_CONTENT:
            continue
        if name == "Base64HighEntropyString":
            found.append(plugin_class(limit=4.5))
        elif name == "HexHighEntropyString":
            found.append(plugin_class(limit=3.0))
        else:
            found.append(plugin_class())
    return found


def _pieces(value: str) -> Iterator[str]:
    yield value
    parts = urlsplit(value) if "://" in value else None
    if parts is None:
        return
    yield from (v for _, v in parse_qsl(parts.query, keep_blank_values=False))
    yield from (segment for segment in parts.path.split("/") if segment)
    if parts.password:
        yield parts.password


@functools.lru_cache(maxsize=65536)
def findings(value: str, public: bool = False) -> list[str]:
    """The plugins (their secret types) that call `value` a credential (a pure function of its arguments: a
    1000-node file repeats most of its strings)."""
    hits = set()
    for piece in _pieces(value):
        line = f'value: "{piece}"'
        for plugin in _plugins():
            if (public or len(piece) < _ENTROPY_MIN) and type(plugin).__name__ in _ENTROPY:
                continue
            if plugin.analyze_line(filename="settings.yaml", line=line, line_number=1):
                hits.add(plugin.secret_type)
    return sorted(hits)


def strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(config path, string) for every string in a raw config tree, keys of free-form maps included."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            at = f"{path}.{key}" if path else str(key)
            yield at + " (key)", str(key)
            yield from strings(item, at)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from strings(item, f"{path}[{i}]")


@functools.lru_cache(maxsize=4096)
def _public_shape(root: type[BaseModel], path: str) -> bool:
    """`_public` of a path with every list index 0: a field's declarations do not depend on its position."""
    return _public(root, path)


def _public(root: type[BaseModel], path: str) -> bool:
    found = field_at(root, path)
    if found is None:
        return False
    info = found[2]
    metadata = _all_metadata(info)
    checks = [getattr(m, "func", None) for m in metadata]
    return PUBLIC in metadata or any(getattr(c, "__name__", "") in _PUBLIC for c in checks)


def _all_metadata(info: Any) -> list[Any]:
    import typing

    found = list(info.metadata)
    stack = [info.annotation]
    while stack:
        tp = stack.pop()
        found += list(getattr(tp, "__metadata__", ()))
        stack += list(typing.get_args(tp))
    return found


def credential_problems(root: type[BaseModel], raw: dict[str, Any]) -> list[str]:
    """A problem for every plain string of `raw` (the `ml-platform:` config) that looks like a credential."""
    problems = []
    for path, value in strings(raw):
        if len(value) < 8:
            continue
        hits = findings(value, public=_public_shape(root, re.sub(r"\[\d+\]", "[0]", path.removesuffix(" (key)"))))
        if hits:
            problems.append(
                f"{path}: looks like a credential ({', '.join(hits)}; value not shown): a credential must not be "
                "plain config, where it sits unencrypted in the stack file and the state. Remove it; if the program "
                "needs it, set it as a secret with `pulumi config set --secret` (docs/settings.md, Secrets)"
            )
    return problems
