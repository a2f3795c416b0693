"""Every Eval Ever records (schema 0.3.x) as `Run`s for importers/assemble.py: SafetyRepro's own records
(`R.is_safetyrepro_record`) from the keys the export wrote, any other record's evaluation names as tasks
(docs/eee.md, "What `import eee` reads"). `EeeReader` is the I/O edge; its `runs` does not touch the disk."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetyrepro.limits import MAX_CHOICE, MAX_COUNT, MAX_SEED, MAX_SHOTS, Refused, read_capped, shorten, whole_number
from safetyrepro.tasks.benchmarks.registry import BENCHMARKS
from safetyrepro.tasks.envelope import Config

from . import eee_format as R
from .common import (
    BadInput,
    DecodingSpec,
    ItemRow,
    Run,
    Unmapped,
    Unplaced,
    as_unit_score,
    bad_file,
    kept_items,
    number,
    precision_label,
    recorded_time,
    share,
    short_hash,
    split_package,
)
from .mapping import AXIS_VALUE, LM_EVAL_TASK, NAME, SCORINGS, Mapping, place_task, run_decoding, with_settings
from .reader import Companion, about, find, json_file, json_lines

SHOTS_KEYS = (R.K_NUM_FEWSHOT, "num_fewshot", "shots", "n_shots", "fewshot", "k_shot")
# generation settings that leave the output as it is when they have these values
NEUTRAL = {
    "presence_penalty": ("0", "0.0"),
    "frequency_penalty": ("0", "0.0"),
    "num_completions": ("1",),
    "stop_sequences": ("[]", ""),
    "reasoning": (False, "false"),
}
SAMPLING_ARGS = ("temperature", "top_p")
NOT_OUTPUT_ARGS = ("prompt_template", "execution_command", "agentic_eval_config", "eval_plan", "eval_limits", "sandbox")


# -- finding and reading files (the edge) ---------------------------------------------------------------
def _records_in(folder: Path) -> list[Path]:
    """`<uuid>.json` at any depth (links and hidden folders not followed): the name EEE's datastore and
    converters give aggregate records."""
    here = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not (Path(root) / d).is_symlink() and not d.startswith("."))
        here += [
            Path(root) / f
            for f in sorted(files)
            if f.endswith(".json") and R.UUID_FILE.fullmatch(f[:-5]) and not (Path(root) / f).is_symlink()
        ]
    return here


class EeeReader:
    """An aggregate record holds one evaluation's results; its instance-level file, when there, the items."""

    package, what, kind = "eee", "Every Eval Ever records", "eee record"

    def find(self, paths: Sequence[str]) -> tuple[list[Path], list[BadInput]]:
        return find(
            paths,
            lambda p: p.suffix == ".json",
            _records_in,
            "is not an Every Eval Ever aggregate record (.json)",
            "holds no Every Eval Ever record (<uuid>.json at any depth)",
        )

    def read(self, path: Path) -> tuple[bytes, Any]:
        return json_file(path, check_record)

    def companions(self, path: Path, parsed: Any) -> list[Companion]:
        samples = _companion(path, parsed)
        if samples is None:
            return []
        with about(samples):
            data = read_capped(samples)
            return [Companion(samples, "eee samples", data, _instance_rows(data, parsed))]

    def runs(
        self, path: Path, parsed: Any, companions: list[Companion], mapping: Mapping, rules, metric: str | None
    ) -> list[Run | Unmapped]:
        note = "the record has no instance-level file"
        if not companions and parsed.get("detailed_evaluation_results"):
            where = shorten(parsed["detailed_evaluation_results"].get("file_path"))
            note = f"its instance-level file {where} is not there"
        rows, samples = (companions[0].parsed, str(companions[0].path)) if companions else (None, None)
        record = Record(parsed, str(path), rows, samples, note)
        results = parsed["evaluation_results"]
        if R.is_safetyrepro_record(parsed):
            return [run for result in results for run in _safetyrepro_runs(record, result, mapping)]
        by_task: dict[str, list[dict]] = defaultdict(list)
        for result in results:
            by_task[str(result.get("evaluation_name"))].append(result)
        return [_foreign_run(record, task, of_task, mapping, rules, metric) for task, of_task in by_task.items()]


