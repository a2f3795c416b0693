"""Every transformers internal the engine relies on, and every patch it makes to transformers, and
nowhere else (tested window: pyproject.toml, docs/compat.md). Nothing here imports transformers at
module level (the command line answers `--help` without it)."""

from __future__ import annotations


def dynamic_cache_layer_class() -> type:
    """The per-layer cache class of `DynamicCache` (`cache_utils.DynamicLayer`), which the engine's
    KV slab subclasses: its `update` writes key/value states in place instead of concatenating."""
    from transformers.cache_utils import DynamicLayer

    return DynamicLayer


def sdpa_attention_forward(*args, **kwargs):
    """transformers' own SDPA attention function (what `attn_implementation="sdpa"` runs)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward as forward

    return forward(*args, **kwargs)


def sdpa_mask(*args, **kwargs):
    """transformers' SDPA mask creator (`masking_utils.sdpa_mask`)."""
    from transformers.masking_utils import sdpa_mask as make

    return make(*args, **kwargs)


def register_attention(name: str, forward) -> None:
    """Register an attention function under `name`, with the SDPA mask creator for its masks."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask as make

    AttentionInterface.register(name, forward)
    AttentionMaskInterface.register(name, make)


def attention_implementation(model) -> str | None:
    """The attention implementation a loaded model runs (`config._attn_implementation`)."""
    return getattr(model.config, "_attn_implementation", None)


def quiet_gguf_dequantisation_bar() -> None:
    """The GGUF loader draws its dequantisation bar with tqdm directly (not through transformers'
    logging switches): switch it off."""
    import functools

    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    if not isinstance(gguf_utils.tqdm, functools.partial):
        gguf_utils.tqdm = functools.partial(gguf_utils.tqdm, disable=True)
