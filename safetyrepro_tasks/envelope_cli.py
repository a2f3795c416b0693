"""`safetyrepro envelope`: list the configurations the rules file admits, with ids and the rules hash."""

from __future__ import annotations

import argparse
import json

from safetyrepro.anytask.cli import add_task_arguments, print_envelope
from safetyrepro.errors import UserError
from safetyrepro.tasks.envelope import load_rules


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "envelope",
        help="list the envelope's configurations and the rules hash",
        description="List the configurations the rules file admits, their tier, and its sha256.",
    )
    p.add_argument("--benchmark", action="append", help="only this benchmark (repeatable)")
    p.add_argument(
        "--tier",
        default="full",
        help="sub-envelope: full, core, excl_t4, excl_diverse, free_form, logprob, conservative_core (default: full)",
    )
    p.add_argument("--rules", help="rules file (default: the packaged envelope.yaml)")
    p.add_argument("--list", action="store_true", help="print every configuration id, not only the counts")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_task_arguments(p, sweep=False)
    p.add_argument("--out", dest="out_file", metavar="FILE.yaml", help="with --task: write the envelope there too")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.task:
        return print_envelope(args)
    if args.envelope or args.include_path or args.out_file:
        raise UserError("--envelope, --include_path and --out go with --task (a task SafetyRepro does not define)")
    rules = load_rules(args.rules)
    benches = [rules.check_benchmark(b) for b in args.benchmark] if args.benchmark else list(rules.benchmarks)
    per = {b: rules.configs(b, args.tier) for b in benches}
    if args.json:
        print(
            json.dumps(
                {
                    "rules_sha256": rules.sha256,
                    "rules": rules.path,
                    "tier": args.tier,
                    "configs": [{"config_id": c.config_id, "tier": rules.tier(c)} for b in benches for c in per[b]],
                },
                indent=2,
            )
        )
        return 0
    from rich.table import Table

    from safetyrepro.console import console as make_console

    table = Table(title=f"envelope ({args.tier})", title_justify="left")
    for col in ("benchmark", "configs", "free_form", "logprob", "core", "stress"):
        table.add_column(col, justify="right" if col != "benchmark" else "left")
    for b, cfgs in per.items():
        table.add_row(
            b,
            str(len(cfgs)),
            str(sum(c.scoring == "free_form" for c in cfgs)),
            str(sum(c.scoring == "logprob" for c in cfgs)),
            str(sum(rules.tier(c) == "core" for c in cfgs)),
            str(sum(rules.tier(c) == "stress" for c in cfgs)),
        )
    total = sum(len(c) for c in per.values())
    table.add_row("total", str(total), "", "", "", "", end_section=True)
    console = make_console()
    console.print(table)
    if args.list:
        for b in benches:
            for c in per[b]:
                console.print(f"{c.config_id}  [dim]{rules.tier(c)}[/dim]", highlight=False)
    console.print(f"cells for 3 models: {3 * total}", highlight=False)
    console.print(
        f"rules: {rules.path}\nrules sha256: {rules.sha256}", highlight=False, soft_wrap=True
    )  # paths stay copyable
    return 0
