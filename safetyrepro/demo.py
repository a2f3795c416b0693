"""`safetyrepro demo`: the embedded demo. It reproduces the slice of the first study (docs/study) whose
flip survives item-level confirmation: two small real models from PyPI on the two configurations where
each wins, at the study's precision and item count, so its cells can be checked against the published
ones; then the analysis, and a closing summary in words of what flipped, what the study confirmed, and
what the flip rests on."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from safetyrepro.tasks.envelope import benchmarks_of

# The study's one flip confirmed at the item level (docs/study/README.md, *Findings*): on TruthfulQA,
# SmolLM2-135M beats Gemma 3 270M on T3 with diverse sampling and loses to it on T4 with moderate sampling,
# each win significant after Holm correction over the pair's 48 configurations. Both cells are sampled
# (5 seeds each), which is what makes this the demo's slowest choice per cell, and still within ten minutes
# on two CPU cores: measured in docs/analysis.md, *The demo*.
DEMO_MODELS = ("smollm2", "gemma3-270m")
DEMO_CONFIGS = ("truthfulqa/T3/diverse/0shot/free_form", "truthfulqa/T4/moderate/0shot/free_form")
DEMO_BENCHMARKS = tuple(benchmarks_of(DEMO_CONFIGS))
DEMO_TIER = "full"
DEMO_LIMIT = 24
DEMO_PRECISION = "fp32"  # the study's: a cell is compared with the published one only at the same precision
DEMO_OUT = Path("runs/demo")
STUDY_DIR = Path(__file__).resolve().parents[1] / "docs" / "study"  # this checkout's published study
DESCRIPTION = (
    f"Reproduce the first study's confirmed flip: the embedded small models {' and '.join(DEMO_MODELS)} on "
    f"{' and '.join(DEMO_CONFIGS)}, the first {DEMO_LIMIT} items of the fixed subset, in {DEMO_PRECISION} as the "
    "study ran; then analyse the grid, check each cell against the published study (docs/study/grid.csv) and say "
    "what flipped and what it rests on. Under ten minutes on two CPU cores from an empty cache (docs/analysis.md, "
    "The demo). Every sweep option below can change the slice (e.g. --benchmarks crows_pairs --tier logprob); "
    "--benchmarks or an axis filter replaces the study's two configurations; finished cells are reused.")
# the sweep options whose demo default differs from the sweep's: their help must say the demo's
DEMO_HELP = {
    "models": f"embedded names, HF folders, .gguf files or hub ids (demo default: {' '.join(DEMO_MODELS)})",
    "benchmarks": f"benchmarks to run (demo default: {' '.join(DEMO_BENCHMARKS)}, the study's two configurations)",
    "configs": f"configuration ids (demo default: {' '.join(DEMO_CONFIGS)}, unless --benchmarks or an axis filter "
               "is given)",
    "tier": f"sub-envelope (demo default: {DEMO_TIER}); also core, excl_t4, excl_diverse, free_form, logprob, "
            f"conservative_core. A tier alone runs it on {' '.join(DEMO_BENCHMARKS)} instead of the study's two "
            "configurations",
    "limit": f"score only the first N items of each fixed subset (demo default: {DEMO_LIMIT})",
    "precision": f"fp32, bf16 or nf4 (demo default: {DEMO_PRECISION}, the study's; bf16 is faster on a GPU or a CPU "
                 "with native bf16, but its cells are not the study's)",
}
AXIS_OPTIONS = ("benchmarks", "templates", "decodings", "shots", "scoring", "configs")


def register(sub: argparse._SubParsersAction) -> None:
    from safetyrepro.sweep.cli import add_sweep_arguments

    p = sub.add_parser("demo", help="run the embedded demo: the first study's confirmed flip, reproduced",
                       description=DESCRIPTION)
    p.add_argument("--out", type=Path, default=DEMO_OUT, help=f"output directory (demo default: {DEMO_OUT})")
    p.add_argument("--study", type=Path, default=STUDY_DIR,
                   help="the published study to check the cells against (default: docs/study of this checkout)")
    add_sweep_arguments(p, require_out=False, help_for=DEMO_HELP)
    p.set_defaults(func=run, models=None, benchmarks=None, tier=None, limit=DEMO_LIMIT, precision=DEMO_PRECISION)


def demo_selection(args: argparse.Namespace) -> argparse.Namespace:
    """The demo's models and configurations where the user named none of their own: the study's two
    configurations, or with only a tier named, that tier of the study's benchmark."""
    if not args.models and not getattr(args, "models_file", None):
        args.models = list(DEMO_MODELS)
    if not any(getattr(args, a, None) for a in AXIS_OPTIONS):
        if args.tier is None:
            args.configs = list(DEMO_CONFIGS)
        else:
            args.benchmarks = list(DEMO_BENCHMARKS)
    args.tier = args.tier or DEMO_TIER
    return args


