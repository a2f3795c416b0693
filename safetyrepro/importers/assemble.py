"""From imported runs to the grid: model names, package versions, comparability, duplicates, cells, the rules
file the analysis validates against, and the tables that say what happened; docs/importing.md ("Disagreements and
duplicates") says how each case is resolved. Everything here is pure: DataFrames and text in and out."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import replace
from typing import Any

import pandas as pd
import yaml

from safetyrepro.errors import UserError
from safetyrepro.grid_schema import grid_row
from safetyrepro.tasks.benchmarks.registry import BENCHMARKS, get_benchmark
from safetyrepro.tasks.envelope import AXES, Config, parse_rules

from .common import DUPLICATES, Reading, Run, Unmapped, item_set_key
from .mapping import Mapping
from .write import Imported

# items.parquet's columns, in order, and their types (docs/formats.md)
ITEM_TYPES = {
    **dict.fromkeys(("model", "config_id", "benchmark", "package", "precision", "item_id"), "string"),
    **{"seed": "int64", "item_score": "float64", "prediction": "Int64", "parsed": "boolean", "gold": "Int64"},
    **dict.fromkeys(("raw_output", "prompt_sha256", "source"), "string"),
}
PROVENANCE_COLUMNS = ["path", "kind", "sha256", "bytes", "status", "cells"]
UNMAPPED_COLUMNS = ["source", "task", "model", "reason"]
DUPLICATE_COLUMNS = ["model", "config_id", "precision", "package", "seed", "source", "created", "action"]
DISAGREEMENT_COLUMNS = ["kind", "subject", "values", "resolution"]
BAD_COLUMNS = ["path", "reason"]


def _grouped(pairs: Iterable[tuple[Hashable, Any]]) -> dict[Any, list]:
    """The values of (key, value) pairs listed under their keys, keys in order of first appearance."""
    groups: dict[Any, list] = defaultdict(list)
    for key, value in pairs:
        groups[key].append(value)
    return groups


# -- what a benchmark's definition admits ------------------------------------------------------------
def definition_misfits(runs: list[Run]) -> tuple[list[Run], list[Unmapped]]:
    """Runs placed under one of SafetyRepro's benchmarks must score it a way its definition allows
    (CrowS-Pairs: logprob only; the rules file derives that constraint from the definition, so no
    imported rules file could admit them): the others are listed as unmapped."""
    kept, unmapped = [], []
    for r in runs:
        allowed = get_benchmark(r.axes.benchmark).scorings if r.axes.benchmark in BENCHMARKS else None
        if allowed is not None and r.axes.scoring not in allowed:
            reason = (
                f"placed under {r.axes.benchmark}, which its definition scores {', '.join(allowed)} only, "
                f"but the run scored {r.axes.scoring}; map the task to a benchmark name of its own"
            )
            unmapped.append(Unmapped(r.source, r.task, r.model, reason))
        else:
            kept.append(r)
    return kept, unmapped


# -- non-axis agreement ----------------------------------------------------------------------------
def _note(kind: str, subject: str, values: str, resolution: str) -> dict:
    """A row of disagreements.csv."""
    return dict(zip(DISAGREEMENT_COLUMNS, (kind, subject, values, resolution), strict=True))


def split_models(runs: list[Run]) -> tuple[list[Run], list[dict]]:
    """A label whose runs recorded different weights becomes one label per weights hash."""
    notes = []
    by_label = _grouped((r.model, r.weights_id) for r in runs if r.weights_id)
    split = {label: sorted(set(ids)) for label, ids in by_label.items() if len(set(ids)) > 1}
    for label, ids in sorted(split.items()):
        kept_as = ", ".join(f"{label}#{i[:8]}" for i in ids)
        notes.append(_note("model weights", label, ", ".join(i[:12] for i in ids), "kept apart as " + kept_as))
    runs = [replace(r, model=f"{r.model}#{r.weights_id[:8]}") if r.model in split and r.weights_id else r for r in runs]
    by_weights = _grouped((r.weights_id, r.model) for r in runs if r.weights_id)
    merge = (
        "kept as separate models; if they are one model, give them one label with a `models` entry of the mapping file"
    )
    for weights, labels in sorted(by_weights.items()):
        if len(set(labels)) > 1:
            notes.append(_note("model names", f"weights {weights[:12]}", ", ".join(sorted(set(labels))), merge))
    return runs, notes


def package_labels(runs: list[Run]) -> tuple[list[Run], list[dict]]:
    """With more than one package version, every row's package names its version."""
    versions = sorted({r.package_version for r in runs})
    if len(versions) < 2:
        return [replace(r, package_label=r.package) for r in runs], []
    package = runs[0].package
    columns = ", ".join(f"{package}=={v}" for v in versions)
    note = _note("package version", package, ", ".join(versions), "kept apart: package column " + columns)
    return [replace(r, package_label=f"{r.package}=={r.package_version}") for r in runs], [note]


