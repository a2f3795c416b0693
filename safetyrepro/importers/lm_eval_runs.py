"""Reading lm-eval output folders (docs/importing.md, "What is read"): `LmEvalReader` is the I/O edge (for
importers/reader.py's loop); `runs_from_results` turns one parsed results file and its samples into `Run`s."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from safetyrepro.hashing import sha256_bytes
from safetyrepro.limits import MAX_CHOICE, MAX_COUNT, MAX_SEED, MAX_SHOTS, Refused, read_capped, shorten, whole_number
from safetyrepro.tasks.benchmark import DEFAULT_TIE_RULE
from safetyrepro.tasks.envelope import Config

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
    number,
    precision_label,
    share,
)
from .mapping import Mapping, decorated_template, model_label, parse_model_args, place_task, run_decoding, truthy
from .reader import Companion, about, find, json_file, json_lines

STAMP = r"(?P<stamp>\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?)"
RESULTS_FILE = re.compile(rf"results_{STAMP}\.json")
SAMPLES_FILE = re.compile(rf"samples_(?P<task>.+)_{STAMP}\.jsonl")
SUPPORTED = "0.4"  # the results layout (results, configs, config, n-shot, ...) of lm-eval 0.4.x
LOGPROB_TYPES = ("multiple_choice", "loglikelihood", "loglikelihood_rolling")
NOT_METRICS = {"alias", "name", "sample_len", "samples"}
SAMPLING_KEYS = ("temperature", "top_p", "do_sample", "seed")


def _named(pattern: re.Pattern[str], path: Path) -> re.Match[str]:
    """The match of a file that was picked by its name's pattern."""
    m = pattern.fullmatch(path.name)
    if m is None:
        raise ValueError(f"{path.name} was picked as {pattern.pattern} but does not match it")
    return m


def _ours(path: Path) -> bool:
    return bool(RESULTS_FILE.fullmatch(path.name) or SAMPLES_FILE.fullmatch(path.name))


# -- reading files (the edge) ----------------------------------------------------------------------
class LmEvalReader:
    """Results files are the runs; each brings the samples files its run wrote beside it (same date stamp)."""

    package, what, kind = "lm-eval", "lm-eval results files", "lm-eval results"

    def find(self, paths: Sequence[str]) -> tuple[list[Path], list[BadInput]]:
        files, bad = find(
            paths,
            _ours,
            lambda folder: sorted(q for q in folder.rglob("*") if q.is_file() and _ours(q)),
            "is neither an lm-eval results_<date>.json nor a samples_<task>_<date>.jsonl",
            "holds no lm-eval results_<date>.json (was lm_eval run with --output_path?)",
        )
        results = {f for f in files if RESULTS_FILE.fullmatch(f.name)}
        for s in [f for f in files if SAMPLES_FILE.fullmatch(f.name)]:  # a samples file brings its results file
            beside = s.with_name(f"results_{_named(SAMPLES_FILE, s)['stamp']}.json")
            if beside.is_file():
                results.add(beside)
            else:
                why = f"has no results file beside it ({beside.name}): a samples file without its results"
                bad.append(BadInput(str(s), why + " cannot say the run's settings"))
        return sorted(results), bad

    def read(self, path: Path) -> tuple[bytes, Any]:
        return json_file(path, check_results, "is not valid JSON (a partial or damaged results file)")

    def companions(self, path: Path, parsed: Any) -> list[Companion]:
        """The samples files of the run, each with the task it belongs to: its file name holds the task
        name (lm-eval sanitises some characters in it), matched against the tasks the results list."""
        stamp = _named(RESULTS_FILE, path)["stamp"]
        tasks = {**{re.sub(r"[^\w.-]", "_", t): t for t in parsed["configs"]}, **{t: t for t in parsed["configs"]}}
        out = []
        for s in sorted(q for q in path.parent.glob(f"samples_*_{stamp}.jsonl") if q.is_file() and _ours(q)):
            lines = []
            with about(s):
                data = read_capped(s)
                for n, record in json_lines(data, "a partial or damaged samples file"):
                    if not isinstance(record, dict) or "doc_id" not in record:
                        raise Refused(f"line {n} is not an lm-eval sample record (no doc_id)")
                    lines.append(record)
            hint = _named(SAMPLES_FILE, s)["task"]
            if hint not in tasks:
                raise bad_file(
                    s, f"is a samples file for task {hint!r}, which its results file {path.name} does not list"
                )
            out.append(Companion(s, "lm-eval samples", data, (tasks[hint], lines)))
        return out

    def runs(
        self, path: Path, parsed: Any, companions: list[Companion], mapping: Mapping, rules, metric: str | None
    ) -> list[Run | Unmapped]:
        samples = {c.parsed[0]: (str(c.path), c.parsed[1]) for c in companions}
        logged = [t for t in parsed["configs"] if t in samples]
        if logged and len(logged) < len(parsed["configs"]):
            lacking = sorted(set(parsed["configs"]) - set(logged))[0]
            raise bad_file(
                path,
                f"the run logged samples for {', '.join(sorted(logged))} but not for {lacking}: a partial run folder",
            )
        return runs_from_results(parsed, str(path), samples, mapping, rules, metric)


