"""`safetyrepro export eee GRID --out DIR`: one Every Eval Ever record per grid cell in EEE's datastore
layout, its item records beside it as EEE instance rows, and the verdict tables in DIR/safetyrepro_verdicts.json5
(docs/eee.md has the layout and the field mapping). `build_export` is pure (frames in, file texts out);
`write_export` writes them, staged beside DIR and swapped in at once.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import pandas as pd

import safetyrepro
from safetyrepro.atomic import atomic_write, staged_output
from safetyrepro.errors import UserError
from safetyrepro.hashing import sha256_bytes
from safetyrepro.importers import eee_format as R
from safetyrepro.importers.common import split_package
from safetyrepro.tasks.benchmarks.registry import BENCHMARKS, get_benchmark

ITEM_REQUIRED = ("model", "config_id", "item_id", "seed", "item_score")
SE_METHOD = "analytic: sample standard deviation of the item scores (each item's mean over seeds) / sqrt(n_items)"


@dataclass
class Export:
    """The files of one export, by path relative to DIR, and what was left out."""

    files: dict[str, str] = field(default_factory=dict)
    records: list[dict] = field(default_factory=list)  # the index written into the verdicts file
    skipped: list[dict] = field(default_factory=list)  # cells not exported (status not ok)
    warnings: list[str] = field(default_factory=list)


# -- inputs ---------------------------------------------------------------------------------------------
def load_run_json(grid_path: Path, run_json: str | None) -> dict:
    path = Path(run_json) if run_json else grid_path.parent / "run.json"
    if not path.is_file():
        if run_json:
            raise UserError(f"--run-json {run_json} does not exist")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}") from None
    return data if isinstance(data, dict) else {}


def parse_model_ids(values: Sequence[str] | None) -> dict[str, str]:
    out = {}
    for v in values or ():
        label, sep, model_id = v.partition("=")
        if not sep or not label or not R.HF_ID.fullmatch(model_id):
            raise UserError(f"--model-id {v!r}: expected LABEL=ORG/NAME (a Hugging Face style id)")
        out[label] = model_id
    return out


def _check_distinct_ids(labels: Sequence[str], model_ids: dict[str, str]) -> None:
    """Two labels under one model_info.id would be two models filed as one: their records would share
    a folder and an evaluation_id, and a reader could not tell them apart."""
    seen: dict[str, str] = {}
    for label in labels:
        model_id = R.model_id_for(label, model_ids)
        if seen.setdefault(model_id, label) != label:
            raise UserError(
                f"models {seen[model_id]!r} and {label!r} both get model id {model_id!r} "
                f"(--model-id or their labels); give each model its own id with --model-id LABEL=ORG/NAME"
            )


# -- pieces of a record ------------------------------------------------------------------------------
def _present(v: Any | None) -> TypeGuard[Any]:
    """A value, not None or a missing one (NaN, NA): narrows an optional field to its value."""
    try:
        return not bool(pd.isna(v))
    except (TypeError, ValueError):
        return True


def _given(row: dict, key: str) -> str | None:
    """An optional column's value as text, None when it is absent, missing or empty."""
    v = row.get(key)
    return str(v) if _present(v) and str(v) else None


def _seed_scores(row: dict, cell_items: pd.DataFrame | None) -> dict[str, float] | None:
    """seed -> score: the grid's seed_scores column, else the item records' mean per seed; None
    when neither gives one score per seed."""
    n_seeds = int(row["n_seeds"])
    text = row.get("seed_scores")
    if _present(text) and str(text).strip():
        with contextlib.suppress(ValueError, TypeError, AttributeError):  # not a JSON object of seed -> number
            got = {str(int(k)): float(v) for k, v in json.loads(str(text)).items()}
            if len(got) == n_seeds and all(math.isfinite(v) for v in got.values()):
                return got
    if cell_items is not None:
        means = cell_items.groupby("seed", sort=True)["item_score"].mean()
        if len(means) == n_seeds:
            return {str(int(s)): float(v) for s, v in means.items()}
    if n_seeds == 1:
        return {"0": float(row["score"])}
    return None


def _uncertainty(cell_items: pd.DataFrame) -> dict:
    per_item = cell_items.groupby("item_id", sort=False)["item_score"].mean().to_numpy(dtype=float)
    n = len(per_item)
    sd = float(per_item.std(ddof=1)) if n > 1 else 0.0
    return {
        "standard_error": {"value": sd / math.sqrt(n), "method": SE_METHOD},
        "standard_deviation": sd,
        "num_samples": n,
    }


