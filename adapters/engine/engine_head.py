"""The engine's LM head: the model's own head (decoding follows it, so greedy texts are
transformers' `generate`'s up to bf16 rounding) or a float32 copy for scored positions, both padded to
full row blocks."""

from __future__ import annotations

from safetyrepro.adapters.engine.row_tiles import tiled_linear
from safetyrepro.compat.transformers import apply_final_logit_softcap

EXACT_ROW_BLOCK = 8  # rows of a float32 head call are padded to a multiple of this (see HeadMixin._logits)


class HeadMixin:
    """Engine methods for the LM head; the engine sets `_head`, `_softcap`, `_head_fp32`, `model`."""

    def _logits(self, hidden, exact: bool = False, blocked: bool = False):
        """LM head on hidden states [M, H] -> logits [M, V]. A single row is run as two copies (see
        `_run`); `blocked` (decoding) pads the rows to a multiple of EXACT_ROW_BLOCK, as the exact
        head always does.

        Default: as the model's own head computes them (the model dtype), which is what decoding
        follows, so that greedy texts are those of transformers' `generate` (up to bf16 rounding). `exact`: the head in
        float32 on the upcast hidden states, for scored positions. A bf16 head rounds logits of
        magnitude 16-32 to multiples of 1/8, and since the candidates of an item share the
        normaliser at their first token, their log-likelihoods then differ by multiples of 1/8 and
        often tie exactly; in float32 they do not (docs/models.md)."""
        import torch

        m = hidden.shape[0]
        head = self._exact_head() if exact else None
        if head is None:
            pad = -m % EXACT_ROW_BLOCK if blocked else int(m == 1)
            if pad:
                hidden = torch.cat([hidden, hidden[:1].expand(pad, -1)])
            logits = self._head(hidden)
        else:
            # a CPU GEMM picks its kernel by the row count, so a row's last bits would depend on how many
            # rows share the call: row tiles of a fixed count keep them the same (tested for any batch
            # and offset); the padding to EXACT_ROW_BLOCK predates the tiles and changes nothing
            pad = -m % EXACT_ROW_BLOCK
            if pad:
                hidden = torch.cat([hidden, hidden[:1].expand(pad, -1)])
            weight, bias = head
            logits = tiled_linear(hidden.float(), weight, bias)
        if self._softcap is not None:  # Gemma's final logit softcapping, as its ForCausalLM does it
            logits = apply_final_logit_softcap(logits, self._softcap)
        return logits[:m]

    def _exact_head(self):
        """(weight, bias) of the LM head in float32, made once per engine (the model's own tensors
        when it is float32 already); None when the head is not a plain linear layer (a quantised
        head), which then runs as the model runs it."""
        import torch

        if self._head_fp32 is None:
            head = self._head
            ok = type(head) is torch.nn.Linear and head.weight.dtype in (torch.float32, torch.bfloat16, torch.float16)
            if not ok:
                self._head_fp32 = False
            else:
                bias = None if head.bias is None else head.bias.detach().float()
                self._head_fp32 = (head.weight.detach().float(), bias)
        return self._head_fp32 or None