# -- the closing summary ------------------------------------------------------------------------
def _pair_sentence(r, comparative: str, monotone: bool) -> str:
    a, b = r.model_a, r.model_b
    if monotone:
        counts = f"{a} scores higher on {r.n_plus}, {b} on {r.n_minus}"
    else:
        counts = f"{a} is {comparative} on {r.n_plus_better}, {b} on {r.n_minus_better}"
    ties = r.n_zero if monotone else r.n_zero_better
    return f"{a} vs {b}: {counts}" + (f", {ties} tied" if ties else "") + f" of {r.n_configs} configurations"


def summary_lines(analysis) -> list[str]:
    """What flipped, in words: per benchmark, the pairs whose better-reading verdict changes with the
    configuration, the orderings reached, and whether the items support the flips."""
    from safetyrepro.analysis.direction import direction

    lines = []
    detail = analysis.rho_flip_detail[analysis.rho_flip_detail["slice"] == "full"]
    orders = analysis.orderings_detail[analysis.orderings_detail["slice"] == "full"].set_index("benchmark")
    any_flip = False
    for benchmark in analysis.grid.benchmarks:
        rows = detail[detail["benchmark"] == benchmark]
        if rows.empty:
            continue
        better = direction(benchmark)
        n = int(rows["n_configs"].iloc[0])
        flipped = rows[rows["rho_flip_better"] > 0]
        o = orders.loc[benchmark]
        tied = int(o["n_tied_configs_better"])
        reached = (f"{int(o['n_orderings_better'])} of {int(o['n_possible'])} strict orderings of the models reached"
                   + (f", and {tied} configuration(s) tie some models" if tied else ""))
        if flipped.empty:
            lines.append(f"{benchmark} ({better.label}, {n} configurations): no verdict flipped; {reached}.")
            continue
        any_flip = True
        lines.append(f"{benchmark} ({better.label}, {n} configurations): {len(flipped)} of {len(rows)} pairwise "
                     f"verdicts flip with the configuration; {reached}.")
        for r in flipped.sort_values("rho_flip_better", ascending=False).itertuples():
            lines.append(f"  {_pair_sentence(r, better.comparative, better.monotone)} (rho_flip {r.rho_flip_better:.3f}, "
                         f"chance {r.chance:.3f})")
    if not any_flip:
        lines.append("Nothing flipped: in every pair one model was never strictly behind (ties aside). The models "
                     "differ by more than these configurations move their scores; a wider slice (--tier full) or more "
                     "items (--limit) gives the configurations more room.")
    flips = analysis.significant_flips
    if flips is not None and not flips.empty:
        holm = flips[(flips["slice"] == "full") & (flips["correction"] == "holm")]
        supported = holm[holm["rho_flip_sig_better"] > 0]  # the verdicts above read the better direction
        if any_flip and supported.empty:
            n_items = sorted(set(int(v) for v in analysis.grid.cells["n_items"]))
            lines.append(f"With {', '.join(map(str, n_items))} items per cell, no flip has a significant win each way "
                         "after Holm correction: the flips show how fragile a one-configuration verdict is, but the "
                         "items are too few to call any single configuration's winner.")
        elif not supported.empty:
            lines.append("Flips with a significant win each way after Holm correction over this run's configurations: "
                         + "; ".join(f"{r.benchmark} {r.model_a} vs {r.model_b} ({r.n_plus_sig_better} and "
                                     f"{r.n_minus_sig_better} "
                                     "configurations)" for r in supported.itertuples()) + ".")
    return lines


