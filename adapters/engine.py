"""One inference engine behind every package: batched greedy/sampled generation and
continuation log-likelihoods, on a model loaded once.

Reproducibility rules (tests hold the engine to them):

- Tokenisation follows lm-eval's HFLM: `tok_encode` uses the tokenizer's own default for special
  tokens (SmolLM2 and Qwen add none, Gemma adds `<bos>`), except that a text which already starts
  with the BOS/prefix token's text (chat-templated prompts) gets none added. `encode_pair` moves
  trailing whitespace of the context into the continuation, encodes context+continuation whole and
  splits at the length of the encoded context; an empty context is the BOS token (else EOS).
  Inputs longer than the model's context are cut from the left, as HFLM does.
- The canonical computation is a chunked prefill: a prompt (or context+continuation) is cut into
  chunks of C = `chunk_size` tokens at absolute positions 0..C-1, C..2C-1, ... (the last one
  partial; C = 32 unless SAFETYREPRO_PREFILL_CHUNK says otherwise), and chunk j's queries attend,
  in one SDPA call of their own, to the keys of positions 0 .. end of chunk j; decoding then
  appends one token at a time, every row attending to its own keys (left-aligned in a slab whose
  width is a multiple of DECODE_KEY_BLOCK; masked zero keys add exact zeros), all rows in one
  float32 attention product per layer. Every other operation (embeddings, norms, RoPE, linear
  layers) is token-wise, and on CPU in bf16 a matrix product's row does not depend on the other
  rows (a single-row product takes a GEMV path that can differ in the last bit, so no forward pass
  ever has a single token row: a lone one is run with an idle second row). Hence a request's
  numbers never depend on the other requests in its batch, nor on what was computed before: batch
  size 1, 8 and the default (sized to the work) give bit-identical greedy texts, sampled texts and
  log-likelihoods in bf16 (tested). In fp32 a CPU matrix product computes rows in blocks and a
  partial block another way, so generation (its prompts' prefill passes, its decode steps and their
  head) pads every product to a multiple of EXACT_ROW_BLOCK rows: fp32 generation is
  batch-invariant too (tested). fp32 log-likelihoods are not padded (their exact head is) and can
  move in the last bits (about 1e-6 relative) with the batch; so can anything on CUDA.
- Prefix reuse never changes a number. Since chunk j's key/value states depend only on the tokens
  up to its end, requests that share a chunk-aligned prefix (the few-shot demonstrations of a
  cell, the prompt of a request's sampled seeds, the context of a multiple-choice item) compute
  it once, and the states of full chunks are kept in a bounded LRU store (`prefix_cache`; 384 MB
  unless SAFETYREPRO_PREFIX_CACHE_MB says otherwise) for later calls. SAFETYREPRO_PREFIX_CACHE=0
  (or `Engine(prefix_cache=False)`) turns reuse off: every request then prefills every chunk
  itself, with bit-identical results (tested).
- Relation to lm-eval's HFLM (one forward over the whole input): with `exact_scores=False`, inputs
  of at most C tokens are computed exactly as HFLM computes them (with `softmax_dtype=float32`,
  bit-identical log-likelihoods, tested). Longer inputs attend chunk by chunk, which moves bf16 results: on
  SmolLM2 up to 0.34 nats on 1-3-token continuations after 300-700-token contexts (mostly none
  below ~256 tokens), as far from the float32 model as HFLM's own bf16 numbers are (in fp32 the
  two agree to ~1e-5). The per-item choices agree (tested; docs/models.md).
- Log-likelihoods run the LM head and the log-softmax in float32 (the model's final hidden state
  upcast), and only at the continuation positions (the head runs on those positions' hidden
  states only), which is what makes 150-260k vocabularies cheap. A bf16 head would round the
  logits to multiples of 1/8 at their usual magnitude, so that an item's candidates tie exactly
  (about 6 % of SmolLM2 items); `exact_scores=False` keeps the model-dtype head (HFLM's numbers).
  lm-eval's HFLM takes its log-softmax in the model dtype unless `softmax_dtype=float32` is
  passed. Decoding follows the model's own head (greedy texts equal transformers' `generate`).
- temperature == 0 is true greedy (argmax, first index on ties). temperature > 0 samples from
  softmax(logits / temperature) restricted to the top-p nucleus (the smallest set of tokens whose
  probability reaches top_p, as transformers' TopPLogitsWarper, token for token), by inverse CDF
  with a torch.Generator seeded per request on CPU (`sampling`): a request's text depends only on
  its prompt, seed, temperature, top_p and max_new_tokens. A sampled request without a seed gets a
  fresh random one, reported in `GenResult.seed`. DECODE_VERSION names this decoding in the
  engine's identity, so that outputs cached by an earlier one are never mixed with its own.
- Generated text excludes the prompt and EOS, and is cut at the earliest stop string (excluded).
  A row stops at EOS, at a stop string, or at max_new_tokens. Decoding is continuously batched:
  a finished row's place goes to the next waiting prompt (`Engine._generate`).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from safetyrepro.adapters.backend import (
    GREEDY_EXACT,
    SEED_PER_REQUEST,
    BackendIdentity,
    Capabilities,
    GenRequest,
    GenResult,
    LoglikRequest,
)
from safetyrepro.adapters.prefix_cache import (
    PrefixStore,
    chunk_keys,
    chunk_size_from_env,
    enabled_from_env,
    max_bytes_from_env,
)
from safetyrepro.adapters.sampling import next_tokens
from safetyrepro.errors import UserError

DEFAULT_BATCH_SIZE = 8
DECODE_ROWS_PER_PROMPT = 8  # decoding with an explicit batch_size: that many prompts, batch_size x this rows
DECODE_MAX_ROWS = 192  # decoding sized to the work: at most this many rows in one step ...
DECODE_KV_MB = 2048  # ... and their key/value states within this many MB (SAFETYREPRO_DECODE_KV_MB)
DECODE_KEY_BLOCK = 16  # a decode step's key width is a multiple of this (see rowwise_attention._decode_forward)
# 2: one attention product for all rows, row blocks padded in fp32, inverse-CDF sampling (1: the first)
DECODE_VERSION = 2
DEFAULT_MAX_LENGTH = 2048
EXACT_ROW_BLOCK = 8  # rows of a float32 head call are padded to a multiple of this (see Engine._logits)
_TOKENIZER_INFINITY = 1000000000000000019884624838656


@dataclass(frozen=True)
class ModelInfo:
    label: str
    source: str
    weights_sha256: str
    precision: str
    device: str
    has_chat_template: bool
    n_params: int
    kind: str = ""  # "gguf" or "hf"
    name: str = ""  # display name of an embedded model
    max_length: int = 0
    attention: str = ""  # the attention implementation used

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------- tokenisation (pure)


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
    return ctx, whole[len(ctx):]


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


def derive_seed(base: int, *parts: object) -> int:
    """A 63-bit seed from a base seed and any parts (stable across processes and platforms)."""
    h = hashlib.sha256(repr((int(base), *parts)).encode("utf-8")).digest()
    return int.from_bytes(h[:8], "big") >> 1


def first_stop(text: str, stop: Sequence[str]) -> int:
    """Index of the earliest occurrence of any (non-empty) stop string, or -1."""
    found = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return min(found) if found else -1


def check_gen_request(r: GenRequest) -> None:
    if r.max_new_tokens < 0:
        raise UserError(f"max_new_tokens must be >= 0, got {r.max_new_tokens}")
    if r.temperature < 0:
        raise UserError(f"temperature must be >= 0, got {r.temperature}")
    if not 0 < r.top_p <= 1:
        raise UserError(f"top_p must be in (0, 1], got {r.top_p}")


# --------------------------------------------------------------------------- the engine


class Engine:
    """A loaded model with batched generation and continuation log-likelihoods."""

    def __init__(self, model, tokenizer, info: ModelInfo, batch_size: int | None = None,
                 chunk_size: int | None = None, prefix_cache: bool | None = None,
                 prefix_cache_bytes: int | None = None, exact_scores: bool = True):
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        # None: log-likelihoods in batches of DEFAULT_BATCH_SIZE, decoding sized to the work (decode_rows)
        self.batch_size = None if batch_size is None else max(1, int(batch_size))
        self.max_length = info.max_length or resolve_max_length(model.config, tokenizer)
        self._lock = threading.RLock()
        self.pad_token_id = next(t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0) if t is not None)
        eos = set()
        gc = getattr(model, "generation_config", None)
        for e in (getattr(gc, "eos_token_id", None), tokenizer.eos_token_id):
            if isinstance(e, int):
                eos.add(e)
            elif e:
                eos.update(int(x) for x in e)
        self.eos_token_ids = frozenset(eos)
        self._rowwise = info.attention == "safetyrepro_rowwise"
        self.chunk_size = int(chunk_size) if chunk_size else chunk_size_from_env()
        if self.chunk_size < 2:
            raise ValueError(f"chunk_size must be >= 2, got {self.chunk_size}")
        self.prefix_cache = enabled_from_env() if prefix_cache is None else bool(prefix_cache)
        self.prefix_store = PrefixStore(max_bytes_from_env() if prefix_cache_bytes is None else prefix_cache_bytes)
        # log-likelihoods from a float32 head (`_logits`); False reproduces the model-dtype head (HFLM's numbers)
        self.exact_scores = bool(exact_scores)
        self._head_fp32 = None
        self._kv_layout()

    # ----------------------------------------------------------------- the Backend protocol

    @property
    def identity(self) -> BackendIdentity:
        info = self.info
        return BackendIdentity("engine", info.label, info.label, info.precision, info.weights_sha256,
                               extra={"device": info.device, "source": info.source, "decode": DECODE_VERSION})

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(loglikelihood=True, greedy=GREEDY_EXACT, seeds=SEED_PER_REQUEST,
                            chat_template=self.info.has_chat_template)

    def close(self) -> None:
        """Engines stay loaded for the process (load_engine reuses them)."""

    # ----------------------------------------------------------------- text in, text out

    @property
    def has_chat_template(self) -> bool:
        return self.info.has_chat_template

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The tokenizer's chat template as lm-eval's HFLM applies it (system role dropped if the
        template rejects it); the plain-text join when the model has no template."""
        if not self.has_chat_template:
            from safetyrepro.tasks.rendering import plain_text

            return plain_text(messages)
        import jinja2

        kw = {"tokenize": False, "add_generation_prompt": add_generation_prompt,
              "continue_final_message": not add_generation_prompt}
        try:
            return self.tokenizer.apply_chat_template(messages, **kw)
        except jinja2.exceptions.TemplateError:
            return self.tokenizer.apply_chat_template([m for m in messages if m["role"] != "system"], **kw)

    def render(self, messages: list[dict[str, str]]) -> str:
        return self.apply_chat_template(messages, add_generation_prompt=True)

    def tok_encode(self, text: str, add_special_tokens: bool | None = None) -> list[int]:
        return tok_encode(self.tokenizer, text, add_special_tokens)

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        return encode_pair(self.tokenizer, context, continuation)

    # ----------------------------------------------------------------- chunked prefill

    def _kv_layout(self) -> None:
        """Base model, LM head and softcap, and the keyword the cache goes under (renamed in 5.x)."""
        from safetyrepro.compat.transformers import (
            base_cache_keyword,
            final_logit_softcap,
            text_config,
        )

        self._base = self.model.base_model
        self._head = self.model.get_output_embeddings()
        text = text_config(self.model)
        self._softcap = final_logit_softcap(self.model)
        self._base_cache_kw = base_cache_keyword(self._base)
        heads = text.num_attention_heads
        self._kv_dims = (text.num_hidden_layers, getattr(text, "num_key_value_heads", None) or heads,
                         getattr(text, "head_dim", None) or text.hidden_size // heads)
        self._kv_dtype = self.model.get_input_embeddings().weight.dtype

    def _logits(self, hidden, exact: bool = False, blocked: bool = False):
        """LM head on hidden states [M, H] -> logits [M, V]. A single row is run as two copies (see
        `_run`); `blocked` (decoding) pads the rows to a multiple of EXACT_ROW_BLOCK, as the exact
        head always does.

        Default: as the model's own head computes them (the model dtype), which is what decoding
        follows, so that greedy texts are those of transformers' `generate`. `exact`: the head in
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
            # CPU float32 GEMM computes rows in blocks of 4 and a partial block another way, so a row's
            # last bits would depend on how many rows share the call: padding to a multiple of
            # EXACT_ROW_BLOCK keeps every row in a full block (tested for any batch and offset)
            pad = -m % EXACT_ROW_BLOCK
            if pad:
                hidden = torch.cat([hidden, hidden[:1].expand(pad, -1)])
            weight, bias = head
            logits = torch.nn.functional.linear(hidden.float(), weight, bias)
        if self._softcap is not None:  # Gemma's final logit softcapping, as its ForCausalLM does it
            from safetyrepro.compat.transformers import apply_final_logit_softcap

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

    def _run(self, ids, attention_mask, position_ids, cache, spans, key_len=None):
        """One forward of the base model: last hidden states [batch, T, hidden]. Every row's span (a
        prefill), or every row's key count (`key_len`, a decode step), is given to the row-wise
        attention (see rowwise_attention); the caller keeps single-token forwards at two rows or more
        (CPU bf16 GEMV and GEMM differ in the last bit)."""
        kwargs = {self._base_cache_kw: cache, "attention_mask": attention_mask, "position_ids": position_ids}
        if self._rowwise:
            kwargs.update(sr_spans=spans, sr_key_len=key_len, sr_mask_memo={})
        return self._base(input_ids=ids, use_cache=True, **kwargs).last_hidden_state

    def _prefill(self, rows: Sequence[_Row], want_kv: bool = False, exact: bool = False,
                 blocked: bool = False) -> _Prefilled:
        """Chunked prefill of token rows: the logits at each row's wanted positions and (want_kv) the
        key/value states of each row's chunks.

        The canonical computation: row r is cut into chunks of C = `chunk_size` tokens at absolute
        positions (the last one partial), and chunk j's queries attend, in one SDPA call of their
        own, to the keys of positions 0 .. end of chunk j. Everything else in the network is
        token-wise, so the chunks of any number of rows are packed into one sequence per forward
        pass (no padding); each chunk writes its keys/values into its row of a KVSlab and reads its
        keys from there (see rowwise_attention and kv_slab). A chunk's states thus depend on the
        tokens up to its end only, and are computed the same way whatever the batch. `exact`: the
        wanted logits come from the float32 head (`_logits`).

        With `prefix_cache` on, a chunk is identified by the whole prefix up to its end: rows sharing
        it compute it once (the other rows copy its states before their later chunks run, one
        forward pass later), and full chunks before the chunk holding a row's first wanted position
        are taken from the prefix store when there (`prefix_cache.PrefixStore`). Off, every row
        computes every chunk itself. The numbers are the same either way."""
        import torch

        C = self.chunk_size
        share = self.prefix_cache
        store = self.prefix_store
        R = len(rows)
        lens = [len(row.tokens) for row in rows]
        n_chunks = [-(-n // C) for n in lens]
        node_of: list[list] = []  # per row, per chunk: the chunk's identity
        for r, row in enumerate(rows):
            if share:
                ids: list = list(chunk_keys(row.tokens, C))
                if len(ids) < n_chunks[r]:
                    ids.append((ids[-1] if ids else b"", tuple(row.tokens[len(ids) * C:])))
            else:
                ids = [(r, j) for j in range(n_chunks[r])]
            node_of.append(ids)
        stored: dict = {}  # chunk identity -> states from the store
        first = [0] * R  # each row's first chunk not taken from the store
        if share:
            for r, row in enumerate(rows):
                keys = node_of[r][: row.need_from // C]
                found = store.longest_prefix(keys) if keys else []
                stored.update(zip(keys, found))
                first[r] = len(found)
        # items: the chunks computed here, each by the first row that needs it computed
        owner: dict = {}  # identity -> (row, j)
        wanted: dict = {}  # identity -> offsets whose logits some row wants
        for r, row in enumerate(rows):
            for j in range(first[r], n_chunks[r]):
                node = node_of[r][j]
                owner.setdefault(node, (r, j))
                lo, hi = max(j * C, row.need_from), min(lens[r], (j + 1) * C)
                if hi > lo:
                    wanted.setdefault(node, set()).update(range(lo - j * C, hi - j * C))
        # an item runs in the pass after every item of another row that it needs (0: none)
        rnd: dict = {}
        for node, (r, j) in owner.items():
            t = 0
            for i in range(j):
                src = owner.get(node_of[r][i])
                if src is not None:
                    t = max(t, rnd[node_of[r][i]] + (src[0] != r))
            rnd[node] = t
        slab_row = {r: k for k, r in enumerate(sorted({r for r, _ in owner.values()}))}
        buf = None
        if owner:
            n_layers, kv_heads, head_dim = self._kv_dims
            cap = max(lens[r] for r in slab_row)
            buf = torch.empty(len(slab_row), n_layers, 2, kv_heads, cap, head_dim, dtype=self._kv_dtype,
                              device=self.model.device)

        def states(r: int, j: int):
            node = node_of[r][j]
            src = owner.get(node)
            if src is None:
                return stored[node]
            r2, _ = src
            return buf[slab_row[r2], :, :, :, j * C: min(lens[r2], (j + 1) * C)]

        wanted_logits: dict = {}  # (identity, offset) -> logits [V]
        copied: set = set()  # (row, j) whose states are in the row's slab line
        passes = sorted(set(rnd.values()))
        for t in passes:
            items = [(node, rj) for node, rj in owner.items() if rnd[node] == t]
            for _, (r, j) in items:  # the states each item reads that other rows made, into its line
                for i in range(j):
                    if (r, i) not in copied and owner.get(node_of[r][i], (None,))[0] != r:
                        buf[slab_row[r], :, :, :, i * C:(i + 1) * C] = states(r, i)
                        copied.add((r, i))
            groups = [items] if self._rowwise else [[it] for it in items]
            for group in groups:
                self._prefill_pass(group, rows, lens, buf, slab_row, wanted, wanted_logits, exact, blocked)
        if share:
            puts = []
            for node, (r, j) in owner.items():
                if isinstance(node, bytes) and (j + 1) * C <= max(
                        rows[q].store_upto for q in range(R) if j < n_chunks[q] and node_of[q][j] == node):
                    puts.append((j, node, states(r, j).clone()))
            store.put_prefix([(node, v) for _, node, v in sorted(puts, key=lambda p: p[0])])
        logits = [torch.stack([wanted_logits[(node_of[r][p // C], p % C)] for p in range(row.need_from, lens[r])])
                  for r, row in enumerate(rows)]
        chunks = [[states(r, j) for j in range(n_chunks[r])] for r in range(R)] if want_kv else None
        return _Prefilled(logits, chunks)

    def _prefill_pass(self, items: list, rows: Sequence[_Row], lens: list[int], buf, slab_row: dict,
                      wanted: dict, wanted_logits: dict, exact: bool = False, blocked: bool = False) -> None:
        """One forward over `items` ((identity, (row, j)): chunk j of a row), packed into one sequence
        (row-wise attention) or, without it, one chunk alone on a one-row cache."""
        import torch

        from safetyrepro.adapters.kv_slab import KVSlab

        C, device = self.chunk_size, self.model.device
        toks: list[int] = []
        pos: list[int] = []
        spans, writes, sel_t, sel_key = [], [], [], []
        for node, (r, j) in items:
            lo, hi = j * C, min(lens[r], (j + 1) * C)
            off = len(toks)
            toks += rows[r].tokens[lo:hi]
            pos += range(lo, hi)
            spans.append((0, off, off + hi - lo, slab_row[r], 0, hi))
            writes.append((slab_row[r], lo, off, off + hi - lo))
            for o in sorted(wanted.get(node, ())):
                sel_t.append(off + o)
                sel_key.append((node, o))
        if self._rowwise:
            # never a one-token forward (see _run): an idle second token; `blocked` (the prompts of a
            # generation) pads to a multiple of EXACT_ROW_BLOCK tokens, so that float32 products
            # compute every token in a full block of rows whatever else the pass holds
            pad = -len(toks) % EXACT_ROW_BLOCK if blocked else int(len(toks) == 1)
            toks += [self.pad_token_id] * pad
            pos += [0] * pad
            hidden = self._run(torch.tensor([toks], device=device), None, torch.tensor([pos], device=device),
                               KVSlab(buf, 0, writes).cache, spans)
        else:
            ((_, (r, j)),) = items
            line = buf[slab_row[r]: slab_row[r] + 1]
            hidden = self._run(torch.tensor([toks], device=device), None, torch.tensor([pos], device=device),
                               KVSlab(line, j * C).cache, None)
        if sel_key:
            logits = self._logits(hidden[0, torch.tensor(sel_t, device=device)], exact=exact, blocked=blocked)
            for k, key in enumerate(sel_key):
                wanted_logits[key] = logits[k]

    # ----------------------------------------------------------------- log-likelihood

    def loglikelihood(self, requests: Sequence[LoglikRequest], batch_size: int | None = None,
                      exact: bool | None = None) -> list[tuple[float, bool]]:
        """(sum of continuation token log-probs, whether greedy decoding would produce the continuation).
        `exact` (default: `exact_scores`) takes them from the float32 head, else from the model-dtype head."""
        pairs = [self.encode_pair(r.context, r.continuation) for r in requests]
        return self.loglikelihood_tokens(pairs, batch_size=batch_size, exact=exact)

    def loglikelihood_tokens(self, pairs: Sequence[tuple[list[int], list[int]]],
                             batch_size: int | None = None, exact: bool | None = None) -> list[tuple[float, bool]]:
        import torch

        exact = self.exact_scores if exact is None else bool(exact)
        bs = batch_size or self.batch_size or DEFAULT_BATCH_SIZE
        results: list[tuple[float, bool] | None] = [None] * len(pairs)
        # identical model inputs are run once (as HFLM's one-token-continuation cache does)
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, (ctx, cont) in enumerate(pairs):
            if not cont:
                results[i] = (0.0, True)
                continue
            if not ctx:
                raise ValueError("empty context token list; encode with encode_pair()")
            inp = tuple((list(ctx) + list(cont))[-(self.max_length + 1):][:-1])
            groups.setdefault(inp, []).append(i)
        inputs = list(groups)
        # in token order, so that requests sharing a context (the candidates of an item, the items of
        # a few-shot cell) sit in the same batch and share its chunks
        order = sorted(range(len(inputs)), key=lambda k: inputs[k])
        with self._lock, torch.inference_mode():
            for chunk in (order[i:i + bs] for i in range(0, len(order), bs)):
                keeps = [max(len(pairs[i][1]) for i in groups[inputs[k]]) for k in chunk]
                rows = [_Row(list(inputs[k]), max(0, len(inputs[k]) - keep), max(1, len(inputs[k]) - keep + 1))
                        for k, keep in zip(chunk, keeps, strict=True)]
                pre = self._prefill(rows, exact=exact)
                for b, k in enumerate(chunk):
                    logits = pre.logits[b]
                    keep = logits.shape[0]
                    for i in groups[inputs[k]]:
                        cont = list(pairs[i][1])
                        n = len(cont)
                        lp = torch.log_softmax(logits[keep - n:].float(), dim=-1)
                        target = torch.tensor(cont, device=lp.device)
                        score = lp.gather(1, target[:, None]).sum().item()
                        greedy = bool((lp.argmax(dim=-1) == target).all())
                        results[i] = (float(score), greedy)
        return results  # type: ignore[return-value]

    # ----------------------------------------------------------------- generation

    def generate(self, requests: Sequence[GenRequest], batch_size: int | None = None,
                 progress: bool = False) -> list[str]:
        return [r.text for r in self.generate_detailed(requests, batch_size=batch_size, progress=progress)]

    def generate_detailed(self, requests: Sequence[GenRequest], batch_size: int | None = None,
                          progress: bool = False) -> list[GenResult]:
        import torch

        for r in requests:
            check_gen_request(r)
        bs = batch_size or self.batch_size
        prompts: list[list[int]] = []
        seeds: list[int | None] = []
        for r in requests:
            ids = self.tok_encode(r.prompt)
            room = self.max_length - r.max_new_tokens
            if room <= 0:
                raise UserError(f"max_new_tokens {r.max_new_tokens} leaves no room for the prompt "
                                f"(model context {self.max_length} tokens)")
            if not ids:
                ids = [prefix_token_id(self.tokenizer)]
            prompts.append(ids[-room:])
            seeds.append(None if r.temperature == 0 else (r.seed if r.seed is not None else secrets.randbits(63)))
        results: list[GenResult | None] = [None] * len(requests)
        order = sorted(range(len(requests)), key=lambda i: (-len(prompts[i]), prompts[i], i))
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(requests), desc="generate", unit="req")

        def done(i: int, res: GenResult) -> None:
            results[i] = res
            if bar is not None:
                bar.update(1)

        with self._lock, torch.inference_mode():
            self._generate(order, prompts, list(requests), seeds, bs, done)
        if bar is not None:
            bar.close()
        return results  # type: ignore[return-value]

    def decode_rows(self, longest: int) -> int:
        """Rows decoded side by side when no batch size is given: as many as the work has, up to
        DECODE_MAX_ROWS (matrix products stop gaining speed well before), and as many as fit
        SAFETYREPRO_DECODE_KV_MB (default DECODE_KV_MB) of key/value states when every row is
        `longest` tokens (prompt + new tokens) long."""
        import os

        import torch

        try:
            budget_mb = float(os.environ.get("SAFETYREPRO_DECODE_KV_MB", "") or DECODE_KV_MB)
        except ValueError:
            raise UserError("SAFETYREPRO_DECODE_KV_MB must be a number of megabytes, got "
                            f"{os.environ['SAFETYREPRO_DECODE_KV_MB']!r}") from None
        n_layers, kv_heads, head_dim = self._kv_dims
        per_row = max(1, longest) * n_layers * 2 * kv_heads * head_dim * torch.empty(0, dtype=self._kv_dtype).element_size()
        return max(2, min(DECODE_MAX_ROWS, int(budget_mb * 2**20 // per_row)))

    def _generate(self, order: list[int], prompts: list[list[int]], reqs: list[GenRequest],
                  seeds: list[int | None], batch_size: int | None, done) -> None:
        """Continuous batching. Requests are admitted in `order` by prompt groups (identical prompts,
        e.g. the seeds of a sampled request): whenever fewer than `batch_size` distinct prompts are
        decoding, the next groups are prefilled (chunked, through the prefix store) and join the
        decoding rows, up to `DECODE_ROWS_PER_PROMPT` x batch_size rows; with no batch size, up to
        `decode_rows` rows whatever their prompts (the work and the memory decide). Decoding runs on a
        KVSlab with one row per request, its keys from column 0, every row writing its new token at
        its own column and attending to its own keys, all rows in one attention call per layer
        (rowwise_attention._decode_forward); finished rows stay in it, idle, until half of its rows
        are idle or new rows come in, then it is laid out anew. A lone decoding row always has a
        second (idle) row beside it: no forward pass has a single token row. Without row-wise
        attention, a group is admitted only into an empty slab and only with groups of its prompt
        length (no padding)."""
        import torch

        from safetyrepro.adapters.kv_slab import KVSlab

        if batch_size is None:  # sized to the work and the memory (decode_rows)
            max_rows = self.decode_rows(max(len(prompts[i]) + reqs[i].max_new_tokens for i in order) if order else 1)
            batch_size = max_rows
        else:
            max_rows = DECODE_ROWS_PER_PROMPT * batch_size
        groups: list[list[int]] = []
        for i in order:
            if reqs[i].max_new_tokens == 0:
                done(i, GenResult(text="", n_prompt_tokens=len(prompts[i]), n_new_tokens=0, finish_reason="length",
                                  seed=seeds[i]))
            elif groups and prompts[groups[-1][0]] == prompts[i] and len(groups[-1]) < max_rows:
                groups[-1].append(i)
            else:
                groups.append([i])
        pending = deque(groups)
        rows: list[_GenRow | None] = []  # slab rows; None: idle
        slab = None
        logits: dict[int, object] = {}  # slab row -> logits of the row's next token
        fed: list[int] = []  # the rows of the last decode step, whose logits are `out`
        out = None
        device = self.model.device
        while pending or any(r is not None for r in rows):
            live = [b for b, r in enumerate(rows) if r is not None]
            n_groups = len({rows[b].group for b in live})
            if pending and n_groups < batch_size and (self._rowwise or not live):
                admit: list[list[int]] = []
                n_rows = len(live)
                while pending and n_groups + len(admit) < batch_size and (
                        n_rows + len(pending[0]) <= max_rows or not (admit or live)):
                    if not self._rowwise and admit and len(prompts[pending[0][0]]) != len(prompts[admit[0][0]]):
                        break
                    n_rows += len(pending[0])
                    admit.append(pending.popleft())
                if admit:
                    slab, rows, logits = self._admit(admit, prompts, reqs, seeds, slab, rows, logits)
                    fed = []  # rows renumbered: `out` no longer lines up with them
                    live = [b for b, r in enumerate(rows) if r is not None]
            # sample every live row's next token
            active = [rows[b] for b in live]
            batch = out if live == fed else torch.stack([logits[b] for b in live])  # (no copy when unchanged)
            toks = next_tokens(batch, [reqs[r.i] for r in active], [r.gen for r in active])
            feed: dict[int, int] = {}
            for b, r, t in zip(live, active, toks, strict=True):
                r.n_new += 1
                stop = t in self.eos_token_ids
                if not stop:
                    r.generated.append(t)
                    stop = bool(reqs[r.i].stop) and first_stop(
                        self.tokenizer.decode(r.generated, skip_special_tokens=True), reqs[r.i].stop) >= 0
                if stop or len(r.generated) >= reqs[r.i].max_new_tokens:
                    done(r.i, self._result(r, prompts, reqs, seeds, "stop" if stop else "length"))
                    rows[b] = None
                else:
                    feed[b] = t
            logits = {}
            if not feed:
                rows, slab = [], None
                continue
            # the rows still decoding are exactly those being fed: lay them out anew when half the slab
            # is idle or it has no column left (a fresh slab has room for every row's next token)
            idle = len(rows) - len(feed)
            longest = max(rows[b].length for b in feed)
            if (2 * idle >= len(rows) and len(feed) + (-len(feed) % EXACT_ROW_BLOCK) < len(rows)) \
                    or longest + 1 > slab.capacity:
                slab, rows, kept = self._relayout(slab, rows, sorted(feed), [])
                feed = {kept[b]: t for b, t in feed.items()}
            # one decode step for the rows being fed, each writing at its own next column; idle rows get
            # a pad token at column 0 and see only that
            pos, ids = [], []
            for b, r in enumerate(rows):
                if b in feed:
                    r.length += 1
                    pos.append(r.length - 1)
                    ids.append(feed[b])
                else:
                    pos.append(0)
                    ids.append(self.pad_token_id)
            pos_t = torch.tensor(pos, device=device)
            if self._rowwise:
                width = min(slab.capacity, -(-(longest + 1) // DECODE_KEY_BLOCK) * DECODE_KEY_BLOCK)
                cache = KVSlab(slab.buf, 0, cols=pos_t, width=width, layer_major=True).cache
                hidden = self._run(torch.tensor(ids, device=device)[:, None], None, pos_t[:, None], cache, None,
                                   key_len=pos_t + 1)
            else:  # one prompt length per slab, so every row writes the same column: no padding, no mask
                slab = KVSlab(slab.buf, slab.n, layer_major=True)
                mask = torch.ones(len(rows), slab.n + 1, dtype=torch.long, device=device)
                hidden = self._run(torch.tensor(ids, device=device)[:, None], mask, pos_t[:, None], slab.cache, None)
            fed = sorted(feed)
            out = self._logits(hidden[torch.tensor(fed, device=device), -1], blocked=True)
            logits = {b: out[k] for k, b in enumerate(fed)}

    def _result(self, r: _GenRow, prompts, reqs, seeds, finish: str) -> GenResult:
        text = self.tokenizer.decode(r.generated, skip_special_tokens=True)
        cut = first_stop(text, reqs[r.i].stop)
        if cut >= 0:
            text = text[:cut]
        return GenResult(text=text, n_prompt_tokens=len(prompts[r.i]), n_new_tokens=r.n_new, finish_reason=finish,
                         seed=seeds[r.i])

    def _admit(self, admit: list[list[int]], prompts, reqs, seeds, slab, rows, logits):
        """Prefill the admitted groups and add one slab row per request (the slab is laid out anew)."""
        import torch

        if self.prefix_cache:  # one prefill row per distinct prompt
            members = admit
        else:  # the unoptimised path: every request prefills its own prompt
            members = [[i] for g in admit for i in g]
        pre = self._prefill([_Row(prompts[m[0]], len(prompts[m[0]]) - 1, len(prompts[m[0]])) for m in members],
                            want_kv=True, blocked=True)
        group_of = {}
        for g in admit:
            key = object()
            for i in g:
                group_of[i] = key
        new = []
        for p, m in enumerate(members):
            for i in m:
                g = None
                if seeds[i] is not None:
                    g = torch.Generator(device="cpu")
                    g.manual_seed(int(seeds[i]))
                new.append((_GenRow(i=i, group=group_of[i], gen=g, length=len(prompts[i]), max_new=reqs[i].max_new_tokens),
                            pre.chunks[p],
                            pre.logits[p][-1]))
        keep = [b for b, r in enumerate(rows) if r is not None]
        slab, rows, kept = self._relayout(slab, rows, keep, [(r, c) for r, c, _ in new])
        logits = {kept[b]: t for b, t in logits.items() if b in kept}
        for k, (_, _, t) in enumerate(new):
            logits[len(keep) + k] = t
        return slab, rows, logits

    def _relayout(self, slab, rows, keep: list[int], new: list):
        """A fresh slab holding the kept rows (then the new ones: (row, prompt chunks)), each from
        column 0 (left-aligned), with room to decode every row to its max_new_tokens (rounded up to
        DECODE_KEY_BLOCK columns), idle rows added to make a multiple of EXACT_ROW_BLOCK.
        Returns (slab, rows, old index -> new index)."""
        import torch

        from safetyrepro.adapters.kv_slab import KVSlab

        out_rows: list[_GenRow | None] = [rows[b] for b in keep] + [r for r, _ in new]
        width = max(r.length for r in out_rows)
        capacity = max(r.length + r.room for r in out_rows)
        capacity = -(-capacity // DECODE_KEY_BLOCK) * DECODE_KEY_BLOCK
        out_rows += [None] * (-len(out_rows) % EXACT_ROW_BLOCK)  # idle rows: every step a full block
        n_layers, kv_heads, head_dim = self._kv_dims
        # zeros: the masked columns of a decode step are read (as exact zeros, never NaN garbage)
        buf = torch.zeros(n_layers, 2, len(out_rows), kv_heads, capacity, head_dim, dtype=self._kv_dtype,
                          device=self.model.device)
        for b, old in enumerate(keep):
            n = rows[old].length
            buf[:, :, b, :, :n] = slab.buf[:, :, old, :, :n]
        for k, (_r, chunks) in enumerate(new):
            at = 0
            for t in chunks:  # [layers, 2, kv_heads, n, head_dim]
                buf[:, :, len(keep) + k, :, at: at + t.shape[3]] = t
                at += t.shape[3]
        return KVSlab(buf, width, layer_major=True), out_rows, {old: b for b, old in enumerate(keep)}

@dataclass
class _Row:
    """A prefill row: logits are wanted at positions need_from..len(tokens)-1; its full chunks
    ending at or before position store_upto go into the prefix store."""

    tokens: list[int]
    need_from: int
    store_upto: int


@dataclass
class _Prefilled:
    logits: list  # per row: [len(tokens) - need_from, vocab], the model's dtype (float32 when exact)
    chunks: list | None  # per row: each chunk's states [layers, 2, kv_heads, n, head_dim]


@dataclass(eq=False)
class _GenRow:
    """A decoding request: its index, prompt group, sampling generator, and state."""

    i: int
    group: object
    gen: object
    length: int  # tokens in its cache row (prompt + tokens fed back)
    generated: list = field(default_factory=list)
    n_new: int = 0
    max_new: int = 0

    @property
    def room(self) -> int:
        return max(1, self.max_new - len(self.generated))


# --------------------------------------------------------------------------- loading, once per process

_ENGINES: dict[tuple[str, str, str], Engine] = {}
_ENGINES_LOCK = threading.Lock()


def _engine_key(model: str, precision: str, device: str | None):
    """((weights path, precision, device), resolved weights); validates all three."""
    from safetyrepro.adapters.loading import check_precision, resolve_device
    from safetyrepro.adapters.weights import resolve_weights

    precision = check_precision(precision)
    resolved = resolve_weights(model)
    return (str(resolved.path), precision, resolve_device(device)), resolved


def load_engine(model: str, precision: str = "bf16", device: str | None = None,
                batch_size: int | None = None) -> Engine:
    """The engine for (model, precision, device), loaded once per process and reused.

    Raises UserError for an unknown model name, an unreadable GGUF file, an unknown precision or
    device. An engine put in place with `install_engine` (for example one wrapped in an output
    cache) is returned as it is."""
    from safetyrepro.adapters import rowwise_attention
    from safetyrepro.adapters.loading import load_hf
    from safetyrepro.compat.transformers import attention_implementation

    key, resolved = _engine_key(model, precision, device)
    with _ENGINES_LOCK:
        eng = _ENGINES.get(key)
        if eng is None:
            _, precision, device = key
            hf_model, tokenizer = load_hf(resolved, precision, device)
            attention = rowwise_attention.NAME if rowwise_attention.enable(hf_model) else \
                str(attention_implementation(hf_model))
            info = ModelInfo(
                label=resolved.label, source=resolved.source, weights_sha256=resolved.weights_sha256(),
                precision=precision, device=device, has_chat_template=bool(getattr(tokenizer, "chat_template", None)),
                n_params=int(hf_model.num_parameters()), kind=resolved.kind,
                name=resolved.spec.name if resolved.spec else resolved.label,
                max_length=resolve_max_length(hf_model.config, tokenizer), attention=attention,
            )
            eng = Engine(hf_model, tokenizer, info, batch_size=batch_size)
            _ENGINES[key] = eng
        elif batch_size and isinstance(eng, Engine):
            eng.batch_size = max(1, int(batch_size))
    return eng


def install_engine(model: str, precision: str, device: str | None, engine) -> None:
    """Make `load_engine(model, precision, device)` return `engine` (e.g. a caching wrapper) in this process."""
    key, _ = _engine_key(model, precision, device)
    with _ENGINES_LOCK:
        _ENGINES[key] = engine
