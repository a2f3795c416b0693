"""The sha256 of bytes and of a file, as every record of SafetyRepro writes it (lowercase hex): pinned
benchmark files, model weights, a grid set's members, an import's source files."""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK = 1 << 20  # a file is hashed a block at a time: weights run to gigabytes


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(BLOCK), b""):
            h.update(block)
    return h.hexdigest()