READER = EeeReader()


@dataclass(frozen=True)
class Record:
    """An aggregate record as read, with its instance rows (None: no instance-level file, `items_note` says why)."""

    record: dict
    source: str
    rows: list[dict] | None
    samples_source: str | None
    items_note: str


def _companion(path: Path, record: dict) -> Path | None:
    """The record's instance-level file: detailed_evaluation_results.file_path, rooted at the folder
    above the `data/` the record sits in (EEE's layout), else `<uuid>_samples.jsonl` beside it."""
    detail = record.get("detailed_evaluation_results")
    if isinstance(detail, dict) and isinstance(detail.get("file_path"), str):
        rel = detail["file_path"].strip()
        if _escapes(rel):
            # a shared record must never make the importer open (and hash) a file of this machine
            raise Refused(
                f"field detailed_evaluation_results.file_path {shorten(rel)} is absolute or climbs out of its "
                "folder (..); an instance-level file is named relative to the record's datastore, inside it"
            )
        for ancestor in path.absolute().parents:
            if ancestor.name == R.DATA_DIR:
                candidate = ancestor.parent / rel
                if candidate.is_file():
                    if not candidate.resolve().is_relative_to(ancestor.parent.resolve()):
                        raise Refused(
                            f"field detailed_evaluation_results.file_path {shorten(rel)} leads out of "
                            f"{ancestor.parent} through a symbolic link; remove the link and rerun"
                        )
                    return candidate
        beside = path.parent / Path(rel).name
        if beside.is_file():
            return beside
    beside = path.with_name(path.stem + "_samples.jsonl")
    return beside if beside.is_file() else None


def _escapes(rel: str) -> bool:
    """A file_path that is absolute (POSIX, Windows drive or UNC) or has a `..` component."""
    parts = rel.replace("\\", "/").split("/")
    return rel.startswith(("/", "\\")) or bool(re.match(r"^[A-Za-z]:", rel)) or ".." in parts


def _instance_rows(data: bytes, record: dict) -> list[dict]:
    detail = record.get("detailed_evaluation_results") or {}
    algorithm, checksum = detail.get("hash_algorithm"), detail.get("checksum")
    if algorithm in ("sha256", "md5") and isinstance(checksum, str) and checksum:
        got = hashlib.new(algorithm, data).hexdigest()
        if got != checksum.lower():
            raise Refused(
                f"has {algorithm} {got}, but its record states {checksum}: the file changed since the "
                "record was written"
            )
    rows = []
    for n, row in json_lines(data):
        if not isinstance(row, dict):
            raise Refused(f"line {n} is not a JSON object")
        if row.get("evaluation_id") != record.get("evaluation_id"):
            raise Refused(
                f"line {n} belongs to evaluation {shorten(row.get('evaluation_id'))}, not to its record's "
                f"{shorten(record.get('evaluation_id'))}"
            )
        rows.append(row)
    total = detail.get("total_rows")
    if isinstance(total, int) and total != len(rows):
        raise Refused(f"holds {len(rows)} rows; its record states total_rows {total}: a partial file")
    return rows


def check_record(record: Any) -> str | None:
    """Why a parsed file is not an EEE aggregate record this importer reads, or None."""
    if not isinstance(record, dict) or "evaluation_results" not in record or "model_info" not in record:
        return "is not an Every Eval Ever aggregate record (no evaluation_results and model_info)"
    version = record.get("schema_version")
    if not isinstance(version, str) or not version.startswith(R.SUPPORTED_SCHEMAS):
        return (
            f"is an Every Eval Ever record of schema version {shorten(version)}; supported: "
            f"{', '.join(v + 'x' for v in R.SUPPORTED_SCHEMAS)}"
        )
    results = record["evaluation_results"]
    if not isinstance(results, list) or not results or not all(isinstance(r, dict) for r in results):
        return "field evaluation_results: expected a non-empty list of results"
    info = record["model_info"]
    if not isinstance(info, dict) or not isinstance(info.get("id"), str) or not info["id"].strip():
        return "field model_info.id: missing"
    return None


