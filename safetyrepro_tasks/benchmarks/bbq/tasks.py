"""BBQ as an Inspect task: the `@task` that `inspect eval safetyrepro/bbq` runs.

    inspect eval safetyrepro/bbq --model safetyrepro/smollm2 --limit 8 -T template=T2 -T scoring=logprob
    inspect eval safetyrepro_tasks/benchmarks/bbq/tasks.py --model safetyrepro/smollm2 -T shots=3   # the same, by path

Prompts, candidates, parser and scoring come from the benchmark's definition in this folder, through
`benchmark_task`; the `Literal` values below are checked against that definition when the tasks are
registered (safetyrepro_tasks/inspect_task_registry.py), so they cannot drift from it.
"""

from typing import Literal

from inspect_ai import Task, task

from safetyrepro.tasks.benchmark import DEFAULT_TIE_RULE, TieRule
from safetyrepro.tasks.inspect_tasks import benchmark_task
from safetyrepro.tasks.subsets import DEFAULT_FEWSHOT_DRAW, FewshotDraw


@task
def bbq(
    template: Literal["T1", "T2", "T3", "T4"] = "T1",
    scoring: Literal["free_form", "logprob"] = "logprob",
    shots: Literal[0, 3, 5] = 0,
    tie_rule: TieRule = DEFAULT_TIE_RULE,
    fewshot_draw: FewshotDraw = DEFAULT_FEWSHOT_DRAW,
) -> Task:
    """BBQ: three-option reading comprehension over social-bias contexts, scored with accuracy and the BBQ bias scores.

    Args:
        template: T1 minimal (HELM-style), T2 role-framed system preamble, T3 lm-eval-style detailed
            instruction, T4 chain of thought ending in an `Answer:` line.
        scoring: free_form (parse the generated reply) or logprob (argmax over the candidates'
            log-likelihoods; needs --model safetyrepro/<model>).
        shots: few-shot demonstrations before each item, from the benchmark's demo pool.
        tie_rule: how logprob scoring credits an item whose top candidates tie: expected (1/k of
            the credit when the gold is among k tied) or first (lm-eval's argmax: the first one wins).
        fewshot_draw: fixed (one draw of demonstrations for every item, the default) or per_item (each
            item's own, seeded by its id: the draw becomes part of what the items sample).
    """
    return benchmark_task("bbq", template, scoring, shots, tie_rule=tie_rule, fewshot_draw=fewshot_draw)
