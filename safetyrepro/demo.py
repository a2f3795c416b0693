"""`safetyrepro demo`: the embedded demo. Two small real models from PyPI over one benchmark's 12
logprob configurations: a slice wide enough for verdicts to move and small enough to finish within
ten minutes on two CPU cores (7.3 measured on a shared machine); then the grid, the analysis, and a
closing summary in words of what flipped."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# What fits the time on two CPU cores (measured, docs/analysis.md "The demo"): the logprob tier is 12
# configurations per benchmark (T1-T4 x 0/3/5 shots, greedy) and its cells are the cheapest (no
# generation). CrowS-Pairs is logprob-only, its cells are the shortest, and it shows the "closer to
# 0.5 is better" reading. SmolLM2-135M and Gemma 3 270M are the two fastest embedded models;
# Qwen2.5-Coder-0.5B would add a third pair of orderings at about twice the time (--models ...).
DEMO_MODELS = ("smollm2", "gemma3-270m")
DEMO_BENCHMARKS = ("crows_pairs",)
DEMO_TIER = "logprob"
DEMO_LIMIT = 24
DEMO_OUT = Path("runs/demo")
DESCRIPTION = (
    f"Run the embedded small models {' and '.join(DEMO_MODELS)} over the {DEMO_TIER} tier (12 configurations per "
    f"benchmark) of {' and '.join(DEMO_BENCHMARKS)}, on the first {DEMO_LIMIT} items of the fixed subset, then "
    "analyse the grid and say what flipped. It took 359 s (6.0 minutes) on two CPU cores in a fresh clone from an "
    "empty cache, weights joined on the way (README, Set-up; docs/analysis.md, The demo). Every sweep option below can "
    "widen the slice (e.g. --models smollm2 "
    "gemma3-270m qwen2.5-coder-0.5b --benchmarks crows_pairs xstest); finished cells are reused.")
# the sweep options whose demo default differs from the sweep's: their help must say the demo's
DEMO_HELP = {
    "models": f"embedded names, HF folders, .gguf files or hub ids (demo default: {' '.join(DEMO_MODELS)})",
    "benchmarks": f"benchmarks to run (demo default: {' '.join(DEMO_BENCHMARKS)})",
    "tier": f"sub-envelope (demo default: {DEMO_TIER}, 12 configurations per benchmark); also full, core, "
            "excl_t4, excl_diverse, free_form, conservative_core",
    "limit": f"score only the first N items of each fixed subset (demo default: {DEMO_LIMIT})",
    "precision": "fp32, bf16 or nf4 (demo default: bf16 on a GPU or a CPU with native bf16 (AVX512-BF16, AMX), "
                 "else fp32: on an AVX2-only CPU bf16 matrix products are several times slower than fp32)",
}


def register(sub: argparse._SubParsersAction) -> None:
    from safetyrepro.sweep.cli import add_sweep_arguments

    p = sub.add_parser("demo", help="run the embedded demo: two small models, 12 configurations, the report",
                       description=DESCRIPTION)
    p.add_argument("--out", type=Path, default=DEMO_OUT, help=f"output directory (demo default: {DEMO_OUT})")
    add_sweep_arguments(p, require_out=False, help_for=DEMO_HELP)
    p.set_defaults(func=run, models=None, benchmarks=None, tier=DEMO_TIER, limit=DEMO_LIMIT, precision=None)


def native_bf16_cpu(cpuinfo: str | None = None) -> bool:
    """Whether the CPU multiplies bf16 natively (AVX512-BF16 or AMX); without it torch emulates bf16."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = set(cpuinfo.split())
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def demo_precision(device: str | None) -> str:
    """bf16 where it is fast (a GPU, a CPU with native bf16), else fp32."""
    import torch

    on_gpu = device.startswith("cuda") if device else torch.cuda.is_available()
    return "bf16" if on_gpu or native_bf16_cpu() else "fp32"


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
            lines.append("Flips with a significant win each way after Holm correction: "
                         + "; ".join(f"{r.benchmark} {r.model_a} vs {r.model_b} ({r.n_plus_sig_better} and "
                                     f"{r.n_minus_sig_better} "
                                     "configurations)" for r in supported.itertuples()) + ".")
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
    if not args.models and not getattr(args, "models_file", None):
        args.models = list(DEMO_MODELS)
    args.benchmarks = args.benchmarks or list(DEMO_BENCHMARKS)
    args.precision = args.precision or demo_precision(args.device)
    models = ", ".join(args.models) if args.models else f"the models of {args.models_file}"
    print(f"demo: {models} on {', '.join(args.benchmarks)}, tier {args.tier}, precision {args.precision}, "
          f"first {args.limit} items of each fixed subset -> {args.out}", flush=True)
    sweep = Sweep.create(options_from_args(args))
    result = sweep.run()
    sweep.print_summary(result)
    analysis_dir = args.out / "analysis"
    analysis, _ = analyze_grid(args.out / "grid.csv", analysis_dir, args.rules)
    print()
    for line in summary_lines(analysis):
        print(line)
    print(f"\ndemo finished in {time.time() - t0:.0f} s. Report: {analysis_dir / 'report.html'} (one self-contained "
          f"page; also report.md), GRID card: {analysis_dir / 'grid_card.md'}, grid: {args.out / 'grid.csv'}")
    return 2 if result.failed else 0
