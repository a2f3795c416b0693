"""The one boundary between SafetyRepro and whatever computes a model's outputs.

A backend answers requests at the level every package needs: render chat messages into the model's
input text, generate (per-request seed, stop strings, max new tokens) and score continuations. The
SafetyRepro engine is one backend; lm-eval's own models (`lm-eval:<model>:<args>`) and Inspect's own
providers (`inspect:<model>`) are the others. The sweeper, the package drivers, the outputs cache and
the Ray executor hold a `Backend` and never ask which one it is: what a backend can and cannot do is
stated in its `Capabilities`, and what it is, for the cache and run.json, in its `BackendIdentity`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

# how a backend treats a request's seed
SEED_PER_REQUEST = "per-request"  # a request's text depends only on its prompt, settings and seed
SEED_PER_RUN = "per-run"  # one random stream per call (seeded by the first request): batch-dependent
SEED_IGNORED = "ignored"  # no seed reaches the model
# what temperature 0 means to a backend
GREEDY_EXACT = "exact"  # argmax decoding
GREEDY_REQUESTED = "requested"  # temperature 0 is sent; the server decides what it does with it
GREEDY_NONE = "none"  # no greedy decoding (the nearest setting is used, and flagged)


@dataclass(frozen=True)
class GenRequest:
    """One generation. `prompt` is the rendered input (`Backend.render`): text, or for backends that
    take chat messages, the messages as JSON."""

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
    n_prompt_tokens: int  # 0 where the backend does not say
    n_new_tokens: int  # generated tokens, EOS included, text after a stop string included (0: not said)
    finish_reason: str  # "stop" (EOS or a stop string), "length", or "unknown"
    seed: int | None  # the seed actually used (None for greedy)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, stated (never guessed from a failure)."""

    loglikelihood: bool  # continuation log-likelihoods (logprob scoring)
    greedy: str = GREEDY_EXACT
    seeds: str = SEED_PER_REQUEST
    chat_template: bool = False  # render() applies a chat template (else the plain-text join)
    input: str = "text"  # "text": generate() takes rendered text; "messages": the chat messages themselves
    notes: tuple[str, ...] = ()  # anything a reader of the GRID card must know

    def to_dict(self) -> dict:
        return asdict(self)

    def flags(self) -> list[str]:
        """The deviations from exact greedy decoding and per-request seeds, in words."""
        out = []
        if self.greedy != GREEDY_EXACT:
            out.append(
                "temperature 0 is not guaranteed argmax decoding"
                if self.greedy == GREEDY_REQUESTED
                else "no greedy decoding: greedy cells ran with the backend's nearest setting"
            )
        if self.seeds == SEED_PER_RUN:
            out.append(
                "one random stream per call: sampled texts depend on the batch, not on each request's seed alone"
            )
        elif self.seeds == SEED_IGNORED:
            out.append("seeds are ignored: the 5 seeds of a sampled cell are 5 unseeded draws")
        if not self.loglikelihood:
            out.append("no continuation log-likelihoods: logprob cells are not applicable")
        return out + list(self.notes)


@dataclass(frozen=True)
class BackendIdentity:
    """What decides a backend's outputs besides the request: the cache key's model part and run.json's record."""

    kind: str  # "engine", "lm-eval", "inspect"
    spec: str  # as the user wrote it
    label: str  # the grid's `model` column
    precision: str  # the numeric format the backend reports (bf16, fp32, nf4, gguf, api, ...)
    weights_sha256: str | None = None  # local weight files, where there are any
    revision: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # model args, base URL, device, ...

    def cache_fields(self) -> dict[str, Any]:
        if self.kind == "engine":  # the engine's keys since the first release: its caches stay valid
            return {
                "weights": self.weights_sha256,
                "precision": self.precision,
                "device": str(self.extra.get("device", "cpu")).split(":")[0],
            }
        return {
            "backend": self.kind,
            "spec": self.spec,
            "weights": self.weights_sha256,
            "revision": self.revision,
            "precision": self.precision,
            **{k: v for k, v in sorted(self.extra.items()) if k != "label"},
        }

    def gen_cache_fields(self) -> dict[str, Any]:
        """The model part of a generation's cache key: `cache_fields`, and for the engine its decode
        version from 2 on (generation numerics changed then; log-likelihoods did not, so their keys
        stay those of the first release)."""
        fields = self.cache_fields()
        if self.kind == "engine" and self.extra.get("decode", 1) != 1:
            fields["decode"] = self.extra["decode"]
        return fields

    def to_dict(self) -> dict:
        return asdict(self)


@runtime_checkable
class Backend(Protocol):
    """A loaded model behind one package's backend (or SafetyRepro's engine)."""

    @property
    def identity(self) -> BackendIdentity: ...

    @property
    def capabilities(self) -> Capabilities: ...

    def render(self, messages: list[dict[str, str]]) -> str:
        """The model's input for chat messages: its chat template with the generation prompt, or the
        plain-text join (rendering.plain_text) for models without one."""

    def generate_detailed(
        self, requests: Sequence[GenRequest], batch_size: int | None = None, progress: bool = False
    ) -> list[GenResult]: ...

    def loglikelihood(
        self, requests: Sequence[LoglikRequest], batch_size: int | None = None
    ) -> list[tuple[float, bool]]:
        """(summed log-probability of each continuation after its context, whether it is the greedy
        continuation). Only called when `capabilities.loglikelihood`."""

    def close(self) -> None: ...


class StatedBackend:
    """What the lm-eval and Inspect backends share: an identity and capabilities fixed when they are
    built, and `render` as their chat template with the generation prompt."""

    _identity: BackendIdentity
    _capabilities: Capabilities

    @property
    def identity(self) -> BackendIdentity:
        return self._identity

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def has_chat_template(self) -> bool:
        return self._capabilities.chat_template

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        raise NotImplementedError

    def render(self, messages: list[dict[str, str]]) -> str:
        return self.apply_chat_template(messages, add_generation_prompt=True)
