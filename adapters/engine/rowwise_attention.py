"""Batch-invariant attention: padding never changes a row's numbers.

With left padding, PyTorch's fused attention kernels give a padded row slightly different numbers
than the same row run alone (bf16 on CPU: up to 0.2 nats per token on SmolLM2), because the
kernel's blocking and its masked/causal code path depend on the padded length. Linear layers,
norms and RoPE are row-wise and, on CPU in bf16, bitwise independent of the batch size.

So this attention function takes each row's left-padding from the engine (the `sr_left_pad`
and `sr_total_len` keyword arguments, which transformers passes through the model to the
attention function), cuts the padding off, and runs Hugging Face's own SDPA path on the unpadded
row with the mask a lone row would get: `None` (plain causal) when the row's mask is a pure
causal or all-true pattern, the sliced mask otherwise (sliding windows). A batch without padding
goes through one SDPA call, with the same mask canonicalisation, so batch size 1 and batch size
8 take identical code paths per row.

The engine passes spans instead (`sr_spans`): a list of query blocks
`(q_row, q_lo, q_hi, kv_row, k_lo, k_hi)`, each the queries query[q_row, :, q_lo:q_hi] attending
to key[kv_row, :, k_lo:k_hi], the block being the last q_hi - q_lo positions of its keys. Every
block is run alone: one SDPA call on exactly its queries and keys, with the mask built from its
shape alone (`span_mask`: causal, the layer's sliding window if any; the model's own batch mask is
not used). So a block's output is a function of its own queries and keys, whatever else the
forward pass holds. The engine's chunked prefill packs the chunks of many prompts into one
sequence and reads each chunk's keys from its prompt's cache row (written by the same layer
moments before); decode steps use one block per row over the row's unpadded keys.

It is registered in transformers' AttentionInterface (and the SDPA mask creator under the same
name) as "safetyrepro_rowwise"; `enable(model)` switches a loaded model to it.
"""

from __future__ import annotations

from safetyrepro.compat.transformers import (
    attention_implementation,
    register_attention,
    sdpa_attention_forward,
    set_attention_implementation,
)

NAME = "safetyrepro_rowwise"
_registered = False


def _canonical_mask(mask, q_len: int, kv_len: int):
    """None when the mask says no more than plain causal attention (what a lone, unpadded row gets)."""
    import torch

    if mask is None or mask.dtype != torch.bool:
        return mask
    if q_len == 1 and bool(mask.all()):
        return None
    if q_len == kv_len:
        tril = torch.ones(q_len, kv_len, dtype=torch.bool, device=mask.device).tril()
        if bool((mask == tril).all()):
            return None
    return mask


def rowwise_sdpa_forward(module, query, key, value, attention_mask, **kwargs):
    pads = kwargs.pop("sr_left_pad", None)
    total = kwargs.pop("sr_total_len", None)
    spans = kwargs.pop("sr_spans", None)
    memo = kwargs.pop("sr_mask_memo", None)  # per forward pass: every layer shares the same mask tensors
    key_len = kwargs.pop("sr_key_len", None)
    memo = {} if memo is None else memo
    if key_len is not None:
        return _decode_forward(module, query, key, value, key_len, memo, sdpa_attention_forward, kwargs)
    if spans is not None:
        return _spans_forward(module, query, key, value, spans, memo, sdpa_attention_forward, kwargs)
    q_len, kv_len = query.shape[2], key.shape[2]

    def canonical(mask, row: int | None, q_start: int = 0, kv_start: int = 0):
        if mask is None:
            return None
        key_ = (mask.data_ptr(), tuple(mask.shape), row, q_start, kv_start)
        if key_ not in memo:
            m = mask if row is None else mask[row : row + 1, :, q_start:, kv_start:]
            memo[key_] = _canonical_mask(m, q_len - q_start, m.shape[-1])
        return memo[key_]

    if not pads or not any(pads):
        return sdpa_attention_forward(module, query, key, value, canonical(attention_mask, None), **kwargs)

    batch = query.shape[0]
    total = kv_len if total is None else int(total)
    kv_offset = total - kv_len  # absolute position of key index 0 (a sliding-window cache keeps the tail)
    q_offset = total - q_len  # absolute position of the first query
    out = query.new_zeros(batch, q_len, query.shape[1], value.shape[-1])
    for i in range(batch):
        kv_start = max(0, pads[i] - kv_offset)
        q_start = max(0, pads[i] - q_offset)
        q = query[i : i + 1, :, q_start:]
        k = key[i : i + 1, :, kv_start:]
        v = value[i : i + 1, :, kv_start:]
        m = canonical(attention_mask, i, q_start, kv_start)
        o, _ = sdpa_attention_forward(module, q, k, v, m, **kwargs)
        out[i, q_start:] = o[0]
    return out, None


