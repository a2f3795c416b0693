"""`safetyrepro demo`: one question, answered with a certificate. On BBQ, is Qwen2.5-Coder-0.5B less biased
than SmolLM2-135M, or does the answer depend on how the evaluator prompts them? The demo certifies it live
(`safetyrepro certify`, docs/certify.md) on BBQ's 300-item subset, on the two configurations where the
studies found the lead on each side: chain of thought (T4, greedy, zero-shot, free-form), where Qwen
leads, and the role-framed template with three examples scored by log-probabilities (T2, greedy,
3-shot), where SmolLM2 does. It starts from the records the studies published (docs/study: the first 24
items of every configuration; docs/study/certified: what the certified study evaluated), evaluates live
only what they lack, in paired rounds, and stops as soon as the verdict is known; then it says the
verdict in one sentence, what it cost against the full grid, and where the certified study is.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from safetyrepro.sweep.cli import add_sweep_arguments
from safetyrepro.sweep.options import Profile, SweepOptions

DEMO_MODELS = ("qwen2.5-coder-0.5b", "smollm2")
DEMO_CONFIGS = ("bbq/T4/greedy/0shot/free_form", "bbq/T2/greedy/3shot/logprob")
DEMO_PRECISION = "fp32"  # the studies': their records are the demo's first draws
DEMO_BUDGET = "12m"  # CPU time of model work (two cores: about 6-8 minutes of wall time); loading is outside it
DEMO_BATCH = 16  # items per configuration per round: a generation call costs about the same for 2 items or 16
DEMO_OUT = Path("runs/demo")
STUDY_DIR = Path(__file__).resolve().parents[1] / "docs" / "study"  # this checkout's published studies
STUDY = "docs/study/certified/README.md"
DESCRIPTION = (
    f"Answer one question with a certificate: on BBQ, is {DEMO_MODELS[0]} less biased than {DEMO_MODELS[1]}, or "
    f"does the answer depend on the prompt? Certifies the pair live on {' and '.join(DEMO_CONFIGS)} over BBQ's "
    "300-item subset, starting from the studies' published records (docs/study, docs/study/certified) and "
    "evaluating paired items only where the verdict is still open (docs/certify.md), then says the verdict in one "
    f"sentence and what it cost against the full grid. At most {DEMO_BUDGET} of evaluation (docs/measured.md). "
    "The sweep's flags below change the question (other models, benchmarks or configurations)."
)
AXIS_OPTIONS = ("benchmarks", "templates", "decodings", "shots", "scoring", "configs")
ONE_PLACE = "the demo runs its models here (--executor local); `safetyrepro certify --executor ray` runs them on Ray"
# the sweep's flags as the demo takes them: its question unless the user asks another, certified live here
DEMO = Profile(
    "demo",
    refused={"executor": ONE_PLACE},
    fixed={"executor": "local"},
    defaults={"precision": DEMO_PRECISION},
    fallback={"models": (list(DEMO_MODELS), ("models_file",)), "configs": (list(DEMO_CONFIGS), AXIS_OPTIONS)},
    help={
        "models": f"embedded names, HF folders, .gguf files or hub ids (demo default: {' '.join(DEMO_MODELS)})",
        "configs": f"configuration ids (demo default: {' '.join(DEMO_CONFIGS)}, unless --benchmarks or an axis "
        "filter is given)",
        "precision": f"fp32, bf16 or nf4 (demo default: {DEMO_PRECISION}, the studies')",
    },
    require_out=False,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="run the embedded demo: one pairwise verdict, certified live", description=DESCRIPTION
    )
    p.add_argument("--out", type=Path, default=DEMO_OUT, help=f"output directory (demo default: {DEMO_OUT})")
    p.add_argument("--alpha", type=float, default=0.05, help="familywise error of the certificate (default 0.05)")
    p.add_argument(
        "--budget",
        default=DEMO_BUDGET,
        help=f"evaluation budget, paired evaluations or wall time (demo default: {DEMO_BUDGET})",
    )
    p.add_argument(
        "--study",
        type=Path,
        default=STUDY_DIR,
        help="the published studies whose records are taken as evaluated (default: docs/study of this "
        "checkout; a folder without them: everything is evaluated live)",
    )
    add_sweep_arguments(p, DEMO)
    p.set_defaults(func=run)


def study_records(study: Path) -> list[Path]:
    """The published records the demo starts from: the first study's (its --limit 24 records are the
    first 24 draws of every configuration) and the certified study's, where this checkout has them."""
    return [folder for folder in (study, study / "certified") if (folder / "items.parquet").is_file()]


