"""`lm_eval --model safetyrepro`: lm-eval on SafetyRepro's engine.

    lm_eval --model safetyrepro --model_args model=smollm2,precision=bf16 --tasks ... --limit 8

model_args: `model` (embedded label, .gguf file, HF folder or hub id; default smollm2),
`precision` (bf16 | fp32 | nf4; `dtype=` is accepted as an alias), `device` (cpu | cuda | auto),
`batch_size` (an int: prompts per forward pass; unset or "auto": the engine sizes its batches,
8 prompts for log-likelihoods and as many decoding rows as the work and the memory allow), `seed` (base
sampling seed, see below).

Equivalence with `--model hf`: contexts and continuations are tokenised exactly as HFLM does
(engine.encode_pair), and the model sees the same tokens, so the per-item choices agree. Inputs
that fit in one prefill chunk (32 tokens) agree to the bit with `--model hf --model_args
...,softmax_dtype=float32,batch_size=1`; longer ones are prefilled chunk by chunk (the engine's
canonical computation, which is what lets it reuse shared prefixes), which moves bf16 numbers by
up to a few tenths of a nat on SmolLM2 (see engine.py). HFLM otherwise takes the log-softmax in
the model dtype, and its right-padded batches move numbers slightly; this engine's results do not
depend on batching.

Sampling seeds: a generate_until request samples with the base seed itself, as Inspect's provider
does with `--seed` (so both packages give the same text for the same seed, and share cached
outputs); a repeat of an identical (context, gen_kwargs) request in the same call (lm-eval's
`repeats`) gets `derive_seed(base, context, gen_kwargs, k)` instead, k counting earlier repeats, so
repeats differ. `base` is, in order: `seed` in gen_kwargs (`--gen_kwargs seed=3`), `seed` in
model_args, or torch's initial seed, which lm-eval sets from `--seed` (third value; default 1234).
Same seeds, same texts, regardless of batch size or which other requests run alongside.
"""

from __future__ import annotations

import json
import logging
import sys

from lm_eval import utils
from lm_eval.api.model import TemplateLM
from tqdm import tqdm

from safetyrepro.adapters.backends.backend import SEED_PER_REQUEST
from safetyrepro.adapters.catalogue.loading import check_precision
from safetyrepro.adapters.catalogue.weights import resolve_weights
from safetyrepro.adapters.engine.engine import (
    DECODE_MAX_ROWS,
    DEFAULT_BATCH_SIZE,
    GenRequest,
    LoglikRequest,
    derive_seed,
    load_engine,
    prefix_token_id,
)
from safetyrepro.errors import UserError, refuse

eval_logger = logging.getLogger(__name__)
_UNSUPPORTED_GEN_KWARGS = ("top_k", "num_beams", "repetition_penalty", "min_p", "typical_p")
_IGNORED_GEN_KWARGS = (
    "do_sample",
    "temperature",
    "top_p",
    "until",
    "max_gen_toks",
    "max_new_tokens",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "use_cache",
)


def _fail(e: UserError):
    refuse(e)


def _device(device: str | None) -> str | None:
    """lm-eval's CLI passes --device (default cuda:0) to every model; like HFLM, fall back to the CPU
    when CUDA is not there."""
    if device and str(device).startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            eval_logger.info(f"device {device!r} (lm-eval's default) is not available; using cpu")
            return "cpu"
    return device


def _batch_size(batch_size, max_batch_size, default: int | None = None) -> int | None:
    """The engine batch asked for; None (unset or "auto") lets the engine size it: log-likelihoods
    in batches of DEFAULT_BATCH_SIZE prompts, decoding as many rows as the work and the memory allow."""
    bs = default
    if batch_size not in (None, "") and not str(batch_size).startswith("auto"):
        try:
            bs = int(batch_size)
        except ValueError:
            raise UserError(f"batch_size must be an integer or 'auto', got {batch_size!r}") from None
        if bs < 1:
            raise UserError(f"batch_size must be >= 1, got {bs}")
    if max_batch_size:
        bs = min(bs or int(max_batch_size), int(max_batch_size))
    return bs


