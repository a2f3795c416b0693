"""`safetyrepro sweep`: the envelope × models through lm-eval or Inspect, resumable."""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from safetyrepro.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep", help="run the envelope for several models through one package (resumable)",
        description="Run every configuration of the chosen tier for every model through lm-eval or Inspect. "
        "Finished cells are kept: rerun the same command to resume after a crash.")
    add_sweep_arguments(p)
    p.set_defaults(func=run)


def add_sweep_arguments(p: argparse.ArgumentParser, require_out: bool = True) -> None:
    p.add_argument("--models", nargs="+", required=require_out, metavar="MODEL",
                   help="embedded names (smollm2, gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b), HF folders, "
                   ".gguf files or hub ids")
    p.add_argument("--benchmarks", nargs="+", metavar="B", help="default: all five")
    p.add_argument("--tier", default="full", help="full, core, excl_t4, excl_diverse, free_form, logprob, "
                   "conservative_core (default: full)")
    p.add_argument("--templates", nargs="+", metavar="T", help="only these templates (T1..T4)")
    p.add_argument("--decodings", nargs="+", metavar="D", help="only these decodings (greedy, moderate, diverse)")
    p.add_argument("--shots", nargs="+", type=int, metavar="K", help="only these few-shot counts (0, 3, 5)")
    p.add_argument("--scoring", nargs="+", metavar="S", help="only these scorings (free_form, logprob)")
    p.add_argument("--limit", type=int, help="score only the first N items of each fixed subset")
    p.add_argument("--package", default="lm-eval", choices=("lm-eval", "inspect"), help="default: lm-eval")
    p.add_argument("--precision", default="bf16", help="fp32, bf16 (default) or nf4")
    p.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available, else cpu)")
    p.add_argument("--batch-size", type=int, help="prompts per forward pass (default: the engine's)")
    p.add_argument("--subsample", type=float, help="score a stratified share of each subset (item-subset robustness)")
    p.add_argument("--subset-seed", type=int, help="seed of the --subsample draw")
    p.add_argument("--executor", default="local", choices=("local", "ray"), help="run cells here or on Ray workers")
    p.add_argument("--address", help="Ray cluster address (default: start a local Ray instance)")
    p.add_argument("--workers", type=int, default=2, help="Ray workers (default 2), each holding one model")
    p.add_argument("--rules", help="rules file (default: the packaged envelope.yaml)")
    p.add_argument("--allow-rules-change", action="store_true", help="continue a sweep written under other rules")
    p.add_argument("--no-progress", action="store_true", help="print one line per cell instead of a live bar")
    if require_out:
        p.add_argument("--out", required=True, type=Path, help="output directory (grid.csv, items.parquet, run.json)")


def check_model_name(name: str) -> None:
    from safetyrepro.adapters.registry import EMBEDDED

    if name in EMBEDDED or Path(name).expanduser().exists() or re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        return
    raise UserError(f"unknown model {name!r}; use an embedded name ({', '.join(EMBEDDED)}), "
                    "a local HF folder or .gguf file, or a hub id org/name")


def run(args: argparse.Namespace) -> int:
    from safetyrepro.sweep.sweeper import Sweep

    sweep = Sweep.from_args(args)
    result = sweep.run()
    sweep.print_summary(result)
    return 2 if result.failed else 0


def main() -> int:  # `python -m safetyrepro.sweep.cli`
    from safetyrepro.cli import main as cli_main

    return cli_main(["sweep", *sys.argv[1:]])


if __name__ == "__main__":
    t0 = time.time()
    sys.exit(main())