def _source_data(benchmark: str, row: dict) -> dict:
    details = {k: _given(row, c) for k, c in ((R.K_ITEM_SET, "item_set"), (R.K_SUBSET, "subset_id")) if _given(row, c)}
    if benchmark in BENCHMARKS:
        src = get_benchmark(benchmark).source
        urls = [f.urls[0] for f in src.files if f.urls]
        details.update({"repo": src.repo, "commit": src.commit, "licence": src.licence})
        if urls:
            return {"dataset_name": benchmark, "source_type": "url", "url": urls, "additional_details": details}
    return {"dataset_name": benchmark, "source_type": "other"} | ({"additional_details": details} if details else {})


def _metric_config(benchmark: str, row: dict, tie_rule: str | None) -> dict:
    from safetyrepro.grid.direction import direction

    better = direction(benchmark)
    meaning = get_benchmark(benchmark).score_meaning if benchmark in BENCHMARKS else ""
    details = {R.K_BETTER: better.name}
    if tie_rule and row["scoring"] == "logprob":
        details[R.K_TIE_RULE] = tie_rule
    if _given(row, "metric"):
        details[R.K_METRIC] = str(row["metric"])
    return {
        "evaluation_description": meaning or f"{benchmark}: share of items answered correctly",
        "metric_id": f"safetyrepro.{benchmark}.score" if meaning else "accuracy",
        "metric_name": "score" if meaning else "accuracy",
        "metric_kind": "proportion" if meaning else "accuracy",
        "metric_unit": "proportion",
        # EEE's flag is one bit: "closer to 0.5 is better" (CrowS-Pairs) is not lower; safetyrepro_better says it
        "lower_is_better": better.name in ("lower", "closer_to_0"),
        "score_type": "continuous",
        "min_score": 0.0,
        "max_score": 1.0,
        "additional_details": details,
    }


def _generation_config(row: dict, rules) -> dict:
    decoding = rules.decodings.get(row["decoding"])
    args: dict[str, Any] = {}
    if decoding is not None and row["decoding"] != "provider-default":
        args.update(temperature=float(decoding.temperature), top_p=float(decoding.top_p))
    base = row["template"].split("+", 1)[0]
    if row["scoring"] == "free_form":
        args["max_tokens"] = int(rules.max_new(base))
    texts = get_benchmark(row["benchmark"]).templates.get(base) if row["benchmark"] in BENCHMARKS else None
    prompt = texts and (f"{texts.system}\n\n{texts.body}" if texts.system else texts.body)
    if prompt:
        args["prompt_template"] = prompt
    stress = rules.stress.get("template", ())
    details = {
        R.K_CONFIG_ID: row["config_id"],
        R.K_TEMPLATE: row["template"],
        R.K_DECODING: row["decoding"],
        R.K_SHOTS: str(int(row["shots"])),
        R.K_SCORING: row["scoring"],
        R.K_DO_SAMPLE: R.bool_str(bool(decoding.do_sample) if decoding is not None else False),
        R.K_TIER: row["tier"],
        R.K_STRESS_TEMPLATE: R.bool_str(row["template"] in stress or base in stress),
        R.K_RULES_SHA: rules.sha256,
        R.K_NUM_FEWSHOT: str(int(row["shots"])),
    }
    if decoding is not None and decoding.do_sample:
        details[R.K_SEEDS] = json.dumps(list(decoding.seeds))
    return {"generation_args": args, "additional_details": details}


