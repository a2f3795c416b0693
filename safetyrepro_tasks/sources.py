"""Where benchmark files come from: pinned public sources, checked by sha256, cached, or a local mirror.

Resolution order for a file: the local mirror (`--data-dir` / $SAFETYREPRO_DATA_DIR, laid out like
shared/data/), then the download cache ($SAFETYREPRO_CACHE_DIR/data, default
~/.cache/safetyrepro/data), then a download from the pinned URL into the cache. Whatever the origin,
the bytes must match the pinned sha256, or the load stops with an error naming file and hash.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from safetyrepro.atomic import atomic_write
from safetyrepro.cache_root import cache_root
from safetyrepro.errors import UserError
from safetyrepro.hashing import sha256_file

DATA_DIR_ENV = "SAFETYREPRO_DATA_DIR"
CACHE_DIR_ENV = "SAFETYREPRO_CACHE_DIR"
OFFLINE_ENV = "SAFETYREPRO_OFFLINE"  # set to 1: never download, fail at once on a missing file


@dataclass(frozen=True)
class PinnedFile:
    """One file of a benchmark: its path in the mirror, where to download it, and its sha256."""

    path: str
    sha256: str
    urls: tuple[str, ...]


@dataclass(frozen=True)
class Source:
    benchmark: str
    repo: str
    commit: str
    licence: str
    files: tuple[PinnedFile, ...]

    def file(self, path: str) -> PinnedFile:
        for f in self.files:
            if f.path == path:
                return f
        raise KeyError(path)


def github_raw(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


def cache_dir() -> Path:
    return cache_root()


def mirror_dir() -> Path | None:
    d = os.environ.get(DATA_DIR_ENV)
    if not d:
        return None
    p = Path(d).expanduser()
    if not p.is_dir():
        raise UserError(f"data mirror {p} (from --data-dir or ${DATA_DIR_ENV}) is not a directory")
    return p


def _checked(path: Path, pinned: PinnedFile, benchmark: str) -> Path:
    got = sha256_file(path)
    if got != pinned.sha256:
        raise UserError(f"checksum mismatch for {benchmark} file {path}: expected sha256 {pinned.sha256}, got {got}")
    return path


def _copy_checked(response, out: BinaryIO, sha256: str) -> None:
    """Copy a download, refusing it (ValueError: it never takes the file's name) unless it has the pinned sha256."""
    h = hashlib.sha256()
    for block in iter(lambda: response.read(1 << 20), b""):
        out.write(block)
        h.update(block)
    if h.hexdigest() != sha256:
        raise ValueError(f"sha256 {h.hexdigest()}, expected {sha256}")


def _download(pinned: PinnedFile, target: Path, benchmark: str) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for url in pinned.urls:
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                # whole or not at all: a crash, or a wrong checksum, never leaves a half file under the real name
                return atomic_write(target, functools.partial(_copy_checked, r, sha256=pinned.sha256))
        except ValueError as e:
            errors.append(f"{url}: {e}")
        except OSError as e:
            errors.append(f"{url}: {getattr(e, 'reason', e)}")
    raise UserError(
        f"missing {benchmark} file {pinned.path} (sha256 {pinned.sha256}): not in the mirror "
        f"(set --data-dir or ${DATA_DIR_ENV}) and the download failed ({'; '.join(errors)})"
    )


def fetch(source: Source, path: str) -> Path:
    """Local path of a verified copy of one pinned file of `source`."""
    pinned = source.file(path)
    mirror = mirror_dir()
    if mirror is not None:
        p = mirror / source.benchmark / pinned.path
        if p.is_file():
            return _checked(p, pinned, source.benchmark)
    cached = cache_dir() / "data" / source.benchmark / pinned.path
    if cached.is_file():
        return _checked(cached, pinned, source.benchmark)
    if os.environ.get(OFFLINE_ENV):
        raise UserError(
            f"missing {source.benchmark} file {pinned.path} (sha256 {pinned.sha256}): not in the mirror "
            f"{mirror or '(none set: --data-dir or $' + DATA_DIR_ENV + ')'} nor the cache, and ${OFFLINE_ENV} forbids "
            "a download"
        )
    if mirror is not None:
        sys.stderr.write(f"safetyrepro: {source.benchmark}/{pinned.path} not in the mirror {mirror}; downloading\n")
    return _download(pinned, cached, source.benchmark)
