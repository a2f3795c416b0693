"""Reading Inspect logs through Inspect's public log API (docs/importing.md, "What is read"). `InspectReader` is
the I/O edge (for importers/reader.py's loop); `run_from_log` turns one log header and its samples into a `Run`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from safetyrepro.errors import error_line
from safetyrepro.limits import (
    MAX_COUNT,
    MAX_SEED,
    MAX_SHOTS,
    Refused,
    check_json_text,
    decode_text,
    loads_json,
    read_capped,
    shorten,
    whole_number,
)
from safetyrepro.tasks.benchmark import DEFAULT_TIE_RULE
from safetyrepro.tasks.benchmarks.registry import BENCHMARKS, get_benchmark
from safetyrepro.tasks.envelope import Config

from .archive import check_eval_archive
from .common import (
    BadInput,
    ItemRow,
    Run,
    Unmapped,
    Unplaced,
    answer_index,
    as_unit_score,
    bad_file,
    kept_items,
    precision_label,
    recorded_time,
    share,
)
from .mapping import Mapping, decorated_template, place_task, run_decoding
from .reader import Companion, Reader, find

LOG_FORMATS = (2,)  # the .eval / .json log format versions Inspect 0.3 writes
SUPPORTED = "0.3"
SR_PROVIDER = "safetyrepro/"
SR_ARGS = ("template", "scoring", "shots", "tie_rule")
SHOTS_ARGS = ("shots", "num_fewshot", "fewshot", "n_shots", "k_shot")
# generate settings that change a model's outputs (beyond temperature, top_p and seed, which name the decoding)
OUTPUT_SETTINGS = tuple(
    "max_tokens top_k stop_seqs frequency_penalty presence_penalty logit_bias best_of num_choices reasoning_effort "
    "reasoning_tokens".split()
)
MEAN_METRICS = ("accuracy", "mean")  # Inspect metrics that are the mean of the per-sample values


def _logs_in(folder: Path) -> list[Path]:
    from inspect_ai.log import list_eval_logs

    return sorted(Path(info.name.removeprefix("file://")) for info in list_eval_logs(str(folder), recursive=True))


class InspectReader(Reader):
    """One log is one run; it holds its samples itself."""

    package, what, kind = "inspect", "Inspect logs", "inspect log"

    def find(self, paths: Sequence[str]) -> tuple[list[Path], list[BadInput]]:
        return find(
            paths,
            lambda p: p.suffix in (".eval", ".json"),
            _logs_in,
            "is not an Inspect log (.eval or .json)",
            "holds no Inspect log (.eval or .json)",
        )

    def read(self, path: Path) -> tuple[bytes, Any]:
        data = read_capped(path)
        # refused over the caps of safetyrepro/limits.py before Inspect loads it (seconds): a bomb at once;
        # `members`: the archive's members that say its format version (a .json log: the file itself)
        if str(path).endswith(".eval"):
            members = check_eval_archive(data)
        else:
            decode_text(data)
            check_json_text(data)
            members = {"log.json": data}
        from inspect_ai.log import read_eval_log, read_eval_log_samples

        try:
            header = read_eval_log(str(path), header_only=True)
        except Exception as e:  # Inspect raises many types for a damaged file; each is one bad input
            problem = _declared_format_problem(members)
            raise bad_file(path, problem or f"is not a readable Inspect log ({error_line(e, most=160)})") from None
        if problem := check_log(header):
            raise bad_file(path, problem)
        samples = None
        if getattr(header.eval.config, "log_samples", True) is not False:
            stopped = early_stopped(header)  # an early-stopped eval logs only the samples it ran
            try:
                samples = list(read_eval_log_samples(str(path), all_samples_required=not stopped))
            except Exception as e:  # a log cut short keeps its header but loses samples
                raise bad_file(path, f"its samples cannot be read ({error_line(e, most=160)}): a partial log") from None
            if stopped:
                epochs = int(getattr(header.eval.config, "epochs", None) or 1)
                wanted = {(str(i), e) for i in header.eval.dataset.sample_ids or () for e in range(1, epochs + 1)}
                lost = wanted - {(str(s.id), int(s.epoch)) for s in samples} - stopped
                if lost:
                    sid, epoch = sorted(lost)[0]
                    raise bad_file(
                        path,
                        f"lacks {len(lost)} sample(s) its early stopping did not stop (e.g. {sid}, epoch {epoch}): "
                        "a partial log",
                    )
        return data, (header, samples)

    def runs(
        self, path: Path, parsed: Any, companions: list[Companion], mapping: Mapping, rules, metric: str | None
    ) -> list[Run | Unmapped]:
        header, samples = parsed
        return [run_from_log(header, samples, str(path), mapping, rules, metric)]


READER = InspectReader()


def _declared_format_problem(members: dict[str, bytes]) -> str | None:
    """Why the log format version a file declares is not supported, read without Inspect (which refuses versions
    it does not know with a bare "unable to read"): a .json log's top-level `version`, a .eval archive's header
    (`members`: what `read` checked and kept); None when it is or declares none."""
    for name in ("log.json", "header.json", "_journal/start.json"):
        if name in members:
            try:
                version = int(loads_json(decode_text(members[name]), checked=True).get("version"))
            except (ValueError, TypeError, AttributeError, OverflowError, Refused):
                return None
            return _format_problem(version)
    return None


def _format_problem(version: Any) -> str | None:
    if version in LOG_FORMATS:
        return None
    supported = ", ".join(map(str, LOG_FORMATS))
    return f"is an Inspect log of format version {version}; supported: {supported} (Inspect {SUPPORTED}.x)"


def check_log(log) -> str | None:
    """Why a log (its header) cannot be imported, or None."""
    if problem := _format_problem(getattr(log, "version", None)):
        return problem
    version = str((log.eval.packages or {}).get("inspect_ai", ""))
    if version and not version.startswith(SUPPORTED + "."):
        return f"was written by Inspect {version}; supported: Inspect {SUPPORTED}.x logs"
    if log.status != "success":
        return f"records an eval that ended {log.status!r}, not 'success': a partial run"
    if log.results is None or not log.results.scores:
        return "records no scores (was the eval run with --no-score?)"
    return None


def _choose_metric(log, wanted: str | None) -> tuple[Any, str]:
    """(the EvalScore, the metric name): `wanted` as `metric` or `scorer/metric`, else the first
    scorer's first metric that is not a spread (stderr, std); `Unplaced` when there is none."""
    scores = log.results.scores
    if wanted:
        scorer, _, name = wanted.rpartition("/")
        for s in scores:
            if (not scorer or s.name == scorer) and name in s.metrics:
                return s, name
        have = ", ".join(f"{s.name}/{m}" for s in scores for m in s.metrics)
        raise Unplaced(f"reports no metric {wanted!r} (it has: {have})")
    for s in scores:
        for name in s.metrics:
            if name not in ("stderr", "std", "var"):
                return s, name
    raise Unplaced("reports no metric")


