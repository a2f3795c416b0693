"""Run one cell (model × configuration, every seed) through a package and return per-item records.

Both drivers use the package's own machinery end to end: lm-eval builds its requests from the
SafetyRepro task YAML and scores with the task's process_results; Inspect runs the `safetyrepro/<b>`
task with its solver and scorer. The model is a Backend (adapters/backends/backend.py), loaded once per
sweep and wrapped in the outputs cache: the engine, or a model of the package's own backends. A
driver never asks which.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from safetyrepro.atomic import ensure_dir
from safetyrepro.compat.lm_eval import ask_environment_once, no_request_building_bar, quiet_logs
from safetyrepro.grid_schema import cell_stem
from safetyrepro.lm_eval_plugin import task_dir
from safetyrepro.sweep.records import ItemRecord, prompt_hash
from safetyrepro.sweep.store import slug
from safetyrepro.tasks.benchmark import DEFAULT_TIE_RULE
from safetyrepro.tasks.benchmarks.registry import get_benchmark
from safetyrepro.tasks.envelope import Config, Rules
from safetyrepro.tasks.lm_eval_tasks import task_name
from safetyrepro.tasks.subsets import DEFAULT_FEWSHOT_DRAW, ItemSet, item_set

if TYPE_CHECKING:
    from safetyrepro.adapters.backends.backend import Backend


@dataclass(frozen=True)
class Decode:
    temperature: float
    top_p: float
    do_sample: bool


def decode_settings(rules: Rules, cfg: Config) -> Decode:
    d = rules.decodings[cfg.decoding]
    return Decode(d.temperature, d.top_p, d.do_sample)


def inspect_task_args(cfg: Config, tie_rule: str = DEFAULT_TIE_RULE, fewshot_draw: str = DEFAULT_FEWSHOT_DRAW) -> dict:
    """The arguments of the `safetyrepro/<benchmark>` Inspect task for one configuration (`-T k=v`); the
    few-shot draw only where it is not the default, so a default run's task arguments stay as they were."""
    args = {"template": cfg.template, "scoring": cfg.scoring, "shots": cfg.shots, "tie_rule": tie_rule}
    return args if fewshot_draw == DEFAULT_FEWSHOT_DRAW else {**args, "fewshot_draw": fewshot_draw}


def inspect_generate_args(rules: Rules, cfg: Config, seed: int) -> dict:
    """Inspect's generate options for one configuration and seed (`--temperature`, `--top-p`, `--seed`):
    the decoding's temperature, and for a sampled decoding its top_p and the seed (None: left unset).
    The token budget and stop sequences are the task's own (`benchmark_task`)."""
    dec = decode_settings(rules, cfg)
    return {
        "temperature": dec.temperature,
        "top_p": dec.top_p if dec.do_sample else None,
        "seed": seed if dec.do_sample else None,
    }


class _Driver:
    backend: Backend

    @property
    def identity(self) -> dict:
        return self.backend.identity.to_dict()

    def run_cell(self, cfg: Config, seeds: Sequence[int], ids: Sequence[str]) -> list[ItemRecord]:
        raise NotImplementedError


