"""`safetyrepro flow`: write the Inspect Flow spec of an envelope sweep (docs/flow.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from safetyrepro.anytask.cli import add_task_refusal
from safetyrepro.errors import UserError
from safetyrepro.sweep.cli import add_sweep_arguments
from safetyrepro.sweep.options import Profile, SweepOptions

# the sweep's flags that say how SafetyRepro itself runs the cells: Flow runs them, so these are refused
RUNNER = "{flag} is a sweep runner's option; Flow schedules the tasks itself (docs/flow.md: Ray or Flow)"
RUNNER_FLAGS = ("executor", "address", "workers", "allow_rules_change", "no_progress")
FLOW = Profile(
    "flow",
    refused={"package": "flow runs the Inspect tasks: --package {value} does not apply"}
    | {dest: RUNNER for dest in RUNNER_FLAGS},
    fixed={"package": "inspect"},
    hidden=frozenset({"package", *RUNNER_FLAGS}),
    require_out=False,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "flow",
        help="write an Inspect Flow spec that runs the envelope's Inspect tasks (docs/flow.md)",
        description="Write an Inspect Flow spec (YAML) with one task per cell and seed of the sweep the same flags "
        "select: the safetyrepro/<benchmark> tasks with the sweep's task arguments, generate options, seeds and "
        "items. Run it with `flow run SPEC`; `safetyrepro import inspect LOGDIR --mapping SPEC-stem.mapping.yaml` "
        "turns its logs into the sweep's grid.",
    )
    add_sweep_arguments(p, FLOW)
    add_task_refusal(p)
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
    from safetyrepro.console import console as make_console
    from safetyrepro.flow.spec import write

    try:
        import inspect_flow  # noqa: F401  (the spec is Flow's own model: nothing is written without it)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != "inspect_flow":
            raise
        raise UserError(
            "safetyrepro flow needs Inspect Flow, which is not installed: pip install 'safetyrepro[flow]'"
        ) from None
    options = SweepOptions.from_args(args, FLOW)
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
