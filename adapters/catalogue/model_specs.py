"""The models of a sweep as the user names them, checked before anything loads.

    smollm2 | /models/x.gguf | /models/folder | org/name        SafetyRepro's engine (either package)
    lm-eval:<model>:<model_args>                                  lm-eval's own model, args as --model_args takes them
    inspect:<provider>/<model>                                    Inspect's own provider, as --model takes it

or, with labels and notes, a YAML file (`--models-file`):

    models:
      - label: smol-hf                      # the grid's `model` column (default: the spec as written)
        spec: lm-eval:hf                    # any of the forms above
        model_args: pretrained=/models/smol,dtype=bfloat16   # lm-eval: --model_args; inspect: -M k=v pairs
        precision: bf16                     # optional: the grid's precision group for this model
        revision: 0a1b2c3                   # optional: recorded in run.json and the cache key

A model runs through its own package: `lm-eval:` specs under `--package lm-eval`, `inspect:` specs
under `--package inspect`; the engine under either. What each kind of backend can do (continuation
log-likelihoods, greedy decoding, seeds) is stated here per backend name, so that a sweep can plan
not-applicable cells and refuse impossible requests before any model loads.
"""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlparse

from safetyrepro.adapters.backends.backend import (
    GREEDY_EXACT,
    GREEDY_NONE,
    GREEDY_REQUESTED,
    SEED_IGNORED,
    SEED_PER_REQUEST,
    SEED_PER_RUN,
    Capabilities,
)
from safetyrepro.adapters.catalogue.weights import EMBEDDED
from safetyrepro.compat.lm_eval import model_required_args
from safetyrepro.errors import UserError, did_you_mean
from safetyrepro.limits import (
    MAX_CONFIG_BYTES,
    MAX_SPEC_CHARS,
    Refused,
    label_problem,
    load_yaml,
    read_capped,
    shorten,
)

ENGINE, LM_EVAL, INSPECT = "engine", "lm-eval", "inspect"
PACKAGES = {ENGINE: ("lm-eval", "inspect"), LM_EVAL: ("lm-eval",), INSPECT: ("inspect",)}
MODELS_FILE_KEYS = ("label", "spec", "model_args", "precision", "revision")

# lm-eval models: which give continuation log-likelihoods, and how they take a seed
LM_EVAL_SEED_IN_GEN_KWARGS = {
    "vllm",
    "local-completions",
    "local-chat-completions",
    "openai-completions",
    "openai-chat-completions",
    "sglang",
    "sglang-generate",
}
LM_EVAL_IN_PROCESS = {
    "hf",
    "hf-auto",
    "huggingface",
    "vllm",
    "sglang",
    "mamba_ssm",
    "steered",
    "openvino",
    "ipex",
    "onnxruntime",
    "onnxruntime-genai",
}
# Inspect providers that honour a per-request seed, and those that cannot decode greedily
INSPECT_SEEDED = {
    "openai",
    "openai-api",
    "vllm",
    "sglang",
    "llama-cpp-python",
    "ollama",
    "together",
    "fireworks",
    "groq",
    "deepseek",
    "openrouter",
    "mistral",
    "grok",
    "azureai",
    "openai-api-completions",
    "vllm-completions",
    "litellm-proxy",
}
LM_EVAL_COMPLETIONS = {"local-completions", "openai-completions"}  # loglikelihood from echoed prompt log-probabilities
PROBE_PROMPT = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16"
INSPECT_NO_GREEDY = {"hf"}
# Inspect providers that load weights or start a server when built (not built before the sweep starts)
INSPECT_IN_PROCESS = {
    "hf",
    "vllm",
    "sglang",
    "llama-cpp-python",
    "transformer_lens",
    "nnterp",
    "safetyrepro",
}  # Inspect's hf/ provider hard-codes do_sample=True
# where Inspect providers read their server address (openai-api/<service>/... reads <SERVICE>_BASE_URL)
INSPECT_BASE_URL_ENV = {
    "openai": "OPENAI_BASE_URL",
    "vllm": "VLLM_BASE_URL",
    "sglang": "SGLANG_BASE_URL",
    "ollama": "OLLAMA_BASE_URL",
    "llama-cpp-python": "LLAMA_CPP_PYTHON_BASE_URL",
    "openai-api-completions": None,
}


