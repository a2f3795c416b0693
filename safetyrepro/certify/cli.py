"""`safetyrepro certify`: certified pairwise verdicts on a budget. `certify live --models ...` evaluates models
live (the sweep's model specs, benchmarks and envelope filters; certify/live.py); `certify replay ITEMS --grid GRID`
runs the algorithm on a finished run's per-item records (no model). Each mode takes only its own flags; the
former spellings (`certify --models ...`, `certify --replay ITEMS ...`) are rewritten to these (legacy_argv).
docs/certify.md."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from safetyrepro.anytask.cli import add_task_refusal
from safetyrepro.errors import UserError
from safetyrepro.sweep.cli import add_sweep_arguments
from safetyrepro.sweep.options import Profile, SweepOptions

# certificate.csv's text columns as written (a label like "007" stays one)
LABELS = {c: str for c in ("target", "benchmark", "model_a", "model_b", "verdict", "rests_on", "rests_on_why")}
BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$")


# the sweep's flags as a live run takes them; a replay reads its models and configurations from --grid
LIVE = Profile(
    "certify",
    help={
        "no_progress": "(sweep's flag; certify prints progress lines unless --quiet)",
        "executor": "local (default: the models run here) or ray (each model on a Ray worker; --address: a cluster)",
    },
    require_out=False,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "certify",
        help="certified pairwise verdicts on a budget (evaluate only where a verdict is still open)",
        description="Evaluate items in rounds, paired, only where a pairwise verdict is still open, and certify "
        "per configuration and per pair what the items show, with familywise error control that holds wherever "
        "the run stops. `certify live` evaluates models (the sweep's flags choose the models, benchmarks and "
        "configurations); `certify replay ITEMS --grid GRID` replays a finished run's records. The former "
        "spellings `certify --models ...` and `certify --replay ITEMS --grid GRID` still work.",
    )
    modes = p.add_subparsers(dest="certify_mode", metavar="MODE", parser_class=type(p))
    modes.required = True
    live = modes.add_parser(
        "live",
        help="evaluate models live (the sweep's models, benchmarks and envelope filters)",
        description="Certify pairwise verdicts by evaluating the models live, in rounds, only where a verdict "
        "is still open; resumable (rerun the same command), and earlier records count as evaluated.",
    )
    replay = modes.add_parser(
        "replay",
        help="replay a finished run's per-item records (no model)",
        description="Certify pairwise verdicts from a finished run's per-item records (items.parquet) and its "
        "grid.csv: the records are the oracle, no model runs.",
    )
    replay.add_argument("replay", metavar="ITEMS", help="a finished run's per-item records (items.parquet)")
    replay.add_argument("--grid", metavar="GRID", required=True, help="the run's grid.csv (models, configurations)")
    for q in (live, replay):
        _add_common(q)
    replay.add_argument(
        "--reading",
        choices=("strict", "content"),
        default="strict",
        help="what a free-form claim compares: strict (default: an unread reply counts as wrong, the grid's score) "
        "or content (who is better on the items both models' replies were read: each item either reply is unread "
        "on counts 0, so the estimate is that difference scaled by the share both read)",
    )
    replay.add_argument(
        "--cluster",
        metavar="FIELD",
        help="the items file's column naming each item's cluster (a passage, a template): the clusters, not the "
        "items, are the draws of the population target (a cluster's score is its items' mean)",
    )
    replay.add_argument("--precision", help="the grid's precision group, when it holds several")
    replay.add_argument("--package", help="the grid's package group, when it holds several")
    replay.add_argument(
        "--rules",
        help="the rules file the grid was written under (default: rules.yaml beside the grid, as an import writes "
        "it, else the packaged envelope)",
    )
    live.add_argument(
        "--selection",
        choices=("none", "records", "family"),
        help="how --configs were chosen: none (fixed before any data was seen), records (by looking at "
        "--records or at what a sweep or certify run left in the outputs cache: those items are not used as "
        "evidence for those configurations), family (from the whole envelope the other flags select: alpha "
        "covers all of it, only --configs are evaluated); required with --configs whenever their records are "
        "in --records or the outputs cache",
    )
    live.add_argument(
        "--order",
        choices=("subset", "seeded"),
        help="draw order: subset (default: the fixed subset's own seeded order, so a sweep's --limit N records "
        "are the first N draws) or seeded (the default with --control auto, whose partner items need a random "
        "order: permuted with --seed)",
    )
    live.add_argument(
        "--records",
        nargs="+",
        metavar="PATH",
        default=[],
        help="earlier records to take as evaluated (a sweep's or certify run's folder, or its items.parquet, made "
        "with the same models, package, precision, tie rule and rules)",
    )
    live.add_argument(
        "--held-only",
        action="store_true",
        help="read only what the folder's own and --records' records hold, evaluate nothing (re-read a run, "
        "for example under another --target)",
    )
    add_sweep_arguments(live.add_argument_group("what to evaluate (the sweep's flags)"), LIVE)
    add_task_refusal(live)
    live.set_defaults(func=run, reading="strict", replay=None, grid=None, cluster=None)
    replay.set_defaults(func=run, models=None, models_file=None, held_only=False, order=None, records=[])
    replay.set_defaults(selection=None, configs=None)


def _add_common(p: argparse.ArgumentParser) -> None:
    """The flags both modes take: the claims' error and target, the budget, the output folder."""
    p.add_argument("--alpha", type=float, default=0.05, help="familywise error of all claims of the run (default 0.05)")
    p.add_argument(
        "--delta",
        type=float,
        default=0.05,
        help="a configuration within +-delta is claimed within_delta and stops (default 0.05)",
    )
    p.add_argument(
        "--target",
        choices=("population", "subset"),
        default="population",
        help="what a claim is about: population (default: the two models, generalising over the benchmark's "
        "items as draws from the benchmark, what another draw of items would confirm, and holding fixed the "
        "seeds, the one draw of few-shot examples and the templates) or subset (the fixed subset's realised "
        "difference, which the full grid and rho_flip report)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the seeded item order (default 0)")
    p.add_argument(
        "--control",
        choices=("auto", "time", "none"),  # control.CONTROLS (the CLI stays light)
        default="none",
        help="auto lets each free-form configuration's log-probability twin (same template and shots) help "
        "certify it, a control variate: on partner items only the twin scores (population target), or on the "
        "twin's whole subset (subset target) (docs/methods/certify.md, 'Cheap twins'), for the fewest free-form "
        "evaluations; time does the same with no more partner items a step than pay for their model time (the "
        "run's measured seconds per item); none (default) certifies every configuration on its own items",
    )
    p.add_argument(
        "--budget",
        help="paired evaluations (e.g. 20000), or time (90s, 30m, 2h): live, CPU time of model work (the process's "
        "CPU seconds in model calls, every thread; loading and other programs excluded), replay, wall time",
    )
    p.add_argument(
        "--batch", type=int, default=0, help="items per configuration per round (default: N/30, from 4 to 50)"
    )
    # for comparison only (perf/certify_allocation.py, perf/certify_power.py; docs/methods/certify.md): off --help
    p.add_argument(
        "--allocation",
        default="flip_hunt",
        choices=("flip_hunt", "reversal_first", "uniform"),  # algorithm.ALLOCATIONS (the CLI stays light)
        help=argparse.SUPPRESS,
    )
    p.add_argument("--familywise", choices=("closed", "bonferroni"), default="closed", help=argparse.SUPPRESS)
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


