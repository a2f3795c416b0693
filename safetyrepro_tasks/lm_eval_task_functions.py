"""The functions SafetyRepro's lm-eval YAMLs call (`!function safetyrepro.tasks.lm_eval_task_functions.*`).

Every task's documents are references `{id, benchmark, template}` into the shared definitions, so
the prompt text, candidates, parser and scoring rule are the benchmark module's, never a copy. A
benchmark's extra metrics (`Benchmark.extra_metrics`) all go through one aggregation,
`aggregate_extra_metric`: each per-item value names its metric.

Each item is scored once, here (`Benchmark.score_logprob` / `score_free_form`), and everything the
sweep records comes from the per-sample metrics lm-eval logs: `acc`, `parse_rate`, `top_answer_share`
(per sample: the predicted label index, None when unparsed; aggregated: the share of the most frequent
parsed answer, 1.0 for a cell that answers everything alike) and, for logprob tasks, `tie_rate` (per
sample: 1.0 when the top log-likelihood is tied).
"""

from __future__ import annotations

from typing import Any

from lm_eval.api.samplers import ContextSampler

from safetyrepro.errors import UserError, refuse
from safetyrepro.tasks.benchmark import (
    DEFAULT_TIE_RULE,
    Benchmark,
    Item,
    ItemScore,
    check_tie_rule,
    top_answer_share,
)
from safetyrepro.tasks.benchmarks.registry import get_benchmark
from safetyrepro.tasks.envelope import default_rules
from safetyrepro.tasks.subsets import DEFAULT_FEWSHOT_DRAW, ItemSet, check_fewshot_draw, item_set


def _doc(
    item: Item,
    benchmark: str,
    template: str,
    tie_rule: str = DEFAULT_TIE_RULE,
    fewshot_draw: str = DEFAULT_FEWSHOT_DRAW,
) -> dict[str, str]:
    # `system` is read by lm-eval as the task description (the system message under a chat template).
    system = get_benchmark(benchmark).system_text(template) or ""
    doc = {"id": item.id, "benchmark": benchmark, "template": template, "system": system, "tie_rule": tie_rule}
    # only where it is not the default: a default run's documents, so their doc_hash, stay as they were, and
    # `verdict` pairs its samples with an earlier run's
    return doc if fewshot_draw == DEFAULT_FEWSHOT_DRAW else {**doc, "fewshot_draw": fewshot_draw}


def _resolve(doc: dict) -> tuple[Benchmark, Item, str]:
    s: ItemSet = item_set(doc["benchmark"])
    return get_benchmark(doc["benchmark"]), s.by_id(doc["id"]), doc["template"]


def dataset(
    benchmark: str, template: str, tie_rule: str = DEFAULT_TIE_RULE, fewshot_draw: str = DEFAULT_FEWSHOT_DRAW, **_: Any
):
    """`custom_dataset`: the fixed subset as the test split. lm-eval passes `--metadata` here:
    `--metadata '{"tie_rule": "first"}'` selects the tie rule of logprob scoring (benchmark.TIE_RULES), and
    `{"fewshot_draw": "per_item"}` gives each item its own demonstrations (subsets.FewshotDraw); every document
    carries both to process_results and to the few-shot sampler.

    There is no few-shot split: the demonstrations come from the benchmark's pool of unscored items through
    `FixedDemos`, never from these documents. The tasks name the test split as their few-shot split only so
    that lm-eval hands the sampler the document it is building a prompt for (it does so for no other split),
    which a per-item draw seeds on."""
    import datasets

    s = item_set(benchmark)
    get_benchmark(benchmark).template(template)
    check_tie_rule(tie_rule)
    check_fewshot_draw(fewshot_draw)
    docs = [_doc(it, benchmark, template, tie_rule, fewshot_draw) for it in s.items]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)})


class FixedDemos(ContextSampler):
    """Few-shot sampler: the benchmark's demonstrations for the requested count, in order (subsets.ItemSet.
    demos_for): the fixed ones, or with `fewshot_draw: per_item` the document's own."""

    def sample(self, n: int, eval_doc=None, df=None, **kwargs):
        allowed = default_rules().axes["shots"]
        if n not in allowed:  # --num_fewshot outside the envelope: refused, as Inspect's -T shots= is
            refuse(
                UserError(
                    f"--num_fewshot {n} is outside SafetyRepro's envelope; allowed: {', '.join(map(str, allowed))}"
                )
            )
        if n == 0:
            return []
        ref = eval_doc if eval_doc is not None else (df or self.df)[0]
        s, draw = item_set(ref["benchmark"]), ref.get("fewshot_draw") or DEFAULT_FEWSHOT_DRAW
        return [_doc(it, ref["benchmark"], ref["template"]) for it in s.demos_for(n, ref["id"], draw)]


def doc_to_text(doc: dict) -> str:
    bench, item, template = _resolve(doc)
    return bench.user_text(item, template)


def doc_to_choice(doc: dict) -> list[str]:
    bench, item, template = _resolve(doc)
    return bench.candidates(item, template)


def doc_to_target(doc: dict) -> int:
    bench, item, _ = _resolve(doc)
    return bench.gold(item)


def doc_to_target_text(doc: dict) -> str:
    bench, item, template = _resolve(doc)
    return bench.answer_text(item, template, bench.gold(item))


def demo_answer(doc: dict) -> str:
    bench, item, template = _resolve(doc)
    return bench.demo_answer(item, template)


def _metrics(bench: Benchmark, item: Item, scored: ItemScore) -> dict:
    out: dict[str, object] = {
        "acc": scored.score,
        "parse_rate": float(scored.parsed),
        "top_answer_share": scored.prediction,
    }
    for spec in bench.extra_metrics:
        out[spec.name] = (spec.name, bench.name, item.id, scored.prediction, scored.score)
    return out


def process_results_logprob(doc: dict, results: list) -> dict:
    bench, item, _ = _resolve(doc)
    scored = bench.score_logprob(item, [r[0] for r in results], doc.get("tie_rule") or DEFAULT_TIE_RULE)
    return {**_metrics(bench, item, scored), "tie_rate": float(scored.tied)}


def process_results_free_form(doc: dict, results: list) -> dict:
    bench, item, template = _resolve(doc)
    return _metrics(bench, item, bench.score_free_form(item, results[0], template))


def aggregate_top_answer_share(predictions: list) -> float:
    """lm-eval aggregation of `top_answer_share`: the per-sample values are predicted label indices."""
    return top_answer_share(predictions)


def aggregate_extra_metric(rows: list) -> float:
    """lm-eval aggregation of any extra metric: rows are (metric, benchmark, item id, prediction, item
    score as `acc` counts it)."""
    if not rows:
        return float("nan")
    name, benchmark = rows[0][0], rows[0][1]
    bench, s = get_benchmark(benchmark), item_set(benchmark)
    items = [s.by_id(r[2]) for r in rows]
    scores = [r[4] for r in rows] if all(len(r) > 4 for r in rows) else None
    return bench.compute_extra_metrics(items, [r[3] for r in rows], scores).get(name, float("nan"))