@dataclass(frozen=True)
class ModelEntry:
    """One model of a sweep: how the user named it and which backend runs it."""

    label: str  # the grid's `model` column
    kind: str  # ENGINE, LM_EVAL or INSPECT
    target: str  # engine: name or path; lm-eval: its registry name; inspect: provider/model
    model_args: str = ""  # lm-eval: verbatim --model_args; inspect: k=v,... for get_model
    precision: str | None = None  # the grid's precision group for this model (default: the sweep's)
    revision: str | None = None
    notes: dict = field(default_factory=dict, compare=False)
    # set by check_runnable when a server was asked: its prompt log-probabilities are usable or not, and why
    loglikelihood: bool | None = None
    loglikelihood_note: str = ""

    @property
    def spec(self) -> str:
        if self.kind == ENGINE:
            return self.target
        if self.kind == LM_EVAL:
            return f"lm-eval:{self.target}:{self.model_args}"
        return f"inspect:{self.target}" + (f" -M {self.model_args}" if self.model_args else "")

    @property
    def packages(self) -> tuple[str, ...]:
        return PACKAGES[self.kind]

    @property
    def provider(self) -> str:
        return self.target.split("/", 1)[0] if self.kind == INSPECT else self.target

    def args_dict(self) -> dict[str, str]:
        return parse_model_args(self.model_args, self.spec)

    def capabilities(self) -> Capabilities:
        """What this backend can do, known before it loads (the engine's chat template is added when it does)."""
        if self.kind == ENGINE or (self.kind == INSPECT and self.provider == "safetyrepro"):
            return Capabilities(loglikelihood=True, greedy=GREEDY_EXACT, seeds=SEED_PER_REQUEST)
        if self.kind == LM_EVAL:
            chat = "chat" in self.target
            in_process = self.target in LM_EVAL_IN_PROCESS
            seeds = SEED_PER_REQUEST if self.target in LM_EVAL_SEED_IN_GEN_KWARGS else SEED_PER_RUN
            loglik = not chat if self.loglikelihood is None else self.loglikelihood
            return Capabilities(
                loglikelihood=loglik,
                greedy=GREEDY_EXACT if in_process else GREEDY_REQUESTED,
                seeds=seeds,
                input="text",
                notes=(self.loglikelihood_note,) if self.loglikelihood_note else (),
            )
        provider = self.provider
        return Capabilities(
            loglikelihood=False,
            greedy=GREEDY_NONE if provider in INSPECT_NO_GREEDY else GREEDY_REQUESTED,
            seeds=SEED_PER_REQUEST
            if provider in INSPECT_SEEDED
            else SEED_PER_RUN
            if provider == "hf"
            else SEED_IGNORED,
            input="messages",
            notes=("Inspect providers take chat messages: the server applies its own chat template",),
        )


def parse_model_args(text: str, spec: str = "") -> dict[str, str]:
    """`k=v,k=v` as lm-eval's --model_args and Inspect's -M take them; a piece without `=` is an error."""
    out: dict[str, str] = {}
    for piece in (p.strip() for p in (text or "").split(",")):
        if not piece:
            continue
        key, eq, value = piece.partition("=")
        if not eq or not key.strip():
            raise UserError(f"model args {text!r}{' of ' + spec if spec else ''}: {piece!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def parse_model_spec(
    spec: str, label: str | None = None, model_args: str = "", precision: str | None = None, revision: str | None = None
) -> ModelEntry:
    """A model as written on the command line (or in a models file) -> ModelEntry; UserError if malformed."""
    spec = str(spec).strip()
    if not spec:
        raise UserError(
            "an empty model name was given; use an embedded name, a path, lm-eval:<model>:<args> "
            "or inspect:<provider>/<model>"
        )
    if spec.startswith("lm-eval:"):
        name, _, args = spec[len("lm-eval:") :].partition(":")
        if model_args and args:
            raise UserError(f"{spec}: model args given twice (in the spec and as model_args)")
        if not name:
            raise UserError(f"{spec!r}: write lm-eval:<model>:<model_args>, e.g. lm-eval:hf:pretrained=/models/smol")
        entry = ModelEntry(label or spec, LM_EVAL, name, args or model_args, precision, revision)
    elif spec.startswith("inspect:"):
        target = spec[len("inspect:") :]
        if not re.fullmatch(r"[\w.-]+/\S+", target):
            raise UserError(
                f"{spec!r}: write inspect:<provider>/<model> as `inspect eval --model` takes it, "
                "e.g. inspect:openai-api/llamacpp/smol"
            )
        entry = ModelEntry(label or spec, INSPECT, target, model_args, precision, revision)
    else:
        if model_args:
            raise UserError(f"{spec}: model_args apply to lm-eval: and inspect: specs only")
        check_model_name(spec)
        entry = ModelEntry(label or spec, ENGINE, spec, "", precision, revision)
    entry.args_dict()  # malformed args are refused here
    problem = label_problem(label) if label is not None else None  # a label names files, figures, report rows
    if problem:
        raise UserError(problem)
    return entry


def check_model_name(name: str) -> None:
    """An engine model: an embedded label, a local .gguf file or HF folder, or a hub id org/name."""
    if name in EMBEDDED or Path(name).expanduser().exists() or re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        return
    raise UserError(
        f"unknown model {name!r}{did_you_mean(name, EMBEDDED)}; use an embedded name ({', '.join(EMBEDDED)}), "
        "a local HF folder or .gguf file, a hub id org/name, lm-eval:<model>:<model_args> "
        "or inspect:<provider>/<model>"
    )


