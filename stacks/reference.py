"""Where the pinned upstream reference files live (charts' values.yaml, full chart directories, CRD schemas).

One place decides it, for the tests and for the review's rendering:
- `$MLP_REFERENCE_DIR` when it is set (e.g. a shared read-only copy on a site without network access);
- else the cache that `make reference` fills: `$XDG_CACHE_HOME/ml-platform/reference`
  (`~/.cache/ml-platform/reference`).
The layout under it: `charts/<chart>/<version>/values.yaml`, `charts-src/<chart>/<version>/` (a chart as
`helm pull --untar` gives it) and `crds/...`.
"""

from __future__ import annotations

import os
from pathlib import Path

FETCH_COMMAND = "make reference"


def reference_dir() -> Path:
    """The directory that holds the reference files (it may not exist yet)."""
    explicit = os.environ.get("MLP_REFERENCE_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "ml-platform" / "reference"


def strict() -> bool:
    """`MLP_REFERENCE_STRICT=1`: a missing reference file is a failure, not a skip (CI)."""
    return os.environ.get("MLP_REFERENCE_STRICT", "") not in ("", "0")