def _instance_text(cell_items: pd.DataFrame, evaluation_id: str, model_id: str, row: dict) -> str:
    """The cell's item records as EEE instance rows, one JSON line each."""
    method = "regex" if row["scoring"] == "free_form" else "logprob_argmax"
    lines = []
    for it in cell_items.to_dict("records"):  # an optional column the records lack reads as None
        meta = {"seed": str(int(it["seed"]))}
        meta |= {key: str(int(it[key])) for key in ("prediction", "gold") if _present(it.get(key))}
        prediction, gold, raw = it.get("prediction"), it.get("gold"), it.get("raw_output")
        if _present(it.get("parsed")):
            meta["parsed"] = R.bool_str(bool(it["parsed"]))
        if _given(it, "prompt_sha256"):
            meta["prompt_sha256"] = str(it["prompt_sha256"])
        score = float(it["item_score"])
        correct = (int(prediction) == int(gold)) if _present(prediction) and _present(gold) else score >= 1.0
        lines.append(
            R.dump_line(
                {
                    "schema_version": R.SCHEMA_VERSION,
                    "evaluation_id": evaluation_id,
                    "model_id": model_id,
                    "evaluation_name": row["benchmark"],
                    "evaluation_result_id": row["config_id"],
                    "sample_id": str(it["item_id"]),
                    "interaction_type": "single_turn",
                    # SafetyRepro's item records keep the prompt's sha256 (metadata.prompt_sha256), not its text
                    "input": {"raw": "", "reference": [str(int(gold))] if _present(gold) else []},
                    "output": {"raw": [str(raw)] if _present(raw) else []},
                    "answer_attribution": [
                        {
                            "turn_idx": 0,
                            "source": "output.raw",
                            "extracted_value": str(int(prediction)),
                            "extraction_method": method,
                            "is_terminal": True,
                        }
                    ]
                    if _present(prediction)
                    else [],
                    "evaluation": {"score": score, "is_correct": bool(correct)},
                    "metadata": meta,
                }
            )
        )
    return "".join(lines)


# -- the export -----------------------------------------------------------------------------------
def _items_by_cell(items: pd.DataFrame | None, grid: pd.DataFrame) -> Callable[[dict], pd.DataFrame | None]:
    """The item records grouped by cell, as a look-up: a grid row -> its item records (None: it has none)."""
    if items is None:
        return lambda row: None
    missing = [c for c in ITEM_REQUIRED if c not in items.columns]
    if missing:
        raise UserError(f"item records lack column(s) {', '.join(missing)}; they need {', '.join(ITEM_REQUIRED)}")
    keys = ["model", "config_id", *(c for c in ("precision", "package") if c in items.columns)]
    if len(keys) == 2 and grid.duplicated(["model", "config_id"]).any():
        raise UserError(
            "the grid holds several precisions or packages of one cell, and the item records do not say "
            "which they belong to (no precision/package columns)"
        )
    items = items.astype({"model": str, "item_id": str})
    bad = ~items["item_score"].astype(float).between(0.0, 1.0)
    if bad.any():
        raise UserError(f"item records: item_score {items['item_score'][bad].iloc[0]!r} is outside [0, 1]")
    # keys has 2 or more columns; pandas 2 also groups a categorical column's unused categories: empty, dropped
    groups = {tuple(map(str, k)): g for k, g in items.groupby(keys, sort=False) if len(g)}
    return lambda row: groups.get(tuple(str(row[k]) for k in keys))