def quiet_openmp_waits() -> bool:
    """Let torch's idle OpenMP threads sleep instead of spin (OMP_WAIT_POLICY=PASSIVE), unless the user
    chose a policy. It must be set before torch loads; returns whether it was set here. On a two-core
    machine shared with other work, spinning threads wait for each other's time slices: one logprob
    cell took 92 s with the default policy and 12 s with PASSIVE (8.5 s single-threaded) at a load of 6."""
    if "OMP_WAIT_POLICY" in os.environ or "torch" in sys.modules:
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def closing_lines(result, full_hours: float | None, live: int | None = None, subset=None) -> list[str]:
    """The demo's last words: per pair the verdict in one sentence on its target, beside it the same
    items read for this sample only (`subset`, a `--target subset` reading of the same records), what it
    cost against the full grid (`live`: model evaluations run here, the rest came from published records),
    and where the full study is."""
    from safetyrepro.certify.outputs import TARGET_WORDS, verdict_sentence

    target = result.options.target
    lines = [
        f"About the models: {verdict_sentence(p, result.claims, result.options.delta, target)}" for p in result.pairs
    ]
    if subset is not None:
        lines += [
            f"About these items only (--target subset, the paper's reading): "
            f"{verdict_sentence(p, subset.claims, subset.options.delta, 'subset')}"
            for p in subset.pairs
        ]
        for p, q in zip(result.pairs, subset.pairs, strict=True):
            if q.verdict == "flip" and p.verdict != "flip":
                lines.append(
                    f"{p.benchmark}: on these items the lead flips, as the paper's metric sees it; beyond item "
                    f"noise only {', '.join(p.deciding) or 'nothing'} holds, so the flip is partly this sample's."
                )
    share = result.paired_evaluations / max(result.full_paired_evaluations, 1)
    cost = (
        f"It used {result.paired_evaluations:,} of the full grid's {result.full_paired_evaluations:,} paired "
        f"evaluations ({100 * share:.0f} %)"
    )
    if live is not None:
        cost += (
            f", {live:,} model evaluations run here (the rest from the studies' published records) in "
            f"{result.seconds:.0f} s"
        )
    else:
        cost += f", in {result.seconds:.0f} s of evaluation"
    if full_hours is not None:
        cost += f"; scoring the whole grid would take about {full_hours:.1f} h here"
    lines.append(
        cost + f". Every claim holds with probability at least {1 - result.options.alpha:.2f}, all together; the "
        f"first lines are {TARGET_WORDS[target]}."
    )
    if result.stopped_by in ("budget", "interrupted"):
        lines.append("It stopped before the answer: rerun the same command to go on (it resumes where it stopped).")
    lines.append(f"The certified study (three models, five benchmarks, the full envelope): {STUDY}.")
    return lines


def run(args: argparse.Namespace) -> int:
    quiet_openmp_waits()
    from safetyrepro.certify.algorithm import CertifyOptions
    from safetyrepro.certify.cli import parse_budget
    from safetyrepro.certify.live import LIVE_ROUND_SECONDS, run_live
    from safetyrepro.errors import UserError

    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha {args.alpha}: must be in (0, 1)")
    t0 = time.time()
    evaluations, seconds = parse_budget(args.budget)
    options = CertifyOptions(
        alpha=args.alpha,
        budget_evaluations=evaluations,
        budget_seconds=seconds,
        order="subset",
        round_seconds=LIVE_ROUND_SECONDS,
        batch=DEMO_BATCH,
    )
    sweep_options = SweepOptions.from_args(args, DEMO)
    configs, benchmarks = sweep_options.filters.get("config"), sweep_options.benchmarks
    named = args.models or ([] if args.models_file else DEMO_MODELS)
    models = " and ".join(named) if named else f"the models of {args.models_file}"
    what = ", ".join(configs) if configs and not benchmarks else ", ".join(benchmarks or [])
    records = study_records(args.study)
    print(
        f"demo: certify {models} on {what} ({sweep_options.precision}; -> {args.out})"
        + (f"; starting from the records in {', '.join(map(str, records))}" if records else ""),
        flush=True,
    )
    say = lambda line: print(f"certify: {line}", file=sys.stderr, flush=True)  # noqa: E731
    # the configurations were chosen from BBQ's envelope (by the studies): alpha covers all of it
    selection = "family" if configs else "none"
    result, _ = run_live(sweep_options, Path(args.out), options, say, records=records, selection=selection)
    cost = json.loads((Path(args.out) / "cost.json").read_text())
    # the same records read for this sample only: no model runs, a folder beside the demo's
    subset_out = Path(f"{args.out}.subset")
    subset, _ = run_live(
        sweep_options,
        subset_out,
        dataclasses.replace(options, target="subset", held_only=True, budget_seconds=None),
        None,
        records=[Path(args.out), *records],
        selection=selection,
    )
    full = cost.get("measured_seconds_full_grid")
    print()
    hours = None if full is None else full / 3600
    for line in closing_lines(result, hours, cost.get("model_evaluations_live"), subset):
        print(line)
    print(
        f"\ndemo finished in {time.time() - t0:.0f} s. Report: {Path(args.out) / 'report.md'}; claims: "
        f"{Path(args.out) / 'claims.csv'}"
    )
    return 130 if result.stopped_by == "interrupted" else 0