def span_mask(q_len: int, kv_len: int, window: int | None, memo: dict, device):
    """The mask of a query block that is the last q_len of kv_len keys (causal, and within a sliding
    window when the layer has one: query position p sees keys k with p - window < k <= p), as a
    lone row gets it: None when it is plain causal over the whole span (q_len == kv_len: SDPA's
    `is_causal`), else a boolean [1, 1, q_len, kv_len] tensor. A single query always gets a boolean
    mask (all true without a window): transformers then packs the query heads onto the key/value
    heads (`pack_gqa`), 4-8x faster on CPU than the `enable_gqa` path a None mask selects."""
    import torch

    if window is not None and window >= kv_len:
        window = None
    if q_len == kv_len and q_len > 1 and window is None:
        return None
    key_ = ("mask", q_len, kv_len, window)
    if key_ not in memo:
        q_pos = torch.arange(kv_len - q_len, kv_len, device=device)[:, None]
        k_pos = torch.arange(kv_len, device=device)[None, :]
        m = k_pos <= q_pos
        if window is not None:
            m &= k_pos > q_pos - window
        memo[key_] = m[None, None].contiguous()
    return memo[key_]


def _spans_forward(module, query, key, value, spans, memo, sdpa, kwargs):
    """Each span alone (see the module docstring); query positions outside every span stay zero."""
    window = kwargs.pop("sliding_window", None) or getattr(module, "sliding_window", None)
    out = query.new_zeros(query.shape[0], query.shape[2], query.shape[1], value.shape[-1])
    for (q_row, q_lo, q_hi, kv_row, k_lo, k_hi), n in _runs(spans):
        m = span_mask(q_hi - q_lo, k_hi - k_lo, window, memo, query.device)
        o, _ = sdpa(
            module,
            query[q_row : q_row + n, :, q_lo:q_hi],
            key[kv_row : kv_row + n, :, k_lo:k_hi],
            value[kv_row : kv_row + n, :, k_lo:k_hi],
            m,
            **kwargs,
        )
        out[q_row : q_row + n, q_lo:q_hi] = o
    return out, None


def decode_mask(key_len, width: int, window: int | None, memo: dict):
    """[batch, 1, 1, width] booleans: row b's one query (at position key_len[b] - 1) sees its keys
    0 .. key_len[b] - 1, within the sliding window when the layer has one. Shared by the layers."""
    import torch

    key_ = ("decode", width, window)
    if key_ not in memo:
        cols = torch.arange(width, device=key_len.device)[None, :]
        m = cols < key_len[:, None]
        if window is not None:
            m &= cols > key_len[:, None] - 1 - window
        memo[key_] = m[:, None, None, :]
    return memo[key_]


def _decode_forward(module, query, key, value, key_len, memo, sdpa, kwargs):
    """A decode step: one query per row, every row's keys left-aligned from column 0 (the rest of the
    width zero and masked), all rows at once. Not SDPA: its CPU kernel gives a row other last bits
    when the batch around it changes (float32) or when its padded width does (bfloat16), and spends
    about 1 ms a layer at 120 rows on 64 keys. Here scores, softmax and the weighted sum are batched
    matrix products and row-wise reductions in float32 (bf16 inputs upcast), each (row, head) a
    product of its own: a row's output is the same bits whatever the other rows and whatever the
    width (a multiple of DECODE_KEY_BLOCK: the masked columns add exact zeros), in every precision
    (tested). Sliding windows and GQA as the model's attention has them; no softcap, no dropout."""
    import torch

    if kwargs.get("softcap") is not None or getattr(module, "attn_logit_softcapping", None):
        raise NotImplementedError("decode attention with logit soft-capping")
    window = kwargs.pop("sliding_window", None) or getattr(module, "sliding_window", None)
    m = decode_mask(key_len, key.shape[2], window, memo)  # [R, 1, 1, W]
    scaling = kwargs.get("scaling")
    rows, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    scale = dim**-0.5 if scaling is None else scaling
    q = query.reshape(rows, kv_heads, heads // kv_heads, dim).float()
    scores = torch.matmul(q, key.float().transpose(-1, -2))  # [R, kv_heads, group, W]
    scores = (scores * scale).masked_fill(~m, float("-inf"))
    probs = scores.softmax(dim=-1)
    out = torch.matmul(probs, value.float())  # [R, kv_heads, group, dim]
    return out.reshape(rows, heads, 1, dim).transpose(1, 2).to(query.dtype), None


def _runs(spans):
    """Spans as (first span, count): single-query spans of consecutive rows with the same key range
    (a prompt's sampled seeds while decoding) go into one SDPA call over those rows; SDPA computes
    every (row, head) on its own, so a row's numbers are those of the call with it alone (tested).
    Empty spans are dropped."""
    out: list = []
    for sp in spans:
        q_row, q_lo, q_hi, kv_row, k_lo, k_hi = sp
        if q_hi <= q_lo:
            continue
        if out and q_hi - q_lo == 1:
            (q0, ql0, qh0, kv0, kl0, kh0), n = out[-1]
            if qh0 - ql0 == 1 and (q_lo, k_lo, k_hi) == (ql0, kl0, kh0) and q_row == q0 + n and kv_row == kv0 + n:
                out[-1] = (out[-1][0], n + 1)
                continue
        out.append((sp, 1))
    return out


def register() -> str:
    global _registered
    if not _registered:
        register_attention(NAME, rowwise_sdpa_forward)
        _registered = True
    return NAME


def enable(model) -> bool:
    """Switch a loaded model to row-wise attention; False (model unchanged) if it cannot take it."""
    register()
    if attention_implementation(model) not in ("sdpa", "eager", NAME):
        return False
    try:
        set_attention_implementation(model, NAME)
    except Exception:  # an architecture whose attention does not go through the interface
        return False
    return attention_implementation(model) == NAME
