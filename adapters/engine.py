"""One inference engine behind every package: batched greedy/sampled generation and
continuation log-likelihoods, on a model loaded once.

Reproducibility rules (tests hold the engine to them):

- Tokenisation follows lm-eval's HFLM: `tok_encode` uses the tokenizer's own default for special
  tokens (SmolLM2 and Qwen add none, Gemma adds `<bos>`), except that a text which already starts
  with the BOS/prefix token's text (chat-templated prompts) gets none added. `encode_pair` moves
  trailing whitespace of the context into the continuation, encodes context+continuation whole and
  splits at the length of the encoded context; an empty context is the BOS token (else EOS).
  Inputs longer than the model's context are cut from the left, as HFLM does.
- A request's numbers never depend on the other requests in its batch: batches are left-padded
  and the attention runs row by row on the unpadded row (`rowwise_attention`); everything else in
  the model is row-wise. On CPU in bf16 this is bitwise: batch size 1 and 8 give identical
  greedy texts and log-likelihoods (tested). In fp32, and on CUDA, matrix kernels chosen by batch
  shape can still move the last bits (about 1e-6 relative).
- Log-likelihoods take the log-softmax in float32 and only at the continuation positions (the
  model is asked for logits of the last k positions only, `logits_to_keep`), which is what makes
  150-260k vocabularies cheap. lm-eval's HFLM takes its log-softmax in the model dtype unless
  `softmax_dtype=float32` is passed; with it, the two agree.
- temperature == 0 is true greedy (argmax, first index on ties). temperature > 0 samples from
  softmax(logits / temperature) restricted to the top-p nucleus (the smallest set of tokens whose
  probability reaches top_p, as transformers' TopPLogitsWarper), with a torch.Generator seeded
  per request on CPU: a request's text depends only on its prompt, seed, temperature, top_p and
  max_new_tokens. A sampled request without a seed gets a fresh random one, reported in
  `GenResult.seed`.
- Generated text excludes the prompt and EOS, and is cut at the earliest stop string (excluded).
  A row stops at EOS, at a stop string, or at max_new_tokens; the batch stops when all rows have.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from safetyrepro.errors import UserError

DEFAULT_BATCH_SIZE = 8
DEFAULT_MAX_LENGTH = 2048
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


@dataclass(frozen=True)
class GenRequest:
    prompt: str
    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class LoglikRequest:
    context: str
    continuation: str


@dataclass(frozen=True)
class GenResult:
    text: str
    n_prompt_tokens: int
    n_new_tokens: int  # generated tokens, EOS included, text after a stop string included
    finish_reason: str  # "stop" (EOS or a stop string) or "length"
    seed: int | None  # the seed actually used (None for greedy)


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

    def __init__(self, model, tokenizer, info: ModelInfo, batch_size: int = DEFAULT_BATCH_SIZE):
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        self.batch_size = max(1, int(batch_size))
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
        import inspect

        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"  # renamed in transformers 5.x

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

    # ----------------------------------------------------------------- forward passes

    def _forward(self, rows: list[list[int]], logits_to_keep: int, cache=None, use_cache: bool = False):
        """One left-padded forward over rows of token ids: (model output, left pads, slots).

        A lone one-token row is run as two copies of it (`slots` = [0, 0]): CPU matmul kernels take
        a different path for a single token row (bf16 GEMV vs GEMM, which differ in the last bit), so
        it would otherwise not match the same row inside a batch. The output's first rows are the
        requested ones."""
        import torch

        device = self.model.device
        slots = list(range(len(rows)))
        if len(rows) == 1 and len(rows[0]) == 1:
            rows, slots = rows * 2, [0, 0]
        width = max(len(r) for r in rows)
        pads = [width - len(r) for r in rows]
        ids = torch.tensor([[self.pad_token_id] * p + r for p, r in zip(pads, rows, strict=True)], device=device)
        kwargs = {}
        if any(pads):
            if not self._rowwise:
                raise RuntimeError("padded batch without row-wise attention")
            kwargs["attention_mask"] = torch.tensor([[0] * p + [1] * len(r) for p, r in zip(pads, rows, strict=True)],
                                                    device=device)
            kwargs["position_ids"] = (torch.arange(width, device=device)[None, :]
                                      - torch.tensor(pads, device=device)[:, None]).clamp(min=0)
        if self._rowwise:
            kwargs.update(sr_left_pad=pads, sr_total_len=width, sr_mask_memo={})
        if cache is not None:
            kwargs[self._cache_kw] = cache
        out = self.model(input_ids=ids, use_cache=use_cache, logits_to_keep=logits_to_keep, **kwargs)
        return out, pads, slots

    def _batches(self, n_rows_sorted: list[int], batch_size: int, lengths: list[int]) -> list[list[int]]:
        """Chunks of row indices; without row-wise attention, only equal lengths share a batch."""
        out: list[list[int]] = []
        for i in n_rows_sorted:
            if out and len(out[-1]) < batch_size and (self._rowwise or lengths[out[-1][0]] == lengths[i]):
                out[-1].append(i)
            else:
                out.append([i])
        return out

    # ----------------------------------------------------------------- log-likelihood

    def loglikelihood(self, requests: Sequence[LoglikRequest], batch_size: int | None = None) -> list[tuple[float, bool]]:
        """(sum of continuation token log-probs, whether greedy decoding would produce the continuation)."""
        pairs = [self.encode_pair(r.context, r.continuation) for r in requests]
        return self.loglikelihood_tokens(pairs, batch_size=batch_size)

    def loglikelihood_tokens(self, pairs: Sequence[tuple[list[int], list[int]]],
                             batch_size: int | None = None) -> list[tuple[float, bool]]:
        import torch

        bs = batch_size or self.batch_size
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
        order = sorted(range(len(inputs)), key=lambda k: (-len(inputs[k]), inputs[k]))
        lengths = [len(x) for x in inputs]
        with self._lock, torch.inference_mode():
            for chunk in self._batches(order, bs, lengths):
                rows = [list(inputs[k]) for k in chunk]
                keep = max(len(pairs[i][1]) for k in chunk for i in groups[inputs[k]])
                out, _, _ = self._forward(rows, logits_to_keep=keep)
                logits = out.logits
                for b, k in enumerate(chunk):
                    for i in groups[inputs[k]]:
                        cont = list(pairs[i][1])
                        n = len(cont)
                        lp = torch.log_softmax(logits[b, keep - n:].float(), dim=-1)
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
        order = sorted(range(len(requests)), key=lambda i: (-len(prompts[i]), i))
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(requests), desc="generate", unit="req")
        with self._lock, torch.inference_mode():
            for chunk in self._batches(order, bs, [len(p) for p in prompts]):
                for i, res in zip(chunk, self._generate_batch([prompts[i] for i in chunk],
                                                              [requests[i] for i in chunk],
                                                              [seeds[i] for i in chunk]), strict=True):
                    results[i] = res
                if bar is not None:
                    bar.update(len(chunk))
        if bar is not None:
            bar.close()
        return results  # type: ignore[return-value]

    def _next_tokens(self, logits, reqs: list[GenRequest], gens: list) -> list[int]:
        import torch

        out = []
        greedy = logits.argmax(dim=-1).tolist()
        for b, r in enumerate(reqs):
            if r.temperature == 0:
                out.append(int(greedy[b]))
                continue
            scores = logits[b].float().cpu() / r.temperature
            if r.top_p < 1.0:
                sorted_scores, sorted_idx = torch.sort(scores, descending=False)
                cum = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
                remove = cum <= (1 - r.top_p)
                remove[-1] = False  # keep at least the most likely token
                scores = scores.masked_fill(remove.scatter(0, sorted_idx, remove), float("-inf"))
            probs = scores.softmax(dim=-1)
            out.append(int(torch.multinomial(probs, 1, generator=gens[b]).item()))
        return out

    def _generate_batch(self, prompts: list[list[int]], reqs: list[GenRequest],
                        seeds: list[int | None]) -> list[GenResult]:
        """Generate for one batch. `slots` maps cache rows to active requests; a lone active row is
        held twice while decoding (see `_forward`) so that no forward pass has a single token row."""
        import torch

        n = len(prompts)
        gens = []
        for s in seeds:
            g = None
            if s is not None:
                g = torch.Generator(device="cpu")
                g.manual_seed(int(s))
            gens.append(g)
        generated: list[list[int]] = [[] for _ in range(n)]
        n_new = [0] * n
        finish = ["length"] * n
        active = [i for i in range(n) if reqs[i].max_new_tokens > 0]
        if active:
            out, pads, slots = self._forward([prompts[i] for i in active], logits_to_keep=1, use_cache=True)
            cache = _output_cache(out)
            width = max(len(prompts[i]) for i in active)
            step = 0
            while True:
                logits = out.logits[: len(active), -1, :]
                toks = self._next_tokens(logits, [reqs[i] for i in active], [gens[i] for i in active])
                keep: list[int] = []
                for b, i in enumerate(active):
                    t = toks[b]
                    n_new[i] += 1
                    if t in self.eos_token_ids:
                        finish[i] = "stop"
                        continue
                    generated[i].append(t)
                    if reqs[i].stop and first_stop(self.tokenizer.decode(generated[i], skip_special_tokens=True),
                                                   reqs[i].stop) >= 0:
                        finish[i] = "stop"
                        continue
                    if len(generated[i]) < reqs[i].max_new_tokens:
                        keep.append(b)
                if not keep:
                    break
                step += 1
                # cache row b holds active position b (a lone row is held twice: [0, 0])
                current = slots
                rows = keep if len(keep) > 1 else keep * 2
                if rows != current:
                    _select_cache_rows(cache, torch.tensor(rows, device=self.model.device))
                    pads = [pads[b] for b in rows]
                slots = list(range(len(rows))) if len(keep) > 1 else [0, 0]
                active = [active[b] for b in keep]
                toks = [toks[b] for b in rows]
                lengths = [len(prompts[i]) for i in (active if len(active) > 1 else active * 2)]
                device = self.model.device
                kwargs = {}
                if any(pads):
                    kwargs["attention_mask"] = torch.tensor(
                        [[0] * p + [1] * (width + step - p) for p in pads], device=device)
                    kwargs["position_ids"] = torch.tensor([[ln + step - 1] for ln in lengths], device=device)
                if self._rowwise:
                    kwargs.update(sr_left_pad=pads, sr_total_len=width + step, sr_mask_memo={})
                kwargs[self._cache_kw] = cache
                out = self.model(input_ids=torch.tensor([[t] for t in toks], device=device),
                                 use_cache=True, logits_to_keep=1, **kwargs)
                cache = _output_cache(out)
        results = []
        for i in range(n):
            text = self.tokenizer.decode(generated[i], skip_special_tokens=True)
            cut = first_stop(text, reqs[i].stop)
            if cut >= 0:
                text = text[:cut]
            results.append(GenResult(text=text, n_prompt_tokens=len(prompts[i]), n_new_tokens=n_new[i],
                                     finish_reason=finish[i], seed=seeds[i]))
        return results


def _output_cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _select_cache_rows(cache, idx) -> None:
    if hasattr(cache, "batch_select_indices"):
        cache.batch_select_indices(idx)
    else:  # pragma: no cover - older cache classes
        cache.reorder_cache(idx)


# --------------------------------------------------------------------------- loading, once per process

_ENGINES: dict[tuple[str, str, str], Engine] = {}
_ENGINES_LOCK = threading.Lock()


def _engine_key(model: str, precision: str, device: str | None):
    """((weights path, precision, device), resolved weights); validates all three."""
    from safetyrepro.adapters.loading import check_precision, resolve_device
    from safetyrepro.adapters.registry import resolve_weights

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

    key, resolved = _engine_key(model, precision, device)
    with _ENGINES_LOCK:
        eng = _ENGINES.get(key)
        if eng is None:
            _, precision, device = key
            hf_model, tokenizer = load_hf(resolved, precision, device)
            attention = rowwise_attention.NAME if rowwise_attention.enable(hf_model) else \
                str(hf_model.config._attn_implementation)
            info = ModelInfo(
                label=resolved.label, source=resolved.source, weights_sha256=resolved.weights_sha256(),
                precision=precision, device=device, has_chat_template=bool(getattr(tokenizer, "chat_template", None)),
                n_params=int(hf_model.num_parameters()), kind=resolved.kind,
                name=resolved.spec.name if resolved.spec else resolved.label,
                max_length=resolve_max_length(hf_model.config, tokenizer), attention=attention,
            )
            eng = Engine(hf_model, tokenizer, info, batch_size=batch_size or DEFAULT_BATCH_SIZE)
            _ENGINES[key] = eng
        elif batch_size and isinstance(eng, Engine):
            eng.batch_size = max(1, int(batch_size))
    return eng


def install_engine(model: str, precision: str, device: str | None, engine) -> None:
    """Make `load_engine(model, precision, device)` return `engine` (e.g. a caching wrapper) in this process."""
    key, _ = _engine_key(model, precision, device)
    with _ENGINES_LOCK:
        _ENGINES[key] = engine


def loaded_engines() -> dict[tuple[str, str, str], Engine]:
    """The engines loaded in this process, by (weights path, precision, device)."""
    with _ENGINES_LOCK:
        return dict(_ENGINES)