def build_export(
    grid_raw: pd.DataFrame,
    items: pd.DataFrame | None,
    rules_path: str | None,
    *,
    grid_sha256: str,
    grid_name: str,
    run_json: dict,
    model_ids: dict[str, str] | None = None,
    organization: str = "SafetyRepro",
    relationship: str = "third_party",
    timestamp: str | None = None,
) -> Export:
    """Every file of the export, as text, keyed by its path under DIR."""
    from safetyrepro.grid.grid_io import validate_cells
    from safetyrepro.tasks.envelope import load_rules

    if relationship not in R.RELATIONSHIPS:
        raise UserError(f"--relationship {relationship!r}; allowed: {', '.join(R.RELATIONSHIPS)}")
    rules = load_rules(rules_path)
    raw = grid_raw.reset_index(drop=True)
    valid = validate_cells(raw.copy(), rules, grid_name)  # the checks `analyze` makes, before anything is built
    model_ids = model_ids or {}
    versions = run_json.get("packages") or {}
    run_tie_rule = run_json.get("tie_rule") if isinstance(run_json.get("tie_rule"), str) else None
    weights = {
        str(m["label"]): str(m["weights_sha256"])
        for m in run_json.get("models") or []
        if isinstance(m, dict) and m.get("label") and m.get("weights_sha256")
    }
    _check_distinct_ids(sorted(map(str, valid["model"].unique())), model_ids)
    stamp = timestamp or os.environ.get("SOURCE_DATE_EPOCH") or str(int(time.time()))
    items_of = _items_by_cell(items, valid)
    out = Export()
    for i, v in valid.iterrows():
        row = {**{k: raw.at[i, k] for k in raw.columns}, **{k: v[k] for k in valid.columns if k != "score"}}
        if v["status"] != "ok":
            cell = {k: row[k] for k in ("model", "config_id", "precision", "package")}
            reason = "EEE records carry a score; a cell that did not run has none"
            out.skipped.append({**cell, "status": v["status"], "reason": reason})
            continue
        row["score"] = float(raw.at[i, "score"])
        label, package, precision = str(row["model"]), str(row["package"]), str(row["precision"])
        n_items, n_seeds = int(row["n_items"]), int(row["n_seeds"])
        model_id = R.model_id_for(label, model_ids)
        try:
            collection, developer, model_dir = R.path_components(row["benchmark"], model_id)
        except UserError as e:
            raise UserError(f"model {label!r}: {e}; give it an id with --model-id {label}=ORG/NAME") from None
        cell_items = items_of(row)
        seed_scores = _seed_scores(row, cell_items)
        if seed_scores is None:
            out.warnings.append(
                f"{label} {row['config_id']}: {row['n_seeds']} seeds but neither seed_scores nor item "
                "records give their scores; the record carries the cell score only"
            )
        evaluation_id = "/".join([row["config_id"], model_id, precision, package])
        stem = "/".join([R.DATA_DIR, collection, developer, model_dir, R.file_uuid(grid_sha256, evaluation_id)])
        record_file, samples_file = f"{stem}.json", f"{stem}_samples.jsonl"
        score_details: dict[str, Any] = {"score": row["score"], "details": _score_details(row, seed_scores)}
        if cell_items is not None:
            score_details["uncertainty"] = _uncertainty(cell_items)
        result = {
            "evaluation_result_id": row["config_id"],
            "evaluation_name": row["benchmark"],
            "source_data": _source_data(row["benchmark"], row),
            "metric_config": _metric_config(row["benchmark"], row, _given(row, "tie_rule") or run_tie_rule),
            "score_details": score_details,
            "generation_config": _generation_config(row, rules),
        }
        model_info = _model_info(label, model_id, _given(row, "weights_sha256") or weights.get(label))
        base, version = split_package(package)
        version = version or str(versions.get(R.VERSION_KEYS.get(base, base), "unknown"))
        record = {
            "schema_version": R.SCHEMA_VERSION,
            "evaluation_id": evaluation_id,
            "retrieved_timestamp": stamp,
            "source_metadata": {
                "source_name": "SafetyRepro",
                "source_type": "evaluation_run",
                "source_organization_name": organization,
                "evaluator_relationship": relationship,
                "additional_details": {R.K_GRID_SHA: grid_sha256, R.K_RULES_SHA: rules.sha256},
            },
            "eval_library": {
                "name": R.LIBRARY_NAMES.get(base, base),
                "version": version,
                "additional_details": {R.K_VERSION: safetyrepro.__version__, R.K_PACKAGE: package},
            },
            "model_info": model_info,
            "evaluation_results": [result],
        }
        if cell_items is not None:
            text = _instance_text(cell_items, evaluation_id, model_id, row)
            record["detailed_evaluation_results"] = {
                "format": "jsonl",
                "file_path": samples_file,
                "hash_algorithm": "sha256",
                "checksum": sha256_bytes(text.encode("utf-8")),
                "total_rows": len(cell_items),
            }
            out.files[samples_file] = text
        out.files[record_file] = R.dump_json(record)
        samples = samples_file if cell_items is not None else None
        entry = {"file": record_file, "samples": samples, "evaluation_id": evaluation_id}
        entry |= {"model": label, "model_id": model_id, "config_id": row["config_id"], "precision": precision}
        out.records.append(entry | {"package": package, "score": row["score"], "n_items": n_items, "n_seeds": n_seeds})
    if not out.records:
        raise UserError(f"grid {grid_name} has no cell with status ok: nothing to export")
    verdicts = verdict_tables(raw[(valid["status"] == "ok").to_numpy()], rules_path, rules, items)
    out.files[R.VERDICTS_FILE] = _verdicts_file(verdicts, out, grid_name, grid_sha256, rules.sha256, stamp)
    return out


def _score_details(row: dict, seed_scores: dict[str, float] | None) -> dict[str, str]:
    """A record's score details: the cell's size, parse rate, precision and package, and its seeds' scores and
    tie rate where the grid has them."""
    details = {
        R.K_N_ITEMS: str(int(row["n_items"])),
        R.K_N_SEEDS: str(int(row["n_seeds"])),
        R.K_PARSE_RATE: R.number_str(row["parse_rate"]),
        R.K_PRECISION: str(row["precision"]),
        R.K_PACKAGE: str(row["package"]),
    }
    if seed_scores is not None:
        details[R.K_SEED_SCORES] = json.dumps(seed_scores)
    if _present(row.get("tie_rate")):
        details[R.K_TIE_RATE] = R.number_str(row["tie_rate"])
    return details


