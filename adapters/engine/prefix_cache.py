"""The engine's prefix KV store: key/value states of chunk-aligned token prefixes, kept for reuse.

The engine prefills every input in chunks of `chunk_size` tokens aligned at absolute positions
(0..C-1, C..2C-1, ...; see `engine.Engine`). Attention is causal and every other operation is
row-wise, so the key/value states of chunk k depend only on the tokens before (k+1)·C, never on
what follows them or on the other rows of the batch. A request whose first k·C tokens were seen
before can therefore take those chunks' states from here and prefill only the rest, with the same
numbers to the bit.

Keys: `chunk_keys(tokens, C)` chains a hash over the chunks: the key of chunk k is
blake2b(key of chunk k-1 || tokens of chunk k) (chunk -1: a root naming C), i.e. a digest of the
whole prefix up to the end of chunk k, so two prompts share a key exactly when they share that
prefix. Only full chunks get keys
(a partial last chunk is always computed).

Values: one tensor per chunk, `[layers, 2 (key, value), kv_heads, C, head_dim]`, in the model's
dtype and on its device.

Bound: an LRU over bytes (`max_bytes`). The engine touches a prefix's chunks deepest first, so
under pressure the deep end of a prefix goes before its shallow start (a shallow start stays
usable on its own; a deep chunk without its predecessors is not).

The store is per engine (one model, precision, device and chunk size) and thread-safe.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_CHUNK_SIZE = 32
DEFAULT_MAX_MB = 384
ENV_ENABLED = "SAFETYREPRO_PREFIX_CACHE"  # "0" (or "off", "false", "no") disables prefix reuse
ENV_MAX_MB = "SAFETYREPRO_PREFIX_CACHE_MB"
ENV_CHUNK = "SAFETYREPRO_PREFILL_CHUNK"


def enabled_from_env() -> bool:
    return os.environ.get(ENV_ENABLED, "1").strip().lower() not in ("0", "off", "false", "no")


def max_bytes_from_env() -> int:
    v = os.environ.get(ENV_MAX_MB, "").strip()
    return int(float(v) * 2**20) if v else DEFAULT_MAX_MB * 2**20


def chunk_size_from_env() -> int:
    v = os.environ.get(ENV_CHUNK, "").strip()
    c = int(v) if v else DEFAULT_CHUNK_SIZE
    if c < 2:
        raise ValueError(f"{ENV_CHUNK} must be >= 2, got {c}")
    return c


_ROOT = b"safetyrepro-prefix-v1"


def chunk_keys(tokens: Sequence[int], chunk_size: int, n_chunks: int | None = None) -> list[bytes]:
    """Keys of the full chunks of `tokens` (at most `n_chunks` of them): key k identifies tokens[: (k+1)·C]."""
    n_full = len(tokens) // chunk_size
    if n_chunks is not None:
        n_full = min(n_full, n_chunks)
    keys, prev = [], _ROOT + str(chunk_size).encode("ascii")
    for k in range(n_full):
        h = hashlib.blake2b(prev, digest_size=16)
        h.update(",".join(map(str, tokens[k * chunk_size : (k + 1) * chunk_size])).encode("ascii"))
        prev = h.digest()
        keys.append(prev)
    return keys


@dataclass
class StoreStats:
    hits: int = 0  # chunks served
    misses: int = 0  # chunks looked up and not found
    puts: int = 0
    evictions: int = 0


class PrefixStore:
    """LRU map chunk key -> KV tensor, bounded by the total bytes of the tensors."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_MB * 2**20):
        self.max_bytes = int(max_bytes)
        self._d: OrderedDict[bytes, object] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.stats = StoreStats()

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: bytes) -> bool:
        return key in self._d

    @property
    def nbytes(self) -> int:
        return self._bytes

    @staticmethod
    def _size(value) -> int:
        return int(value.numel() * value.element_size())

    def longest_prefix(self, keys: Sequence[bytes]) -> list:
        """The stored tensors of keys[0], keys[1], ... up to the first missing one; touched deepest first."""
        with self._lock:
            found = []
            for k in keys:
                v = self._d.get(k)
                if v is None:
                    self.stats.misses += 1
                    break
                found.append(v)
            for k in reversed(keys[: len(found)]):
                self._d.move_to_end(k)
            self.stats.hits += len(found)
            return found

    def get(self, key: bytes):
        with self._lock:
            v = self._d.get(key)
            if v is None:
                self.stats.misses += 1
                return None
            self._d.move_to_end(key)
            self.stats.hits += 1
            return v

    def put(self, key: bytes, value) -> None:
        """Insert (or refresh) one chunk; evicts least recently used chunks beyond the bound. A value
        larger than the whole bound is not kept."""
        size = self._size(value)
        with self._lock:
            old = self._d.pop(key, None)
            if old is not None:
                self._bytes -= self._size(old)
            if size > self.max_bytes:
                return
            self._d[key] = value
            self._bytes += size
            self.stats.puts += 1
            while self._bytes > self.max_bytes:
                _, ev = self._d.popitem(last=False)
                self._bytes -= self._size(ev)
                self.stats.evictions += 1

    def put_prefix(self, items: Sequence[tuple[bytes, object]]) -> None:
        """Insert a prefix's chunks (shallow to deep), leaving the shallow ones most recently used."""
        for key, value in reversed(list(items)):
            self.put(key, value)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self._bytes = 0