class LmEvalDriver(_Driver):
    package = "lm-eval"

    def __init__(
        self,
        backend,
        rules: Rules,
        items_for,
        log_dir: str | None = None,
        tie_rule: str = DEFAULT_TIE_RULE,
        fewshot_draw: str = DEFAULT_FEWSHOT_DRAW,
    ):
        from lm_eval.tasks import TaskManager

        from safetyrepro.adapters.plugins.plugin_lm_eval import SafetyReproLM

        self.backend, self.rules, self.items_for = backend, rules, items_for
        self.log_dir = log_dir
        self.lm = SafetyReproLM.from_backend(backend)
        self.lm.progress_bars = False
        ask_environment_once()  # lm-eval describes the machine on every evaluate call
        # a sweep runs SafetyRepro's tasks only: indexing lm-eval's ~14,000 task YAMLs too took ~10 s a process
        metadata = {"tie_rule": tie_rule, "fewshot_draw": fewshot_draw}  # to the task's documents
        self.task_manager = TaskManager(include_path=str(task_dir()), include_defaults=False, metadata=metadata)
        quiet_logs()

    def _tracker(self, cfg: Config, seed: int):
        """lm-eval's EvaluationTracker writing into <out>/logs/lm-eval/<model>/<config>/seed<k>/."""
        if self.log_dir is None:
            return None
        from lm_eval.loggers import EvaluationTracker

        path = (
            Path(self.log_dir)
            / "lm-eval"
            / slug(self.backend.identity.label)
            / cell_stem(cfg.config_id)
            / f"seed{seed}"
        )
        ensure_dir(path, root=self.log_dir)  # lm-eval writes there itself: no link on the way
        return EvaluationTracker(output_path=str(path))

    def run_cell(self, cfg: Config, seeds: Sequence[int], ids: Sequence[str]) -> list[ItemRecord]:
        from lm_eval.evaluator import simple_evaluate

        bench, items = get_benchmark(cfg.benchmark), self.items_for(cfg.benchmark)
        name = task_name(cfg.benchmark, cfg.template, cfg.scoring)
        dec = decode_settings(self.rules, cfg)
        chat = self.backend.capabilities.chat_template
        position = {it.id: i for i, it in enumerate(item_set(cfg.benchmark).items)}  # the task's test split
        records: list[ItemRecord] = []
        for seed in seeds:
            gen_kwargs = None
            if cfg.scoring == "free_form":
                gen_kwargs = {"temperature": dec.temperature, "top_p": dec.top_p, "do_sample": dec.do_sample}
                if dec.do_sample:
                    gen_kwargs["seed"] = seed
            tracker = self._tracker(cfg, seed)
            with no_request_building_bar():  # one bar per cell under the sweep's own
                res = simple_evaluate(
                    model=self.lm,
                    tasks=[name],
                    num_fewshot=cfg.shots,
                    samples={name: [position[i] for i in ids]},
                    log_samples=True,
                    apply_chat_template=chat,
                    fewshot_as_multiturn=chat,
                    gen_kwargs=gen_kwargs,
                    task_manager=self.task_manager,
                    bootstrap_iters=0,
                    random_seed=seed,
                    numpy_random_seed=seed,
                    torch_random_seed=seed,
                    fewshot_random_seed=seed,
                    evaluation_tracker=tracker,
                )
            if tracker is not None:  # lm-eval's own results_*.json and samples_*.jsonl, as its CLI writes them
                tracker.save_results_aggregated(results=res, samples=res["samples"])
                tracker.save_results_samples(task_name=name, samples=res["samples"][name])
            for s in res["samples"][name]:
                item = items.by_id(s["doc"]["id"])
                context = (
                    s["arguments"][0][0] if isinstance(s["arguments"], list) else s["arguments"]["gen_args_0"]["arg_0"]
                )
                # scored once, by the task's process_results: the record reads its per-sample metrics
                prediction = s["top_answer_share"]
                if cfg.scoring == "logprob":
                    logliks = [float(r[0][0]) if isinstance(r[0], (list, tuple)) else float(r[0]) for r in s["resps"]]
                    raw = bench.candidates(item, cfg.template)[prediction]
                else:
                    logliks = None
                    raw = s["resps"][0][0]
                records.append(
                    ItemRecord(
                        item.id,
                        seed,
                        prompt_hash(context),
                        raw,
                        prediction,
                        bool(s["parse_rate"]),
                        bench.gold(item),
                        float(s["acc"]),
                        logliks,
                        bool(s.get("tie_rate", 0.0)),
                    )
                )
        return records


