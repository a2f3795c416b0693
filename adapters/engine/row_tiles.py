"""Matrix products in tiles of a fixed row count, so that a row's numbers never depend on the other rows.

A CPU GEMM picks its kernel by the shape of the call: on some CPUs (AMD EPYC with avx512_bf16) every row
of a bf16 product comes out the same whatever the row count, on others (Intel with AMX, MKL's float32
kernels) a row computed among 7, 32 or 64 rows differs in the last bits from the same row among 300.
What holds on every CPU measured is weaker: for one fixed row count, a row's result depends neither on
its place in the call nor on the other rows. So the engine runs every linear layer of its model, and its
float32 head, on tiles of exactly ROW_TILE rows (the last one padded with zeros): a request's numbers
then never depend on what else is in its batch, on any CPU (tests/adapters/test_adapters_prefix_cache.py).

The cost is small where it matters: a layer's weights stay in cache across the tiles of one call (one
call per ROW_TILE rows, about 20 us each), and a decode step of a few rows computes ROW_TILE rows,
which at 32 costs about what streaming the weights once costs anyway.
"""

from __future__ import annotations

from functools import partial

ROW_TILE = 32


def tiled_linear(x, weight, bias=None, rows: int = ROW_TILE):
    """`torch.nn.functional.linear(x, weight, bias)` computed on tiles of exactly `rows` rows of x's
    flattened leading dimensions (the last tile padded with zeros)."""
    import torch

    shape = x.shape
    flat = x.reshape(-1, shape[-1])
    m = flat.shape[0]
    pad = -m % rows
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad, shape[-1])])
    out = torch.cat([torch.nn.functional.linear(t, weight, bias) for t in flat.split(rows)])
    return out[:m].reshape(*shape[:-1], weight.shape[0])


def _forward(module, x):
    return tiled_linear(x, module.weight, module.bias)


def tile_linears(model) -> int:
    """Make every plain `torch.nn.Linear` of `model` compute in row tiles (its forward replaced on the
    instance: the class, and any other model, is untouched). Quantised subclasses (bitsandbytes' NF4)
    keep their own kernels. Returns how many layers were switched."""
    import torch

    n = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.forward = partial(_forward, module)  # type: ignore[method-assign]  # this instance only, not the class
            n += 1
    return n
