"""Which code computed a result: the git commit of the source tree SafetyRepro runs from."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path


@functools.cache
def source_commit() -> str | None:
    """`git describe --always --dirty --abbrev=40` of the checkout holding this package (a full sha,
    with "-dirty" when tracked files differ from it), or None when it runs from an installed copy
    with no git checkout around it. Asked once per process."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=40"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None