def _generate_settings(log) -> dict:
    """The effective generate settings: the eval's own (--temperature, ...) over the task's, which
    `log.plan.config` records (unset ones left out)."""
    configs = (getattr(log.plan, "config", None), log.eval.model_generate_config)
    dumps = [c.model_dump() if hasattr(c, "model_dump") else dict(c) for c in configs if c is not None]
    return {k: v for dump in dumps for k, v in dump.items() if v is not None}


def task_name(ev) -> str:
    """The task's name as `inspect eval` gives it: SafetyRepro's tasks run from Python are recorded as
    `<benchmark>` (a notebook) or `task` (a sweep builds them unregistered), and are known by the
    metadata they record (benchmark, item subset, rules hash)."""
    name = str(ev.task)
    meta = dict(ev.metadata or {})
    ours = meta.get("benchmark") in BENCHMARKS and "rules_sha256" in meta and "subset_id" in meta
    return f"safetyrepro/{meta['benchmark']}" if ours and not name.startswith("safetyrepro/") else name


def run_from_log(log, samples: list | None, source: str, mapping: Mapping, rules, metric: str | None) -> Run | Unmapped:
    ev = log.eval
    task_args = dict(ev.task_args or {})
    model_args = dict(ev.model_args or {})
    recorded = str(ev.model)
    output = getattr(samples[0], "output", None) if samples else None
    first_meta = dict(getattr(output, "metadata", None) or {})  # the engine records precision and weights here
    engine = recorded.startswith(SR_PROVIDER)
    label = mapping.checked_label(recorded.removeprefix(SR_PROVIDER), source, "eval.model")
    name = task_name(ev)
    if name.startswith("safetyrepro/"):
        # SafetyRepro's tasks record what they ran in their metadata, also when built in Python (a sweep)
        meta = dict(ev.metadata or {})
        task_args = {**task_args, **{k: meta[k] for k in SR_ARGS if k in meta}}
    try:
        placement = place_task(name, mapping, "inspect", task_args)
        if isinstance(placement, str):
            raise Unplaced(placement)
        score_entry, metric_name = _choose_metric(log, placement.metric or metric)
        scorer_metric = f"{score_entry.name}/{metric_name}"
        score = share(score_entry.metrics[metric_name].value, scorer_metric, " (choose one with --metric)")
    except Unplaced as e:
        return Unmapped(source, str(ev.task), label, str(e))
    settings = _generate_settings(log)
    if placement.safetyrepro:
        scoring = str(task_args.get("scoring") or "logprob")
        shots_key: str | None = "shots"
    else:
        scoring = placement.scoring or "free_form"
        shots_key = placement.shots_arg or next((k for k in SHOTS_ARGS if k in task_args), None)
    recorded_shots = task_args.get(shots_key) if shots_key else None
    shots = 0 if recorded_shots is None else whole_number(recorded_shots, f"task argument {shots_key}", 0, MAX_SHOTS)
    tie_rule = None
    if placement.safetyrepro and scoring == "logprob":
        tie_rule = str(task_args.get("tie_rule") or DEFAULT_TIE_RULE)
    decoding = run_decoding(
        scoring,
        rules,
        settings.get("temperature"),
        settings.get("top_p"),
        provider_default=not engine,
        settings=output_settings(settings, placement, rules),
    )
    template = decorated_template(
        placement.template,
        chat_applied=True,
        model_has_chat=None,
        system_text=settings.get("system_message"),
        fewshot_as_multiturn=True,
        shots=shots,
        args={} if placement.safetyrepro else {k: v for k, v in task_args.items() if k != shots_key},
    )
    seed = whole_number(settings.get("seed") or 0, "generate config seed", 0, MAX_SEED) if decoding.do_sample else 0
    dtypes = (first_meta.get("precision"), model_args.get("precision"), model_args.get("dtype"))
    # none recorded: the engine's bf16; a provider's model's precision is the provider's, not recorded
    precision = precision_label(*dtypes, default="bf16" if engine else "default")
    metrics = score_entry.metrics
    logged_rate = as_unit_score(metrics["parse_rate"].value) if "parse_rate" in metrics else None
    item_ids = tuple(str(i) for i in (ev.dataset.sample_ids or [])) or None
    total = log.results.total_samples or 0
    n_items = len(item_ids) if item_ids else whole_number(total, "field results.total_samples", 0, MAX_COUNT)
    items, note, samples_source = None, "the log holds no samples", None
    if samples:
        rows = _item_rows(samples, score_entry.name)
        samples_source = source
        if isinstance(rows, str):
            note = rows
        else:
            ids = tuple(r.item_id for r in rows)
            stopped = {sid for sid, _ in early_stopped(log)}
            if item_ids is not None and set(ids) != set(item_ids) and not set(item_ids) - set(ids) <= stopped:
                raise bad_file(source, f"holds samples for {len(ids)} of its {len(item_ids)} items: a partial log")
            item_ids, n_items = ids, len(ids)
            if metric_name.split("/")[-1] not in MEAN_METRICS:  # `accuracy` or `<scorer>/accuracy`
                note = f"metric {metric_name} is not a mean over samples"
            else:
                why_not = f"the samples' scores do not average to the reported {metric_name}"
                items, note = kept_items(rows, score, why_not)
    if n_items < 1:
        raise bad_file(source, "records no samples")
    kind = "inspect:safetyrepro" if engine else "inspect"
    return Run(
        package="inspect",
        package_version=str((ev.packages or {}).get("inspect_ai") or f"{SUPPORTED}.x (unrecorded)"),
        source=source,
        samples_source=samples_source,
        task=name,
        model=label,
        model_recorded=recorded,
        model_spec={"kind": kind, "spec": recorded, "model_args": model_args, "precision": precision},
        weights_id=first_meta.get("weights_sha256") or None,
        precision=precision,
        axes=Config(placement.benchmark, template, decoding.name, shots, scoring),
        decoding=decoding,
        stress_template=placement.stress,
        seed=seed,
        metric=scorer_metric,
        tie_rule=tie_rule,
        score=score,
        parse_rate=1.0 if logged_rate is None else logged_rate,
        n_items=n_items,
        item_ids=item_ids,
        items=items,
        items_note=note,
        created=recorded_time(ev.created) or 0.0,
    )