READER = LmEvalReader()


# -- from parsed JSON to runs (pure) ---------------------------------------------------------------
def check_results(data: Any) -> str | None:
    """Why a parsed results file cannot be imported, or None."""
    if not isinstance(data, dict):
        return "is not an lm-eval results file (not a JSON object)"
    version = data.get("lm_eval_version")
    if version is not None and not str(version).startswith(SUPPORTED + "."):
        return f"was written by lm-eval {version}; supported: lm-eval {SUPPORTED}.x results files"
    for key in ("results", "configs", "config"):
        if not isinstance(data.get(key), dict):
            return (
                f"has no {key!r} section: not an lm-eval {SUPPORTED}.x results file (older lm-eval versions "
                "are not supported)"
            )
    for key in ("n-shot", "n-samples"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            return f"field {key!r} is {shorten(data[key])}; expected an object (task name -> its value)"
    return None


def _object(value: Any, field: str) -> dict:
    """An optional JSON object field: {} when absent, refused when it is another type."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Refused(f"field {field} is {shorten(value)}; expected an object")
    return value


def _text(value: Any, field: str) -> str | None:
    """An optional string field (None when absent or empty), refused when it is another type."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise Refused(f"field {field} is {shorten(value)}; expected a string")
    return value


def choose_metric(entry: dict, wanted: str | None) -> str | None:
    """The results key of the task's metric: `wanted` (with or without its `,filter`), else the
    first metric the task reports (lm-eval lists the task's primary metric first), stderr left out."""
    keys = [k for k in entry if k not in NOT_METRICS and "_stderr," not in k and not k.endswith("_stderr")]
    if wanted:
        return wanted if wanted in entry else next((k for k in keys if k.split(",", 1)[0] == wanted), None)
    return keys[0] if keys else None


def _gen_settings(data: dict, task_config: dict) -> tuple[dict, dict]:
    """(effective generation settings, the ones the command line set): lm-eval's --gen_kwargs
    update the task's own generation_kwargs."""
    task_kwargs = dict(_object(task_config.get("generation_kwargs"), "configs.<task>.generation_kwargs"))
    cli = data["config"].get("gen_kwargs") or {}
    if isinstance(cli, str):
        cli = parse_model_args(cli)
    cli = _object(cli, "config.gen_kwargs (--gen_kwargs: an object or a key=value,... string)")
    return {**task_kwargs, **cli}, dict(cli)


def _bool_or_none(v: Any) -> bool | None:
    return None if v is None or v == "" else truthy(v)


def _created(data: dict, source: str) -> float:
    """When the run was made: its `date`, else its results file's date stamp (UTC), else 0."""
    if isinstance(data.get("date"), (int, float)):
        return float(data["date"])
    stamp = _named(RESULTS_FILE, Path(source))["stamp"]
    try:
        when = dt.datetime.strptime(stamp, "%Y-%m-%dT%H-%M-%S" + (".%f" if "." in stamp else ""))
    except ValueError:
        return 0.0
    return when.replace(tzinfo=dt.timezone.utc).timestamp()


def _sampling_seed(gen: dict, config: dict) -> int:
    """A sampled run's seed: the generation seed given in gen_kwargs, else lm-eval's random_seed, else 0."""
    field, value = "generation seed (gen_kwargs seed)", gen.get("seed")
    if value in (None, "", 0, "0"):
        field, value = "config.random_seed", config.get("random_seed")
    return 0 if value in (None, "") else whole_number(value, f"field {field}", 0, MAX_SEED, text=True)


def _recorded_n_items(data: dict, entry: dict, task: str) -> int:
    """The items a task ran, as its results file records them (n-samples' effective, else sample_len; 0 if neither)."""
    n_samples = _object((data.get("n-samples") or {}).get(task), f"'n-samples' of task {task}")
    field, value = f"'n-samples' effective of task {task}", n_samples.get("effective")
    if value in (None, "", 0):
        field, value = f"results sample_len of task {task}", entry.get("sample_len")
    return 0 if value in (None, "", 0) else whole_number(value, f"field {field}", 0, MAX_COUNT)


def runs_from_results(
    data: dict, source: str, samples: dict[str, tuple[str, list[dict]]], mapping: Mapping, rules, metric: str | None
) -> list[Run | Unmapped]:
    config = data["config"]
    kind = str(config.get("model") or "?")
    args = parse_model_args(config.get("model_args"))
    sr_model = config.get("safetyrepro_model") if isinstance(config.get("safetyrepro_model"), dict) else {}
    # SafetyRepro's engine records its own label (the sweep's); a model object handed to lm-eval in
    # Python (a sweep) is recorded under its class name only
    recorded = str(sr_model["label"]) if sr_model.get("label") else model_label(kind, args, data.get("model_name"))
    label = mapping.checked_label(recorded, source, "config.model_args")
    weights = _text(sr_model.get("weights_sha256") or config.get("model_sha") or None, "config.model_sha")
    nf4 = truthy(args.get("load_in_4bit")) or str(args.get("bnb_4bit_quant_type", "")).lower() == "nf4"
    quantised = "nf4" if nf4 else "int8" if truthy(args.get("load_in_8bit")) else None
    dtypes = (sr_model.get("precision"), config.get("model_dtype"), args.get("dtype"), args.get("precision"))
    precision = precision_label(quantised, *dtypes)
    chat_recorded = "chat_template" in data or "chat_template_sha" in data
    chat_applied = bool(data.get("chat_template_sha") or data.get("chat_template")) if chat_recorded else None
    system_text = _text(data.get("system_instruction"), "system_instruction")
    multiturn = _bool_or_none(data.get("fewshot_as_multiturn"))
    spec = {"kind": f"lm-eval:{kind}", "spec": ",".join(f"{k}={v}" for k, v in args.items()), "precision": precision}

    def task_run(task: str, task_config: dict) -> Run:
        entry = data["results"].get(task)
        if not isinstance(entry, dict):
            raise bad_file(source, f"lists task {task} in 'configs' but has no result for it: a partial results file")
        placement = place_task(task, mapping, "lm-eval")
        if isinstance(placement, str):
            raise Unplaced(placement)
        key = choose_metric(entry, placement.metric or metric or ("acc" if placement.safetyrepro else None))
        if key is None:
            have = ", ".join(k for k in entry if "," in k and "_stderr" not in k)
            raise Unplaced(f"reports no metric {placement.metric or metric!r} (it has: {have})")
        score = share(entry[key], key, ": the grid holds scores in [0, 1] (choose another with --metric)")
        output_type = str(task_config.get("output_type") or "")
        scoring = placement.scoring or ("logprob" if output_type in LOGPROB_TYPES else "free_form")
        recorded_shots = (data.get("n-shot") or {}).get(task, task_config.get("num_fewshot"))
        shots = 0
        if recorded_shots not in (None, ""):
            shots = whole_number(recorded_shots, f"field 'n-shot' of task {task}", 0, MAX_SHOTS)
        gen, cli = _gen_settings(data, task_config)
        decoding = run_decoding(
            scoring,
            rules,
            number(gen.get("temperature")),
            number(gen.get("top_p")),
            _bool_or_none(gen.get("do_sample")),
            # other generation settings given on the command line (max_gen_toks, until, ...) change the outputs
            settings={k: v for k, v in cli.items() if k not in SAMPLING_KEYS},
        )
        seed = _sampling_seed(gen, config) if decoding.do_sample else 0
        tie_rule = None
        if placement.safetyrepro and scoring == "logprob":
            meta = _object(task_config.get("metadata"), f"configs.{task}.metadata")
            tie_rule = str(meta.get("tie_rule") or DEFAULT_TIE_RULE)
        n_items = _recorded_n_items(data, entry, task)
        # the share of replies the task's parser read, where the task logs one (the five benchmarks' tasks do; any
        # task may, as a metric named parse_rate): a generated answer's readable/format split reads it
        logged_rate = as_unit_score(entry.get("parse_rate,none"))
        items, item_ids, note, samples_source = None, None, "the run logged no samples (--log_samples)", None
        if task in samples:
            samples_source, lines = samples[task]
            with about(samples_source):
                rows, item_ids = items_from_samples(lines, key, placement.item_id, output_type, placement.safetyrepro)
            if n_items and len(item_ids) < n_items:
                raise bad_file(
                    samples_source, f"holds {len(item_ids)} of the run's {n_items} items: a partial samples file"
                )
            n_items = len(item_ids)
            if rows is None:
                note = f"metric {key} has no numeric per-sample value in [0, 1]"
            else:
                why_not = f"the samples' {key.split(',')[0]} values do not average to the reported {key} (not a mean)"
                items, note = kept_items(rows, score, why_not)
        if n_items < 1:
            raise bad_file(source, f"records no item count for task {task}")
        template = decorated_template(
            placement.template,
            chat_applied=chat_applied,
            model_has_chat=sr_model.get("has_chat_template"),
            system_text=system_text,
            fewshot_as_multiturn=multiturn,
            shots=shots,
        )
        return Run(
            package="lm-eval",
            package_version=str(data.get("lm_eval_version") or f"{SUPPORTED}.x (unrecorded)"),
            source=source,
            samples_source=samples_source,
            task=task,
            model=label,
            model_recorded=recorded,
            model_spec=spec,
            weights_id=weights,
            precision=precision,
            axes=Config(placement.benchmark, template, decoding.name, shots, scoring),
            decoding=decoding,
            stress_template=placement.stress,
            seed=seed,
            metric=key,
            tie_rule=tie_rule,
            score=score,
            parse_rate=1.0 if logged_rate is None else logged_rate,
            n_items=n_items,
            item_ids=item_ids,
            items=items,
            items_note=note,
            created=_created(data, source),
        )

    out: list[Run | Unmapped] = []
    for task, task_config in data["configs"].items():
        try:
            out.append(task_run(task, task_config if isinstance(task_config, dict) else {}))
        except Unplaced as e:
            out.append(Unmapped(source, task, label, str(e)))
    return out


def _loglik(resp: Any) -> float | None:
    """One candidate's log-likelihood from a sample's filtered_resps entry ([loglik, is_greedy])."""
    value = resp[0] if isinstance(resp, (list, tuple)) and resp else resp
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def items_from_samples(
    lines: list[dict], metric_key: str, id_field: str | None, output_type: str, safetyrepro: bool
) -> tuple[list[ItemRow] | None, tuple[str, ...]]:
    """(item rows, or None when the metric has no per-sample value; the ids of every item) from a
    samples file's records of the metric's filter; refused (`Refused`) when the file is unusable."""
    name, _, filt = metric_key.partition(",")
    filt = filt or "none"
    chosen = [s for s in lines if str(s.get("filter", "none")) == filt]
    if not chosen:
        raise Refused(f"has no records for filter {filt!r}")

    def field_ids(name: str) -> list[str] | None:
        values = [s.get("doc", {}).get(name) if isinstance(s.get("doc"), dict) else None for s in chosen]
        if all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in values):
            return [str(v) for v in values]
        return None

    # an item keeps its name across task variants and shot counts when the documents carry one
    if id_field:
        ids = field_ids(id_field)
        if ids is None:
            raise Refused(f"has documents without a usable {id_field!r} field (the mapping's item_id)")
    else:
        ids = field_ids("id")
        if ids is None or len(set(ids)) < len(ids):
            ids = [f"doc{s['doc_id']}" for s in chosen]
    rows: list[ItemRow] | None = []
    for s, item_id in zip(chosen, ids, strict=True):
        value = as_unit_score(s.get(name))
        if value is None or rows is None:
            rows = None
            continue
        rows.append(_item_row(s, item_id, value, output_type, safetyrepro, name))
    if len(set(ids)) < len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise Refused(
            f"names item {dup!r} twice (filter {filt!r}): a samples file of two runs, or an item_id field "
            "that is not unique"
        )
    return rows, tuple(ids)