def _model_info(label: str, model_id: str, weights_sha256: str | None) -> dict[str, Any]:
    """A record's model_info: the label, the id, the weights' hash when known, the developer an ORG/NAME id names."""
    model_details = {"deployment_type": "unknown", "model_availability": "unknown", R.K_LABEL: label}
    if weights_sha256:
        model_details[R.K_WEIGHTS] = weights_sha256
    model_info: dict[str, Any] = {"name": label, "id": model_id, "additional_details": model_details}
    if "/" in model_id and not model_id.startswith("safetyrepro/"):
        model_info["developer"] = model_id.split("/", 1)[0]
    return model_info


def _verdicts_file(verdicts: list, out: Export, grid_name: str, grid_sha256: str, rules_sha256: str, stamp: str) -> str:
    """safetyrepro_verdicts.json: the comparison between models that EEE's records have no place for."""
    from safetyrepro.analysis.metrics.readings import READINGS_NOTE

    return R.dump_json(
        {
            "format": R.VERDICTS_FORMAT,
            "version": 1,
            "eee_schema_version": R.SCHEMA_VERSION,
            "written_by": f"safetyrepro {safetyrepro.__version__} export eee",
            # the file's name and hash, never the exporting machine's path to it: the record is shared
            "grid": {"name": Path(grid_name).name, "sha256": grid_sha256},
            "rules_sha256": rules_sha256,
            "retrieved_timestamp": stamp,
            "about": "SafetyRepro's verdict tables for the models of these records: rho_flip.csv's rows (per benchmark "
            "x slice x model pair: strict sign counts over the configurations every model has) and rho_flip_max, "
            "per (precision, package) group, as `safetyrepro analyze` computes them; rho_flip_csv is "
            "rho_flip.csv's exact text. Each rho_flip row adds how many of its configurations' leads are "
            "format-driven or uninformative (n_format_driven, n_uninformative, rests_on), and `leads` has one row "
            "per benchmark x pair x configuration: who leads and what the lead rests on. "
            f"{READINGS_NOTE}. EEE's schema describes one model's results and has no place for a "
            "comparison between models, so they are kept here (docs/eee.md).",
            "groups": verdicts,
            "records": out.records,
            "cells_not_exported": out.skipped,
        }
    )


def _rows(frame: pd.DataFrame) -> list[dict]:
    """The frame's rows as strict JSON values: numpy scalars plain, an undefined number null."""
    from safetyrepro.grid.grid_io import plain

    rows = [{k: plain(v) for k, v in r.items()} for r in frame.to_dict("records")]
    return [{k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in r.items()} for r in rows]


def verdict_tables(frame: pd.DataFrame, rules_path: str | None, rules, items: pd.DataFrame | None = None) -> list[dict]:
    """Per (precision, package) group of the ok cells in `frame`: rho_flip.csv's rows and text,
    rho_flip_max, and the analysis's warnings; a group the analysis cannot read (one model) says why instead.
    What each lead rests on (issue 52, analysis/metrics/readings.py): `leads` has one row per benchmark x pair x
    configuration with its `rests_on`, and each rho_flip row says how many of its configurations' leads are
    format-driven or uninformative. The rho_flip_csv text stays rho_flip.csv's, byte for byte."""
    from safetyrepro.analysis import api
    from safetyrepro.analysis.metrics import rank_flip
    from safetyrepro.analysis.metrics.slices import check_slices, slice_matrices
    from safetyrepro.analysis.paired.paired import pair_rests_on

    slices = check_slices(None, rules)
    out = []
    for (precision, package), group in frame.groupby(["precision", "package"], sort=True):
        entry: dict[str, Any] = {"precision": str(precision), "package": str(package)}
        try:
            g, r = api.prepare(group.reset_index(drop=True), rules_path)
        except UserError as e:
            entry["not_computed"] = str(e)
        else:
            detail = rank_flip.rho_flip_table(g, r, slices)
            table = detail[list(rank_flip.RHO_FLIP_COLUMNS)]
            leads, why = _leads(g, items)
            entry |= {"models": list(g.models), "slices": list(slices), "warnings": [*g.warnings, *why]}
            per_slice = {(b, name): list(m.index) for b, name, m in slice_matrices(g, r, slices)}
            rows = _rows(table)
            for row in rows:  # the pair-level rows: how many of their configurations' leads are not readable
                pair = leads[(leads["model_a"] == row["model_a"]) & (leads["model_b"] == row["model_b"])]
                row |= pair_rests_on(
                    pair[pair["benchmark"] == row["benchmark"]], per_slice[row["benchmark"], row["slice"]]
                )
            entry |= {"rho_flip": rows, "rho_flip_csv": table.to_csv(index=False)}
            entry["rho_flip_max"] = _rows(rank_flip.rho_flip_max(detail, len(g.models)))
            entry["leads"] = [_whole(row, "n_both") for row in _rows(leads)]
        out.append(entry)
    return out


