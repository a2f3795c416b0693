"""`safetyrepro envelope --task` and `safetyrepro sweep --task`: the flags they add and what they run."""

from __future__ import annotations

import argparse
from pathlib import Path

from safetyrepro.errors import UserError

from .envelope import TaskRef

TASK_HELP = (
    "a task SafetyRepro does not define: lm-eval:<task name or task YAML> or inspect:<task> (docs/any_task.md); "
    "its default envelope is what `safetyrepro envelope --task` prints"
)


def add_task_arguments(p, sweep: bool) -> None:
    p.add_argument("--task", metavar="PKG:TASK", help=TASK_HELP)
    p.add_argument(
        "--include_path", "--include-path", metavar="DIR", help="lm-eval: a folder of task YAMLs to search too"
    )
    p.add_argument(
        "--envelope",
        type=Path,
        metavar="FILE.yaml",
        help="with --task: the envelope written by `envelope --task --out` (default: the task's own)",
    )
    if sweep:
        p.add_argument(
            "--metric",
            metavar="M",
            help="with --task: the metric that scores a task reporting several (lm-eval's `acc,none`, Inspect's "
            "`match/accuracy`; default: the one the importer picks, or it asks)",
        )


class _NeedsSweepFirst(argparse.Action):
    """`--task` on a command that evaluates only the five benchmarks' items: what to run instead, one line."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(
            f"{option_string} {values}: {parser.prog} runs only the five benchmarks' tasks; a task SafetyRepro does "
            "not define is swept first (`safetyrepro sweep --task ... --out DIR`), then `safetyrepro certify replay "
            "DIR/items.parquet --grid DIR/grid.csv` certifies its verdicts (docs/any_task.md)"
        )


def add_task_refusal(p) -> None:
    """certify live and flow: `--task` is understood, and answered with the commands that do it."""
    p.add_argument("--task", action=_NeedsSweepFirst, help=argparse.SUPPRESS)


def print_envelope(args: argparse.Namespace) -> int:
    """The task's default envelope (or --rules FILE's), its configurations, before anything runs."""
    from safetyrepro.atomic import atomic_write

    from .sweep import task_envelope

    if args.rules:
        raise UserError("--rules is the five benchmarks' rules file; with --task give an envelope file as --envelope")
    ref = TaskRef.parse(args.task)
    task, env = task_envelope(ref, args.envelope, args.include_path)
    facts = task.facts()
    configs = env.configs()
    runs = sum(len(env.seeds(c)) for c in configs)
    print(
        f"task {ref} ({facts.name}): {facts.output_type}, {facts.items} items, "
        f"few-shot examples: {'yes' if facts.fewshot_source else 'none'}"
    )
    print(
        f"{len(configs)} configurations ({sum(env.tier(c) == 'stress' for c in configs)} stress), {runs} runs a model"
    )
    for line in axis_lines(task, env, facts.output_type):
        print(line)
    if args.list:
        for c in configs:
            print(f"  {c.run_id}  {env.tier(c)}")
    print("--- envelope.yaml (edit it and pass it to `sweep --task ... --envelope FILE`) ---")
    print(env.text(), end="")
    if args.out_file:
        atomic_write(Path(args.out_file), env.text())
        print(f"written: {args.out_file}")
    return 0


def axis_lines(task, env, output_type: str) -> list[str]:
    """What the envelope's newer axes offer the task, a line each: lm-eval's templates and its scoring variants,
    Inspect's epochs."""
    from importlib.metadata import version

    from .envelope import OWN_TEMPLATE, TEMPLATE_KEYS
    from .lm_eval_task import LmEvalTask

    if not isinstance(task, LmEvalTask):
        return [
            f"epochs: {', '.join(map(str, env.epochs))} (axes.epochs: each sample run k times, scored as their mean)"
        ]
    declared = [t for t in env.template if t != OWN_TEMPLATE]
    lines = [
        f"templates: {', '.join(env.template)}"
        + ("" if declared else f" (declare others under `templates:` with {', '.join(TEMPLATE_KEYS)})")
    ]
    if formats := task.formats():
        lines.append(
            f"scoring: {output_type}; lm-eval also registers {', '.join(formats)} (sweep each as its own task)"
        )
    elif output_type == "multiple_choice":  # the generated twin is derived as a template is
        lines.append(
            f"scoring: {output_type}; lm-eval {version('lm_eval')} has no {task.name}@<format> variant (a "
            "loglikelihood / generate_until twin): axes.scoring [own, generate_until] derives the generated one"
        )
    else:
        lines.append(
            f"scoring: {output_type} only: lm-eval {version('lm_eval')} has no {task.name}@<format> variant "
            "(a loglikelihood / generate_until twin) to sweep"
        )
    return lines


SWEEP_ONLY = ("benchmarks", "tier", "templates", "decodings", "shots", "scoring", "configs", "models_file", "rules")
# the five benchmarks' run settings that `sweep --task` does not have: refused rather than silently dropped
NOT_FOR_TASK = (
    "package",
    "tie_rule",
    "fewshot_draw",
    "subsample",
    "subset_seed",
    "executor",
    "address",
    "workers",
    "allow_rules_change",
)


def sweep_task(args: argparse.Namespace) -> int:
    from safetyrepro.sweep.options import SWEEP

    from .sweep import TaskSweepOptions, run_task_sweep

    given = [d for d in SWEEP_ONLY if getattr(args, d, None) not in (None, SWEEP.default(d))]
    if given:
        raise UserError(
            f"--{given[0].replace('_', '-')} selects among the five benchmarks' configurations; with --task the "
            "envelope file says them (--envelope FILE: `safetyrepro envelope --task ... --out FILE` writes one)"
        )
    if dropped := [d for d in NOT_FOR_TASK if getattr(args, d, None) not in (None, False, SWEEP.default(d))]:
        raise UserError(
            f"--{dropped[0].replace('_', '-')} is a setting of the five benchmarks' sweep; `sweep --task` runs the "
            "task's package (lm-eval: or inspect:) here, on its own items (docs/any_task.md)"
        )
    if not args.models:
        raise UserError("sweep --task needs --models")
    return run_task_sweep(
        TaskSweepOptions(
            TaskRef.parse(args.task),
            list(args.models),
            Path(args.out),
            args.envelope,
            args.include_path,
            args.limit,
            args.precision or "bf16",
            args.device,
            args.batch_size,
            not args.no_progress,
            args.metric,
        )
    )