LEGACY_MODES = ("live", "replay", "-h", "--help")


def legacy_argv(rest: list[str]) -> list[str]:
    """The former spellings, kept: `certify --replay ITEMS ...` is `certify replay ITEMS ...`, and `certify
    --models ...` (any other flags first) is `certify live ...`."""
    if not rest or rest[0] in LEGACY_MODES:
        return rest
    for i, a in enumerate(rest):
        if a == "--replay" and i + 1 < len(rest):
            return ["replay", rest[i + 1], *rest[:i], *rest[i + 2 :]]
        if a.startswith("--replay="):
            return ["replay", a.split("=", 1)[1], *rest[:i], *rest[i + 1 :]]
    return ["live", *rest]


def parse_budget(text: str | None) -> tuple[int | None, float | None]:
    """(paired evaluations, seconds): a bare number is evaluations, a number with s/m/h a time (docs/certify.md)."""
    if text is None:
        return None, None
    m = BUDGET.match(text)
    if not m:
        raise UserError(f"--budget {text[:40]!r}: give paired evaluations (e.g. 20000) or a time (90s, 30m, 2h)")
    value, unit = float(m.group(1)), m.group(2)
    if unit is None:
        if value != int(value) or value < 1:
            raise UserError(f"--budget {text!r}: a number of paired evaluations is a whole number >= 1")
        return int(value), None
    seconds = value * {"s": 1, "m": 60, "h": 3600}[unit]
    if seconds <= 0:
        raise UserError(f"--budget {text!r}: a time must be positive")
    return None, seconds