def study_lines(analysis, study: Path) -> list[str]:
    """This run against the published study: which cells have its score to the last digit, what its
    item-level tests said of these configurations, and which of the cells are degenerate (so that a flip
    between them is read for what it is)."""
    import pandas as pd

    cells = analysis.grid.cells
    lines = []
    published = study / "grid.csv"
    if not published.is_file():
        lines.append(f"No published study at {study} (no grid.csv): the cells are not checked against one.")
    else:
        key = ["model", "config_id", "precision", "n_items"]
        both = cells.merge(pd.read_csv(published)[key + ["score"]], on=key, how="left", suffixes=("", "_study"))
        found = both[both["score_study"].notna()]
        if found.empty:
            lines.append(f"None of these {len(cells)} cells is in the published study ({published}: same model, "
                         "configuration, precision and item count).")
        else:
            differ = found[found["score"] != found["score_study"]]
            lines.append(f"Against the published study ({published}): {len(found) - len(differ)} of {len(found)} "
                         "cells have its score to the last digit"
                         + (f"; {len(cells) - len(found)} of this run's cells are not in it" if len(found) < len(cells)
                            else "") + ".")
            for r in differ.itertuples():
                lines.append(f"  {r.model} {r.config_id}: {r.score:.4f} here, {r.score_study:.4f} in the study")
            if not differ.empty:
                lines.append("  (the same code on another CPU can round a float differently, and a sampled reply "
                             "then takes another path)")
        lines += _study_tests(cells, study / "analysis" / "item_tests.csv")
    degenerate = analysis.degenerate_cells
    if degenerate is not None and not degenerate.empty:
        lines.append(f"Caveat: {len(degenerate)} of these {len(cells)} cells are degenerate: "
                     + "; ".join(f"{r.model} {r.config_id} ({r.reason})" for r in degenerate.itertuples())
                     + ". Their scores count unreadable replies as wrong, so a verdict between such cells says as much "
                       "about which model's replies the template's parser can read as about what the benchmark measures.")
    return lines


def _study_tests(cells, path: Path) -> list[str]:
    """The study's item-level verdict on each configuration of this run, for the pairs of this run."""
    import pandas as pd

    if not path.is_file():
        return []
    tests = pd.read_csv(path)
    models = set(cells["model"])
    mine = tests[(tests["slice"] == "full") & tests["config_id"].isin(set(cells["config_id"]))
                 & tests["model_a"].isin(models) & tests["model_b"].isin(models)]
    if mine.empty:
        return []
    won = mine[~mine["winner_holm_better"].isin(["n.s.", "tie"])]
    lines = [f"In the study, each configuration's exact item-level test, Holm-adjusted over all of the pair's "
             f"configurations on its benchmark: {len(won)} of {len(mine)} here have a significant winner"
             + (":" if len(won) else ".")]
    for r in won.itertuples():
        lines.append(f"  {r.config_id}: {r.winner_holm_better} better ({r.model_a} vs {r.model_b}), p {r.p_value_better:.3g}, "
                     f"Holm {r.p_holm_better:.3g} over {r.family_size}")
    return lines


def quiet_openmp_waits() -> bool:
    """Let torch's idle OpenMP threads sleep instead of spin (OMP_WAIT_POLICY=PASSIVE), unless the user
    chose a policy. It must be set before torch loads; returns whether it was set here. On a two-core
    machine shared with other work, spinning threads wait for each other's time slices: one logprob
    cell took 92 s with the default policy and 12 s with PASSIVE (8.5 s single-threaded) at a load of 6."""
    if "OMP_WAIT_POLICY" in os.environ or "torch" in sys.modules:
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def run(args: argparse.Namespace) -> int:
    quiet_openmp_waits()
    from safetyrepro.analysis.cli import analyze_grid
    from safetyrepro.sweep.cli import options_from_args
    from safetyrepro.sweep.sweeper import Sweep

    t0 = time.time()
    args = demo_selection(args)
    models = ", ".join(args.models) if args.models else f"the models of {args.models_file}"
    what = (" and ".join(args.configs) if args.configs and not args.benchmarks
            else f"{', '.join(args.benchmarks or ['all benchmarks'])}, tier {args.tier}")
    print(f"demo: {models} on {what}, precision {args.precision}, first {args.limit} items of each fixed subset "
          f"-> {args.out}", flush=True)
    sweep = Sweep.create(options_from_args(args))
    result = sweep.run()
    sweep.print_summary(result)
    analysis_dir = args.out / "analysis"
    analysis, _ = analyze_grid(args.out / "grid.csv", analysis_dir, args.rules)
    print()
    for line in summary_lines(analysis) + study_lines(analysis, args.study):
        print(line)
    print(f"\ndemo finished in {time.time() - t0:.0f} s. Report: {analysis_dir / 'report.html'} (one self-contained "
          f"page; also report.md), GRID card: {analysis_dir / 'grid_card.md'}, grid: {args.out / 'grid.csv'}")
    return 2 if result.failed else 0