# -- one record ------------------------------------------------------------------------------------
def _strs(obj: Any) -> dict[str, Any]:
    return obj if isinstance(obj, dict) else {}


def _rows_for(rows: list[dict] | None, result: dict, results: list[dict]) -> list[dict] | None:
    """The instance rows of one result: those naming its evaluation_result_id, or, for rows that name
    none, those of its evaluation name when it is the only result of that name."""
    if rows is None:
        return None
    rid = result.get("evaluation_result_id")
    if rid is not None and any(r.get("evaluation_result_id") is not None for r in rows):
        return [r for r in rows if r.get("evaluation_result_id") == rid]
    name = result.get("evaluation_name")
    if sum(1 for r in results if r.get("evaluation_name") == name) == 1:
        return [r for r in rows if r.get("evaluation_name") == name]
    return []


def _row_score(row: dict, where: str) -> float:
    value = _strs(row.get("evaluation")).get("score")
    score = as_unit_score(value)
    if score is None:
        raise Refused(f"{where}: evaluation.score {shorten(value)} is not a number in [0, 1]")
    return score


def _raw_output(row: dict) -> str | None:
    raw = _strs(row.get("output")).get("raw")
    return str(raw[0]) if isinstance(raw, list) and raw else None


def _run(read: Record, result: dict, items: tuple[ItemRow, ...] | None, **fields: Any) -> Run:
    """A run of one of the record's results, with what every such run takes from the record and the result."""
    record = read.record
    stamps = (result.get("evaluation_timestamp"), record.get("evaluation_timestamp"), record.get("retrieved_timestamp"))
    return Run(
        source=read.source,
        samples_source=read.samples_source if items is not None else None,
        model_recorded=str(record["model_info"]["id"]),
        items=items,
        # when the evaluation ran (its timestamp, else when the record was made), for --duplicates newest
        created=next((seconds for seconds in map(recorded_time, stamps) if seconds is not None), 0.0),
        **fields,
    )


# -- SafetyRepro's own records ---------------------------------------------------------------------------
def _need(d: dict, key: str, where: str) -> str:
    v = d.get(key)
    if not isinstance(v, str) or not v:
        raise Refused(f"field {where}.{key}: missing (a record `safetyrepro export eee` wrote has it)")
    return v


def _index(value: Any, field: str) -> int | None:
    """An answer's index as the export writes it (a string of digits), None when it recorded none."""
    return None if value is None else whole_number(value, field, 0, MAX_CHOICE, text=True)