def dedupe(runs: list[Run], how: str) -> tuple[list[Run], list[dict]]:
    """Duplicate runs of one cell and seed: kept, the newest kept, or refused (`how`)."""
    if how not in DUPLICATES:
        raise UserError(f"--duplicates {how!r}; allowed: {', '.join(DUPLICATES)}")
    groups = _grouped(
        ((r.model, r.axes.config_id, r.precision, r.package_label, r.seed, r.metric, r.tie_rule), r) for r in runs
    )
    kept, rows = [], []
    for key, group in groups.items():
        if len(group) == 1:
            kept.append(group[0])
            continue
        group = sorted(group, key=lambda r: (r.created, r.source, r.task))
        if how == "refuse":
            raise UserError(
                f"duplicate runs of model {key[0]!r}, configuration {key[1]} (seed {key[4]}): "
                f"{group[0].source} and {group[-1].source}; choose --duplicates newest or keep"
            )
        kept.extend(group if how == "keep" else group[-1:])
        for i, r in enumerate(group):
            if how == "keep":
                action = f"kept as repetition {i + 1} of {len(group)}"
            else:
                action = "kept (newest)" if r is group[-1] else f"dropped (older than {group[-1].source})"
            # the key's model, config_id, precision, package and seed, then this run's
            rows.append(dict(zip(DUPLICATE_COLUMNS, (*key[:5], r.source, r.created, action), strict=True)))
    return kept, rows


def comparability(runs: list[Run]) -> tuple[list[Run], list[dict]]:
    """Within each (package, benchmark), runs must share their item set and metric, and logprob runs
    their tie rule: the largest group keeps the package label, the others are labelled with what
    differs (`lm-eval [items n=8:ab12cd]`)."""
    notes = []
    differs: dict[int, list[str]] = defaultdict(list)
    by_bench = _grouped(((r.package_label, r.axes.benchmark), i) for i, r in enumerate(runs))
    for (package, benchmark), idx in sorted(by_bench.items()):
        with_ids = all(runs[i].item_ids is not None for i in idx)
        checks: dict[str, dict[int, Any]] = {
            "items": {i: item_set_key(runs[i].item_ids if with_ids else None, runs[i].n_items) for i in idx},
            "metric": {i: runs[i].metric for i in idx},
            # only likelihood scoring has ties between candidates
            "tie_rule": {i: runs[i].tie_rule for i in idx if runs[i].tie_rule},
        }
        for what, values in checks.items():
            counts = Counter(values.values())
            if len(counts) < 2:
                continue
            size = {v: max(runs[i].n_items for i in values if values[i] == v) for v in counts}
            main = max(counts, key=lambda v: (counts[v], size[v], v))
            for i, v in values.items():
                if v != main:
                    differs[i].append(f"{what} {v}")
            notes.append(
                _note(
                    f"different {what}",
                    f"{package} {benchmark}",
                    "; ".join(f"{v} ({counts[v]} runs)" for v in sorted(counts)),
                    f"runs with {what} {main} keep package {package!r}; the others are kept "
                    f"apart under package '{package} [{what} ...]'",
                )
            )
    return [
        replace(r, package_label=f"{r.package_label} [{'; '.join(differs[i])}]") if differs.get(i) else r
        for i, r in enumerate(runs)
    ], notes


