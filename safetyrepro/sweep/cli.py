"""`safetyrepro sweep`: the envelope × models through lm-eval or Inspect, resumable."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from safetyrepro.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="run the envelope for several models through one package (resumable)",
        description="Run every configuration of the chosen tier for every model through lm-eval or Inspect. "
        "Finished cells are kept: rerun the same command to resume after a crash.",
    )
    add_sweep_arguments(p)
    p.set_defaults(func=run)


def add_sweep_arguments(
    p: argparse.ArgumentParser,
    require_out: bool = True,
    help_for: dict[str, str] | None = None,
    any_package: bool = False,
) -> None:
    """The sweep's flags on `p`; `help_for` (dest -> text) replaces some help texts (the demo's defaults);
    `any_package`: --package takes any name (certify's replay reads a grid of any package group)."""
    if help_for:
        p = _HelpOverride(p, help_for)  # type: ignore[assignment]  # duck-types the ArgumentParser calls below
    p.add_argument(
        "--models",
        nargs="+",
        metavar="MODEL",
        help="embedded names (smollm2, gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b), HF folders, "
        ".gguf files or hub ids (SafetyRepro's engine); lm-eval:<model>:<model_args> (lm-eval's own model, "
        "e.g. lm-eval:hf:pretrained=/models/smol); inspect:<provider>/<model> (an Inspect provider, "
        "e.g. inspect:openai-api/llamacpp/smol)",
    )
    p.add_argument(
        "--models-file",
        type=Path,
        metavar="FILE.yaml",
        help="models with labels, model args and precision/revision notes (docs/sweeps.md: Bring your own model)",
    )
    p.add_argument("--benchmarks", nargs="+", metavar="B", help="default: all five")
    p.add_argument(
        "--tier",
        default="full",
        help="full, core, excl_t4, excl_diverse, free_form, logprob, conservative_core (default: full)",
    )
    p.add_argument("--templates", nargs="+", metavar="T", help="only these templates (T1..T4)")
    p.add_argument("--decodings", nargs="+", metavar="D", help="only these decodings (greedy, moderate, diverse)")
    p.add_argument("--shots", nargs="+", type=int, metavar="K", help="only these few-shot counts (0, 3, 5)")
    p.add_argument("--scoring", nargs="+", metavar="S", help="only these scorings (free_form, logprob)")
    p.add_argument(
        "--configs",
        nargs="+",
        metavar="ID",
        help="only these configurations, by id as in grid.csv (e.g. truthfulqa/T3/diverse/0shot/free_form); "
        "without --benchmarks, their benchmarks",
    )
    p.add_argument("--limit", type=int, help="score only the first N items of each fixed subset")
    p.add_argument(
        "--package", default="lm-eval", choices=None if any_package else ("lm-eval", "inspect"), help="default: lm-eval"
    )
    p.add_argument("--precision", default="bf16", help="fp32, bf16 (default) or nf4")
    p.add_argument(
        "--tie-rule",
        default="expected",
        choices=("expected", "first"),
        help="logprob items whose top candidates tie: expected credit 1/k (default) or lm-eval's first-candidate-wins",
    )
    p.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available, else cpu)")
    p.add_argument("--batch-size", type=int, help="prompts per forward pass (default: the engine's)")
    p.add_argument(
        "--subsample",
        type=float,
        help="score a stratified share of the items (of the first --limit items with a limit): item-subset robustness",
    )
    p.add_argument("--subset-seed", type=int, help="seed of the --subsample draw")
    p.add_argument("--executor", default="local", choices=("local", "ray"), help="run cells here or on Ray workers")
    p.add_argument("--address", help="Ray cluster address (default: start a local Ray instance)")
    p.add_argument("--workers", type=int, default=2, help="Ray workers (default 2), each holding one model")
    p.add_argument("--rules", help="rules file (default: the packaged envelope.yaml)")
    p.add_argument("--allow-rules-change", action="store_true", help="continue a sweep written under other rules")
    p.add_argument("--no-progress", action="store_true", help="print one line per cell instead of a live bar")
    if require_out:
        p.add_argument("--out", required=True, type=Path, help="output directory (grid.csv, items.parquet, run.json)")


def options_from_args(args: argparse.Namespace):
    """The argparse namespace as a SweepOptions (the only place below the command line that reads it)."""
    from safetyrepro.adapters.catalogue.model_specs import load_models_file, parse_model_spec
    from safetyrepro.sweep.plan import SweepOptions

    models = [parse_model_spec(m) for m in (args.models or [])]
    if getattr(args, "models_file", None):
        models += load_models_file(args.models_file)
    if not models:
        raise UserError("no model given: use --models and/or --models-file")
    filters = {
        "template": args.templates,
        "decoding": args.decodings,
        "shots": args.shots,
        "scoring": args.scoring,
        "config": getattr(args, "configs", None),
    }
    return SweepOptions(
        models=tuple(models),
        out=Path(args.out),
        benchmarks=tuple(args.benchmarks) if args.benchmarks else None,
        tier=args.tier,
        filters={k: v for k, v in filters.items() if v},
        limit=args.limit,
        package=args.package,
        precision=args.precision,
        device=args.device,
        batch_size=args.batch_size,
        subsample=args.subsample,
        subset_seed=args.subset_seed,
        executor=args.executor,
        address=args.address,
        workers=args.workers,
        rules=args.rules,
        allow_rules_change=args.allow_rules_change,
        progress=not args.no_progress,
        tie_rule=getattr(args, "tie_rule", None) or "expected",
    )


def run(args: argparse.Namespace) -> int:
    from safetyrepro.sweep.sweeper import Sweep

    sweep = Sweep.create(options_from_args(args))
    result = sweep.run()
    sweep.print_summary(result)
    return 2 if result.failed else 0


def main() -> int:  # `python -m safetyrepro.sweep.cli`
    from safetyrepro.cli import main as cli_main

    return cli_main(["sweep", *sys.argv[1:]])


if __name__ == "__main__":
    t0 = time.time()
    sys.exit(main())


class _HelpOverride:
    """`add_argument` of a parser with some help texts replaced (argparse has no public way to change
    an added argument's help)."""

    def __init__(self, parser: argparse.ArgumentParser, help_for: dict[str, str]):
        self.parser, self.help_for = parser, help_for

    def add_argument(self, *flags, **kwargs):
        dest = kwargs.get("dest") or flags[0].lstrip("-").replace("-", "_")
        if dest in self.help_for:
            kwargs["help"] = self.help_for[dest]
        return self.parser.add_argument(*flags, **kwargs)

    def __getattr__(self, name):
        return getattr(self.parser, name)