def _safetyrepro_runs(read: Record, result: dict, mapping: Mapping) -> list[Run]:
    record, source, samples_source = read.record, read.source, read.samples_source
    rows = _rows_for(read.rows, result, record["evaluation_results"])
    gen = _strs(result.get("generation_config"))
    g = _strs(gen.get("additional_details"))
    args = _strs(gen.get("generation_args"))
    sd = _strs(result.get("score_details"))
    d = _strs(sd.get("details"))
    mc = _strs(result.get("metric_config"))
    md = _strs(mc.get("additional_details"))
    info = record["model_info"]
    idet = _strs(info.get("additional_details"))
    where = "generation_config.additional_details"
    config_id = _need(g, R.K_CONFIG_ID, where)
    try:
        cfg = Config.from_id(config_id)
    except Exception:
        raise Refused(f"field {where}.{R.K_CONFIG_ID}: {shorten(config_id)} is not a configuration id") from None
    shots = whole_number(_need(g, R.K_SHOTS, where), f"{where}.{R.K_SHOTS}", 0, MAX_SHOTS, text=True)
    axes = Config(
        cfg.benchmark, _need(g, R.K_TEMPLATE, where), _need(g, R.K_DECODING, where), shots, _need(g, R.K_SCORING, where)
    )
    if axes.config_id != config_id:
        raise Refused(f"field {where}: the axes make {axes.config_id}, not the stated {config_id}")
    plain = NAME.fullmatch(axes.benchmark) and all(AXIS_VALUE.fullmatch(v) for v in (axes.template, axes.decoding))
    if not plain or axes.scoring not in SCORINGS:
        raise Refused(f"field {where}: configuration {shorten(config_id)} has a value that is no plain name")
    label = mapping.checked_label(idet.get(R.K_LABEL) or str(info.get("name") or info["id"]), source, "model_info")
    dd = "score_details.details"
    n_items = whole_number(_need(d, R.K_N_ITEMS, dd), f"{dd}.{R.K_N_ITEMS}", 1, MAX_COUNT, text=True)
    n_seeds = whole_number(_need(d, R.K_N_SEEDS, dd), f"{dd}.{R.K_N_SEEDS}", 1, MAX_COUNT, text=True)
    score = as_unit_score(sd.get("score"))
    if score is None:
        raise Refused(f"field score_details.score: {shorten(sd.get('score'))} is not a number in [0, 1]")
    parse_rate = as_unit_score(number(d.get(R.K_PARSE_RATE)))
    # comparability labels are made again from the item sets
    package, version = split_package(_need(d, R.K_PACKAGE, dd))
    version = version or str(_strs(record.get("eval_library")).get("version") or "unknown")
    seeds = _seed_scores(d.get(R.K_SEED_SCORES), n_seeds, score, dd)
    by_seed: dict[int, list[ItemRow]] = defaultdict(list)
    for n, row in enumerate(rows or [], 1):
        meta = _strs(row.get("metadata"))
        where_row = f"{samples_source} line {n}"
        seed = whole_number(meta.get("seed", "0"), f"{where_row}: metadata.seed", 0, MAX_SEED, text=True)
        by_seed[seed].append(
            ItemRow(
                str(row.get("sample_id")),
                _row_score(row, where_row),
                _index(meta.get("prediction"), f"{where_row}: metadata.prediction"),
                _index(meta.get("gold"), f"{where_row}: metadata.gold"),
                _raw_output(row),
                {"true": True, "false": False}.get(str(meta.get("parsed"))),
                meta.get("prompt_sha256") or None,
            )
        )
    decoding = DecodingSpec(
        axes.decoding,
        float(args.get("temperature") or 0.0),
        1.0 if args.get("top_p") is None else float(args["top_p"]),
        g.get(R.K_DO_SAMPLE) == "true",
        recorded=axes.decoding != "provider-default",
    )
    runs: list[Run] = []
    for seed, seed_score in seeds.items():
        items, note = None, read.items_note
        have = by_seed.get(seed)  # by_seed is empty when there is no instance-level file
        if have is None and len(seeds) == 1 and len(by_seed) == 1:
            have = next(iter(by_seed.values()))
        if have is not None and len(have) != n_items:
            note = f"the instance file holds {len(have)} rows for seed {seed}, not the record's {n_items} items"
        elif have is not None:
            items, note = kept_items(have, seed_score, "the instance rows do not average to the seed's score")
        elif rows is not None:
            note = f"the instance file holds no rows for seed {seed}"
        runs.append(
            _run(
                read,
                result,
                items,
                package=package,
                package_version=version,
                task=f"safetyrepro/{axes.benchmark}",
                model=label,
                model_spec={"kind": "eee:safetyrepro", "id": info["id"], "name": info.get("name")},
                weights_id=idet.get(R.K_WEIGHTS) or None,
                precision=_need(d, R.K_PRECISION, dd),
                axes=axes,
                decoding=decoding,
                stress_template=g.get(R.K_STRESS_TEMPLATE) == "true",
                seed=seed,
                metric=md.get(R.K_METRIC) or str(mc.get("metric_id") or "score"),
                tie_rule=md.get(R.K_TIE_RULE) if axes.scoring == "logprob" else None,
                score=seed_score,
                parse_rate=1.0 if parse_rate is None else parse_rate,
                n_items=n_items,
                item_ids=tuple(r.item_id for r in items) if items else None,
                items_note=note,
            )
        )
    return runs