def _leads(grid, items: pd.DataFrame | None) -> tuple[pd.DataFrame, list[str]]:
    """(paired.leads_table for the group, warnings): cells screened as `analyze` screens them (the grid's
    parse rates, and the item records' empty outputs and answers), the content reading from the item records.
    Records the analysis cannot read leave the grid's parse rates alone to decide, said in a warning."""
    from safetyrepro.analysis.metrics import readings
    from safetyrepro.analysis.metrics.degenerate import degenerate_cells
    from safetyrepro.analysis.paired.paired import leads_table
    from safetyrepro.analysis.paired.significance import items_from_frame

    records, why = None, []
    if items is not None:
        try:
            records = items_from_frame(items, grid, "the item records")
        except UserError as e:
            why.append(f"rests_on reads the grid's parse rates only: the item records were not read ({e})")
    cells = degenerate_cells(
        grid, None if records is None else records.empty_outputs, None if records is None else records.option_bias
    )
    return leads_table(grid, readings.cell_bases(cells), None if records is None else records.content), why


def _whole(row: dict, key: str) -> dict:
    """A count that a column with missing values carried as a float, as an integer again."""
    value = row.get(key)
    return row | {key: int(value)} if isinstance(value, float) and math.isfinite(value) else row


# -- writing --------------------------------------------------------------------------------------
def _earlier_export(out: Path, files: list[str]) -> set[str] | None:
    """An earlier export is recognised by its verdicts file, and replaced whole."""
    for name in (R.VERDICTS_FILE, *R.EARLIER_VERDICTS_FILES):
        try:
            data = json.loads((out / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("format") == R.VERDICTS_FORMAT:
            return set(files)
    return None


def check_out(out: Path) -> None:
    """DIR must be new, empty, or an earlier export (which is replaced as a whole)."""
    if out.is_symlink():
        raise UserError(f"--out {out} is a symbolic link; give the folder itself")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder; choose another --out")
    if out.is_dir() and any(out.iterdir()) and _earlier_export(out, []) is None:
        raise UserError(f"--out {out} holds files that no `safetyrepro export eee` wrote; choose a new or empty folder")


def write_export(out: Path, export: Export) -> list[Path]:
    """Write the files into a staging folder beside `out`, then put it in out's place in one step
    (safetyrepro/atomic.py `staged_output`: an earlier export there is replaced whole; a failure leaves
    it as it was). No marker file is added: EEE's tools read the folder."""
    check_out(out)
    with staged_output(out, "export eee", legacy=_earlier_export, marker=False) as stage:
        for rel, text in export.files.items():
            atomic_write(stage / rel, text, root=stage)
    return [out.absolute() / rel for rel in export.files]


def export_eee(
    grid: str | Path,
    out: str | Path,
    *,
    items: str | None = None,
    rules: str | None = None,
    run_json: str | None = None,
    **options: Any,
) -> tuple[Export, list[Path]]:
    """Read GRID (and its items, rules.yaml and run.json beside it, as `analyze` finds them), build
    the records and write them into `out`; returns (the export, the paths written). `options` are
    build_export's: model_ids, organization, relationship, timestamp."""
    from safetyrepro.grid.grid_io import ITEM_FILES, RULES_BESIDE, beside_grid, read_table

    grid_path = Path(grid)
    raw = read_table(grid_path)  # the grid's errors before the items'
    item_path = items or beside_grid(grid_path, ITEM_FILES)
    item_frame = read_table(item_path, "items") if item_path else None
    export = build_export(
        raw,
        item_frame,
        # as `analyze` chooses it: --rules, else rules.yaml beside the grid, else the packaged envelope (None)
        rules or beside_grid(grid_path, RULES_BESIDE),
        grid_sha256=sha256_bytes(grid_path.read_bytes()),
        run_json=load_run_json(grid_path, run_json),
        grid_name=str(grid_path),
        **options,
    )
    return export, write_export(Path(out), export)
