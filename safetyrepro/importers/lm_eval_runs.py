"""Reading lm-eval output folders: `results_<date>.json` and, when the run logged them,
`samples_<task>_<date>.jsonl` (what `lm_eval --output_path DIR --log_samples` writes under
DIR/<model>/). The files are plain JSON; lm-eval itself is not imported.

`read_paths` is the I/O edge (finding, hashing and parsing files); `runs_from_results` turns one
parsed results file and its samples into `Run`s without touching the disk.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from safetyrepro.console import paced
from safetyrepro.limits import (
    MAX_CHOICE,
    MAX_COUNT,
    MAX_SEED,
    MAX_SHOTS,
    Refused,
    check_json_text,
    decode_text,
    label_problem,
    loads_json,
    read_capped,
    shorten,
    whole_number,
)

from .common import (
    Axes,
    BadInput,
    BadInputError,
    ItemRow,
    Reading,
    Run,
    SourceFile,
    Unmapped,
    as_unit_score,
    items_match_score,
    precision_label,
)
from .mapping import (
    Mapping,
    decoding_spec,
    decorated_template,
    model_label,
    parse_model_args,
    place_task,
    truthy,
    with_settings,
)

STAMP = r"(?P<stamp>\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?)"
RESULTS_FILE = re.compile(rf"results_{STAMP}\.json")
SAMPLES_FILE = re.compile(rf"samples_(?P<task>.+)_{STAMP}\.jsonl")


def _named(pattern: re.Pattern[str], path: Path) -> re.Match[str]:
    """The match of a file that was picked by its name's pattern."""
    m = pattern.fullmatch(path.name)
    if m is None:
        raise ValueError(f"{path.name} was picked as {pattern.pattern} but does not match it")
    return m


SUPPORTED = "0.4"  # the results layout (results, configs, config, n-shot, ...) of lm-eval 0.4.x
LOGPROB_TYPES = ("multiple_choice", "loglikelihood", "loglikelihood_rolling")
NOT_METRICS = {"alias", "name", "sample_len", "samples"}
SAMPLING_KEYS = ("temperature", "top_p", "do_sample", "seed")


# -- reading files (the edge) ----------------------------------------------------------------------
def _stamp_time(stamp: str) -> float:
    try:
        return (
            dt.datetime.strptime(stamp, "%Y-%m-%dT%H-%M-%S.%f" if "." in stamp else "%Y-%m-%dT%H-%M-%S")
            .replace(tzinfo=dt.timezone.utc)
            .timestamp()
        )
    except ValueError:
        return 0.0


def _source(path: Path, kind: str, data: bytes) -> SourceFile:
    return SourceFile(str(path), kind, hashlib.sha256(data).hexdigest(), len(data))


def links_note(folder: Path, limit: int = 3) -> str:
    """ "; N linked folder(s) were not followed (e.g. X)" for the symbolic links to folders under
    `folder` (a search never follows them), else ""."""
    links = []
    for root, dirs, _files in os.walk(folder):
        links += [Path(root) / d for d in dirs if (Path(root) / d).is_symlink()]
        if len(links) >= limit:
            break
    if not links:
        return ""
    return (
        f"; {len(links)}{'+' if len(links) >= limit else ''} linked folder(s) under it were not followed "
        f"(e.g. {links[0]} -> {os.readlink(links[0])}): name the folder itself"
    )