# -- rules ------------------------------------------------------------------------------------------
def _base(value: str) -> str:
    return value.split("+", 1)[0]


def _config(cell: dict) -> Config:
    """A grid row's configuration (its benchmark and axes columns)."""
    return Config(cell["benchmark"], *(cell[a] for a in AXES))


def rules_for(cells: list[dict], runs: list[Run], packaged_text: bytes, packaged) -> bytes:
    """The packaged rules file when every configuration lies inside it; otherwise the packaged
    envelope widened by the imported values (docs/importing.md, "The rules file")."""
    registered = set(packaged.benchmarks)
    if all(
        c["benchmark"] in registered
        and all(c[a] in packaged.axes[a] for a in AXES)
        and not packaged.violated(_config(c))
        for c in cells
    ):
        return packaged_text
    raw = yaml.safe_load(packaged_text)
    axes = {a: list(raw["axes"][a]) for a in AXES}
    seen = {a: sorted({c[a] for c in cells} - set(axes[a]), key=str) for a in axes}
    stress_templates = {
        r.axes.template
        for r in runs
        if r.stress_template or _base(r.axes.template) in packaged.stress.get("template", ())
    }
    diverse = min(
        (d.temperature for d in packaged.decodings.values() if d.name in packaged.stress.get("decoding", ())),
        default=0.7,
    )
    specs = {r.axes.decoding: r.decoding for r in runs}
    stress_decodings = {
        d
        for d in seen["decoding"]
        if _base(d) in packaged.stress.get("decoding", ())
        or (specs[d].do_sample and specs[d].recorded and specs[d].temperature >= diverse)
    }
    decoding = dict(raw["decoding"])
    for d in seen["decoding"]:
        decoding[d] = {k: getattr(specs[d], k) for k in ("temperature", "top_p", "do_sample")}
    stress = {a: list(v) for a, v in (raw.get("stress") or {}).items()}
    stress.setdefault("template", []).extend(sorted(t for t in seen["template"] if t in stress_templates))
    stress.setdefault("decoding", []).extend(sorted(stress_decodings))

    def derived(axis: str, listed) -> list:
        """The listed values and the imported ones derived from them (`T1+nochat` from `T1`)."""
        listed = list(listed)
        return listed + [v for v in seen.get(axis, []) if isinstance(v, str) and _base(v) != v and _base(v) in listed]

    def widen(subset: dict) -> dict:
        out = {}
        for axis, listed in (subset or {}).items():
            if axis not in seen:
                out[axis] = list(listed)
                continue
            packaged_values, stressed = axes[axis], stress.get(axis, [])
            # a subset that leaves out only stress values keeps every new non-stress value without a base too
            only_cuts_stress = all(v in listed or v in stressed for v in packaged_values)
            out[axis] = derived(axis, listed) + [
                v
                for v in seen[axis]
                if only_cuts_stress and v not in stressed and not (isinstance(v, str) and _base(v) in packaged_values)
            ]
        return out

    subsets = {name: widen(s) for name, s in raw["subsets"].items()}
    constraints = []
    for c in raw.get("constraints") or []:
        when = {k: derived(k, v) for k, v in c["when"].items()}
        require = {k: derived(k, v) for k, v in c["require"].items()}
        # a constraint the imported configurations break does not describe them: it is left out
        if all(
            not all(cell[k] in v for k, v in when.items()) or all(cell[k] in v for k, v in require.items())
            for cell in cells
        ):
            constraints.append({"name": c["name"], "when": when, "require": require})
    out = {"version": raw.get("version", 1)}
    if raw.get("benchmarks") is not None:
        out["benchmarks"] = list(raw["benchmarks"])
    if external := sorted({c["benchmark"] for c in cells} - registered):
        out["external_benchmarks"] = external
    out |= {
        "axes": {a: axes[a] + seen[a] if a != "shots" else sorted(set(axes[a]) | set(seen[a])) for a in axes},
        "decoding": decoding,
        "sampling_seeds": raw["sampling_seeds"],
        "stress": stress,
        "constraints": constraints,
        "subsets": subsets,
        "items": raw["items"],
        "max_new_tokens": raw.get("max_new_tokens", {}),
    }
    header = (
        "# Written by `safetyrepro import`: SafetyRepro's envelope (safetyrepro_tasks/envelope.yaml) widened by\n"
        "# the configurations of the imported runs, so that `safetyrepro analyze` can validate this grid.\n"
        "# New templates and decodings join a sub-envelope when they derive from a value it lists, or when it\n"
        "# leaves out only stress values and they are not stress; constraints the runs break are left out;\n"
        "# external_benchmarks are benchmarks SafetyRepro does not define (read as higher is better).\n"
        "# provider-default decoding: the run recorded no temperature (the provider's default applied).\n"
    )
    return (header + yaml.safe_dump(out, sort_keys=False, width=120)).encode("utf-8")


