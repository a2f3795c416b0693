"""How the analysis scales with the number of models. Not a test: it prints seconds per stage of
analysis/pipeline.py's run_analysis against the number of models.

    python perf/bench_analysis_models.py                          # 3, 10, 30, 100 models
    python perf/bench_analysis_models.py --models 3,10 --baseline-rev 5564fa1
    python perf/bench_analysis_models.py --models 30 --profile     # cProfile of the whole run

Grids: M models x the five benchmarks x every configuration of the envelope (48 each, 12 for
crows_pairs), built by tests/analysis/make_synthetic_grid.py (one base score per benchmark, a
model-specific effect per axis value, noise) plus a per-model offset so that some pairs never
reverse. No item records (significant flips and detectable are skipped, as `analyze` skips them
without items). The stages are run_analysis's: rho_flip (table and maxima), orderings (detail,
concordance, config orderings), dispersion, variance (the four ANOVAs per benchmark and the
configuration bootstrap of rho), attribution (LightGBM regressor and pair classifiers with SHAP),
bootstrap (configuration bootstrap of the maxima), certificate, degenerate.

`--baseline-rev REV` runs the same stages on the analysis package as committed at REV (extracted
with `git archive` into a temporary folder and imported beside this one) and prints the ratio
old / new per stage; `--baseline-max-models` caps the grids it is run on (the old ANOVA bootstrap
takes hours at 100 models).

Measured on the 2-core development machine (shared with other jobs, so +-30 %; 1000 resamples),
seconds per stage; before = the analysis at 5564fa1, after = this one:

    stage           3 models        10 models         30 models          100 models
                  before after    before  after    before  after    before    after
    rho_flip        0.59  0.37      1.91   0.99     24.0    1.05     315      2.68
    orderings       0.54  0.42      0.55   0.56     0.85    1.43     3.14     3.02
    dispersion      0.24  0.21      0.34   0.31     0.71    0.31     2.42     0.77
    variance        4.10  5.11      1049   0.75     ~435*   0.85     ~4200*   0.93
    attribution     2.28  0.72      7.24   2.48     28.6    8.23**   780      10.7**
    bootstrap       0.07  0.06      0.11   0.12     0.72    0.18     8.30     1.06
    certificate     0.33  0.19      0.88   0.30     6.42    0.37     70.0     0.87
    degenerate      0.45  0.08      1.12   0.19     3.76    0.45     17.3     1.59
    total           8.60  7.16      1061   5.70     ~500    12.9     ~5400    21.6

    *  not run to the end: the four statsmodels fits of one benchmark (1.9 s at 30 models, 6.0 s
       at 100) plus 1000 x the measured cost of one lstsq resample (0.11 s, 1.05 s), times the four
       benchmarks with a free-form slice. Under heavier load (load average 8) the old variance stage
       took 2147 s at 10 models, and a 50-model grid was stopped after 19 minutes in it.
    ** at most 200 pair classifiers per benchmark (the most reversed pairs): 902 fits at 30 and at
       100 models, where the old code fitted every pair with a reversal (1,835 and 21,730).

At 3 models (the study) variance runs the same statsmodels/lstsq code as before, and every table is
byte for byte the same. `safetyrepro analyze` of the 100-model grid end to end (reading, analysis,
tables, report, card) took 44 s with --no-figures; the figures add ~4 s at 3 models, 6 s at 10,
23 s at 30 and ~200 s at 100 models (`--figures`; nearly all of it the per-pair heatmap
rho_flip_surface, one labelled row per pair, then wins_by_axes and score_ranges).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "analysis"))

STAGES = ("rho_flip", "orderings", "dispersion", "variance", "attribution", "bootstrap", "certificate", "degenerate")


def model_names(n: int) -> tuple[str, ...]:
    return tuple(f"m{i:03d}" for i in range(n))


def bench_grid(n_models: int, seed: int = 0) -> pd.DataFrame:
    """The synthetic grid with a per-model offset (sd 0.03) on every score."""
    from make_synthetic_grid import synthetic_grid

    models = model_names(n_models)
    frame = synthetic_grid(seed, models=models)
    rng = np.random.default_rng([seed, n_models])
    offset = dict(zip(models, rng.normal(0, 0.03, size=n_models), strict=True))
    frame["score"] = (frame["score"] + frame["model"].map(offset)).clip(0.01, 0.99).round(4)
    return frame


def load_package(rev: str | None, tmp: Path):
    """The analysis package: this checkout's, or the one committed at `rev` as `analysis_baseline`."""
    if rev is None:
        return importlib.import_module("safetyrepro.analysis")
    folder = tmp / "baseline"
    folder.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "analysis"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    (folder / "analysis").rename(folder / "analysis_baseline")
    sys.path.insert(0, str(folder))
    return importlib.import_module("analysis_baseline")


