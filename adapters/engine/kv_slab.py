"""Key/value states in one preallocated tensor that the model writes in place.

Transformers' dynamic cache grows by concatenation: every forward copies the whole cache. The
engine's chunk steps and decode steps instead hand the model a `KVSlab`: one tensor
`[batch, layers, 2 (key, value), kv_heads, capacity, head_dim]` whose columns [0, n) are filled;
each layer's `update` writes the new columns in place and returns views of the filled part. The
values are the same as the dynamic cache's (a copy is a copy); only the copying goes. The cache
layer class itself (a subclass of a transformers internal) lives in safetyrepro/compat/transformers.py.

With `writes` (the engine's packed prefill), the forward's tokens are not one column range for
every row: write k = (kv_row, col, q_lo, q_hi) puts the key/value states of the packed tokens
q_lo..q_hi-1 (of batch row 0) into slab row kv_row at columns col.., and `update` returns the
whole slab (the row-wise attention reads each chunk's keys from its own row).

With `cols` (the engine's decode steps), every row holds its own keys from column 0 (left-aligned)
and row b's one new token goes to column cols[b]; `update` returns the first `width` columns of
every row, and the attention masks each row to its own keys (rowwise_attention, `sr_key_len`).

`layer_major` slabs (the decode slabs) are laid out `[layers, 2, batch, kv_heads, capacity,
head_dim]`: a layer's keys are then one strided block that batched matrix products read in place
(row-major slabs would be copied by every decode step's attention, twice per layer).
"""

from __future__ import annotations

from safetyrepro.compat.transformers import cache_of_layers, slab_cache_layer


class _Slab:
    """What a slab's layers share: the tensor and how a forward writes into it. Kept apart from
    KVSlab so that the layers never point back at the object that holds them: a reference cycle
    through the layers would keep the whole tensor (gigabytes for a decode slab) alive until
    Python's cycle collector happened to run, and a long sweep grew by each slab it made."""

    __slots__ = ("buf", "writes", "cols", "width", "layer_major", "_rows")

    def __init__(self, buf, writes, cols, width, layer_major):
        self.buf, self.writes, self.cols, self.width, self.layer_major = buf, writes, cols, width, layer_major
        self._rows = None

    def rows_index(self):
        import torch

        if self._rows is None:
            self._rows = torch.arange(self.buf.shape[2 if self.layer_major else 0], device=self.buf.device)
        return self._rows


class KVSlab:
    def __init__(
        self,
        buf,
        n: int,
        writes: list[tuple[int, int, int, int]] | None = None,
        cols=None,
        width: int | None = None,
        layer_major: bool = False,
    ):
        if n > buf.shape[4] or (width or 0) > buf.shape[4]:
            raise ValueError(f"{max(n, width or 0)} filled columns in a slab of capacity {buf.shape[4]}")
        self.state = _Slab(buf, writes, cols, width, layer_major)
        self.layers = [_SlabLayer(self.state, i, n) for i in range(buf.shape[0 if layer_major else 1])]
        self.cache = _cache(self.layers)

    @property
    def buf(self):
        return self.state.buf

    @property
    def layer_major(self) -> bool:
        return self.state.layer_major

    @property
    def n(self) -> int:
        return self.layers[0].n

    @property
    def capacity(self) -> int:
        return self.buf.shape[4]

    def rows_index(self):
        return self.state.rows_index()


def _cache(layers):
    return cache_of_layers(layers)


def _SlabLayer(slab: _Slab, idx: int, n: int):  # noqa: N802 - a class of compat's, made on first use

    return slab_cache_layer(slab, idx, n)
