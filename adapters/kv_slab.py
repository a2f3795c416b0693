"""Key/value states in one preallocated tensor that the model writes in place.

Transformers' DynamicCache grows by concatenation: every forward copies the whole cache. The
engine's chunk steps and decode steps instead hand the model a `KVSlab`: one tensor
`[batch, layers, 2 (key, value), kv_heads, capacity, head_dim]` whose columns [0, n) are filled;
each layer's `update` writes the new columns in place and returns views of the filled part. The
values are the same as a DynamicCache's (a copy is a copy); only the copying goes.

With `writes` (the engine's packed prefill), the forward's tokens are not one column range for
every row: write k = (kv_row, col, q_lo, q_hi) puts the key/value states of the packed tokens
q_lo..q_hi-1 (of batch row 0) into slab row kv_row at columns col.., and `update` returns the
whole slab (the row-wise attention reads each chunk's keys from its own row).
"""

from __future__ import annotations


class KVSlab:
    def __init__(self, buf, n: int, writes: list[tuple[int, int, int, int]] | None = None):
        if n > buf.shape[4]:
            raise ValueError(f"{n} filled columns in a slab of capacity {buf.shape[4]}")
        self.buf = buf
        self.writes = writes
        self.layers = [_SlabLayer(self, i, n) for i in range(buf.shape[1])]
        self.cache = _cache(self.layers)

    @property
    def n(self) -> int:
        return self.layers[0].n

    @property
    def capacity(self) -> int:
        return self.buf.shape[4]


def _cache(layers):
    from transformers import DynamicCache

    cache = DynamicCache()
    cache.layers = list(layers)
    return cache


def _layer_class():
    from safetyrepro.compat.transformers import dynamic_cache_layer_class

    class SlabLayer(dynamic_cache_layer_class()):
        """One layer's view of a KVSlab."""

        def __init__(self, slab: KVSlab, idx: int, n: int):
            super().__init__()
            self.slab, self.idx, self.n = slab, idx, n
            self.is_initialized = True
            self.dtype, self.device = slab.buf.dtype, slab.buf.device
            self._views()

        def _views(self) -> None:
            buf = self.slab.buf
            self.keys = buf[:, self.idx, 0, :, : self.n]
            self.values = buf[:, self.idx, 1, :, : self.n]

        def lazy_initialization(self, key_states, value_states) -> None:  # pragma: no cover - never lazy
            pass

        def update(self, key_states, value_states, *args, **kwargs):
            t = key_states.shape[-2]
            buf = self.slab.buf
            if self.slab.writes is not None:
                for kv_row, col, q_lo, q_hi in self.slab.writes:
                    buf[kv_row, self.idx, 0, :, col: col + q_hi - q_lo] = key_states[0, :, q_lo:q_hi]
                    buf[kv_row, self.idx, 1, :, col: col + q_hi - q_lo] = value_states[0, :, q_lo:q_hi]
                return buf[:, self.idx, 0], buf[:, self.idx, 1]
            if self.n + t > buf.shape[4]:
                raise RuntimeError(f"KV slab full ({self.n} + {t} > {buf.shape[4]} columns)")
            buf[:, self.idx, 0, :, self.n: self.n + t] = key_states
            buf[:, self.idx, 1, :, self.n: self.n + t] = value_states
            self.n += t
            self._views()
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.n

        def batch_select_indices(self, indices) -> None:  # pragma: no cover - the engine re-lays slabs out itself
            raise NotImplementedError("select rows on the KVSlab, not on one layer")

    return SlabLayer


_SLAB_LAYER = None


def _SlabLayer(slab: KVSlab, idx: int, n: int):  # noqa: N802 - a class, made on first use (transformers is imported lazily)
    global _SLAB_LAYER
    if _SLAB_LAYER is None:
        _SLAB_LAYER = _layer_class()
    return _SLAB_LAYER(slab, idx, n)
