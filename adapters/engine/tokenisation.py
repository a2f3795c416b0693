"""Tokenisation as lm-eval's HFLM does it (the engine's reproducibility rules, adapters/engine/engine.py):
special tokens by the tokenizer's own default unless the text already starts with the BOS/prefix
token's text, trailing whitespace of a context moved into its continuation, an empty context read as
the BOS (else EOS) token, and the model's context length from its config."""

from __future__ import annotations

DEFAULT_MAX_LENGTH = 2048
_TOKENIZER_INFINITY = 1000000000000000019884624838656


def prefix_token_id(tokenizer) -> int:
    """The token an empty context stands for: BOS if the tokenizer has one, else EOS (HFLM)."""
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def tok_encode(tokenizer, text: str, add_special_tokens: bool | None = None) -> list[int]:
    """HFLM.tok_encode: the tokenizer's default special tokens, none if the text starts with the
    prefix token's text."""
    kwargs = {}
    if add_special_tokens is not None:
        kwargs["add_special_tokens"] = add_special_tokens
    else:
        prefix = tokenizer.decode(prefix_token_id(tokenizer))
        if text.startswith(prefix):
            kwargs["add_special_tokens"] = False
    return list(tokenizer.encode(text, **kwargs))


def split_trailing_space(context: str, continuation: str) -> tuple[str, str]:
    n = len(context) - len(context.rstrip())
    if n:
        return context[:-n], context[-n:] + continuation
    return context, continuation


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """(context tokens, continuation tokens) exactly as lm-eval's TemplateLM for a causal model."""
    if context == "":
        cont = tok_encode(tokenizer, continuation, add_special_tokens=False)
        prefix = prefix_token_id(tokenizer)
        if cont and cont[0] == prefix:
            return cont[:1], cont[1:]
        return [prefix], cont
    context, continuation = split_trailing_space(context, continuation)
    whole = tok_encode(tokenizer, context + continuation)
    ctx = tok_encode(tokenizer, context)
    return ctx, whole[len(ctx) :]


def resolve_max_length(config, tokenizer=None, default: int = DEFAULT_MAX_LENGTH) -> int:
    """lm-eval's resolve_max_length: text_config, then config, then the tokenizer, then default."""
    for cfg in (getattr(config, "text_config", None), config):
        if cfg is None:
            continue
        for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
            v = getattr(cfg, attr, None)
            if isinstance(v, int) and v > 0:
                return v
    m = getattr(tokenizer, "model_max_length", None)
    if isinstance(m, int) and 0 < m < _TOKENIZER_INFINITY:
        return m
    return default
