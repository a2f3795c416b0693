"""`safetyrepro crosspkg`: the cross-package anchor study and its axis-by-axis decomposition.

    safetyrepro crosspkg --model smollm2 --limit 50 --out runs/crosspkg
    python -m safetyrepro.crosspkg --model qwen2.5-coder-0.5b --benchmarks truthfulqa bbq --out DIR

Steps (each writes into --out and is skipped on a rerun when its output is there, unless --fresh):
1. native: the anchor through lm-eval, HELM and Inspect, each with its own default stack
   (`native/<package>.jsonl` per-item records, the packages' own logs/specs/configs);
2. tables: Table 7 (scores, range, items, overlap) and Table 8 (what differs, read from what ran);
3. emulate: each stack rebuilt inside SafetyRepro as values of six axes, checked item by item
   against the real package (agreement), then the score gap between two stacks attributed to the
   axes with exact Shapley values (table + waterfall figure);
4. report.md tying them together.
"""

from __future__ import annotations

import argparse
import sys

DEFAULT_OUT = "runs/crosspkg"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "crosspkg",
        help="the anchor configuration through lm-eval, HELM and Inspect package defaults, "
        "and the decomposition of the spread",
        description=__doc__.split("\n\n")[0],
    )
    add_arguments(p)
    p.set_defaults(func=run_command)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        default="smollm2",
        help="embedded label, .gguf file, HF folder or hub id (default smollm2; the paper: Qwen2.5-7B-Instruct)",
    )
    p.add_argument(
        "--benchmarks",
        nargs="+",
        default=["truthfulqa", "bbq", "toxigen"],
        metavar="B",
        help="any of truthfulqa bbq toxigen (default: all three)",
    )
    p.add_argument("--limit", type=int, default=300, help="items per benchmark and package (default 300, the paper's)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument(
        "--packages",
        nargs="+",
        default=["lm-eval", "helm", "inspect"],
        metavar="P",
        help="which packages to run (default all three)",
    )
    p.add_argument("--precision", default="bf16", choices=("bf16", "fp32"), help="anchor precision (default bf16)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (default)")
    p.add_argument("--seed", type=int, default=42, help="anchor seed (default 42)")
    p.add_argument("--max-new-tokens", type=int, default=96, help="anchor max_new_tokens (default 96)")
    p.add_argument("--batch-size", type=int, default=8, help="lm-eval and emulation batch size (default 8)")
    p.add_argument(
        "--pairs",
        nargs="+",
        default=["lm-eval:helm", "helm:inspect"],
        metavar="A:B",
        help="stack walks to decompose (default lm-eval:helm helm:inspect; lm-eval:inspect also works)",
    )
    p.add_argument(
        "--decompose-limit",
        type=int,
        default=None,
        metavar="N",
        help="walk the decomposition on the first N items of each stack (default: all); the agreement check uses all",
    )
    p.add_argument("--no-decompose", action="store_true", help="run the packages and write Tables 7/8 only")
    p.add_argument("--fresh", action="store_true", help="rerun every step even when its output exists")
    p.add_argument(
        "--helm-env",
        metavar="DIR",
        help="only write a helm-run working folder for SafetyRepro's HELM run entries (prod_env with the "
        "model under HELM's client and under SafetyRepro's engine) into DIR, print the commands, exit",
    )


def run_command(args: argparse.Namespace) -> int:
    if args.helm_env:
        return write_helm_env(args)
    from safetyrepro.crosspkg.study import run_study

    return run_study(args)


def write_helm_env(args: argparse.Namespace) -> int:
    from pathlib import Path

    from safetyrepro.crosspkg.helm_env import helm_bin, write_plugin_env

    run_dir = Path(args.helm_env)
    info = write_plugin_env(run_dir, args.model, args.precision, "cuda" if args.device.startswith("cuda") else "cpu")
    b = helm_bin(required=False)
    run = f"{b}/helm-run" if b else "helm-run"
    summ = f"{b}/helm-summarize" if b else "helm-summarize"
    m, e = info["model"], info["engine_deployment"]
    print(f"wrote {run_dir}/prod_env (model {m}; deployments {m} = HELM's HuggingFaceClient, {e} = SafetyRepro engine)")
    print(
        f"cd {run_dir} && export NLTK_DATA=$PWD/nltk_data HF_HUB_OFFLINE=1 "
        f"SAFETYREPRO_DATA_DIR=${{SAFETYREPRO_DATA_DIR}}"
    )
    print(
        f"{run} --run-entries safetyrepro_bbq:template=T3,scoring=logprob,model={m},model_deployment={e} "
        f"safetyrepro_bbq:template=T3,scoring=free_form,model={m},model_deployment={e} "
        f"--suite safetyrepro --max-eval-instances 300"
    )
    print(f"{summ} --suite safetyrepro --auto-generate-schema")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m safetyrepro.crosspkg ...` / the cross-package anchor script."""
    import logging
    import os

    from safetyrepro.errors import UserError

    p = argparse.ArgumentParser(prog="crosspkg", description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", help="benchmark mirror (default $SAFETYREPRO_DATA_DIR)")
    add_arguments(p)
    args = p.parse_args(argv)
    if args.data_dir:
        os.environ["SAFETYREPRO_DATA_DIR"] = args.data_dir
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        return run_command(args)
    except UserError as e:
        sys.stderr.write(f"crosspkg: error: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
