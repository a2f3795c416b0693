"""`safetyrepro items`: the fixed item subset and few-shot demonstrations of each benchmark."""

from __future__ import annotations

import argparse
import json

from safetyrepro.errors import UserError
from safetyrepro.tasks.envelope import default_rules


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "items",
        help="show each benchmark's fixed item subset, its id and the few-shot pool",
        description="Show the fixed item subset of each benchmark (ids, strata) and its demonstrations.",
    )
    p.add_argument("--benchmark", action="append", help="only this benchmark (repeatable)")
    p.add_argument("--show", metavar="ID_OR_INDEX", help="print the T1-T4 prompts of one scored item (index or id)")
    p.add_argument("--shots", type=int, default=0, help="few-shot demonstrations in --show prompts")
    p.add_argument("--json", action="store_true", help="machine-readable output, with every item id")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from safetyrepro.tasks.benchmarks.registry import get_benchmark
    from safetyrepro.tasks.subsets import item_set

    rules = default_rules()
    benches = [rules.check_benchmark(b) for b in args.benchmark] if args.benchmark else list(rules.benchmarks)
    if args.shots not in rules.axes["shots"]:
        raise UserError(
            f"--shots {args.shots} is outside the envelope; allowed: {', '.join(map(str, rules.axes['shots']))}"
        )
    sets = {b: item_set(b) for b in benches}
    if args.show is not None:
        for b, s in sets.items():
            bench = get_benchmark(b)
            item = _pick(s, args.show)
            for t in rules.axes["template"]:
                print(f"===== {b} {item.id} {t} ({args.shots}-shot, plain text) =====")
                print(bench.prompt(item, t, s.demos_for(args.shots)).plain())
                print(f"----- candidates: {bench.candidates(item, t)}  gold: {bench.gold(item)}")
        return 0
    if args.json:
        print(
            json.dumps(
                {
                    b: {
                        "subset_id": s.subset_id,
                        "items": [i.id for i in s.items],
                        "pool": len(s.pool),
                        "demos": {k: [i.id for i in v] for k, v in s.demos.items()},
                        "strata": s.strata,
                    }
                    for b, s in sets.items()
                },
                indent=2,
            )
        )
        return 0
    for b, s in sets.items():
        print(f"{b}: {len(s.items)} items ({s.subset_id}), {len(s.strata)} strata, few-shot pool {len(s.pool)}")
    return 0


def _pick(s, show: str):
    """A scored item by its index in the subset or by its id."""
    if show.isdigit():
        if int(show) >= len(s.items):
            raise UserError(
                f"--show {show}: {s.benchmark} has {len(s.items)} scored items (indices 0-{len(s.items) - 1})"
            )
        return s.items[int(show)]
    if show not in {it.id for it in s.items}:
        raise UserError(
            f"--show {show!r}: no scored {s.benchmark} item has this id (`safetyrepro items --json "
            f"--benchmark {s.benchmark}` lists them)"
        )
    return s.by_id(show)