def _find(paths: Sequence[str]) -> tuple[list[Path], list[Path], list[BadInput]]:
    """Results and samples files under the given paths (folders are searched at any depth)."""
    results: list[Path] = []
    samples: list[Path] = []
    bad: list[BadInput] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.is_file())
        elif p.is_file():
            found = [p]
            if SAMPLES_FILE.fullmatch(p.name) is None and RESULTS_FILE.fullmatch(p.name) is None:
                bad.append(
                    BadInput(str(p), "is neither an lm-eval results_<date>.json nor a samples_<task>_<date>.jsonl")
                )
                continue
        else:
            bad.append(BadInput(str(p), "does not exist"))
            continue
        before = len(results) + len(samples)
        for q in found:
            if RESULTS_FILE.fullmatch(q.name):
                results.append(q)
            elif SAMPLES_FILE.fullmatch(q.name):
                samples.append(q)
        if p.is_dir() and len(results) + len(samples) == before:
            bad.append(
                BadInput(
                    str(p), "holds no lm-eval results_<date>.json (was lm_eval run with --output_path?)" + links_note(p)
                )
            )
    # a file named alone brings the other files its run wrote beside it (same date stamp)
    for p in (Path(x) for x in paths if Path(x).is_file()):
        if SAMPLES_FILE.fullmatch(p.name):
            beside = p.with_name(f"results_{_named(SAMPLES_FILE, p)['stamp']}.json")
            if beside.is_file():
                results.append(beside)
    for r in list(results):
        stamp = _named(RESULTS_FILE, r)["stamp"]
        samples.extend(q for q in r.parent.glob(f"samples_*_{stamp}.jsonl") if q.is_file())
    return sorted(set(results)), sorted(set(samples)), bad


def _read_samples(path: Path, data: bytes) -> list[dict] | BadInput:
    lines = []
    try:
        text = decode_text(data)
        check_json_text(data)
    except Refused as e:
        return BadInput(str(path), e.reason)
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = loads_json(line, checked=True)
        except Refused as e:
            return BadInput(str(path), f"line {i} {e.reason}")
        except ValueError:
            return BadInput(str(path), f"line {i} is not JSON (a partial or damaged samples file)")
        if not isinstance(record, dict) or "doc_id" not in record:
            return BadInput(str(path), f"line {i} is not an lm-eval sample record (no doc_id)")
        lines.append(record)
    return lines


def read_paths(
    paths: Sequence[str], mapping: Mapping, rules, metric: str | None = None, skip_bad: bool = False
) -> Reading:
    """Every results file under `paths` with its samples files, as runs; bad files raise
    `BadInputError` at once unless `skip_bad`, which lists them and goes on."""
    reading = Reading("lm-eval")

    def bad(b: BadInput) -> None:
        if not skip_bad:
            raise BadInputError(b)
        reading.bad.append(b)

    results_files, samples_files, missing = _find(paths)
    for b in missing:
        bad(b)
    by_run: dict[tuple[Path, str], list[tuple[Path, str]]] = {}
    results_keys = {(r.parent, _named(RESULTS_FILE, r)["stamp"]) for r in results_files}
    for s in samples_files:
        m = _named(SAMPLES_FILE, s)
        key = (s.parent, m["stamp"])
        if key not in results_keys:
            bad(
                BadInput(
                    str(s),
                    f"has no results file beside it (results_{m['stamp']}.json): a samples file "
                    "without its results cannot say the run's settings",
                )
            )
            continue
        by_run.setdefault(key, []).append((s, m["task"]))
    for r in paced(results_files, "lm-eval results files", prefix="import"):
        stamp = _named(RESULTS_FILE, r)["stamp"]
        try:
            raw = read_capped(r)
            data = loads_json(decode_text(raw))
        except OSError as e:
            bad(BadInput(str(r), f"cannot be read ({e.strerror})"))
            continue
        except Refused as e:
            bad(BadInput(str(r), e.reason))
            continue
        except ValueError:
            bad(BadInput(str(r), "is not valid JSON (a partial or damaged results file)"))
            continue
        problem = check_results(data)
        if problem:
            bad(BadInput(str(r), problem))
            continue
        samples: dict[str, tuple[str, list[dict]]] = {}
        sources = [_source(r, "lm-eval results", raw)]
        broken = None
        for s, task_hint in sorted(by_run.get((r.parent, stamp), [])):
            try:
                sraw = read_capped(s)
            except OSError as e:
                broken = BadInput(str(s), f"cannot be read ({e.strerror})")
                break
            except Refused as e:
                broken = BadInput(str(s), e.reason)
                break
            lines = _read_samples(s, sraw)
            if isinstance(lines, BadInput):
                broken = lines
                break
            task = _samples_task(task_hint, data)
            if task is None:
                broken = BadInput(
                    str(s), f"is a samples file for task {task_hint!r}, which its results file {r.name} does not list"
                )
                break
            samples[task] = (str(s), lines)
            sources.append(_source(s, "lm-eval samples", sraw))
        if broken is None:
            logged = [t for t in data["configs"] if t in samples]
            if logged and len(logged) < len(data["configs"]):
                lacking = sorted(set(data["configs"]) - set(logged))[0]
                broken = BadInput(
                    str(r),
                    f"the run logged samples for {', '.join(sorted(logged))} but not for "
                    f"{lacking}: a partial run folder",
                )
        if broken is None:
            try:
                parsed = runs_from_results(data, str(r), samples, mapping, rules, metric, _stamp_time(stamp))
            except Refused as e:
                parsed = BadInput(str(r), e.reason)
            if not isinstance(parsed, BadInput):
                runs, unmapped = parsed
                reading.runs.extend(runs)
                reading.unmapped.extend(unmapped)
                reading.sources.extend(sources)
                continue
            broken = parsed
        bad(broken)
    return reading


