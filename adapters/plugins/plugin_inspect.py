"""Inspect model provider `safetyrepro/<model>` on SafetyRepro's engine.

    inspect eval safetyrepro/xstest --model safetyrepro/smollm2 -M precision=bf16 --temperature 0

`<model>` is an embedded label, a .gguf file, an HF folder or a hub id (`safetyrepro//abs/path`
for an absolute path). Model args (`-M`): `precision` (bf16 | fp32 | nf4), `device`
(cpu | cuda | auto), `batch_size` (engine batch; default: the engine sizes it, 8 prompts for
log-likelihoods and as many decoding rows as the work and the memory allow).

What Inspect's own `hf/` provider cannot do, and this one does:
- `temperature=0` is true greedy decoding (argmax), not an error;
- `seed` is a per-call seed: a sample's text depends only on its prompt and the generate config,
  never on which other samples share its batch (unset with temperature > 0: a fresh random
  seed, recorded in the output's metadata);
- continuation log-likelihoods: `await get_model(...).api.loglikelihood(messages, continuations)`
  (batched with concurrent samples; `loglikelihood_sync` outside an event loop) returns, per
  continuation, the summed log-probability of the continuation after the rendered messages. The context is
  `engine.render(messages)`: the chat template with the generation prompt, or the plain-text
  join for models without a template, exactly as the lm-eval side builds it.

Without `temperature` in the config, decoding follows the model's generation_config (greedy for
the embedded models, which set no sampling). `top_k`, `num_choices` > 1 and tools are not
supported and raise an error.

Batching follows Inspect's hf provider: concurrent `generate` calls (up to max_connections, 32)
are queued to one background thread, which drains the queue (waiting 50 ms for stragglers) and
runs the engine on the collected requests; callers poll their future with `anyio.sleep`.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from typing import Any

import anyio
from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessageAssistant,
    GenerateConfig,
    ModelAPI,
    ModelOutput,
    ModelUsage,
    modelapi,
)

from safetyrepro.adapters.engine.engine import (
    DECODE_MAX_ROWS,
    GenRequest,
    LoglikRequest,
    load_engine,
)
from safetyrepro.compat.inspect_ai import PrerequisiteError, default_max_tokens
from safetyrepro.errors import UserError

DRAIN_WAIT_S = 0.05
POLL_S = 0.02
_MODEL_ARGS = ("precision", "device", "batch_size", "backend")
_BACKENDS: dict[str, object] = {}  # attach_backend(): backends handed to the provider in this process


def attach_backend(backend) -> str:
    """Make `get_model("safetyrepro/<label>", backend=<key>)` run on an already loaded backend (the
    sweeper's cached engine, or an lm-eval / Inspect model behind the Backend protocol); returns the key."""
    key = f"{id(backend):x}"
    _BACKENDS[key] = backend
    return key


def _as_dicts(messages) -> list[dict[str, str]]:
    out = []
    for m in messages:
        if isinstance(m, dict):
            out.append({"role": m["role"], "content": m["content"]})
            continue
        role = m.role if m.role in ("system", "user", "assistant") else "user"
        out.append({"role": role, "content": m.text})
    return out


class _Batcher:
    """One background thread that runs queued engine calls together."""

    def __init__(self, engine, batch_size: int | None):
        self.engine, self.batch_size = engine, batch_size
        self.queue: queue.Queue = queue.Queue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    async def submit(self, kind: str, payload):
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="safetyrepro-batcher", daemon=True)
                self.thread.start()
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self.queue.put((kind, payload, fut))
        while not fut.done():
            await anyio.sleep(POLL_S)
        return fut.result()

    def close(self) -> None:
        if self.thread is not None and self.thread.is_alive():
            self.queue.put(None)

    def _drain(self, first) -> list:
        items = [first]

        cap = self.batch_size * 4 if self.batch_size else DECODE_MAX_ROWS
        deadline = time.monotonic() + DRAIN_WAIT_S
        while len(items) < cap:
            try:
                item = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is None:
                self.queue.put(None)
                break
            items.append(item)
        return items

    def _run(self) -> None:
        while True:
            first = self.queue.get()
            if first is None:
                return
            items = self._drain(first)
            gens = [it for it in items if it[0] == "generate"]
            lls = [it for it in items if it[0] == "loglik"]
            if gens:
                self._call(gens, lambda ps: self.engine.generate_detailed(ps, batch_size=self.batch_size))
            if lls:
                flat = [r for _, reqs, _ in lls for r in reqs]
                try:
                    res = self.engine.loglikelihood(flat, batch_size=self.batch_size)
                    i = 0
                    for _, reqs, fut in lls:
                        fut.set_result(res[i : i + len(reqs)])
                        i += len(reqs)
                except Exception as e:  # every waiting caller gets the error
                    for _, _, fut in lls:
                        if not fut.done():
                            fut.set_exception(e)

    @staticmethod
    def _call(items, fn) -> None:
        try:
            res = fn([payload for _, payload, _ in items])
            for (_, _, fut), r in zip(items, res, strict=True):
                fut.set_result(r)
        except Exception as e:
            for _, _, fut in items:
                if not fut.done():
                    fut.set_exception(e)