class InspectDriver(_Driver):
    package = "inspect"

    def __init__(
        self,
        backend,
        rules: Rules,
        items_for,
        log_dir: str,
        tie_rule: str = DEFAULT_TIE_RULE,
        fewshot_draw: str = DEFAULT_FEWSHOT_DRAW,
    ):
        from inspect_ai.model import get_model

        from safetyrepro.adapters.plugins.plugin_inspect import attach_backend

        self.backend, self.rules, self.items_for, self.log_dir = backend, rules, items_for, log_dir
        self.tie_rule, self.fewshot_draw = tie_rule, fewshot_draw
        self.model = get_model(f"safetyrepro/{backend.identity.label}", backend=attach_backend(backend), memoize=False)

    def run_cell(self, cfg: Config, seeds: Sequence[int], ids: Sequence[str]) -> list[ItemRecord]:
        from inspect_ai import eval as inspect_eval

        from safetyrepro.tasks.inspect_tasks import benchmark_task

        bench, items = get_benchmark(cfg.benchmark), self.items_for(cfg.benchmark)
        model = self.model
        records: list[ItemRecord] = []
        for seed in seeds:
            args = inspect_task_args(cfg, self.tie_rule, self.fewshot_draw)
            task = benchmark_task(cfg.benchmark, **args, check_active=False)
            log = inspect_eval(
                task,
                model=model,
                sample_id=list(ids),
                log_dir=self.log_dir,
                display="none",
                **inspect_generate_args(self.rules, cfg, seed),
                score=True,
                log_samples=True,
            )[0]
            if log.status != "success":
                raise RuntimeError(
                    f"inspect eval {cfg.config_id} ended {log.status}: {log.error.message if log.error else ''}"
                )
            for s in log.samples or []:
                item = items.by_id(str(s.id))
                score = next(iter((s.scores or {}).values()))
                meta = score.metadata or {}
                demos = items.demos_for(cfg.shots, item.id, self.fewshot_draw)
                prompt = self.backend.render(bench.prompt(item, cfg.template, demos).messages())
                logliks = meta.get("logliks")
                records.append(
                    ItemRecord(
                        item.id,
                        seed,
                        prompt_hash(prompt),
                        s.output.completion,
                        meta.get("prediction"),
                        bool(meta.get("parsed")),
                        bench.gold(item),
                        float(score.value),  # type: ignore[arg-type]  # our tasks' scorers give a number
                        logliks,
                        bool(meta.get("tied")),
                    )
                )
        return records


def make_driver(
    package: str,
    backend,
    rules: Rules,
    items_for,
    log_dir: str | None,
    tie_rule: str = DEFAULT_TIE_RULE,
    fewshot_draw: str = DEFAULT_FEWSHOT_DRAW,
):
    """`log_dir`: where Inspect writes its logs (it needs one); lm-eval writes none when it is None."""
    if package == "lm-eval":
        return LmEvalDriver(backend, rules, items_for, log_dir, tie_rule, fewshot_draw)
    if log_dir is None:
        raise ValueError("Inspect's driver needs a log folder")
    return InspectDriver(backend, rules, items_for, log_dir, tie_rule, fewshot_draw)


def backend_record(backend) -> dict:
    """What run.json records of a model: its backend's identity and capabilities (and the engine's
    load details), with the weights' hash at the top level where there is one."""
    ident = backend.identity
    info = getattr(backend, "info", None)
    return {
        **(info.to_dict() if info is not None else {}),
        "weights_sha256": ident.weights_sha256,
        "backend": ident.to_dict(),
        "capabilities": backend.capabilities.to_dict(),
        "capability_flags": backend.capabilities.flags(),
    }


def item_sets(subsample: float | None, subset_seed: int | None, limit: int | None = None):
    """A sweep's item set per benchmark: the fixed subset, or with --subsample a share of the items that
    --limit scores (of the whole subset without a limit)."""

    def items_for(benchmark: str) -> ItemSet:
        if subsample is None:
            return item_set(benchmark)
        return item_set(benchmark, subsample=subsample, subsample_seed=subset_seed, within=limit)

    return items_for
