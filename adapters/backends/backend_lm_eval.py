"""`lm-eval:<model>:<model_args>`: lm-eval's own model (hf, vllm, local-completions, ...) as a Backend.

The model is built exactly as `lm_eval --model <model> --model_args <model_args>` builds it (its
registry class, `create_from_arg_string`), and every request goes to that object's own
`loglikelihood` / `generate_until` and `apply_chat_template`: the numbers are lm-eval's. For
in-process models the sweep adds only `batch_size` (its --batch-size, else 8, unless model_args
sets one) and `device` (its --device, else cuda when torch sees one, else cpu), as lm-eval's command
line adds its own flags; API clients get --batch-size only when it is given.

Seeds: vLLM and the OpenAI-compatible clients take a per-request `seed` in gen_kwargs; HF models
sample from torch's global generator, which is seeded with the call's seed before each call (one
stream per call: `Capabilities.seeds` says so).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from safetyrepro.adapters.backends.backend import (
    SEED_PER_REQUEST,
    SEED_PER_RUN,
    BackendIdentity,
    Capabilities,
    GenRequest,
    GenResult,
    LoglikRequest,
    StatedBackend,
)
from safetyrepro.adapters.catalogue.loading import resolve_device
from safetyrepro.adapters.catalogue.model_specs import (
    LM_EVAL_COMPLETIONS,
    LM_EVAL_IN_PROCESS,
    ModelEntry,
)
from safetyrepro.adapters.catalogue.weights import hf_weight_files, weights_sha256_of
from safetyrepro.errors import UserError
from safetyrepro.tasks.rendering import plain_text

DEFAULT_BATCH_SIZE = 8
_DTYPES = {
    "torch.bfloat16": "bf16",
    "torch.float32": "fp32",
    "torch.float16": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float16": "fp16",
    "float": "fp32",
    "half": "fp16",
}


class LmEvalBackend(StatedBackend):
    def __init__(self, entry: ModelEntry, device: str | None = None, batch_size: int | None = None):
        import lm_eval.models  # noqa: F401  (registers the built-in models)
        from lm_eval.api import registry

        self.entry = entry
        args = entry.args_dict()
        extra: dict = {}
        if entry.target in LM_EVAL_IN_PROCESS:  # lm-eval's own default is cuda:0, as its CLI's --device
            extra = {"batch_size": batch_size or DEFAULT_BATCH_SIZE, "device": resolve_device(device)}
        elif batch_size:  # API clients: lm-eval's default (1 request per call) unless asked
            extra = {"batch_size": batch_size}
        extra = {k: v for k, v in extra.items() if k not in args}
        try:
            cls = registry.get_model(entry.target)
            self.lm = cls.create_from_arg_string(entry.model_args, extra)
        except UserError:
            raise
        except Exception as e:  # lm-eval's own message, as one line
            text = " ".join(str(e).split()) or type(e).__name__
            raise UserError(
                f"{entry.label}: lm-eval could not build {entry.target} from {entry.model_args!r}: "
                f"{type(e).__name__}: {text[:400]}"
            ) from None
        try:
            self._chat = bool(self.lm.chat_template(True))
        except Exception:  # models without a tokenizer-side template
            self._chat = False
        if entry.target in LM_EVAL_COMPLETIONS:
            self._chat = self._completions_tokenizer() is not None
        caps = entry.capabilities()
        self._capabilities = Capabilities(
            caps.loglikelihood, caps.greedy, caps.seeds, self._chat, caps.input, caps.notes
        )
        self._identity = BackendIdentity(
            "lm-eval",
            entry.spec,
            entry.label,
            self._precision(args),
            _local_weights_sha256(args),
            entry.revision or args.get("revision"),
            extra={"model": entry.target, "model_args": entry.model_args},
        )

    def _precision(self, args: dict[str, str]) -> str:
        model = getattr(self.lm, "model", None)
        dtype = getattr(model, "dtype", None)
        if dtype is not None:
            return _DTYPES.get(str(dtype), str(dtype))
        for key in ("dtype", "torch_dtype"):
            if key in args:
                return _DTYPES.get(args[key], args[key])
        return "api" if self.entry.target not in LM_EVAL_IN_PROCESS else "unknown"

    # ----------------------------------------------------------------- Backend protocol

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if not self._chat:
            return plain_text(messages)
        tok = self._completions_tokenizer()
        if tok is not None:
            # a completions endpoint takes text: the HF tokenizer's template, as lm-eval renders it before it
            # tokenises (lm-eval would send the messages themselves when tokenized_requests=False)
            return tok.apply_chat_template(
                messages,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=not add_generation_prompt,
            )
        return self.lm.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)

    def _completions_tokenizer(self):
        tok = getattr(self.lm, "tokenizer", None)
        if self.entry.target in LM_EVAL_COMPLETIONS and getattr(tok, "chat_template", None):
            return tok
        return None

    def _gen_kwargs(self, r: GenRequest) -> dict:
        kw: dict = {
            "until": list(r.stop),
            "max_gen_toks": r.max_new_tokens,
            "do_sample": r.temperature > 0,
            "temperature": r.temperature,
        }
        if r.temperature > 0:
            if r.top_p < 1.0:
                kw["top_p"] = r.top_p
            if r.seed is not None and self._capabilities.seeds == SEED_PER_REQUEST:
                kw["seed"] = r.seed
        return kw

    def generate_detailed(
        self, requests: Sequence[GenRequest], batch_size: int | None = None, progress: bool = False
    ) -> list[GenResult]:
        from lm_eval.api.instance import Instance

        sampled = [r.seed for r in requests if r.temperature > 0 and r.seed is not None]
        if sampled and self._capabilities.seeds == SEED_PER_RUN:
            _seed_everything(sampled[0])
        insts = [Instance("generate_until", {}, (r.prompt, self._gen_kwargs(r)), i) for i, r in enumerate(requests)]
        texts = self.lm.generate_until(insts, disable_tqdm=not progress)
        return [
            GenResult(str(t), 0, 0, "unknown", r.seed if r.temperature > 0 else None)
            for t, r in zip(texts, requests, strict=True)
        ]

    def loglikelihood(
        self, requests: Sequence[LoglikRequest], batch_size: int | None = None
    ) -> list[tuple[float, bool]]:
        from lm_eval.api.instance import Instance

        if not self._capabilities.loglikelihood:
            raise UserError(f"{self.entry.label}: this lm-eval model gives no continuation log-likelihoods")
        insts = [Instance("loglikelihood", {}, (r.context, r.continuation), i) for i, r in enumerate(requests)]
        return [(float(ll), bool(g)) for ll, g in self.lm.loglikelihood(insts, disable_tqdm=True)]

    def close(self) -> None:
        self.lm = None


def _seed_everything(seed: int) -> None:
    """What lm-eval's simple_evaluate seeds (random, numpy, torch), for a call's sampled requests."""
    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # an API-only install
        pass


def _local_weights_sha256(args: dict[str, str]) -> str | None:
    """sha256 of the local weight files a model arg points at (a folder or a .gguf), else None."""
    for key in ("pretrained", "model", "gguf_file", "path"):
        value = args.get(key)
        if not value:
            continue
        p = Path(value).expanduser()
        if p.is_file():
            return weights_sha256_of([p])
        if p.is_dir():
            files = hf_weight_files(p)
            gguf = args.get("gguf_file")
            if gguf and (p / gguf).is_file():
                files = [p / gguf]
            if files:
                return weights_sha256_of(files)
    return None