def _item_row(s: dict, item_id: str, value: float, output_type: str, safetyrepro: bool, metric: str) -> ItemRow:
    args = s.get("arguments")
    context = None
    if isinstance(args, dict) and isinstance(args.get("gen_args_0"), dict):
        context = args["gen_args_0"].get("arg_0")
    elif isinstance(args, list) and args and isinstance(args[0], (list, tuple)) and args[0]:
        context = args[0][0]
    prompt_sha = sha256_bytes(context.encode("utf-8")) if isinstance(context, str) else None
    target, sample = s.get("target"), f"sample doc_id {shorten(s.get('doc_id'))}"
    gold = None
    # a generated task's target is text, not a label index (left out below)
    if (safetyrepro or output_type == "multiple_choice") and (
        (isinstance(target, int) and not isinstance(target, bool))
        or (isinstance(target, str) and re.fullmatch(r"\s*[0-9]+\s*", target))
    ):
        gold = whole_number(target, f"field target of {sample}", 0, MAX_CHOICE, text=True)
    resps = s.get("filtered_resps") if s.get("filtered_resps") is not None else s.get("resps")
    prediction, raw, parsed = None, None, None
    if output_type == "multiple_choice" and isinstance(resps, list) and resps:
        found = [_loglik(r) for r in resps]
        logliks = [v for v in found if v is not None]
        if len(logliks) == len(found):
            best = max(range(len(logliks)), key=lambda i: logliks[i])
            prediction = best if metric == "acc" else None  # acc_norm picks by length-normalised scores
            if isinstance(args, dict) and isinstance(args.get(f"gen_args_{best}"), dict):
                raw = args[f"gen_args_{best}"].get("arg_1")
                raw = raw.strip() if isinstance(raw, str) else None
        parsed = True
    elif isinstance(resps, list) and resps:
        first = resps[0][0] if isinstance(resps[0], list) and resps[0] else resps[0]
        raw = first if isinstance(first, str) else None
        parsed = None if s.get("parse_rate") is None else bool(s["parse_rate"])
        if safetyrepro:
            # the task scored the item once and logged its predicted label (runs before this field: None)
            prediction = answer_index(s.get("top_answer_share"), f"field top_answer_share of {sample}")
    return ItemRow(item_id, value, prediction, gold, raw, parsed, prompt_sha)
