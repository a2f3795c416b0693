"""`safetyrepro sweep`: the envelope × models through lm-eval or Inspect, resumable."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from safetyrepro.anytask.cli import add_task_arguments, sweep_task
from safetyrepro.errors import UserError
from safetyrepro.run_spec_cli import add_config_argument
from safetyrepro.sweep.options import PACKAGES, SWEEP, Profile, SweepOptions, flag
from safetyrepro.tasks.benchmark import TIE_RULES
from safetyrepro.tasks.subsets import FEWSHOT_DRAWS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="run the envelope for several models through one package (resumable)",
        description="Run every configuration of the chosen tier for every model through lm-eval or Inspect. "
        "Finished cells are kept: rerun the same command to resume after a crash.",
    )
    add_sweep_arguments(p)
    add_task_arguments(p, sweep=True)
    p.set_defaults(func=run)


# The sweep's flags, in options.FLAGS' order (tests/sweep/test_options.py): (dest, argparse keywords); the
# flag is the dest with `-` for `_`. Defaults are not here: SweepOptions' fields hold them (a command's
# Profile may have its own).
FLAGS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "models",
        dict(
            nargs="+",
            metavar="MODEL",
            help="embedded names (smollm2, gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b), HF folders, "
            ".gguf files or hub ids (SafetyRepro's engine); lm-eval:<model>:<model_args> (lm-eval's own model, "
            "e.g. lm-eval:hf:pretrained=/models/smol); inspect:<provider>/<model> (an Inspect provider, "
            "e.g. inspect:openai-api/llamacpp/smol)",
        ),
    ),
    (
        "models_file",
        dict(
            type=Path,
            metavar="FILE.yaml",
            help="models with labels, model args and precision/revision notes (docs/sweeps.md: Bring your own model)",
        ),
    ),
    ("benchmarks", dict(nargs="+", metavar="B", help="default: all five")),
    ("tier", dict(help="full, core, excl_t4, excl_diverse, free_form, logprob, conservative_core (default: full)")),
    ("templates", dict(nargs="+", metavar="T", help="only these templates (T1..T4)")),
    ("decodings", dict(nargs="+", metavar="D", help="only these decodings (greedy, moderate, diverse)")),
    ("shots", dict(nargs="+", type=int, metavar="K", help="only these few-shot counts (0, 3, 5)")),
    ("scoring", dict(nargs="+", metavar="S", help="only these scorings (free_form, logprob)")),
    (
        "configs",
        dict(
            nargs="+",
            metavar="ID",
            help="only these configurations, by id as in grid.csv (e.g. truthfulqa/T3/diverse/0shot/free_form); "
            "without --benchmarks, their benchmarks",
        ),
    ),
    ("limit", dict(type=int, help="score only the first N items of each fixed subset")),
    ("package", dict(choices=PACKAGES, help="default: lm-eval")),
    ("precision", dict(help="fp32, bf16 (default) or nf4")),
    (
        "tie_rule",
        dict(
            choices=TIE_RULES,
            help="logprob items whose top candidates tie: expected credit 1/k (default) or lm-eval's "
            "first-candidate-wins",
        ),
    ),
    (
        "fewshot_draw",
        dict(
            choices=FEWSHOT_DRAWS,
            help="few-shot demonstrations: fixed (one draw for every item, the default; claims hold it fixed) or "
            "per_item (each item's own, seeded by its id, so claims about the items generalise over the draw)",
        ),
    ),
    ("device", dict(help="cpu, cuda, cuda:1 ... (default: cuda if available, else cpu)")),
    ("batch_size", dict(type=int, help="prompts per forward pass (default: the engine's)")),
    (
        "subsample",
        dict(
            type=float,
            help="score a stratified share of the items (of the first --limit items with a limit): item-subset "
            "robustness",
        ),
    ),
    ("subset_seed", dict(type=int, help="seed of the --subsample draw")),
    ("executor", dict(choices=("local", "ray"), help="run cells here or on Ray workers")),
    ("address", dict(help="Ray cluster address (default: start a local Ray instance)")),
    ("workers", dict(type=int, help="Ray workers (default 2), each holding one model")),
    ("rules", dict(help="rules file (default: the packaged envelope.yaml)")),
    ("allow_rules_change", dict(action="store_true", help="continue a sweep written under other rules")),
    ("no_progress", dict(action="store_true", help="print one line per cell instead of a live bar")),
)


def add_sweep_arguments(p, profile: Profile = SWEEP) -> None:
    """The sweep's flags on `p` (a parser or an argument group), as `profile`'s command offers them: its
    help texts and defaults, its hidden flags left out of --help."""
    for dest, kwargs in FLAGS:
        kwargs = dict(kwargs, default=profile.default(dest))
        if dest in profile.hidden:
            kwargs["help"] = argparse.SUPPRESS
        elif dest in profile.help:
            kwargs["help"] = profile.help[dest]
        if dest == "package" and profile.any_package:
            kwargs["choices"] = None
        p.add_argument(flag(dest), **kwargs)
    if profile.require_out:
        p.add_argument("--out", required=True, type=Path, help="output directory (grid.csv, items.parquet, run.json)")
    add_config_argument(p)  # read before parsing (safetyrepro.cli.main): args.config is then None


def run(args: argparse.Namespace) -> int:
    if getattr(args, "task", None):
        return sweep_task(args)
    if getattr(args, "envelope", None):
        raise UserError(
            "--envelope goes with --task (a task SafetyRepro does not define); the five benchmarks' is --rules"
        )
    from safetyrepro.sweep.sweeper import Sweep

    sweep = Sweep.create(SweepOptions.from_args(args, SWEEP))
    result = sweep.run()
    sweep.print_summary(result)
    return 2 if result.failed else 0


def main() -> int:  # `python -m safetyrepro.sweep.cli`
    from safetyrepro.cli import main as cli_main

    return cli_main(["sweep", *sys.argv[1:]])


if __name__ == "__main__":
    t0 = time.time()
    sys.exit(main())