def options_from(args: argparse.Namespace):
    from .algorithm import CertifyOptions

    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha {args.alpha}: must be in (0, 1)")
    if not 0 <= args.delta < 1:
        raise UserError(f"--delta {args.delta}: must be in [0, 1)")
    if args.batch < 0 or args.batch > 100_000:
        raise UserError(f"--batch {args.batch}: must be from 0 (automatic) to 100,000")
    if not 0 <= args.seed < 2**63:
        raise UserError(f"--seed {args.seed}: must be a whole number from 0 to 2**63 - 1")
    evaluations, seconds = parse_budget(args.budget)
    live = args.certify_mode == "live"
    # the control's partner items come from the back of the order: only a random order makes them like the
    # front (a twin drifting along the subset's order gave false claims in 3 of 3 grids, issue 53)
    partners = args.control != "none" and not args.held_only  # a re-read takes no partner items
    order = args.order or ("subset" if live and not partners else "seeded")
    if order == "subset" and partners:
        raise UserError(
            f"--control {args.control} takes its partner items from the back of the draw order, which needs a "
            f"random order: leave out --order subset (--order seeded, the default with --control {args.control})"
        )
    from safetyrepro.tasks.subsets import DEFAULT_FEWSHOT_DRAW

    round_seconds = None
    if live:
        from .live import LIVE_ROUND_SECONDS  # lazy: it loads the sweep and the backends (the harness extra)

        round_seconds = LIVE_ROUND_SECONDS
    return CertifyOptions(
        alpha=args.alpha,
        delta=args.delta,
        seed=args.seed,
        batch=args.batch,
        budget_evaluations=evaluations,
        budget_seconds=seconds,
        allocation=args.allocation,
        order=order,
        round_seconds=round_seconds,
        target=args.target,
        held_only=args.held_only,
        familywise=args.familywise,
        control=args.control,
        reading=args.reading,
        fewshot_draw=getattr(args, "fewshot_draw", None) or DEFAULT_FEWSHOT_DRAW,
    )


def run(args: argparse.Namespace) -> int:
    options = options_from(args)
    live = args.certify_mode == "live"
    say = None if args.quiet else (lambda line: print(f"certify: {line}", file=sys.stderr, flush=True))
    control = f"--control {args.control}"
    if args.control != "none" and args.held_only:
        print(
            f"certify: {control} does nothing with --held-only (docs/methods/certify.md, 'Cheap twins'); every "
            "configuration is certified on its own items",
            file=sys.stderr,
        )
    elif args.control == "time" and (not live or args.target == "subset"):
        why = "a replay knows no item costs" if not live else "--target subset takes no partner items"
        print(f"certify: --control time acts as --control auto here: {why}", file=sys.stderr)
    if args.reading == "content" and args.control != "none":
        raise UserError(f"--reading content certifies every configuration on its own items: leave out {control}")
    if args.cluster is not None:
        given = {"--target subset": args.target == "subset", control: args.control != "none"}
        given["--reading content"] = args.reading == "content"
        clash = next((name for name, on in given.items() if on), None)
        if clash:
            raise UserError(
                f"--cluster draws clusters for the population target, read strictly, on each configuration's own "
                f"items: leave out {clash}"
            )
    if live:
        if not (args.models or args.models_file):
            raise UserError(
                "certify live needs --models ... (or --models-file); to replay a finished run's records: "
                "certify replay ITEMS --grid GRID (formerly certify --replay ITEMS)"
            )
        from .live import run_live

        sweep_options = SweepOptions.from_args(args, LIVE)
        result, paths = run_live(
            sweep_options, Path(args.out), options, say, records=args.records, selection=_selection(args)
        )  # a selection not said is decided there, once it knows what the outputs cache holds
    else:
        result, paths = _replay(args, options, say)
    import pandas as pd

    from .outputs import NO_POOL, detectable, no_pool, open_bounds, target_words

    # the verdicts as certificate.csv says them, with what each rests on (read from the records the run used) and,
    # while undecided, what the items used could detect (the run's own claims)
    for r in pd.read_csv(args.out / "certificate.csv", keep_default_na=False, dtype=LABELS).itertuples():
        rests = f"; rests on: {r.rests_on}" if r.rests_on else ""
        bounds = open_bounds(result.claims, r.benchmark, r.model_a, r.model_b)
        found = detectable(bounds) if r.verdict == "undecided" else ""
        print(
            f"{r.benchmark:<12} {r.model_a} vs {r.model_b}: {r.verdict} ({r.n_evaluations:,} of {r.n_full:,} paired "
            f"evaluations{rests}){'; ' if found else ''}{found}"
        )
    print(f"target {options.target}: the verdicts are {target_words(options.target, options.fewshot_draw)}")
    for benchmark in no_pool(result):
        print(f"certify: {benchmark}: {NO_POOL}", file=sys.stderr)
    print(
        f"wrote {len(paths)} files to {args.out} ({result.paired_evaluations:,} of {result.full_paired_evaluations:,} "
        f"paired evaluations, {100 * result.paired_evaluations / max(result.full_paired_evaluations, 1):.0f} %; "
        f"{result.seconds:.1f} s evaluating; stopped: {result.stopped_by}; report: {args.out / 'report.md'})"
    )
    if result.stopped_by == "interrupted":
        print("interrupted: the run so far is saved; rerun the same command to go on", file=sys.stderr)
        return 130
    return 0