def run_stages(pkg: str, frame: pd.DataFrame, n_resamples: int, only: tuple[str, ...] = STAGES) -> dict[str, float]:
    """Seconds per stage of run_analysis on one grid, for the package named `pkg`."""
    mod = {
        name: importlib.import_module(f"{pkg}.{name}")
        for name in (
            "grid_io",
            "slices",
            "pipeline",
            "rank_flip",
            "orderings",
            "dispersion",
            "variance",
            "attribution",
            "bootstrap",
            "verdict",
            "degenerate",
        )
    }
    from safetyrepro.tasks.envelope import default_rules

    rules = default_rules()
    grid = mod["grid_io"].common_configurations(
        mod["grid_io"].validate_cells(frame.copy(), rules, "bench"), "bench", rules
    )
    slices = mod["slices"].check_slices(None, rules)
    thetas, seed = mod["pipeline"].DEFAULT_THETAS, 0
    times: dict[str, float] = {}

    def timed(stage, fn):
        if stage not in only:
            return None
        t0 = time.perf_counter()
        out = fn()
        times[stage] = times.get(stage, 0.0) + time.perf_counter() - t0
        return out

    rf, od, vr = mod["rank_flip"], mod["orderings"], mod["variance"]
    detail = timed("rho_flip", lambda: rf.rho_flip_table(grid, rules, slices))
    if detail is not None:
        timed("rho_flip", lambda: rf.rho_flip_max(detail, len(grid.models)))
    timed("orderings", lambda: od.orderings_tables(grid, rules, slices))
    timed("orderings", lambda: od.config_orderings_table(grid))
    timed("dispersion", lambda: mod["dispersion"].dispersion_tables(grid, rules, slices, thetas))

    def variance():
        fitted = []
        for b in grid.benchmarks:
            fitted.extend(vr.variance_attributions(grid, rules, b, n_resamples, seed)[0])
        return vr.variance_tables(fitted)

    timed("variance", variance)
    timed("attribution", lambda: mod["attribution"].axis_attribution(grid, rules, seed))
    timed(
        "bootstrap",
        lambda: mod["bootstrap"].bootstrap_table({b: grid.matrix(b) for b in grid.benchmarks}, n_resamples, seed),
    )
    timed("certificate", lambda: mod["verdict"].verdict_certificate(grid, rules, slices))

    def degenerate():
        cells = mod["degenerate"].degenerate_cells(grid, None, None)
        return mod["degenerate"].degenerate_effects(grid, rules, cells, thetas)

    timed("degenerate", degenerate)
    times["total"] = sum(times.values())
    return times


def figures_seconds(frame: pd.DataFrame, n_resamples: int, tmp: Path) -> tuple[float, float]:
    """(seconds of the whole `analyze` write without figures, with figures) through the Python API."""
    from safetyrepro.analysis import api

    result = api.analyze(frame, n_resamples=n_resamples)
    out = []
    for figures in (False, True):
        t0 = time.perf_counter()
        result.report(tmp / f"out-{figures}", figures=figures)
        out.append(time.perf_counter() - t0)
    return out[0], out[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="3,10,30,100", help="comma-separated model counts")
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--baseline-rev", help="also time the analysis package committed at this git revision")
    p.add_argument("--baseline-max-models", type=int, default=30)
    p.add_argument("--baseline-only", action="store_true", help="time only the baseline")
    p.add_argument("--figures", action="store_true", help="also time writing the report with and without figures")
    p.add_argument("--stages", default=",".join(STAGES), help="comma-separated stages to run (default: all)")
    p.add_argument("--profile", action="store_true", help="print the top of a cProfile of each run")
    args = p.parse_args(argv)
    counts = [int(n) for n in args.models.split(",")]
    only = tuple(args.stages.split(","))
    unknown = [s for s in only if s not in STAGES]
    if unknown:
        p.error(f"unknown stage(s) {', '.join(unknown)}; stages: {', '.join(STAGES)}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        load_package(None, tmp)
        baseline = None
        if args.baseline_rev:
            load_package(args.baseline_rev, tmp)
            baseline = "analysis_baseline"
        results: dict[tuple[str, int], dict[str, float]] = {}
        extra: dict[int, tuple[float, float]] = {}
        for n in counts:
            frame = bench_grid(n)
            runs = [] if args.baseline_only else [("after", "safetyrepro.analysis")]
            if baseline and n <= args.baseline_max_models:
                runs.insert(0, ("before", baseline))
            for label, pkg in runs:
                profiler = cProfile.Profile() if args.profile else None
                if profiler:
                    profiler.enable()
                results[(label, n)] = run_stages(pkg, frame, args.resamples, only)
                if profiler:
                    profiler.disable()
                    text = io.StringIO()
                    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(35)
                    print(f"--- profile: {label}, {n} models ---\n{text.getvalue()}")
                t = results[(label, n)]
                print(
                    f"{label:6s} {n:4d} models: " + "  ".join(f"{s} {t[s]:.2f}" for s in (*STAGES, "total") if s in t),
                    flush=True,
                )
            if args.figures and not args.baseline_only:
                extra[n] = figures_seconds(frame, args.resamples, tmp)
                print(
                    f"        {n:4d} models: report without figures {extra[n][0]:.2f} s, with figures "
                    f"{extra[n][1]:.2f} s",
                    flush=True,
                )
    print()
    header = f"{'stage':12s}" + "".join(f"{f'{n} models':>24s}" for n in counts)
    print(header)
    print(f"{'':12s}" + "".join(f"{'before':>8s}{'after':>8s}{'ratio':>8s}" for _ in counts))
    for s in (*(s for s in STAGES if s in only), "total"):
        line = f"{s:12s}"
        for n in counts:
            old, new = results.get(("before", n), {}).get(s), results.get(("after", n), {}).get(s)
            line += f"{old:8.2f}" if old is not None else f"{'-':>8s}"
            line += f"{new:8.2f}" if new is not None else f"{'-':>8s}"
            line += f"{old / new:7.1f}x" if old is not None and new else f"{'-':>8s}"
        print(line)
    for n, (plain, drawn) in extra.items():
        print(
            f"{n} models: writing the report {plain:.1f} s without figures, {drawn:.1f} s with them "
            f"(figures {drawn - plain:.1f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
