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
  layers) is token-wise, and every linear layer (and the float32 head) runs on tiles of a fixed row
  count (`row_tiles`): a CPU GEMM picks its kernel by the row count, so a row computed among 7 rows
  can differ in the last bit from the same row among 300 (Intel with AMX, MKL's float32 kernels), but
  among a fixed number of rows it depends neither on its place nor on the other rows. Hence a
  request's numbers never depend on the other requests in its batch, nor on what was computed
  before: batch size 1, 8 and the default (sized to the work) give bit-identical greedy texts,
  sampled texts and log-likelihoods, in bf16 and fp32 (tested). Generation still pads its products
  to a multiple of EXACT_ROW_BLOCK rows and never runs a lone token row (both were needed before the
  tiles, and cost nothing). On CUDA the tiles are not claimed to be enough.
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
  passed. Decoding follows the model's own head (greedy texts equal transformers' `generate` except at
  near-ties inside bf16 rounding: docs/models.md).
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

The code, along its seams: this module holds `Engine` (the Backend protocol, chat rendering,
log-likelihoods) and the once-per-process loading; `tokenisation` the HFLM-compatible encoding;
`engine_prefill` the chunked prefill (`PrefillMixin`); `engine_head` the LM head (`HeadMixin`);
`engine_generate` generation (`GenerateMixin`); `kv_slab`, `prefix_cache`, `rowwise_attention` and
`sampling` what those stand on.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from safetyrepro.adapters.backends.backend import (  # noqa: F401  (GenRequest, GenResult re-exported)
    GREEDY_EXACT,
    SEED_PER_REQUEST,
    BackendIdentity,
    Capabilities,
    GenRequest,
    GenResult,
    LoglikRequest,
)
from safetyrepro.adapters.catalogue.loading import check_precision, load_hf, resolve_device
from safetyrepro.adapters.catalogue.weights import resolve_weights
from safetyrepro.adapters.engine import rowwise_attention
from safetyrepro.adapters.engine.engine_generate import (  # noqa: F401  (re-exported: the engine's public names)
    DECODE_KEY_BLOCK,
    DECODE_KV_MB,
    DECODE_MAX_ROWS,
    DECODE_ROWS_PER_PROMPT,
    DECODE_VERSION,
    GenerateMixin,
    check_gen_request,
    derive_seed,
    first_stop,
)
from safetyrepro.adapters.engine.engine_head import EXACT_ROW_BLOCK, HeadMixin  # noqa: F401
from safetyrepro.adapters.engine.engine_prefill import PrefillMixin, _Row
from safetyrepro.adapters.engine.prefix_cache import (
    PrefixStore,
    chunk_size_from_env,
    enabled_from_env,
    max_bytes_from_env,
)
from safetyrepro.adapters.engine.row_tiles import tile_linears
from safetyrepro.adapters.engine.tokenisation import (  # noqa: F401
    DEFAULT_MAX_LENGTH,
    encode_pair,
    prefix_token_id,
    resolve_max_length,
    split_trailing_space,
    tok_encode,
)
from safetyrepro.compat.transformers import attention_implementation
from safetyrepro.tasks.rendering import plain_text

DEFAULT_BATCH_SIZE = 8


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


# --------------------------------------------------------------------------- the engine


