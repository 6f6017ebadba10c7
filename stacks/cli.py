"""What the command-line tools share."""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def emit(text: str, out: Optional[Path]) -> None:
    """`text` into the file `out` (the tools' `--out`), or to standard output when there is none."""
    if out:
        out.write_text(text)
    else:
        print(text, end="")
