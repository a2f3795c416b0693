"""The study's progress, kept in the repository so that it survives the machine: finished cells
saved compactly under study/cells/, restored into a new run folder, and the time left
estimated from the measured cost of the cells done.

    scripts/study/reproduce.sh --status   # done, left, measured time left (progress.py status)
    scripts/study/reproduce.sh --save     # finished cells -> study/cells, progress.md (progress.py save)
    python scripts/study/progress.py save|restore|status --run OUT/grid -- SWEEP ARGS   # what those run

reproduce.sh restores before it sweeps, and passes its own sweep arguments (one definition).

Saved cells belong to the sweep recorded in study/sweep.json (models, limit, rules...): a run
with other settings restores none of them.

A saved cell is its sweep record, gzip-compressed (mtime 0, so an unchanged cell is an unchanged
file), at cells/<model>/<cell>.json.gz: tens of kilobytes, never near 20 MiB. Each record says which
code computed it (`computed_by`: the source commit and the engine's decode version). `restore` puts
back only cells that the current code would compute the same way: a logprob cell always (the
log-likelihood path has not changed since the first release), a free-form cell only when its
decode version is the engine's current one; the others are left to the sweep to recompute, never
mixed in.

The time left is the sum, over the cells not done, of the mean wall seconds of done cells of the
same model, benchmark, scoring, decoding, template and shots, falling back to coarser groups
(dropping shots, then template, then benchmark) when none of a kind is done yet, and to the mean of
all done cells of that scoring last. Those last groups mix models, so their cells are put on one
scale first: each model's cost factor is the median ratio of its seconds to the first model's over
the cells both have done (the same benchmark, scoring, decoding, template and shots); a model with no
such pair yet gets the ratio of its parameter count to the first model's, a prior stated as such in
the report until its own cells replace it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from safetyrepro.atomic import atomic_write

HERE = Path(__file__).resolve().parent
GROUPS = [
    ("model", "benchmark", "scoring", "decoding", "template", "shots"),
    ("model", "benchmark", "scoring", "decoding", "template"),
    ("model", "benchmark", "scoring", "decoding"),
    ("model", "scoring", "decoding"),
    ("scoring", "decoding"),
    ("scoring",),
]


def plan(run: Path, sweep_args: list[str]):
    """The main grid's sweep as `safetyrepro sweep SWEEP_ARGS --out RUN` plans it (reproduce.sh step
    1 passes its own arguments), without loading a model."""
    from safetyrepro.cli import build_parser
    from safetyrepro.sweep.options import SweepOptions
    from safetyrepro.sweep.sweeper import Sweep

    ns = build_parser().parse_args(["sweep", *sweep_args, "--out", str(run)])
    return Sweep.create(SweepOptions.from_args(ns))


def _read_run(run: Path) -> dict[str, dict]:
    """Finished cell records in a run folder, by key (failed cells are not finished)."""
    out = {}
    for p in sorted((run / "cells").glob("*/*.json")):
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and rec.get("status") in ("ok", "not_applicable"):
            out[rec["key"]] = rec
    return out


def _saved(dest: Path) -> dict[Path, dict]:
    out = {}
    for p in sorted((dest / "cells").glob("*/*.json.gz")):
        out[p] = json.loads(gzip.decompress(p.read_bytes()).decode("utf-8"))
    return out


def _current_decode() -> int:
    from safetyrepro.adapters.engine.engine import DECODE_VERSION

    return DECODE_VERSION


def reusable(rec: dict, decode: int) -> bool:
    """Whether the current code computes this cell the same way (see the module docstring)."""
    if rec.get("status") != "ok" or rec["row"].get("scoring") == "logprob":
        return True
    return (rec.get("computed_by") or {}).get("decode", 1) == decode


def save(run: Path, dest: Path, sweep_args: list[str]) -> int:
    from safetyrepro.sweep.store import slug

    sweep = plan(run, sweep_args)
    if json.loads((run / "sweep.json").read_text()) != sweep.spec.identity():
        raise SystemExit(f"{run} holds another sweep than the study's (its sweep.json differs): nothing saved")
    cells = sweep.cells
    stem = {c.key: (c.model, c.file_stem) for c in cells}
    atomic_write(dest / "sweep.json", json.dumps(sweep.spec.identity(), indent=2) + "\n", root=dest)

    n_new = 0
    for key, rec in _read_run(run).items():
        if key not in stem:
            continue
        model, file_stem = stem[key]
        path = dest / "cells" / slug(model) / f"{file_stem}.json.gz"
        data = gzip.compress(json.dumps(rec, ensure_ascii=False, sort_keys=True).encode("utf-8"), 9, mtime=0)
        if not path.exists() or path.read_bytes() != data:
            atomic_write(path, data, root=dest)
            n_new += 1
    report = status(run, dest, sweep_args, cells)
    atomic_write(dest / "progress.md", report, root=dest)
    print(report.splitlines()[2])
    print(f"saved {n_new} new or changed cell(s) under {dest / 'cells'}")
    return 0


def restore(run: Path, dest: Path, sweep_args: list[str]) -> int:
    from safetyrepro.sweep.store import slug

    sweep = plan(run, sweep_args)
    saved = _saved_for(dest, sweep)
    if not saved:
        print(f"no cells saved in {dest} for this sweep (none yet, or they belong to another): nothing restored")
        return 0
    cells = {c.key: c for c in sweep.cells}
    decode = _current_decode()
    have = _read_run(run)
    put = stale = 0
    for _, rec in saved.items():
        cell = cells.get(rec.get("key"))
        if cell is None or rec["key"] in have:
            continue
        if not reusable(rec, decode):
            stale += 1
            continue
        atomic_write(
            run / "cells" / slug(cell.model) / f"{cell.file_stem}.json", json.dumps(rec, ensure_ascii=False), root=run
        )
        put += 1
    print(
        f"restored {put} saved cell(s) into {run / 'cells'}; {stale} computed by an earlier decode "
        f"(not {decode}) are left to recompute"
    )
    return 0


def _features(cell) -> dict:
    c = cell.config
    return {
        "model": cell.model,
        "benchmark": c.benchmark,
        "scoring": c.scoring,
        "decoding": c.decoding,
        "template": c.template,
        "shots": c.shots,
    }


def cost_factors(
    done: list[tuple[dict, float]], models: list[str], prior: dict[str, float] | None = None
) -> dict[str, tuple[float, str]]:
    """model -> (its cost per cell relative to the first model, "measured over N cells" or "prior: ...").
    Measured: the median ratio over cells of the same kind done by both. Otherwise `prior[model]` (the
    ratio of parameter counts), or 1.0 when there is none."""
    prior = prior or {}
    kind = ("benchmark", "scoring", "decoding", "template", "shots")
    by_kind: dict = defaultdict(dict)
    for f, s in done:
        by_kind[tuple(f[k] for k in kind)].setdefault(f["model"], []).append(s)
    ref = models[0]
    out = {ref: (1.0, "the reference")}
    for m in models[1:]:
        ratios = [
            statistics.fmean(v[m]) / statistics.fmean(v[ref])
            for v in by_kind.values()
            if m in v and ref in v and statistics.fmean(v[ref]) > 0
        ]
        if ratios:
            out[m] = (statistics.median(ratios), f"measured over {len(ratios)} kinds of cell")
        elif m in prior:
            out[m] = (prior[m], "prior: parameter count ratio, no cell of a kind the reference has done yet")
        else:
            out[m] = (1.0, "prior: 1.0, no cell measured and no parameter count known")
    return out


def estimate(
    done: list[tuple[dict, float]], todo: list[dict], factors: dict[str, float] | None = None
) -> tuple[float, dict[str, int]]:
    """Seconds left for the cells in `todo` from the measured seconds of `done` (module docstring);
    also how many estimates came from each level of GROUPS. `factors` (model -> cost factor) puts
    cells of different models on one scale in the groups that leave the model out."""
    factors = factors or {}
    means = []
    for g in GROUPS:
        acc: dict = defaultdict(list)
        for f, s in done:
            acc[tuple(f[k] for k in g)].append(s if "model" in g else s / factors.get(f["model"], 1.0))
        means.append({k: statistics.fmean(v) for k, v in acc.items()})
    left, used = 0.0, defaultdict(int)
    for f in todo:
        for g, m in zip(GROUPS, means, strict=True):
            k = tuple(f[x] for x in g)
            if k in m:
                left += m[k] if "model" in g else m[k] * factors.get(f["model"], 1.0)
                used[" / ".join(g)] += 1
                break
        else:
            used["no measurement"] += 1
    return left, dict(used)


def _param_ratios(models: list[str]) -> dict[str, float]:
    """Parameter count of each embedded model over the first model's (the catalogue's `params`)."""
    from safetyrepro.adapters.catalogue.weights import EMBEDDED

    def count(m: str) -> float | None:
        text = getattr(EMBEDDED.get(m), "params", "") or ""
        try:
            return float(text.rstrip("MB").replace(",", "")) * (1e9 if text.endswith("B") else 1e6)
        except ValueError:
            return None

    counts = {m: count(m) for m in models}
    ref = counts[models[0]]
    return {m: c / ref for m, c in counts.items() if ref and c}


def _saved_for(dest: Path, sweep) -> dict[Path, dict]:
    """The saved cells, if they belong to this sweep (study/sweep.json says which); else none."""
    saved_for = dest / "sweep.json"
    if not saved_for.exists() or json.loads(saved_for.read_text()) != sweep.spec.identity():
        return {}
    return _saved(dest)


def status(run: Path, dest: Path, sweep_args: list[str], cells=None) -> str:
    sweep = plan(run, sweep_args)
    cells = cells if cells is not None else sweep.cells
    recs = _read_run(run)
    for rec in _saved_for(dest, sweep).values():
        recs.setdefault(rec.get("key"), rec)
    decode = _current_decode()
    done, done_cpu, todo = [], [], []
    by_model: dict = defaultdict(lambda: [0, 0, 0.0])
    for c in cells:
        rec = recs.get(c.key)
        f = _features(c)
        if rec is not None and reusable(rec, decode):
            if rec["status"] == "ok" and rec.get("elapsed_s"):
                done.append((f, float(rec["elapsed_s"])))
                by_model[c.model][2] += float(rec["elapsed_s"])
            if rec["status"] == "ok" and rec.get("cpu_s"):
                done_cpu.append((f, float(rec["cpu_s"])))
            by_model[c.model][0] += 1
        else:
            todo.append(f)
            by_model[c.model][1] += 1
    models = list(dict.fromkeys(c.model for c in cells))
    prior = _param_ratios(models)
    factors = cost_factors(done, models, prior)
    left, used = estimate(done, todo, {m: v for m, (v, _) in factors.items()})
    cpu_factors = cost_factors(done_cpu, models, prior)
    left_cpu, _ = estimate(done_cpu, todo, {m: v for m, (v, _) in cpu_factors.items()})
    n_done = len(cells) - len(todo)
    cpu_line = (
        f"CPU time left {left_cpu / 3600:.1f} h from {len(done_cpu)} cells that recorded their CPU seconds "
        f"(whatever else ran beside them; on an idle 2-core machine the wall time lies between half of "
        f"that, {left_cpu / 7200:.1f} h, and all of it)"
        if done_cpu
        else "CPU time left: not known yet (no done cell recorded its CPU seconds)"
    )
    lines = [
        "# Study progress (written by scripts/study/progress.py)",
        "",
        f"cells done {n_done} of {len(cells)}, left {len(todo)}, measured time left {left / 3600:.1f} h "
        f"(from {len(done)} timed cells; wall seconds on the machine that ran them, with whatever else it ran)",
        "",
        cpu_line,
        "",
        "| model | done | left | wall seconds of the done cells |",
        "|---|---|---|---|",
    ]
    for m in dict.fromkeys(c.model for c in cells):
        d, t, s = by_model[m]
        lines.append(f"| {m} | {d} | {t} | {s:,.0f} |")
    lines += [
        "",
        "Mean wall seconds per done cell, by benchmark, scoring and decoding:",
        "",
        "| model | benchmark | scoring | decoding | cells | mean s | max s |",
        "|---|---|---|---|---|---|---|",
    ]
    acc: dict = defaultdict(list)
    for f, s in done:
        acc[(f["model"], f["benchmark"], f["scoring"], f["decoding"])].append(s)
    for k in sorted(acc):
        v = acc[k]
        lines.append(f"| {' | '.join(map(str, k))} | {len(v)} | {statistics.fmean(v):.1f} | {max(v):.1f} |")
    if used:
        lines += ["", "Estimates of the cells left came from: " + ", ".join(f"{v} by {k}" for k, v in used.items())]
        if any("model" not in k for k in used):
            lines.append(
                "(a cell of a model with no timed cell of its kind yet is estimated from other models' "
                "cells, scaled by the cost factors below)"
            )
    lines += [
        "",
        f"Cost per cell relative to {models[0]} (wall seconds):",
        "",
        "| model | factor | from |",
        "|---|---|---|",
    ]
    lines += [f"| {m} | {v:.2f} | {why} |" for m, (v, why) in factors.items()]
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        usage="progress.py {save,restore,status} --run OUT/grid [--dest DIR] -- SWEEP ARGS",
    )
    ap.add_argument("action", choices=("save", "restore", "status"))
    ap.add_argument("--run", type=Path, required=True, help="the main grid's run folder (reproduce.sh: OUT/grid)")
    ap.add_argument("--dest", type=Path, default=HERE, help="where saved cells live (default: study)")
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    sweep_args = argv[cut + 1 :]
    if not sweep_args:
        ap.error("give the main grid's sweep arguments after --, as reproduce.sh does (reproduce.sh --status)")
    if args.action == "save":
        return save(args.run, args.dest, sweep_args)
    if args.action == "restore":
        return restore(args.run, args.dest, sweep_args)
    print(status(args.run, args.dest, sweep_args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
