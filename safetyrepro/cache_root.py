"""The one cache folder: models, benchmark data and the outputs cache all live under it.

`$SAFETYREPRO_CACHE_DIR` when set, else `$XDG_CACHE_HOME/safetyrepro`, else `~/.cache/safetyrepro`.
"""

from __future__ import annotations

import os
from pathlib import Path

from safetyrepro.errors import UserError

CACHE_DIR_ENV = "SAFETYREPRO_CACHE_DIR"


def cache_root() -> Path:
    base = os.environ.get(CACHE_DIR_ENV)
    if base:
        # absolute, so that paths written into configs (HELM's prod_env, lm-eval task folders) still hold
        # when another process reads them from another working folder
        root = Path(os.path.abspath(Path(base).expanduser()))
        where = f"${CACHE_DIR_ENV}={base}"
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "safetyrepro"
        where = "the cache folder"
    if root.exists() and not root.is_dir():
        raise UserError(
            f"{where} is a file ({root}), not a folder; point ${CACHE_DIR_ENV} at a folder (it is created if missing)"
        )
    for parent in root.parents:  # a file above it: the folder could never be created
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"{where} lies under the file {parent}; point ${CACHE_DIR_ENV} at a folder")
            break
    return root