# -- cells ------------------------------------------------------------------------------------------
def _cells(runs: list[Run]) -> tuple[list[dict], list[dict], dict[str, set[str]]]:
    """Grid rows (without tier), item rows, and which cells each source file fed."""
    by_cell = _grouped(((r.model, r.axes.config_id, r.precision, r.package_label), r) for r in runs)
    rows, items = [], []
    fed: dict[str, set[str]] = defaultdict(set)
    for (model, config_id, precision, package), group in sorted(by_cell.items()):
        group = sorted(group, key=lambda r: (r.seed, r.created, r.source))
        seeds: list[int] = []
        for r in group:
            s = r.seed
            while s in seeds:  # repetitions kept by --duplicates keep get the next free seed number
                s += 1
            seeds.append(s)
            for source in filter(None, (r.source, r.samples_source)):
                fed[source].add(f"{model}|{config_id}")
        first = group[0]
        has_items = all(r.items is not None for r in group)
        rows.append(
            grid_row(
                model,
                first.axes,
                precision,
                package,
                max(r.n_items for r in group),
                len(group),
                sum(r.score for r in group) / len(group),
                sum(r.parse_rate for r in group) / len(group),
                None,
                config_id,  # the tier is read off the rules the import writes (assemble)
                seed_scores=json.dumps({str(s): r.score for s, r in zip(seeds, group, strict=True)}),
                metric=first.metric,
                tie_rule=first.tie_rule or "",
                item_set=item_set_key(first.item_ids, first.n_items),
                package_version=first.package_version,
                task=first.task,
                weights_sha256=first.weights_id or "",
                items="yes" if has_items else "no: " + next(r.items_note for r in group if r.items is None),
                sources=";".join(dict.fromkeys(r.source for r in group)),
            )
        )
        if has_items:
            for s, r in zip(seeds, group, strict=True):
                cell_columns = {"model": model, "config_id": config_id, "benchmark": first.axes.benchmark}
                cell_columns.update(package=package, precision=precision, seed=s, source=r.samples_source)
                items += [{**cell_columns, **vars(it)} for it in r.items or ()]  # an ItemRow's fields are columns
    return rows, items, fed