class Engine(PrefillMixin, HeadMixin, GenerateMixin):
    """A loaded model with batched generation and continuation log-likelihoods."""

    def __init__(
        self,
        model,
        tokenizer,
        info: ModelInfo,
        batch_size: int | None = None,
        chunk_size: int | None = None,
        prefix_cache: bool | None = None,
        prefix_cache_bytes: int | None = None,
        exact_scores: bool = True,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        tile_linears(model)  # a row's numbers never depend on the other rows, on any CPU (row_tiles)
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
        return BackendIdentity(
            "engine",
            info.label,
            info.label,
            info.precision,
            info.weights_sha256,
            extra={"device": info.device, "source": info.source, "decode": DECODE_VERSION},
        )

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            loglikelihood=True, greedy=GREEDY_EXACT, seeds=SEED_PER_REQUEST, chat_template=self.info.has_chat_template
        )

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
            return plain_text(messages)
        import jinja2

        kw = {
            "tokenize": False,
            "add_generation_prompt": add_generation_prompt,
            "continue_final_message": not add_generation_prompt,
        }
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

    # ----------------------------------------------------------------- log-likelihood

    def loglikelihood(
        self, requests: Sequence[LoglikRequest], batch_size: int | None = None, exact: bool | None = None
    ) -> list[tuple[float, bool]]:
        """(sum of continuation token log-probs, whether greedy decoding would produce the continuation).
        `exact` (default: `exact_scores`) takes them from the float32 head, else from the model-dtype head."""
        pairs = [self.encode_pair(r.context, r.continuation) for r in requests]
        return self.loglikelihood_tokens(pairs, batch_size=batch_size, exact=exact)

    def loglikelihood_tokens(
        self, pairs: Sequence[tuple[list[int], list[int]]], batch_size: int | None = None, exact: bool | None = None
    ) -> list[tuple[float, bool]]:
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
            inp = tuple((list(ctx) + list(cont))[-(self.max_length + 1) :][:-1])
            groups.setdefault(inp, []).append(i)
        inputs = list(groups)
        # in token order, so that requests sharing a context (the candidates of an item, the items of
        # a few-shot cell) sit in the same batch and share its chunks
        order = sorted(range(len(inputs)), key=lambda k: inputs[k])
        with self._lock, torch.inference_mode():
            for chunk in (order[i : i + bs] for i in range(0, len(order), bs)):
                keeps = [max(len(pairs[i][1]) for i in groups[inputs[k]]) for k in chunk]
                rows = [
                    _Row(list(inputs[k]), max(0, len(inputs[k]) - keep), max(1, len(inputs[k]) - keep + 1))
                    for k, keep in zip(chunk, keeps, strict=True)
                ]
                pre = self._prefill(rows, exact=exact)
                for b, k in enumerate(chunk):
                    logits = pre.logits[b]
                    keep = logits.shape[0]
                    for i in groups[inputs[k]]:
                        cont = list(pairs[i][1])
                        n = len(cont)
                        lp = torch.log_softmax(logits[keep - n :].float(), dim=-1)
                        target = torch.tensor(cont, device=lp.device)
                        score = lp.gather(1, target[:, None]).sum().item()
                        greedy = bool((lp.argmax(dim=-1) == target).all())
                        results[i] = (float(score), greedy)
        return results  # type: ignore[return-value]


# --------------------------------------------------------------------------- loading, once per process

_ENGINES: dict[tuple[str, str, str], Engine] = {}
_ENGINES_LOCK = threading.Lock()


def _engine_key(model: str, precision: str, device: str | None):
    """((weights path, precision, device), resolved weights); validates all three."""
    precision = check_precision(precision)
    resolved = resolve_weights(model)
    return (str(resolved.path), precision, resolve_device(device)), resolved


def load_engine(
    model: str, precision: str = "bf16", device: str | None = None, batch_size: int | None = None
) -> Engine:
    """The engine for (model, precision, device), loaded once per process and reused.

    Raises UserError for an unknown model name, an unreadable GGUF file, an unknown precision or
    device. An engine put in place with `install_engine` (for example one wrapped in an output
    cache) is returned as it is."""
    key, resolved = _engine_key(model, precision, device)
    with _ENGINES_LOCK:
        eng = _ENGINES.get(key)
        if eng is None:
            _, precision, device = key
            hf_model, tokenizer = load_hf(resolved, precision, device)
            attention = (
                rowwise_attention.NAME
                if rowwise_attention.enable(hf_model)
                else str(attention_implementation(hf_model))
            )
            info = ModelInfo(
                label=resolved.label,
                source=resolved.source,
                weights_sha256=resolved.weights_sha256(),
                precision=precision,
                device=device,
                has_chat_template=bool(getattr(tokenizer, "chat_template", None)),
                n_params=int(hf_model.num_parameters()),
                kind=resolved.kind,
                name=resolved.spec.name if resolved.spec else resolved.label,
                max_length=resolve_max_length(hf_model.config, tokenizer),
                attention=attention,
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