def early_stopped(log) -> set[tuple[str, int]]:
    """(sample id, epoch) of every sample the eval's early stopping stopped (Inspect's `early_stops`): an
    early-stopped log holds the others only, and is whole as such."""
    summary = getattr(getattr(log, "results", None), "early_stopping", None)
    return {(str(s.id), int(s.epoch)) for s in getattr(summary, "early_stops", None) or ()}


def output_settings(settings: dict, placement, rules) -> dict:
    """Generate settings besides the sampling ones that change a free-form output: a log records them merged
    (the task's own with the eval's), so every one present names the decoding, except a SafetyRepro task's
    own token budget and stop sequences (docs/importing.md, "The axes")."""
    present = {k: settings[k] for k in OUTPUT_SETTINGS if settings.get(k) is not None}
    if placement.safetyrepro:
        own = {
            "max_tokens": rules.max_new_tokens.get(placement.template, 96),
            "stop_seqs": list(get_benchmark(placement.benchmark).stop_sequences(placement.template)) or None,
        }
        present = {k: v for k, v in present.items() if own.get(k, object()) != v}
    return present


def _item_rows(samples: list, scorer: str) -> list[ItemRow] | str:
    """One row per sample id (epochs averaged, as Inspect's default reducer does)."""
    from inspect_ai.scorer import value_to_float

    to_float = value_to_float()
    values: dict[str, list[float]] = defaultdict(list)
    first: dict[str, Any] = {}
    for s in samples:
        score = (s.scores or {}).get(scorer)
        if score is None:
            return f"sample {s.id} has no {scorer} score"
        try:
            v = float(to_float(score.value))
        except (TypeError, ValueError):
            return f"sample {s.id}'s {scorer} score {score.value!r} is not a number"
        if as_unit_score(v) is None:
            return f"sample {s.id}'s {scorer} score {v!r} is outside [0, 1]"
        values[str(s.id)].append(v)
        first.setdefault(str(s.id), s)
    rows = []
    for sid, vs in values.items():
        s = first[sid]
        meta = dict(s.scores[scorer].metadata or {})
        rows.append(
            ItemRow(
                sid,
                sum(vs) / len(vs),
                answer_index(meta.get("prediction"), f"sample {shorten(sid)}'s score metadata prediction"),
                answer_index(dict(s.metadata or {}).get("gold"), f"sample {shorten(sid)}'s metadata gold"),
                s.output.completion if getattr(s, "output", None) is not None else None,
                bool(meta["parsed"]) if "parsed" in meta else None,
            )
        )
    return rows
