"""Every transformers internal the engine relies on, and every patch it makes to transformers, and
nowhere else (tested window: pyproject.toml, docs/compat.md). Nothing here imports transformers at
module level (the command line answers `--help` without it)."""

from __future__ import annotations

import functools
import inspect


def dynamic_cache_layer_class() -> type:
    """The per-layer cache class of `DynamicCache` (`cache_utils.DynamicLayer`), which the engine's
    KV slab layer subclasses: its `update` writes key/value states in place instead of concatenating."""
    from transformers.cache_utils import DynamicLayer

    return DynamicLayer


def cache_of_layers(layers):
    """A `DynamicCache` whose per-layer caches are `layers` (the model calls their `update`)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    cache.layers = list(layers)
    return cache


_SLAB_LAYER: type | None = None


def slab_cache_layer(slab, idx: int, n: int):
    """Layer `idx` of an engine KV slab (adapters/engine/kv_slab.py `_Slab`: `buf`, `writes`, `cols`, `width`,
    `layer_major`, `rows_index()`) as a transformers cache layer: `update` writes the new key/value
    states into the slab's tensor in place and returns views of it. What it must provide (keys,
    values, is_initialized, get_seq_length, no lazy initialisation) is DynamicLayer's contract in
    transformers 5.17-5.24 (docs/compat.md)."""
    global _SLAB_LAYER
    if _SLAB_LAYER is None:
        _SLAB_LAYER = _slab_layer_class()
    return _SLAB_LAYER(slab, idx, n)


def _slab_layer_class() -> type:
    # the base is transformers' cache layer class, found at run time (it moved between versions)
    class SlabLayer(dynamic_cache_layer_class()):  # type: ignore[misc]
        """One layer's view of a KV slab."""

        def __init__(self, slab, idx: int, n: int):
            super().__init__()
            self.slab, self.idx, self.n = slab, idx, n
            self.is_initialized = True
            self.dtype, self.device = slab.buf.dtype, slab.buf.device
            self._views()

        def _kv(self):
            """This layer's keys and values, each [batch, kv_heads, capacity, head_dim]."""
            buf = self.slab.buf
            if self.slab.layer_major:
                return buf[self.idx, 0], buf[self.idx, 1]
            return buf[:, self.idx, 0], buf[:, self.idx, 1]

        def _views(self) -> None:
            k, v = self._kv()
            self.keys = k[:, :, : self.n]
            self.values = v[:, :, : self.n]

        def lazy_initialization(self, key_states, value_states) -> None:  # pragma: no cover - never lazy
            pass

        def update(self, key_states, value_states, *args, **kwargs):
            t = key_states.shape[-2]
            buf = self.slab.buf
            if self.slab.writes is not None:
                for kv_row, col, q_lo, q_hi in self.slab.writes:
                    buf[kv_row, self.idx, 0, :, col : col + q_hi - q_lo] = key_states[0, :, q_lo:q_hi]
                    buf[kv_row, self.idx, 1, :, col : col + q_hi - q_lo] = value_states[0, :, q_lo:q_hi]
                return buf[:, self.idx, 0], buf[:, self.idx, 1]
            k, v = self._kv()
            if self.slab.cols is not None:
                rows = self.slab.rows_index()
                k[rows, :, self.slab.cols] = key_states[:, :, 0]
                v[rows, :, self.slab.cols] = value_states[:, :, 0]
                w = self.slab.width
                return k[:, :, :w], v[:, :, :w]
            if self.n + t > buf.shape[4]:
                raise RuntimeError(f"KV slab full ({self.n} + {t} > {buf.shape[4]} columns)")
            k[:, :, self.n : self.n + t] = key_states
            v[:, :, self.n : self.n + t] = value_states
            self.n += t
            self._views()
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.n

        def batch_select_indices(self, indices) -> None:  # pragma: no cover - the engine re-lays slabs out itself
            raise NotImplementedError("select rows on the KVSlab, not on one layer")

    return SlabLayer


def text_config(model):
    """The text part of a model's config (multimodal configs nest it)."""
    cfg = model.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def base_cache_keyword(base_model) -> str:
    """The keyword a base model's forward takes its cache under (`past_key_values`, renamed `cache` in
    transformers 5.x), read from its signature."""
    return "cache" if "cache" in inspect.signature(base_model.forward).parameters else "past_key_values"


def final_logit_softcap(model) -> float | None:
    """Gemma's `final_logit_softcapping`, which its ForCausalLM applies after the LM head (None for
    models without it)."""
    return getattr(text_config(model), "final_logit_softcapping", None)


def apply_final_logit_softcap(logits, cap: float):
    """What Gemma's ForCausalLM does with the head's logits (modeling_gemma3, transformers 5.17-5.24),
    in the same three steps, so the rounding is the same."""
    import torch

    logits = logits / cap
    logits = torch.tanh(logits)
    return logits * cap


def strip_gguf_quantizer(model) -> None:
    """A model loaded from GGUF (dequantised) still carries the quantizer attributes that make
    `save_pretrained` refuse it; its weights are plain tensors already."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for attr in ("is_quantized", "quantization_method"):
        if hasattr(model, attr):
            try:
                setattr(model, attr, None if attr == "quantization_method" else False)
            except AttributeError:
                pass


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


def set_attention_implementation(model, name: str) -> None:
    """Switch a loaded model's attention to a registered implementation (`set_attn_implementation`)."""
    model.set_attn_implementation(name)


def quiet_gguf_dequantisation_bar() -> None:
    """The GGUF loader draws its dequantisation bar with tqdm directly (not through transformers'
    logging switches): switch it off."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    if not isinstance(gguf_utils.tqdm, functools.partial):
        gguf_utils.tqdm = functools.partial(gguf_utils.tqdm, disable=True)