def _samples_task(hint: str, data: dict) -> str | None:
    """The task a samples file belongs to: its file name holds the task name (lm-eval sanitises
    some characters in it), so match against the tasks its results file lists."""
    if hint in data["configs"]:
        return hint
    clean = {re.sub(r"[^\w.-]", "_", t): t for t in data["configs"]}
    return clean.get(hint)


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
        if wanted in entry:
            return wanted
        return next((k for k in keys if k.split(",", 1)[0] == wanted), None)
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


def _float_or_none(v: Any) -> float | None:
    try:
        return None if v is None or v == "" else float(v)
    except (TypeError, ValueError):
        return None


def _bool_or_none(v: Any) -> bool | None:
    return None if v is None or v == "" else truthy(v)


def runs_from_results(
    data: dict,
    source: str,
    samples: dict[str, tuple[str, list[dict]]],
    mapping: Mapping,
    rules,
    metric: str | None,
    stamp_time: float,
) -> tuple[list[Run], list[Unmapped]] | BadInput:
    config = data["config"]
    kind = str(config.get("model") or "?")
    args = parse_model_args(config.get("model_args"))
    sr_model = config.get("safetyrepro_model") if isinstance(config.get("safetyrepro_model"), dict) else {}
    # SafetyRepro's engine records its own label (the sweep's); a model object handed to lm-eval in
    # Python (a sweep) is recorded under its class name only
    recorded = str(sr_model["label"]) if sr_model.get("label") else model_label(kind, args, data.get("model_name"))
    label = mapping.label(recorded)
    problem = label_problem(label)
    if problem:
        return BadInput(source, f"field config.model_args: {problem} (a `models` entry of the mapping file gives one)")
    weights = _text(sr_model.get("weights_sha256") or config.get("model_sha") or None, "config.model_sha")
    if truthy(args.get("load_in_4bit")) or str(args.get("bnb_4bit_quant_type", "")).lower() == "nf4":
        precision = "nf4"
    elif truthy(args.get("load_in_8bit")):
        precision = "int8"
    else:
        precision = precision_label(
            sr_model.get("precision"), config.get("model_dtype"), args.get("dtype"), args.get("precision")
        )
    version = str(data.get("lm_eval_version") or f"{SUPPORTED}.x (unrecorded)")
    created = float(data["date"]) if isinstance(data.get("date"), (int, float)) else stamp_time
    chat_applied = (
        bool(data.get("chat_template_sha") or data.get("chat_template"))
        if ("chat_template" in data or "chat_template_sha" in data)
        else None
    )
    has_chat = sr_model.get("has_chat_template") if "has_chat_template" in sr_model else None
    system_text = _text(data.get("system_instruction"), "system_instruction")
    multiturn = _bool_or_none(data.get("fewshot_as_multiturn"))
    spec = {"kind": f"lm-eval:{kind}", "spec": ",".join(f"{k}={v}" for k, v in args.items()), "precision": precision}
    runs, unmapped = [], []
    for task, task_config in data["configs"].items():
        task_config = task_config if isinstance(task_config, dict) else {}
        entry = data["results"].get(task)
        if not isinstance(entry, dict):
            return BadInput(source, f"lists task {task} in 'configs' but has no result for it: a partial results file")
        placement = place_task(task, mapping, "lm-eval")
        if isinstance(placement, str):
            unmapped.append(Unmapped(source, task, label, placement))
            continue
        key = choose_metric(entry, placement.metric or metric or ("acc" if placement.safetyrepro else None))
        if key is None:
            unmapped.append(
                Unmapped(
                    source,
                    task,
                    label,
                    f"reports no metric {placement.metric or metric!r} "
                    f"(it has: {', '.join(k for k in entry if ',' in k and '_stderr' not in k)})",
                )
            )
            continue
        score = as_unit_score(entry[key])
        if score is None:
            unmapped.append(
                Unmapped(
                    source,
                    task,
                    label,
                    f"metric {key} is {entry[key]!r}, not a share in [0, 1]: "
                    "the grid holds scores in [0, 1] (choose another with --metric)",
                )
            )
            continue
        output_type = str(task_config.get("output_type") or "")
        scoring = placement.scoring or ("logprob" if output_type in LOGPROB_TYPES else "free_form")
        shots_recorded = (data.get("n-shot") or {}).get(task, task_config.get("num_fewshot"))
        shots = (
            0
            if shots_recorded in (None, "")
            else whole_number(shots_recorded, f"field 'n-shot' of task {task}", 0, MAX_SHOTS)
        )
        gen, cli = _gen_settings(data, task_config)
        if scoring == "logprob":  # likelihoods involve no sampling: the envelope's logprob cells are greedy
            decoding = decoding_spec(0.0, None, False, rules)
        else:
            decoding = decoding_spec(
                _float_or_none(gen.get("temperature")),
                _float_or_none(gen.get("top_p")),
                _bool_or_none(gen.get("do_sample")),
                rules,
            )
        # other generation settings given on the command line (max_gen_toks, until, ...) change the outputs
        extra_gen = {k: v for k, v in cli.items() if k not in SAMPLING_KEYS} if scoring == "free_form" else {}
        decoding = replace(decoding, name=with_settings(decoding.name, extra_gen))
        template = decorated_template(
            placement.template,
            chat_applied=chat_applied,
            model_has_chat=has_chat,
            system_text=system_text,
            fewshot_as_multiturn=multiturn,
            shots=shots,
        )
        seed = 0
        if decoding.do_sample:
            field, value = "generation seed (gen_kwargs seed)", gen.get("seed")
            if value in (None, "", 0, "0"):
                field, value = "config.random_seed", config.get("random_seed")
            seed = 0 if value in (None, "") else whole_number(value, f"field {field}", 0, MAX_SEED, text=True)
        tie_rule = None
        if placement.safetyrepro and scoring == "logprob":
            tie_rule = str(
                _object(task_config.get("metadata"), f"configs.{task}.metadata").get("tie_rule") or "expected"
            )
        n_samples = _object((data.get("n-samples") or {}).get(task), f"'n-samples' of task {task}")
        n_items = 0
        for field, value in (
            (f"'n-samples' effective of task {task}", n_samples.get("effective")),
            (f"results sample_len of task {task}", entry.get("sample_len")),
        ):
            if value not in (None, "", 0):
                n_items = whole_number(value, f"field {field}", 0, MAX_COUNT)
                break
        parse_rate = 1.0
        if placement.safetyrepro:
            logged_rate = as_unit_score(entry.get("parse_rate,none"))
            parse_rate = 1.0 if logged_rate is None else logged_rate
        items, item_ids, note, samples_source = None, None, "the run logged no samples (--log_samples)", None
        if task in samples:
            samples_source, lines = samples[task]
            try:
                got = items_from_samples(lines, key, placement.item_id, output_type, placement.safetyrepro)
            except Refused as e:
                return BadInput(samples_source, e.reason)
            if isinstance(got, str):
                return BadInput(samples_source, got)
            rows, item_ids = got
            if n_items and len(item_ids) < n_items:
                return BadInput(
                    samples_source, f"holds {len(item_ids)} of the run's {n_items} items: a partial samples file"
                )
            n_items = len(item_ids)
            if rows is None:
                note = f"metric {key} has no numeric per-sample value in [0, 1]"
            elif not items_match_score(rows, score):
                note = f"the samples' {key.split(',')[0]} values do not average to the reported {key} (not a mean)"
            else:
                items, note = tuple(rows), ""
        if n_items < 1:
            return BadInput(source, f"records no item count for task {task}")
        runs.append(
            Run(
                package="lm-eval",
                package_version=version,
                source=source,
                samples_source=samples_source,
                task=task,
                model=label,
                model_recorded=recorded,
                model_spec=spec,
                weights_id=weights,
                precision=precision,
                axes=Axes(placement.benchmark, template, decoding.name, shots, scoring),
                decoding=decoding,
                stress_template=placement.stress,
                seed=seed,
                metric=key,
                tie_rule=tie_rule,
                score=score,
                parse_rate=parse_rate,
                n_items=n_items,
                item_ids=item_ids,
                items=items,
                items_note=note,
                created=created,
                settings={
                    "task": task,
                    "chat_template": chat_applied,
                    "system_instruction": system_text,
                    "fewshot_as_multiturn": multiturn,
                    "gen_kwargs": json.dumps(cli, sort_keys=True) if cli else "",
                    "lm_eval_model": kind,
                },
            )
        )
    return runs, unmapped


