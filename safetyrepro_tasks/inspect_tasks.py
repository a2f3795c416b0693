"""Inspect tasks `safetyrepro/<benchmark>`: the shared definitions as an Inspect dataset, solver and scorer.

    inspect eval safetyrepro/xstest --model safetyrepro/smollm2 -T template=T2 -T scoring=free_form --temperature 0

Task parameters: `template` (T1-T4), `scoring` (free_form | logprob), `shots` (0/3/5), `tie_rule`
(expected | first: how logprob scoring credits an item whose top candidates tie), `fewshot_draw` (fixed |
per_item: one draw of demonstrations for every item, or each item's own; safetyrepro.tasks.subsets). Decoding comes from
Inspect's own generate options (`--temperature`, `--top-p`, `--seed`, `--max-tokens`). Free-form replies are
parsed by the benchmark's parser; logprob scoring asks the model for the log-likelihood of each candidate
(the `safetyrepro/` model provider can; Inspect's `hf/` cannot) and takes the argmax.

The `@task` itself is in each benchmark's folder (`benchmarks/<name>/tasks.py`, a visible function
with `Literal` parameters that calls `benchmark_task` below); `inspect_task_registry.py` loads them and
checks their parameters against the benchmark's definition. One `@metric` per declared extra metric is
made in a loop below (`EXTRA_METRICS`): a new benchmark folder needs nothing here.
"""

from __future__ import annotations

from typing import Any

from inspect_ai import Task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    GenerateConfig,
    ModelOutput,
    get_model,
)
from inspect_ai.scorer import SampleScore, Score, Scorer, Target, accuracy, metric, scorer, stderr
from inspect_ai.solver import Generate, Solver, TaskState, generate, solver

from safetyrepro.compat.inspect_ai import PrerequisiteError, active_generate_config, active_model
from safetyrepro.errors import UserError
from safetyrepro.tasks.benchmark import DEFAULT_TIE_RULE, check_tie_rule
from safetyrepro.tasks.benchmarks.registry import BENCHMARKS, get_benchmark
from safetyrepro.tasks.envelope import default_rules
from safetyrepro.tasks.rendering import continuation
from safetyrepro.tasks.subsets import DEFAULT_FEWSHOT_DRAW, check_fewshot_draw, item_set

_ROLE = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant}


def chat_messages(messages: list[dict[str, str]]) -> list[ChatMessage]:
    return [_ROLE[m["role"]](content=m["content"]) for m in messages]


def samples(benchmark: str, template: str, shots: int, fewshot_draw: str = DEFAULT_FEWSHOT_DRAW) -> list[Sample]:
    """The fixed subset as Inspect samples: the same messages lm-eval builds, item metadata attached."""
    bench, s = get_benchmark(benchmark), item_set(benchmark)
    out = []
    for item in s.items:
        prompt = bench.prompt(item, template, s.demos_for(shots, item.id, fewshot_draw))
        out.append(
            Sample(
                id=item.id,
                input=chat_messages(prompt.messages()),
                target=bench.labels(item)[bench.gold(item)],
                metadata={
                    "item_id": item.id,
                    "benchmark": benchmark,
                    "template": template,
                    "shots": shots,
                    "candidates": bench.candidates(item, template),
                    "gold": bench.gold(item),
                    "stratum": item.stratum,
                },
            )
        )
    return out


def _check(benchmark: str, template: str, scoring: str, shots: int, tie_rule: str, fewshot_draw: str) -> None:
    rules = default_rules()
    bench = get_benchmark(benchmark)
    bench.template(template)
    bench.check_scoring(scoring)
    check_tie_rule(tie_rule)
    check_fewshot_draw(fewshot_draw)
    if shots not in rules.axes["shots"]:
        raise UserError(f"unknown shots {shots!r}; allowed: {', '.join(map(str, rules.axes['shots']))}")


def _is_greedy(config: GenerateConfig) -> bool:
    return config.temperature is None or config.temperature == 0


def _gives_logliks(api) -> bool:
    """Continuation log-likelihoods: the safetyrepro/ provider, on a backend that has them."""
    backend = getattr(api, "backend", None)
    return hasattr(api, "loglikelihood") and (backend is None or backend.capabilities.loglikelihood)