def _selection(args: argparse.Namespace) -> str | None:
    """How --configs were chosen, or None when not said: run_live then refuses hand-picked configurations
    whose records it can see (--records, the outputs cache; live.selection_said, docs/certify.md)."""
    if args.selection is not None and not args.configs:
        raise UserError("--selection says how --configs were chosen: give --configs too")
    return args.selection


def _replay(args: argparse.Namespace, options, say):
    from safetyrepro.grid.grid_io import RULES_BESIDE, beside_grid, load_grid
    from safetyrepro.sweep.store import Store
    from safetyrepro.tasks.envelope import load_rules

    from .algorithm import certify
    from .outputs import check_out, write_outputs
    from .replay import benchmark_seconds, load_replay, used_records

    check_out(args.out, inputs=(Path(args.replay), Path(args.grid)))  # before anything is read or written
    rules = load_rules(args.rules or beside_grid(Path(args.grid), RULES_BESIDE))  # an import's widened envelope
    grid = load_grid(args.grid, rules, precision=args.precision, package=args.package)
    replay = load_replay(args.replay, grid, args.reading)
    for w in (*grid.warnings, *replay.warnings):
        print(f"warning: {w}", file=sys.stderr)
    lock = Store(Path(args.out))
    lock.lock()  # one run at a time writes the folder, as a live run does
    try:
        problems, oracle, as_items = replay.problems, replay.oracle, lambda evaluated: evaluated
        if args.cluster is not None:
            problems, oracle, as_items = _clustered(replay, args.cluster, args.replay)
        result = certify(problems, oracle, options, progress=say)
        paths = write_outputs(
            result,
            args.out,
            used_records(replay, as_items(result.evaluated)),
            f"replay of {args.replay}",
            benchmark_seconds(Path(args.grid), grid),
            parse_rates={
                (str(m), str(c)): float(r)
                for m, c, r in grid.cells[["model", "config_id", "parse_rate"]].itertuples(index=False)
            },
        )
    finally:
        lock.unlock()
    return result, paths


def _clustered(replay, field: str, items_path):
    """The replay's problems and oracle with the clusters of `field` as the draws, and the map of what was
    evaluated back to items; says how many clusters each benchmark has."""
    from .clusters import ClusterOracle, cluster_members, clustered_problem, items_of
    from .replay import replay_clusters

    cluster_of = replay_clusters(replay, field, items_path)
    members = {p.benchmark: cluster_members(p.item_ids, cluster_of[p.benchmark]) for p in replay.problems}
    for p in replay.problems:
        n = len(members[p.benchmark])
        print(f"{p.benchmark}: the draws are {n} clusters of {field} ({len(p.item_ids)} items)")
    problems = tuple(clustered_problem(p, members[p.benchmark]) for p in replay.problems)
    return problems, ClusterOracle(replay.oracle, members), lambda evaluated: items_of(evaluated, members)