def load_models_file(path: str | Path) -> list[ModelEntry]:
    """The `models:` list of a YAML models file (see the module docstring)."""
    p = Path(path)
    try:
        data = load_yaml(read_capped(p, MAX_CONFIG_BYTES, "MAX_CONFIG_BYTES"), f"models file {p}")
    except OSError as e:
        raise UserError(f"cannot read models file {p}: {e.strerror or e}") from None
    except Refused as e:
        raise UserError(f"models file {p} {e.reason}") from None
    rows = data.get("models") if isinstance(data, dict) else data
    if not isinstance(rows, list) or not rows:
        raise UserError(f"models file {p}: expected a non-empty list under `models:`")
    out = []
    for i, row in enumerate(rows, 1):
        if isinstance(row, str):
            row = {"spec": row}
        if not isinstance(row, dict) or "spec" not in row:
            raise UserError(f"models file {p}, model {i}: each model needs at least `spec:`")
        unknown = sorted(set(row) - set(MODELS_FILE_KEYS))
        if unknown:
            raise UserError(
                f"models file {p}, model {i}: unknown key(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(MODELS_FILE_KEYS)}"
            )
        where = f"models file {p}, model {i}"
        for key in MODELS_FILE_KEYS:  # each value is one line of text (model_args: also a key -> value mapping)
            value = row.get(key)
            if (
                value is not None
                and not isinstance(value, (str, int, float))
                and not (key == "model_args" and isinstance(value, dict))
            ):
                raise UserError(f"{where}: `{key}` is {shorten(value)}; expected text")
        model_args = row.get("model_args") or ""
        if isinstance(model_args, dict):
            model_args = ",".join(f"{k}={v}" for k, v in model_args.items())
        for key, value in (("spec", str(row["spec"])), ("model_args", str(model_args))):
            if len(value) > MAX_SPEC_CHARS:
                raise UserError(
                    f"{where}: `{key}` {shorten(value)} is longer than {MAX_SPEC_CHARS} characters "
                    "(the cap MAX_SPEC_CHARS)"
                )
        label = row.get("label")
        problem = label_problem(
            str(row["spec"]).strip() if label is None else str(label),
            "`label`" if label is not None else "label (the spec, as no `label:` is given)",
        )
        if problem:  # before the spec is parsed, so that the line names this file
            raise UserError(f"{where}: {problem}")
        out.append(
            parse_model_spec(
                str(row["spec"]),
                None if label is None else str(label),
                str(model_args),
                row.get("precision"),
                None if row.get("revision") is None else str(row["revision"]),
            )
        )
    return out


# --------------------------------------------------------------------------- checks before loading


def check_runnable(entry: ModelEntry, package: str, scorings: set[str], explicit_scoring: bool) -> ModelEntry:
    """Refuse, as one line, what cannot run: the wrong package, an unknown lm-eval model or Inspect
    provider, an unreachable server, logprob scoring asked for explicitly of a backend without
    continuation log-likelihoods. Returns the entry, with what a completions server's answer to one
    probe says of its prompt log-probabilities (see `probe_prompt_logprobs`)."""
    if package not in entry.packages:
        raise UserError(
            f"{entry.label}: {entry.kind} models run under --package {entry.packages[0]} only "
            f"(a model runs through its own package), not {package}"
        )
    if entry.kind == LM_EVAL:
        names = lm_eval_model_names()
        if entry.target not in names:
            raise UserError(
                f"{entry.label}: lm-eval has no model {entry.target!r}; known: "
                f"{', '.join(sorted(n for n in names if n != 'safetyrepro'))}"
            )
        if entry.target not in LM_EVAL_COMPLETIONS:  # what it can score is known without asking a server
            _check_logprob(entry, scorings, explicit_scoring)
        args = entry.args_dict()

        missing = [k for k in (model_required_args(entry.target) or []) if k not in args]
        if entry.target in ("local-completions", "local-chat-completions") and "base_url" not in args:
            missing.append("base_url")  # optional in the signature, but the request has nowhere to go without it
        if missing:
            example = {
                "pretrained": "pretrained=/models/smol",
                "base_url": "base_url=http://localhost:8080/v1/completions",
            }
            raise UserError(
                f"{entry.label}: lm-eval's {entry.target!r} model needs model_args "
                f"{', '.join(f'{k}=...' for k in missing)} (e.g. lm-eval:{entry.target}:"
                f"{example.get(missing[0], missing[0] + '=...')})"
            )
        for key in ("pretrained", "tokenizer", "peft"):
            value = args.get(key, "")
            # a path that is not there would reach the Hub as a repo id and fail after start-up
            if value.startswith(("/", "./", "../", "~")) and not Path(value).expanduser().exists():
                raise UserError(
                    f"{entry.label}: {key}={value} does not exist (lm-eval would take it for a Hub "
                    "repo id); give an existing folder"
                )
        url = args.get("base_url")
        if url:
            check_reachable(url, entry.label)
            if entry.target in LM_EVAL_COMPLETIONS and "logprob" in scorings:
                ok, note = probe_prompt_logprobs(url, args.get("model", ""))
                entry = replace(entry, loglikelihood=ok, loglikelihood_note=note)
    elif entry.kind == INSPECT and entry.provider != "safetyrepro":
        from safetyrepro.compat.inspect_ai import provider_names

        if entry.provider not in provider_names():
            raise UserError(
                f"{entry.label}: Inspect has no model provider {entry.provider!r}; known: "
                f"{', '.join(sorted(provider_names()))}"
            )
        url = entry.args_dict().get("base_url") or inspect_base_url(entry.target)
        if url:
            check_reachable(url, entry.label)
        if entry.provider not in INSPECT_IN_PROCESS:
            # an API client is cheap to build, and a missing key or package shows now, not after a model load
            build_inspect_model(entry)
    _check_logprob(entry, scorings, explicit_scoring)
    return entry