@modelapi(name="safetyrepro")
class SafetyReproModelAPI(ModelAPI):
    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig | None = None,
        **model_args: Any,
    ):
        super().__init__(
            model_name=model_name,
            base_url=base_url,
            api_key=api_key,
            config=config if config is not None else GenerateConfig(),
        )

        try:  # Inspect prints a PrerequisiteError as one message, without a traceback
            unknown = sorted(set(model_args) - set(_MODEL_ARGS))
            if unknown:
                raise UserError(
                    f"unknown model args for safetyrepro/: {', '.join(unknown)}; "
                    f"allowed: {', '.join(a for a in _MODEL_ARGS if a != 'backend')}"
                )
            bs = int(model_args["batch_size"]) if model_args.get("batch_size") else None
            if model_args.get("backend"):
                self.backend = _BACKENDS[str(model_args["backend"])]
            else:
                self.backend = load_engine(
                    model_name, str(model_args.get("precision") or "bf16"), model_args.get("device"), batch_size=bs
                )
        except UserError as e:
            raise PrerequisiteError(f"safetyrepro/{model_name}: {e}") from None
        self.batch_size = bs
        self._batcher = _Batcher(self.backend, bs)

    @property
    def engine(self):
        """The backend (for the engine: the Engine itself)."""
        return self.backend

    # ----------------------------------------------------------------- Inspect surface

    def max_tokens(self) -> int | None:
        return default_max_tokens()

    def max_connections(self) -> int:
        return 32

    def close(self) -> None:
        self._batcher.close()

    def gen_request(self, input, config: GenerateConfig):
        """The engine request for a list of messages and a generate config."""
        if config.top_k is not None:
            raise UserError("safetyrepro/ models do not support top_k; use temperature and top_p")
        if config.num_choices not in (None, 1):
            raise UserError("safetyrepro/ models return one choice per call (num_choices=1)")
        temperature, top_p = config.temperature, config.top_p
        if temperature is None:
            gc = getattr(getattr(self.backend, "model", None), "generation_config", None)
            if getattr(gc, "do_sample", False):
                temperature = float(getattr(gc, "temperature", None) or 1.0)
                top_p = top_p if top_p is not None else float(getattr(gc, "top_p", None) or 1.0)
            else:
                temperature = 0.0
        return GenRequest(
            prompt=self.backend.render(_as_dicts(input)),
            max_new_tokens=int(config.max_tokens or self.max_tokens()),
            temperature=float(temperature),
            top_p=float(top_p if top_p is not None else 1.0),
            seed=config.seed,
            stop=tuple(s for s in (config.stop_seqs or ()) if s),
        )

    async def generate(self, input, tools, tool_choice, config: GenerateConfig) -> ModelOutput:
        if tools:
            raise UserError("safetyrepro/ models do not support tool calling")
        req = self.gen_request(input, config)
        start = time.monotonic()
        if getattr(self.backend, "asynchronous", False):  # an Inspect provider behind the backend
            res = await self.backend.agenerate(req)
        else:
            res = await self._batcher.submit("generate", req)
        ident = self.backend.identity
        return ModelOutput(
            model=self.model_name,
            choices=[
                ChatCompletionChoice(
                    message=ChatMessageAssistant(content=res.text, model=self.model_name, source="generate"),
                    stop_reason="stop" if res.finish_reason == "stop" else "max_tokens",
                )
            ],
            usage=ModelUsage(
                input_tokens=res.n_prompt_tokens,
                output_tokens=res.n_new_tokens,
                total_tokens=res.n_prompt_tokens + res.n_new_tokens,
            ),
            time=time.monotonic() - start,
            metadata={
                "seed": res.seed,
                "temperature": req.temperature,
                "top_p": req.top_p,
                "precision": ident.precision,
                "weights_sha256": ident.weights_sha256,
            },
        )

    # ----------------------------------------------------------------- log-likelihoods

    def _loglik_requests(self, messages, continuations):
        context = self.backend.render(_as_dicts(messages))
        return [LoglikRequest(context, c) for c in continuations]

    async def loglikelihood(self, messages, continuations: list[str]) -> list[float]:
        """Summed log-probability of each continuation after the rendered messages; awaited, and
        batched with the calls of concurrent samples."""
        res = await self._batcher.submit("loglik", self._loglik_requests(messages, continuations))
        return [float(lp) for lp, _ in res]

    def loglikelihood_sync(self, messages, continuations: list[str]) -> list[float]:
        """`loglikelihood` for code outside an event loop (blocking)."""
        res = self.backend.loglikelihood(self._loglik_requests(messages, continuations), batch_size=self.batch_size)
        return [float(lp) for lp, _ in res]
