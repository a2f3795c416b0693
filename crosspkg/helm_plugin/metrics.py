"""SafetyRepro's scoring as HELM metrics: the benchmark's own parser for free_form, the argmax of
summed candidate log-likelihoods for logprob (HELM's exact_match on separate MC divides by the
token count; SafetyRepro does not)."""

from __future__ import annotations

from helm.benchmark.metrics.metric import Metric, MetricMetadata
from helm.benchmark.metrics.metric_name import MetricName
from helm.benchmark.metrics.reference_metric import ReferenceMetric
from helm.benchmark.metrics.statistic import Stat

from safetyrepro.tasks.benchmarks.registry import get_benchmark


def _item(benchmark: str, item_id: str):
    from safetyrepro.tasks.subsets import item_set

    return item_set(benchmark).by_id(item_id)


class _Common:
    def __init__(self, benchmark: str, template: str, scoring: str):
        self.benchmark, self.template, self.scoring = benchmark, template, scoring

    def _bench(self):
        return get_benchmark(self.benchmark)

    def get_metadata(self) -> list[MetricMetadata]:
        return METADATA


class SafetyReproGenerationMetric(_Common, Metric):
    """free_form: the benchmark's own parser on the completion; unparsed scores 0."""

    def evaluate_generation(self, adapter_spec, request_state, metric_service, eval_cache_path):
        bench = self._bench()
        item = _item(self.benchmark, request_state.instance.id)
        text = request_state.result.completions[0].text if request_state.result.completions else ""
        scored = bench.score_free_form(item, text, self.template)
        return [
            Stat(MetricName("safetyrepro_accuracy")).add(scored.score),
            Stat(MetricName("safetyrepro_parse_rate")).add(float(scored.parsed)),
        ]


class SafetyReproReferenceMetric(_Common, ReferenceMetric):
    """logprob: one request per candidate; argmax of the summed log-likelihoods (`completion.logprob`
    from the SafetyRepro engine client), tied winners credited by the default tie rule."""

    def evaluate_references(self, adapter_spec, reference_request_states, metric_service, eval_cache_path):
        bench = self._bench()
        states = sorted(
            (s for s in reference_request_states if s.request_mode in (None, "original")),
            key=lambda s: s.reference_index,
        )
        item = _item(self.benchmark, states[0].instance.id)
        logliks = [s.result.completions[0].logprob for s in states]
        scored = bench.score_logprob(item, logliks)
        return [
            Stat(MetricName("safetyrepro_accuracy")).add(scored.score),
            Stat(MetricName("safetyrepro_parse_rate")).add(1.0),
            Stat(MetricName("safetyrepro_predicted_index")).add(scored.prediction),
        ]


METADATA = [
    MetricMetadata(
        name="safetyrepro_accuracy",
        display_name="SafetyRepro score",
        description="the benchmark's headline score, SafetyRepro's scoring",
        lower_is_better=False,
        group="accuracy",
    ),
    MetricMetadata(
        name="safetyrepro_parse_rate",
        display_name="Parse rate",
        description="share of replies with a parsed label (1 for logprob)",
        lower_is_better=False,
        group="accuracy",
    ),
    MetricMetadata(
        name="safetyrepro_predicted_index",
        display_name="Predicted index",
        description="logprob: index of the picked candidate",
        lower_is_better=None,
        group="accuracy",
    ),
]