@solver
def score_candidates() -> Solver:
    """Logprob scoring: the log-likelihood of every candidate as the reply, through the model provider."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        if not _is_greedy(active_generate_config()):
            raise PrerequisiteError(
                "logprob scoring is greedy-only (the envelope forbids sampling with it): "
                "run with --temperature 0 or without a temperature"
            )
        api: Any = get_model().api  # the safetyrepro/ provider's, checked next: ModelAPI declares no logliks
        if not _gives_logliks(api):
            raise PrerequisiteError(
                f"logprob scoring needs continuation log-likelihoods, which model "
                f"{get_model().name!r} does not provide: use --model safetyrepro/<model>"
            )
        candidates = state.metadata["candidates"]
        chat = api.backend.capabilities.chat_template  # plain text puts lm-eval's target delimiter first
        logliks = await api.loglikelihood(state.messages, [continuation(c, chat) for c in candidates])
        state.metadata["logliks"] = list(logliks)
        best = max(range(len(logliks)), key=lambda i: (logliks[i], -i))
        state.output = ModelOutput.from_content(model=get_model().name, content=candidates[best])
        return state

    return solve


def _parsed(scores: list[SampleScore]) -> list[bool]:
    return [bool((s.score.metadata or {}).get("parsed")) for s in scores]


@metric
def parse_rate():
    def compute(scores: list[SampleScore]) -> float:
        flags = _parsed(scores)
        return sum(flags) / len(flags) if flags else 0.0

    return compute


def _extra_metric(name: str):
    """The @metric for one declared extra metric: the benchmark's compute_extra_metrics over the
    scored samples (which carry their benchmark, item id and prediction)."""

    def factory():
        def compute(scores: list[SampleScore]) -> float:
            meta = [s.score.metadata or {} for s in scores]
            if not meta:
                return float("nan")
            benchmark = meta[0]["benchmark"]
            s = item_set(benchmark)
            items = [s.by_id(m["item_id"]) for m in meta]
            values = get_benchmark(benchmark).compute_extra_metrics(
                items, [m["prediction"] for m in meta], [s.score.as_float() for s in scores]
            )
            return values.get(name, float("nan"))

        return compute

    factory.__name__ = factory.__qualname__ = name
    return metric(name=name)(factory)


# name -> @metric, one per extra metric any registered benchmark declares (a name shared by two
# benchmarks is one metric: it computes through the benchmark of the samples it sees)
EXTRA_METRICS = {spec.name: _extra_metric(spec.name) for b in BENCHMARKS for spec in get_benchmark(b).extra_metrics}


@scorer(metrics=[accuracy(), stderr(), parse_rate()])
def safetyrepro_scorer(scoring: str = "free_form", tie_rule: str = DEFAULT_TIE_RULE) -> Scorer:
    """The benchmark's own parser (free-form) or argmax over candidate log-likelihoods (logprob),
    with ties credited by `tie_rule`."""

    async def score(state: TaskState, target: Target) -> Score:
        meta = state.metadata
        bench = get_benchmark(meta["benchmark"])
        item = item_set(meta["benchmark"]).by_id(meta["item_id"])
        if scoring == "logprob":
            scored = bench.score_logprob(item, meta["logliks"], tie_rule)
        else:
            scored = bench.score_free_form(item, state.output.completion, meta["template"])
        answer = None if scored.prediction is None else bench.labels(item)[scored.prediction]
        return Score(
            value=scored.score,
            answer=answer,
            explanation=state.output.completion,
            metadata={
                "parsed": scored.parsed,
                "prediction": scored.prediction,
                "tied": scored.tied,
                "item_id": item.id,
                "benchmark": bench.name,
                "logliks": meta.get("logliks"),
            },
        )

    return score


def _check_model_for_logprob() -> None:
    """Inspect makes the eval's model and generate options active before it builds the tasks, so an
    impossible combination is refused here, as one line, before any sample runs."""
    if not _is_greedy(active_generate_config()):
        raise PrerequisiteError(
            "logprob scoring is greedy-only (the envelope forbids sampling with it): "
            "run with --temperature 0 or without a temperature"
        )
    model = active_model()
    if model is not None and not _gives_logliks(model.api):
        raise PrerequisiteError(
            f"logprob scoring needs continuation log-likelihoods, which model {model.name!r} "
            "does not provide: use --model safetyrepro/<model>, or -T scoring=free_form"
        )


def benchmark_task(
    benchmark: str,
    template: str,
    scoring: str,
    shots: int,
    check_active: bool = True,
    tie_rule: str = DEFAULT_TIE_RULE,
    fewshot_draw: str = DEFAULT_FEWSHOT_DRAW,
) -> Task:
    """The task for one configuration. `check_active=False` skips the check of Inspect's active model and
    options, for callers (the sweeper) that build the task outside `inspect eval` and set both themselves."""
    # Inspect prints a PrerequisiteError as one message; anything else (a bad name, a missing mirror
    # file, a checksum mismatch) would reach the user as a traceback
    try:
        _check(benchmark, template, scoring, shots, tie_rule, fewshot_draw)
        if scoring == "logprob" and check_active:
            _check_model_for_logprob()
        dataset = MemoryDataset(samples(benchmark, template, shots, fewshot_draw), name=f"safetyrepro_{benchmark}")
    except UserError as e:
        raise PrerequisiteError(f"safetyrepro/{benchmark}: {e}") from None
    rules = default_rules()
    bench = get_benchmark(benchmark)
    greedy = rules.decodings["greedy"]
    config = GenerateConfig(
        max_tokens=rules.max_new(template),
        stop_seqs=list(bench.stop_sequences(template)) or None,
        temperature=greedy.temperature,
    )
    return Task(
        dataset=dataset,
        solver=score_candidates() if scoring == "logprob" else generate(),
        scorer=safetyrepro_scorer(scoring, tie_rule),
        metrics=[accuracy(), stderr(), parse_rate(), *(EXTRA_METRICS[m.name]() for m in bench.extra_metrics)],
        config=config,
        metadata={
            "benchmark": benchmark,
            "template": template,
            "scoring": scoring,
            "shots": shots,
            "tie_rule": tie_rule,
            "fewshot_draw": fewshot_draw,
            "subset_id": item_set(benchmark).subset_id,
            "rules_sha256": rules.sha256,
        },
        version=1,
    )
