"""`safetyrepro flow`: write the Inspect Flow spec of an envelope sweep (docs/flow.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from safetyrepro.errors import UserError

# the sweep's flags that say how SafetyRepro itself runs the cells: Flow runs them, so these are refused
NOT_FOR_FLOW = {
    "executor": "--executor",
    "address": "--address",
    "workers": "--workers",
    "allow_rules_change": "--allow-rules-change",
    "no_progress": "--no-progress",
}


def register(sub: argparse._SubParsersAction) -> None:
    from safetyrepro.sweep.cli import add_sweep_arguments

    p = sub.add_parser(
        "flow",
        help="write an Inspect Flow spec that runs the envelope's Inspect tasks (docs/flow.md)",
        description="Write an Inspect Flow spec (YAML) with one task per cell and seed of the sweep the same flags "
        "select: the safetyrepro/<benchmark> tasks with the sweep's task arguments, generate options, seeds and "
        "items. Run it with `flow run SPEC`; `safetyrepro import inspect LOGDIR --mapping SPEC-stem.mapping.yaml` "
        "turns its logs into the sweep's grid.",
    )
    add_sweep_arguments(
        p,
        require_out=False,
        help_for={"package": argparse.SUPPRESS, **{dest: argparse.SUPPRESS for dest in NOT_FOR_FLOW}},
    )
    p.set_defaults(package=None, **{dest: None for dest in NOT_FOR_FLOW})
    p.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="SPEC.yaml",
        help="the spec file to write (and SPEC-stem.mapping.yaml beside it, for the import)",
    )
    p.add_argument(
        "--log-dir",
        metavar="DIR",
        help="the spec's log_dir, where Flow writes the logs: a folder or a "
        "URL such as s3://...; relative to the spec (default: logs-<spec stem>)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from safetyrepro.console import console as make_console
    from safetyrepro.flow.spec import write
    from safetyrepro.sweep.cli import options_from_args

    try:
        import inspect_flow  # noqa: F401  (the spec is Flow's own model: nothing is written without it)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != "inspect_flow":
            raise
        raise UserError(
            "safetyrepro flow needs Inspect Flow, which is not installed: pip install 'safetyrepro[flow]'"
        ) from None
    if args.package not in (None, "inspect"):
        raise UserError("flow runs the Inspect tasks: --package lm-eval does not apply")
    given = [flag for dest, flag in NOT_FOR_FLOW.items() if getattr(args, dest) not in (None, False)]
    if given:
        raise UserError(
            f"{given[0]} is a sweep runner's option; Flow schedules the tasks itself (docs/flow.md: Ray or Flow)"
        )
    args.package, args.executor, args.workers, args.allow_rules_change, args.no_progress = (
        "inspect",
        "local",
        2,
        False,
        False,
    )
    options = replace(options_from_args(args), package="inspect")
    out, mapping, plan, spec = write(options, args.out, args.log_dir)
    console = make_console(highlight=False, soft_wrap=True)
    cells = [c for c in plan.cells if c.applicable]
    na = len(plan.cells) - len(cells)
    console.print(
        f"[bold]flow spec[/bold] {out}: {len(spec.tasks)} Inspect tasks ({len(cells)} cells x their seeds, "
        f"{len(plan.options.models)} model(s))"
        + (f"; {na} logprob cells left out (no continuation log-likelihoods)" if na else "")
    )
    meta = spec.flow_metadata["safetyrepro"]
    console.print(f"run:    flow run {out}\nimport: (from {out.parent or '.'}) {meta['import']}\nmapping: {mapping}")
    return 0