class SafetyReproLM(TemplateLM):
    backend = "causal"

    def __init__(
        self,
        model: str = "smollm2",
        precision: str | None = None,
        device: str | None = None,
        batch_size: int | str | None = None,
        max_batch_size: int | None = None,
        seed: int | None = None,
        dtype: str | None = None,
        pretrained: str | None = None,
        max_gen_toks: int = 256,
        **unknown,
    ):
        super().__init__()
        try:
            if unknown:
                raise UserError(
                    f"unknown model_args for --model safetyrepro: {', '.join(sorted(unknown))}; "
                    "allowed: model, precision, device, batch_size, seed, max_gen_toks"
                )

            bs = _batch_size(batch_size, max_batch_size)
            resolve_weights(pretrained or model)  # a refusal comes before any note on the device
            check_precision(precision or dtype or "bf16")
            engine = load_engine(pretrained or model, precision or dtype or "bf16", _device(device), batch_size=bs)
        except UserError as e:
            _fail(e)
        self._setup(engine, bs, seed, max_gen_toks)

    @classmethod
    def from_backend(
        cls, backend, batch_size: int | None = None, seed: int | None = None, max_gen_toks: int = 256
    ) -> SafetyReproLM:
        """An lm-eval model on a backend that is already loaded (the engine, or an lm-eval model behind
        the Backend protocol), possibly wrapped, e.g. in an output cache."""
        self = cls.__new__(cls)
        TemplateLM.__init__(self)
        self._setup(backend, _batch_size(batch_size, None, getattr(backend, "batch_size", None)), seed, max_gen_toks)
        return self

    from_engine = from_backend

    progress_bars = True  # the sweeper turns them off: it has its own

    def _setup(self, engine, batch_size: int | None, seed, max_gen_toks) -> None:
        self.engine = engine  # the backend (the Engine itself for --model safetyrepro)
        self._batch_size = batch_size
        self._seed = None if seed in (None, "") else int(seed)
        self._max_gen_toks = int(max_gen_toks)
        self.tokenizer = getattr(engine, "tokenizer", None)
        self._device = engine.identity.extra.get("device", "cpu")
        self._chat_applied = False
        self._warned_plain = False

    def _warn_if_plain_text(self) -> None:
        """A chat model fed plain text answers differently (SmolLM2 picks option A on every BBQ item):
        say so once, in one line, when requests arrive without lm-eval having applied the template."""
        if self._chat_applied or self._warned_plain or not self.engine.capabilities.chat_template:
            return
        self._warned_plain = True
        sys.stderr.write(
            f"safetyrepro: warning: {self.engine.identity.label} has a chat template but lm-eval sent plain "
            "text; add --apply_chat_template to score as the sweep does (README: lm-eval)\n"
        )

    # ----------------------------------------------------------------- properties lm-eval reads

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        return prefix_token_id(self.tokenizer)

    @property
    def max_length(self) -> int:
        return getattr(self.engine, "max_length", 2048)

    @property
    def max_gen_toks(self) -> int:
        return self._max_gen_toks

    @property
    def batch_size(self) -> int | None:
        return self._batch_size

    @property
    def tokenizer_name(self) -> str:
        ident = self.engine.identity
        return f"safetyrepro__{ident.label}__{(ident.weights_sha256 or ident.kind)[:12]}".replace("/", "__")

    def get_model_info(self) -> dict:
        ident = self.engine.identity
        info = getattr(self.engine, "info", None)
        return {
            "model_num_parameters": getattr(info, "n_params", None),
            "model_dtype": ident.precision,
            "model_sha": ident.weights_sha256,
            "model_source": ident.spec,
            "safetyrepro_model": info.to_dict() if info is not None else ident.to_dict(),
        }

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        if not chat_template or not self.engine.capabilities.chat_template:
            return None
        if self.tokenizer is None:
            return str(chat_template) if isinstance(chat_template, str) else "backend"
        return super().chat_template(chat_template)

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        self._chat_applied = True
        return self.engine.apply_chat_template(chat_history, add_generation_prompt=add_generation_prompt)

    # ----------------------------------------------------------------- tokens

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, left_truncate_len=None, **kwargs):
        ids = self.engine.tok_encode(string, add_special_tokens)
        return ids[-left_truncate_len:] if left_truncate_len else ids

    def tok_decode(self, tokens, skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=skip_special_tokens)

    # ----------------------------------------------------------------- scoring

    def _chunks(self, n: int, decoding: bool = False) -> list[range]:
        """Calls of batch_size x 8 requests (for the progress bar; with no batch size, DEFAULT_BATCH_SIZE
        x 8 log-likelihoods or DECODE_MAX_ROWS generations, what the engine runs side by side); one
        call for backends whose sampling is seeded per call, so that a run's requests share one
        stream as in the package itself."""
        if self.engine.capabilities.seeds != SEED_PER_REQUEST:
            return [range(0, n)] if n else []
        if self.batch_size:
            step = self.batch_size * 8
        else:
            step = DECODE_MAX_ROWS if decoding else DEFAULT_BATCH_SIZE * 8
        return [range(i, min(n, i + step)) for i in range(0, n, step)]

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        self._warn_if_plain_text()
        reqs = [LoglikRequest(*req.args) for req in requests]
        out: list[tuple[float, bool]] = []
        with tqdm(
            total=len(reqs), disable=disable_tqdm or not self.progress_bars, desc="Running loglikelihood requests"
        ) as bar:
            for r in self._chunks(len(reqs)):
                res = self.engine.loglikelihood([reqs[i] for i in r], batch_size=self.batch_size)
                for i, ans in zip(r, res, strict=True):
                    self.cache_hook.add_partial("loglikelihood", requests[i].args, ans)
                out.extend(res)
                bar.update(len(r))
        return out

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        return self.engine.loglikelihood_tokens(
            [(list(c), list(k)) for _, c, k in requests], batch_size=self.batch_size
        )

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        out = []
        for req in tqdm(
            requests, disable=disable_tqdm or not self.progress_bars, desc="Running loglikelihood_rolling requests"
        ):
            (string,) = req.args
            windows = [
                utils.make_disjoint_window(w)
                for w in utils.get_rolling_token_windows(
                    token_list=self.tok_encode(string),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                )
            ]
            res = self.engine.loglikelihood_tokens(windows, batch_size=self.batch_size)
            total = sum(x[0] for x in res)
            self.cache_hook.add_partial("loglikelihood_rolling", (string,), total)
            out.append(total)
        return out

    # ----------------------------------------------------------------- generation

    def _gen_request(self, context: str, gen_kwargs: dict, k: int):
        import torch

        kw = dict(gen_kwargs or {})
        bad = [name for name in _UNSUPPORTED_GEN_KWARGS if name in kw and kw[name] not in (None, 0, 1, 1.0)]
        if bad:
            raise UserError(
                f"--model safetyrepro does not support gen_kwargs {', '.join(bad)}; "
                "supported: until, max_gen_toks, do_sample, temperature, top_p, seed"
            )
        until = kw.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        max_new = next(
            (
                int(kw[a])
                for a in ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")
                if kw.get(a) is not None
            ),
            self.max_gen_toks,
        )
        temperature = float(kw.get("temperature") or 0.0)
        do_sample = kw.get("do_sample")
        if do_sample is False or (do_sample is None and temperature == 0.0):
            temperature = 0.0
        top_p = float(kw["top_p"]) if kw.get("top_p") is not None else 1.0
        seed = None
        if temperature > 0:
            base = kw.get("seed")
            base = self._seed if base is None else int(base)
            base = torch.initial_seed() if base is None else base
            key = json.dumps({k2: v for k2, v in sorted(kw.items()) if k2 != "seed"}, default=str)
            seed = int(base) if k == 0 else derive_seed(base, context, key, k)
        return GenRequest(
            prompt=context,
            max_new_tokens=max_new,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            stop=tuple(s for s in until if s),
        )

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        self._warn_if_plain_text()
        seen: dict[str, int] = {}
        gen_reqs = []
        try:
            for req in requests:
                context, gen_kwargs = req.args
                key = json.dumps([context, gen_kwargs], sort_keys=True, default=str)
                k = seen.get(key, 0)
                seen[key] = k + 1
                gen_reqs.append(self._gen_request(context, gen_kwargs, k))
        except UserError as e:
            _fail(e)
        out: list[str] = []
        with tqdm(
            total=len(gen_reqs), disable=disable_tqdm or not self.progress_bars, desc="Running generate_until requests"
        ) as bar:
            for r in self._chunks(len(gen_reqs), decoding=True):
                texts = [
                    g.text for g in self.engine.generate_detailed([gen_reqs[i] for i in r], batch_size=self.batch_size)
                ]
                for i, text in zip(r, texts, strict=True):
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
                out.extend(texts)
                bar.update(len(r))
        return out