def _seed_scores(text: Any, n_seeds: int, score: float, where: str) -> dict[int, float]:
    """seed -> score as the record states them; seed 0 with the score when it states none."""
    if text is None:
        return {0: score}
    try:
        raw = json.loads(str(text))
        read = {
            whole_number(k, f"{where}.{R.K_SEED_SCORES} seed", 0, MAX_SEED, text=True): as_unit_score(v)
            for k, v in raw.items()
        }
    except (ValueError, AttributeError):
        raise Refused(f"field {where}.{R.K_SEED_SCORES}: not a JSON object of seed -> score") from None
    got = {k: v for k, v in read.items() if v is not None}
    if len(got) != len(read) or len(got) != n_seeds:
        raise Refused(f"field {where}.{R.K_SEED_SCORES}: expected {n_seeds} scores in [0, 1]")
    mean = sum(got.values()) / len(got)
    if abs(mean - score) > 1e-9:
        raise Refused(f"field {where}.{R.K_SEED_SCORES}: the seeds average to {mean!r}, not the score {score!r}")
    return dict(sorted(got.items()))


# -- any other record ------------------------------------------------------------------------------------
def _choose(results: list[dict], wanted: str | None) -> dict:
    """The result of the metric `wanted` (its result id, metric id or name), else the first; `Unplaced` when
    no result reports `wanted`."""
    if not wanted:
        return results[0]
    for r in results:
        mc = _strs(r.get("metric_config"))
        if wanted in (r.get("evaluation_result_id"), mc.get("metric_id"), mc.get("metric_name")):
            return r
    have = ", ".join(
        str(r.get("evaluation_result_id") or _strs(r.get("metric_config")).get("metric_id")) for r in results
    )
    raise Unplaced(f"reports no metric {wanted!r} (it has: {have})")


def _settings(gen: dict, shots_key: str | None) -> dict[str, Any]:
    """The recorded generation settings besides temperature and top_p that change an output."""
    out: dict[str, Any] = {}
    skips = {"generation_args": (*SAMPLING_ARGS, *NOT_OUTPUT_ARGS), "additional_details": (shots_key, *SHOTS_KEYS)}
    for where, skip in skips.items():
        for k, v in _strs(gen.get(where)).items():
            if k not in skip and v is not None and v not in NEUTRAL.get(k, ()):
                out[k] = v
    return out