def _check_logprob(entry: ModelEntry, scorings: set[str], explicit_scoring: bool) -> None:
    if explicit_scoring and "logprob" in scorings and not entry.capabilities().loglikelihood:
        why = entry.loglikelihood_note or "a chat API gives none"
        raise UserError(
            f"{entry.label}: logprob scoring needs continuation log-likelihoods ({why}); "
            "run it with --scoring free_form"
        )


def probe_prompt_logprobs(url: str, model: str, timeout: float = 30.0) -> tuple[bool, str]:
    """Ask a completions server once for the log-probabilities of a predictable prompt, echoed (what
    lm-eval's `local-completions` reads for loglikelihood requests), and check that they are usable:
    present, and aligned (the distribution listed at position i predicts token i, not token i + 1;
    llama-cpp-python 0.3.36's server lists them one position late). Returns (usable, why not)."""
    body = json.dumps(
        {"model": model, "prompt": PROBE_PROMPT, "max_tokens": 1, "logprobs": 1, "echo": True, "temperature": 0}
    ).encode()
    try:
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            lp = json.loads(r.read())["choices"][0]["logprobs"]
        tokens, top = lp["tokens"], lp["top_logprobs"]
        aligned = sum(bool(t) and max(t, key=t.get) == tokens[i] for i, t in enumerate(top))
        late = sum(bool(t) and i + 1 < len(tokens) and max(t, key=t.get) == tokens[i + 1] for i, t in enumerate(top))
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        return False, f"the server returns no usable prompt log-probabilities ({type(e).__name__})"
    if late > aligned:
        return False, (
            "the server's echoed prompt log-probabilities are one token late (each position lists the "
            "next token's distribution), so continuation log-likelihoods would be wrong"
        )
    return True, ""


def lm_eval_model_names() -> set[str]:
    import lm_eval.models  # noqa: F401  (registers the built-in models)
    from lm_eval.api import registry

    return set(registry.model_registry.keys())


def build_inspect_model(entry: ModelEntry):
    """Inspect's model for an `inspect:` entry; Inspect's own message (a missing API key or package, an
    unknown model) becomes one line."""
    from inspect_ai.model import get_model

    try:
        # the -M model args as written (strings): the provider checks and converts them
        return get_model(entry.target, memoize=False, **entry.args_dict())  # type: ignore[arg-type]
    except Exception as e:
        text = " ".join(str(e).split()) or type(e).__name__
        raise UserError(f"{entry.label}: Inspect could not create {entry.target}: {text[:400]}") from None


def inspect_base_url(target: str) -> str | None:
    """The server address an Inspect provider will use, from its environment variable (if any)."""
    parts = target.split("/")
    if parts[0] == "openai-api" and len(parts) >= 3:
        return os.environ.get(f"{parts[1].upper().replace('-', '_')}_BASE_URL")
    env = INSPECT_BASE_URL_ENV.get(parts[0])
    return os.environ.get(env) if env else None


def check_reachable(url: str, label: str, timeout: float = 3.0) -> None:
    """A TCP connection to the server's host and port, so that a wrong address is one line now rather
    than a failed cell per configuration later."""
    u = urlparse(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UserError(f"{label}: base URL {url!r} is not an http(s) address")
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        with socket.create_connection((u.hostname, port), timeout=timeout):
            pass
    except OSError as e:
        raise UserError(
            f"{label}: cannot reach the server at {url} ({e.strerror or e}); start it first "
            "(README: Bring your own model)"
        ) from None
