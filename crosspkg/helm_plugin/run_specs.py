"""HELM run spec functions `safetyrepro_<benchmark>` over the shared benchmark definitions.

    helm-run --run-entries "safetyrepro_bbq:template=T3,scoring=logprob,model=M,model_deployment=M-engine" ...

Arguments: template (T1-T4), scoring (logprob | free_form), shots (0, 3, 5), max_new_tokens (default: the
rules file's for the template, 256 for T4), limit (first N items of the fixed subset; default: all of it).
Decoding is greedy (temperature 0).
Use a deployment whose client is `SafetyReproEngineClient` (`safetyrepro crosspkg helm-env` writes
one): with HELM's stock HuggingFaceClient the logprob path scores the chat template's closing
tokens rather than the candidate.
"""

from __future__ import annotations

from helm.benchmark.adaptation.adapter_spec import (
    ADAPT_GENERATION,
    ADAPT_MULTIPLE_CHOICE_SEPARATE_ORIGINAL,
    AdapterSpec,
)
from helm.benchmark.metrics.metric import MetricSpec
from helm.benchmark.run_spec import RunSpec, run_spec_function
from helm.benchmark.scenarios.scenario import ScenarioSpec

from safetyrepro.tasks.benchmarks.registry import BENCHMARKS, get_benchmark

PKG = "safetyrepro.crosspkg.helm_plugin"
# the prompt is complete (scenario messages): HELM adds nothing around it
BARE = dict(
    instructions="",
    input_prefix="",
    input_suffix="",
    output_prefix="",
    output_suffix="",
    reference_prefix="",
    reference_suffix="",
    instance_prefix="",
    max_train_instances=0,
    num_outputs=1,
    temperature=0.0,
)


def safetyrepro_spec(
    benchmark: str,
    template: str = "T3",
    scoring: str = "logprob",
    shots: int = 0,
    max_new_tokens: int | None = None,
    limit: int | None = None,
) -> RunSpec:
    from safetyrepro.tasks.envelope import default_rules
    from safetyrepro.tasks.subsets import item_set

    template, scoring = str(template), str(scoring)
    max_new_tokens = default_rules().max_new(template) if max_new_tokens in (None, "") else int(max_new_tokens)
    limit = len(item_set(benchmark).items) if limit in (None, "") else int(limit)
    if scoring == "logprob":
        adapter = AdapterSpec(method=ADAPT_MULTIPLE_CHOICE_SEPARATE_ORIGINAL, max_tokens=0, **BARE)
    elif scoring == "free_form":
        stop = list(get_benchmark(benchmark).stop_sequences(template))
        adapter = AdapterSpec(method=ADAPT_GENERATION, max_tokens=int(max_new_tokens), stop_sequences=stop, **BARE)
    else:
        raise ValueError(f"scoring must be logprob or free_form, not {scoring!r}")
    args = {"benchmark": benchmark, "template": template, "scoring": scoring}
    return RunSpec(
        name=f"safetyrepro_{benchmark}:template={template},scoring={scoring},shots={int(shots)}",
        scenario_spec=ScenarioSpec(
            class_name=f"{PKG}.scenario.SafetyReproScenario", args={**args, "shots": int(shots), "limit": int(limit)}
        ),
        adapter_spec=adapter,
        metric_specs=[
            MetricSpec(
                class_name=f"{PKG}.metrics.SafetyRepro{'Reference' if scoring == 'logprob' else 'Generation'}Metric",
                args=args,
            )
        ],
        groups=[f"safetyrepro_{benchmark}"],
    )


def _register(benchmark: str):
    @run_spec_function(f"safetyrepro_{benchmark}")
    def spec(
        template: str = "T3",
        scoring: str = "logprob",
        shots: int = 0,
        max_new_tokens: int | None = None,
        limit: int | None = None,
    ) -> RunSpec:
        return safetyrepro_spec(benchmark, template, scoring, shots, max_new_tokens, limit)

    spec.__name__ = f"get_safetyrepro_{benchmark}_spec"
    return spec


for _b in BENCHMARKS:
    _register(_b)