def assemble(
    reading: Reading, duplicates: str, mapping: Mapping, packaged_text: bytes, extra_sources: list[dict] | None = None
) -> Imported:
    """Everything `safetyrepro import` writes, from what an importer read (`packaged_text`: the
    packaged rules file's bytes; `extra_sources`: provenance rows of files the reader did not use)."""
    from safetyrepro.grid.grid_io import validate_cells

    kept, misfits = definition_misfits(reading.runs)
    reading = replace(reading, runs=kept, unmapped=[*reading.unmapped, *misfits])
    if not reading.runs:
        first = reading.bad[0].line() if reading.bad else "no run found"
        if reading.unmapped:
            first = f"{reading.unmapped[0].source}: {reading.unmapped[0].reason}"
        raise UserError(
            f"nothing to import: {len(reading.unmapped)} unmapped task run(s), {len(reading.bad)} bad "
            f"file(s); the first: {first}"
        )
    runs, notes = split_models(reading.runs)
    runs, more = package_labels(runs)
    notes += more
    runs, dup_rows = dedupe(runs, duplicates)
    runs, more = comparability(runs)
    notes += more
    rows, items, fed = _cells(runs)
    rules_text = rules_for(rows, runs, packaged_text, parse_rules(packaged_text, "the packaged envelope.yaml"))
    rules = parse_rules(rules_text, "rules.yaml")
    for row in rows:
        row["tier"] = rules.tier(_config(row))
    grid = pd.DataFrame(rows)  # grid_row's columns: the written ones, then the import's own
    validate_cells(grid.copy(), rules, "the imported grid")  # what analyze will check, before anything is written
    warnings = [f"{n['kind']}: {n['subject']}: {n['values']}; {n['resolution']}" for n in notes]
    warnings += [f"unmapped: {u.source}: {u.task} ({u.model}): {u.reason}" for u in reading.unmapped]
    warnings += [f"bad input skipped: {b.line()}" for b in reading.bad]
    dropped = [r for r in dup_rows if r["action"].startswith("dropped")]
    if dropped:
        warnings.append(
            f"duplicates: {len(dropped)} older run(s) of a cell dropped, the newest kept "
            "(duplicates.csv; --duplicates keep|refuse)"
        )
    no_items = grid[grid["items"] != "yes"]
    if len(no_items):
        warnings.append(
            f"items: {len(no_items)} of {len(grid)} cells have no per-item records ({no_items['items'].iloc[0]}); "
            "the item-level tests leave them out"
        )
    # a source both dropped as a duplicate and unmapped is said to be dropped
    status = {u.source: "unmapped" for u in reading.unmapped} | {r["source"]: "duplicate (dropped)" for r in dropped}
    provenance = [
        {
            "path": s.path,
            "kind": s.kind,
            "sha256": s.sha256,
            "bytes": s.size,
            "status": "imported" if fed.get(s.path) else status.get(s.path, "not used"),
            "cells": ";".join(sorted(fed.get(s.path, ()))),
        }
        for s in reading.sources
    ]
    provenance += extra_sources or []
    first_runs = {r.model: r for r in reversed(runs)}  # each label's first run
    recorded_as = _grouped((r.model, r.model_recorded) for r in runs)
    models = [
        dict(label=m, weights_sha256=r.weights_id, backend=r.model_spec, recorded_as=[*dict.fromkeys(recorded_as[m])])
        for m, r in sorted(first_runs.items())
    ]
    tie_rules = sorted({r.tie_rule for r in runs if r.tie_rule})
    run_record = {
        "source": f"safetyrepro import {reading.package}",
        "rules_sha256": rules.sha256,
        "rules_path": "rules.yaml",
        "tie_rule": tie_rules[0] if len(tie_rules) == 1 else ("mixed: " + ", ".join(tie_rules) if tie_rules else None),
        "models": models,
        "packages": {reading.package: ", ".join(sorted({r.package_version for r in runs}))},
        "item_subsets": {b: ", ".join(sorted(set(g["item_set"]))) for b, g in grid.groupby("benchmark")},
        "import": {
            "duplicates": duplicates,
            "mapping": mapping.path,
            "mapping_sha256": mapping.sha256,
            "runs_read": len(reading.runs),
            "runs_used": len(runs),
            "cells": len(grid),
            "unmapped": len(reading.unmapped),
            "bad_inputs": len(reading.bad),
        },
    }
    return Imported(
        grid=grid,
        items=pd.DataFrame(items, columns=list(ITEM_TYPES)).astype(ITEM_TYPES),
        provenance=pd.DataFrame(provenance, columns=PROVENANCE_COLUMNS),
        unmapped=pd.DataFrame([u.__dict__ for u in reading.unmapped], columns=UNMAPPED_COLUMNS),
        duplicates=pd.DataFrame(dup_rows, columns=DUPLICATE_COLUMNS),
        disagreements=pd.DataFrame(notes, columns=DISAGREEMENT_COLUMNS),
        bad=pd.DataFrame([b.__dict__ for b in reading.bad], columns=BAD_COLUMNS),
        rules_text=rules_text,
        run_record=run_record,
        warnings=warnings,
    )