def _loglik(resp: Any) -> float | None:
    """One candidate's log-likelihood from a sample's filtered_resps entry ([loglik, is_greedy])."""
    value = resp[0] if isinstance(resp, (list, tuple)) and resp else resp
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def items_from_samples(
    lines: list[dict], metric_key: str, id_field: str | None, output_type: str, safetyrepro: bool
) -> tuple[list[ItemRow] | None, tuple[str, ...]] | str:
    """(item rows, or None when the metric has no per-sample value; the ids of every item) from a
    samples file's records of the metric's filter; a string says why the file is unusable."""
    name, _, filt = metric_key.partition(",")
    filt = filt or "none"
    chosen = [s for s in lines if str(s.get("filter", "none")) == filt]
    if not chosen:
        return f"has no records for filter {filt!r}"

    def field_ids(name: str) -> list[str] | None:
        values = [s.get("doc", {}).get(name) if isinstance(s.get("doc"), dict) else None for s in chosen]
        if all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in values):
            return [str(v) for v in values]
        return None

    # an item keeps its name across task variants and shot counts when the documents carry one
    if id_field:
        ids = field_ids(id_field)
        if ids is None:
            return f"has documents without a usable {id_field!r} field (the mapping's item_id)"
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
        return (
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
    prompt_sha = hashlib.sha256(context.encode("utf-8")).hexdigest() if isinstance(context, str) else None
    target = s.get("target")
    gold = None
    # a generated task's target is text, not a label index (left out below)
    if (safetyrepro or output_type in LOGPROB_TYPES[:1]) and (
        (isinstance(target, int) and not isinstance(target, bool))
        or (isinstance(target, str) and re.fullmatch(r"\s*[0-9]+\s*", target))
    ):
        gold = whole_number(
            target, f"field target of sample doc_id {shorten(s.get('doc_id'))}", 0, MAX_CHOICE, text=True
        )
    resps = s.get("filtered_resps") if s.get("filtered_resps") is not None else s.get("resps")
    prediction, raw, parsed = None, None, None
    if output_type in LOGPROB_TYPES[:1] and isinstance(resps, list) and resps:
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
        first = resps[0]
        raw = (
            first
            if isinstance(first, str)
            else first[0]
            if isinstance(first, list) and first and isinstance(first[0], str)
            else None
        )
        if safetyrepro and s.get("parse_rate") is not None:
            parsed = bool(s["parse_rate"])
        if safetyrepro and isinstance(s.get("top_answer_share"), int) and not isinstance(s["top_answer_share"], bool):
            # the task scored the item once and logged its predicted label (runs before this field: None)
            prediction = whole_number(
                s["top_answer_share"],
                f"field top_answer_share of sample doc_id {shorten(s.get('doc_id'))}",
                0,
                MAX_CHOICE,
            )
    if not safetyrepro and output_type not in LOGPROB_TYPES[:1]:
        gold = None  # a generated task's target is text, not a label index
    return ItemRow(item_id, value, prediction, gold, raw, parsed, prompt_sha)