def _foreign_run(
    read: Record, task: str, results: list[dict], mapping: Mapping, rules, metric: str | None
) -> Run | Unmapped:
    from safetyrepro.grid.direction import direction

    record, source, samples_source = read.record, read.source, read.samples_source
    info = record["model_info"]
    library = _strs(record.get("eval_library"))
    label = mapping.checked_label(str(info["id"]).strip(), source, "model_info.id")
    unmapped = functools.partial(Unmapped, source, task, label)
    own_lm_eval = library.get("name") == "lm_eval" and LM_EVAL_TASK.fullmatch(task) is not None
    if mapping.task_rule(task) is None and not own_lm_eval:
        return unmapped(
            f"task {task!r} (an EEE record SafetyRepro did not write) is not one of SafetyRepro's task names and "
            "no entry of the mapping file matches it: say its benchmark and template with --mapping (docs/eee.md)"
        )
    placement = place_task(task, mapping, "lm-eval")
    if isinstance(placement, str):
        return unmapped(placement)
    try:
        chosen = _choose(results, placement.metric or metric)
        mc = _strs(chosen.get("metric_config"))
        metric_name = str(chosen.get("evaluation_result_id") or mc.get("metric_id") or mc.get("metric_name") or "score")
        sd = _strs(chosen.get("score_details"))
        score = share(sd.get("score"), metric_name, " (choose one with --metric or the mapping's metric)")
    except Unplaced as e:
        return unmapped(str(e))
    lower = mc.get("lower_is_better")
    better = direction(placement.benchmark) if placement.benchmark in BENCHMARKS else None
    if better is None and lower is True:
        return unmapped(
            f"metric {metric_name} is lower-is-better, and a benchmark SafetyRepro does not define is read as "
            "higher-is-better: choose a higher-is-better metric"
        )
    said = "lower" if lower else "higher"
    if better is not None and lower is not None and better.name in ("higher", "lower") and better.name != said:
        return unmapped(
            f"metric {metric_name} is {said}-is-better, but {placement.benchmark}'s definition reads its score "
            f"{better.label}"
        )
    gen = _strs(chosen.get("generation_config"))
    args = _strs(gen.get("generation_args"))
    details = _strs(gen.get("additional_details"))
    scoring = placement.scoring or "free_form"
    shots_key = placement.shots_arg or next((k for k in SHOTS_KEYS if k in details), None)
    shots = 0
    if shots_key and shots_key in details:
        where = f"generation_config.additional_details.{shots_key}"
        shots = whole_number(details[shots_key], where, 0, MAX_SHOTS, text=True)
    decoding = run_decoding(
        scoring,
        rules,
        number(args.get("temperature")),
        number(args.get("top_p")),
        provider_default="temperature" not in args or args.get("temperature") is None,
        settings=_settings(gen, shots_key),
    )
    prompt = args.get("prompt_template")
    template = with_settings(placement.template, {"prompt": short_hash(str(prompt))} if prompt else {})
    item_rows = _rows_for(read.rows, chosen, results)
    items, note = None, read.items_note
    if item_rows is not None:
        values: dict[str, list[float]] = defaultdict(list)
        first: dict[str, dict] = {}
        for n, row in enumerate(item_rows, 1):
            sid = str(row.get("sample_id"))
            values[sid].append(_row_score(row, f"{samples_source} row {n} of {metric_name}"))
            first.setdefault(sid, row)
        built = [ItemRow(sid, sum(v) / len(v), raw_output=_raw_output(first[sid])) for sid, v in values.items()]
        note = f"the instance file holds no rows for {metric_name}"
        if built:
            items, note = kept_items(
                built, score, f"the instance rows' scores do not average to the reported {metric_name}"
            )
    source_data = _strs(chosen.get("source_data"))
    sample_ids = [r.item_id for r in items] if items else source_data.get("sample_ids")  # the items', else stated
    item_ids = tuple(str(s) for s in sample_ids) if isinstance(sample_ids, list) and sample_ids else None
    unc = _strs(sd.get("uncertainty"))
    stated = [v for v in (unc.get("num_samples"), source_data.get("samples_number")) if isinstance(v, int) and v >= 1]
    n_items = len(item_ids or ())
    if stated and not items:
        n_items = whole_number(stated[0], "sample count", 1, MAX_COUNT)
    if n_items < 1:
        raise bad_file(
            source,
            f"result {metric_name} states no sample count (uncertainty.num_samples, "
            "source_data.samples_number) and has no instance rows",
        )
    if item_ids is not None and len(set(item_ids)) != n_items:
        item_ids = None
    return _run(
        read,
        chosen,
        items,
        package=R.PACKAGE_OF_LIBRARY.get(str(library.get("name")), str(library.get("name") or "eee")),
        package_version=str(library.get("version") or "unknown"),
        task=task,
        model=label,
        model_spec={"kind": "eee"} | {k: info.get(k) for k in ("id", "name", "developer", "inference_platform")},
        precision=precision_label(_strs(info.get("additional_details")).get("precision")),
        axes=Config(placement.benchmark, template, decoding.name, shots, scoring),
        decoding=decoding,
        stress_template=placement.stress,
        metric=metric_name,
        score=score,
        n_items=n_items,
        item_ids=item_ids,
        items_note=note,
    )
