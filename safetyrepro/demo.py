"""`safetyrepro demo`: one question, answered with a certificate. Is SmolLM2-135M less biased than
Qwen2.5-Coder-0.5B on BBQ, or does the answer depend on how the evaluator prompts them? The demo
certifies it live (`safetyrepro certify`, docs/certify.md): both models on BBQ's 300-item subset, over
eight configurations of the envelope (templates T2 and T4, greedy decoding, 0 and 3 shots, both
scorings), paired items in rounds only where the verdict is still open, stopping as soon as it is
known; then it says the verdict in one sentence, what it cost against the full grid, and where the
certified study of all three models on all five benchmarks is.

Why this pair and these configurations: in the first study (24 items, docs/study) SmolLM2 led on BBQ
with the role-framed T2 template and three shots, by 29 points, and Qwen led with the chain-of-thought
T4 template at zero shots, by 29 points, every one of its wins on an item SmolLM2 got wrong; the
certified study (docs/study/certified) certifies pairs like this one at the scale of the whole envelope.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

DEMO_MODELS = ("qwen2.5-coder-0.5b", "smollm2")
DEMO_BENCHMARKS = ("bbq",)
DEMO_FILTERS = {"templates": ["T2", "T4"], "decodings": ["greedy"], "shots": [0, 3]}
DEMO_PRECISION = "fp32"  # the studies': the demo's items are theirs, item for item
DEMO_BUDGET = "7m"       # of evaluation: with loading, the demo stays within ten minutes on two cores
DEMO_OUT = Path("runs/demo")
STUDY = "docs/study/certified/README.md"
DESCRIPTION = (
    f"Answer one question with a certificate: on BBQ, is {DEMO_MODELS[1]} less biased than {DEMO_MODELS[0]}, or "
    "does the answer depend on the prompt? Certifies the pair live over eight configurations (templates T2 and "
    "T4, greedy, 0 and 3 shots, both scorings) of BBQ's 300-item subset, evaluating paired items only where the "
    "verdict is still open (docs/certify.md), then says the verdict in one sentence and what it cost against "
    f"the full grid. About 5 minutes on two CPU cores from an empty cache (at most {DEMO_BUDGET} of evaluation). "
    "The sweep's flags below change the question (other models, benchmarks or configurations).")
DEMO_HELP = {
    "models": f"embedded names, HF folders, .gguf files or hub ids (demo default: {' '.join(DEMO_MODELS)})",
    "benchmarks": f"benchmarks to certify (demo default: {' '.join(DEMO_BENCHMARKS)})",
    "templates": f"only these templates (demo default: {' '.join(DEMO_FILTERS['templates'])}, unless --benchmarks, "
                 "--configs or another axis is given)",
    "decodings": f"only these decodings (demo default: {' '.join(DEMO_FILTERS['decodings'])}, as for --templates)",
    "shots": f"only these few-shot counts (demo default: {' '.join(map(str, DEMO_FILTERS['shots']))}, as for "
             "--templates)",
    "precision": f"fp32, bf16 or nf4 (demo default: {DEMO_PRECISION}, the studies')",
}
AXIS_OPTIONS = ("benchmarks", "templates", "decodings", "shots", "scoring", "configs")


def register(sub: argparse._SubParsersAction) -> None:
    from safetyrepro.sweep.cli import add_sweep_arguments

    p = sub.add_parser("demo", help="run the embedded demo: one pairwise verdict, certified live",
                       description=DESCRIPTION)
    p.add_argument("--out", type=Path, default=DEMO_OUT, help=f"output directory (demo default: {DEMO_OUT})")
    p.add_argument("--alpha", type=float, default=0.05, help="familywise error of the certificate (default 0.05)")
    p.add_argument("--budget", default=DEMO_BUDGET,
                   help=f"evaluation budget, paired evaluations or wall time (demo default: {DEMO_BUDGET})")
    add_sweep_arguments(p, require_out=False, help_for=DEMO_HELP)
    p.set_defaults(func=run, models=None, benchmarks=None, precision=DEMO_PRECISION)


def demo_selection(args: argparse.Namespace) -> argparse.Namespace:
    """The demo's models and configurations where the user named none of their own."""
    if not args.models and not getattr(args, "models_file", None):
        args.models = list(DEMO_MODELS)
    if not any(getattr(args, a, None) for a in AXIS_OPTIONS):
        args.benchmarks = list(DEMO_BENCHMARKS)
        for axis, values in DEMO_FILTERS.items():
            setattr(args, axis, list(values))
    return args


def quiet_openmp_waits() -> bool:
    """Let torch's idle OpenMP threads sleep instead of spin (OMP_WAIT_POLICY=PASSIVE), unless the user
    chose a policy. It must be set before torch loads; returns whether it was set here. On a two-core
    machine shared with other work, spinning threads wait for each other's time slices: one logprob
    cell took 92 s with the default policy and 12 s with PASSIVE (8.5 s single-threaded) at a load of 6."""
    if "OMP_WAIT_POLICY" in os.environ or "torch" in sys.modules:
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def closing_lines(result, full_hours: float | None) -> list[str]:
    """The demo's last words: per pair the verdict in one sentence, what it cost against the full grid,
    and where the full study is."""
    from safetyrepro.certify.outputs import verdict_sentence

    lines = [verdict_sentence(p, result.claims, result.options.delta) for p in result.pairs]
    share = result.paired_evaluations / max(result.full_paired_evaluations, 1)
    cost = (f"It needed {result.paired_evaluations:,} of the full grid's {result.full_paired_evaluations:,} paired "
            f"evaluations ({100 * share:.0f} %) and {result.seconds:.0f} s of evaluation")
    if full_hours is not None:
        cost += f"; scoring the whole grid would take about {full_hours:.1f} h here"
    lines.append(cost + f". Every claim holds with probability at least {1 - result.options.alpha:.2f}, all together.")
    lines.append(f"The certified study (three models, five benchmarks, the full envelope): {STUDY}.")
    return lines


def run(args: argparse.Namespace) -> int:
    quiet_openmp_waits()
    from safetyrepro.certify.algorithm import CertifyOptions
    from safetyrepro.certify.cli import parse_budget
    from safetyrepro.certify.live import LIVE_ROUND_SECONDS, run_live
    from safetyrepro.errors import UserError
    from safetyrepro.sweep.cli import options_from_args

    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha {args.alpha}: must be in (0, 1)")
    t0 = time.time()
    args = demo_selection(args)
    evaluations, seconds = parse_budget(args.budget)
    options = CertifyOptions(alpha=args.alpha, budget_evaluations=evaluations, budget_seconds=seconds,
                             order="subset", round_seconds=LIVE_ROUND_SECONDS)
    models = " and ".join(args.models) if args.models else f"the models of {args.models_file}"
    print(f"demo: certify {models} on {', '.join(args.benchmarks or ['the named configurations'])} "
          f"({args.precision}; -> {args.out})", flush=True)
    say = lambda line: print(f"certify: {line}", file=sys.stderr, flush=True)  # noqa: E731
    result, _ = run_live(options_from_args(args), Path(args.out), options, say)
    full = json.loads((Path(args.out) / "cost.json").read_text()).get("measured_seconds_full_grid")
    print()
    for line in closing_lines(result, None if full is None else full / 3600):
        print(line)
    print(f"\ndemo finished in {time.time() - t0:.0f} s. Report: {Path(args.out) / 'report.md'}; claims: "
          f"{Path(args.out) / 'claims.csv'}")
    return 130 if result.stopped_by == "interrupted" else 0
