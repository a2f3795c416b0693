"""What certification saves, and what its allocation rules buy (a measurement, not a test):

    python perf/certify_allocation.py                       # every part, 20 synthetic grids per scenario
    python perf/certify_allocation.py --grids 5 --part flips

Model time is a cost model's seconds, never a clock: on synthetic grids an item of one model costs what
this project's CPU measured in proportion (a log-probability item 0.1, a greedy free-form one 1, a sampled
one 5: five seeds; docs/measured.md, tests/certify/certify_grids.item_cost); on the published records each
(model, configuration) costs the seconds per item its cell took in the 24-item study (study/cells).
Three parts:

- `saves`: per scenario (one model far ahead everywhere; the lead reversing between templates; a small lead
  of 5 points; identical models), the paired evaluations and the model time certification spent, as shares
  of the full grid's, for each allocation: flip hunting (the default) and today's reversal-first rounds,
  each with costs known and rounds capped at 60 units as a live run makes them ("cost-aware") and without
  costs or cap as a replay runs, and uniform rounds; with the verdicts and whether any claim contradicted
  the full subset.
- `flips`: flip hunting against today's cost-aware rounds on seeded worlds whose law holds a flip
  (certify_grids.FLIP_WORLDS) and worlds where it holds none (STEADY_WORLDS), with a 24-item pilot's
  records held (a sweep's --limit 24 before certify, `--order subset`) and without: mean model time until
  the run ended, flip hunting's share of today's, its worst world, and the verdicts.
- `replays`: the published records. The 24-item study (study) replayed as `certify replay` runs it
  (no costs, seeded order), under both targets; and worlds drawn from the certified study's records
  (study/certified: per configuration, 300 items resampled from the items it holds for all three
  models, the study's own 24 items first and held as the pilot), certified as the study's script runs
  (`--order subset`, measured costs, 600-second rounds) within 4 h of model time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "certify"))

from certify_grids import FLIP_WORLDS, STEADY_WORLDS, CostedOracle, item_cost, pilot, synthetic_problem, synthetic_run  # noqa: E402, I001

from safetyrepro.grid.grid_io import common_configurations, load_grid, validate_cells  # noqa: E402
from safetyrepro.certify.algorithm import BenchmarkProblem, CertifyOptions, certify  # noqa: E402
from safetyrepro.certify.live import LIVE_ROUND_SECONDS  # noqa: E402
from safetyrepro.certify.replay import contradicted, load_replay  # noqa: E402
from safetyrepro.grid.cell_timing import cell_seconds_per_item  # noqa: E402
from safetyrepro.tasks.envelope import default_rules  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = {
    "far ahead (0.80 vs 0.35)": lambda cfg, m: 0.8 if m == "a" else 0.35,
    "reverses with template": lambda cfg, m: (
        (0.75 if m == "a" else 0.4) if cfg.template in ("T1", "T2") else (0.4 if m == "a" else 0.75)
    ),
    "small lead (0.60 vs 0.55)": lambda cfg, m: 0.6 if m == "a" else 0.55,
    "identical (0.55)": lambda cfg, m: 0.55,
}
# label -> (allocation, costs known and rounds capped as a live run's)
RULES = {
    "flip_hunt, cost-aware": ("flip_hunt", True),
    "reversal_first, cost-aware": ("reversal_first", True),
    "flip_hunt, no costs": ("flip_hunt", False),
    "reversal_first, no costs": ("reversal_first", False),
    "uniform": ("uniform", False),
}


def full_cost(problems, rates=None) -> float:
    rates = rates or {}
    return sum(
        rates.get((m, c), item_cost(c)) * len(p.item_ids) for p in problems for c in p.config_ids for m in p.models
    )


def saves(grids: int, n_items: int) -> list[str]:
    rules = default_rules()
    lines = [
        f"{'scenario':<26} {'allocation':<27} {'evaluations':>11} {'model time':>10}  {'verdicts':<22} "
        f"{'contradicted':>12} {'s/grid':>6}"
    ]
    print(lines[0], flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, acc in SCENARIOS.items():
            runs = []
            for k in range(grids):
                grid, items = synthetic_run(np.random.default_rng(k), acc, n_items)
                g = common_configurations(validate_cells(grid, rules, "synthetic"), "synthetic", rules)
                path = Path(tmp) / "items.parquet"
                items.to_parquet(path)
                runs.append(load_replay(path, g))
            for label, (allocation, costed) in RULES.items():
                shares, spent, verdicts, bad, t0 = [], [], Counter(), 0, time.perf_counter()
                for k, replay in enumerate(runs):
                    oracle = CostedOracle(replay.oracle, known=costed)
                    r = certify(
                        replay.problems,
                        oracle,
                        CertifyOptions(seed=k, allocation=allocation, round_seconds=60.0 if costed else None),
                    )
                    shares.append(r.paired_evaluations / r.full_paired_evaluations)
                    spent.append(oracle.spent() / full_cost(replay.problems))
                    verdicts.update(p.verdict for p in r.pairs)
                    bad += any(
                        contradicted(c.claim, replay.full_delta[(c.benchmark, c.config_id, c.model_a, c.model_b)], 0.05)
                        for c in r.claims
                    )
                seconds = (time.perf_counter() - t0) / len(runs)
                said = ", ".join(f"{v} {n}" for v, n in verdicts.most_common())
                lines.append(
                    f"{name:<26} {label:<27} {np.mean(shares):>11.1%} {np.mean(spent):>10.2%}  {said:<22} "
                    f"{bad:>12} {seconds:>6.2f}"
                )
            print("\n".join(lines[-len(RULES) :]), flush=True)
    return lines


def flips(grids: int) -> list[str]:
    lines = [
        f"{'world':<32} {'records':<8} {'today (units)':>13} {'flip_hunt':>10} {'share':>6} {'worst':>6}  "
        f"{'verdicts (today / flip_hunt)'}"
    ]
    print(lines[0], flush=True)
    for worlds in (FLIP_WORLDS, STEADY_WORLDS):
        for name, (accuracy, models) in worlds.items():
            for with_pilot in (True, False):
                spent = {"reversal_first": [], "flip_hunt": []}
                verdicts = {a: Counter() for a in spent}
                for seed in range(grids):
                    problem, oracle, _ = synthetic_problem(np.random.default_rng(100 + seed), accuracy, models=models)
                    for allocation in spent:
                        asked = CostedOracle(oracle, pilot(problem) if with_pilot else None)
                        options = CertifyOptions(seed=seed, allocation=allocation, order="subset", round_seconds=60.0)
                        result = certify([problem], asked, options)
                        spent[allocation].append(asked.spent())
                        verdicts[allocation].update(p.verdict for p in result.pairs)
                today, new = np.array(spent["reversal_first"]), np.array(spent["flip_hunt"])
                said = " / ".join(", ".join(f"{v} {n}" for v, n in verdicts[a].most_common()) for a in spent)
                lines.append(
                    f"{name:<32} {'pilot' if with_pilot else 'none':<8} {today.mean():>13,.1f} {new.mean():>10,.1f} "
                    f"{new.mean() / today.mean():>6.2f} {np.max(new / today):>6.2f}  {said}"
                )
                print(lines[-1], flush=True)
    return lines


def study_rates() -> dict[tuple[str, str], float]:
    """(model, config_id) -> seconds per item its cell took in the 24-item study (study/cells)."""
    return cell_seconds_per_item(ROOT / "study")


def study_replay() -> list[str]:
    """The 24-item study replayed as `certify replay study/items.parquet --grid study/grid.csv` runs
    it (no costs, seeded order, seed 0), both targets, each allocation; model hours at the study's rates."""
    rules = default_rules()
    grid = load_grid(ROOT / "study/grid.csv", rules)
    replay = load_replay(ROOT / "study/items.parquet", grid)
    rates = study_rates()
    lines = [
        f"{'24-item study replay':<22} {'allocation':<15} {'paired evaluations':>18} {'model h':>8}  verdicts",
    ]
    print(lines[0], flush=True)
    for target in ("population", "subset"):
        for allocation in ("flip_hunt", "reversal_first", "uniform"):
            oracle = CostedOracle(replay.oracle, known=False, rates=rates)
            r = certify(replay.problems, oracle, CertifyOptions(allocation=allocation, target=target))
            said = ", ".join(f"{v} {n}" for v, n in Counter(p.verdict for p in r.pairs).most_common())
            lines.append(
                f"{target:<22} {allocation:<15} {r.paired_evaluations:>18,} {oracle.spent() / 3600:>8.2f}  {said}"
            )
            print(lines[-1], flush=True)
    return lines


def certified_world(rng: np.random.Generator, frame: pd.DataFrame, first: dict[str, list[str]], n_items: int = 300):
    """Problems and an oracle whose law is the certified study's records: per benchmark x configuration, item
    j >= 24 is an item drawn (with replacement) from those the records hold for every model there, all
    models' scores of it together; the first 24 are the 24-item study's own items (the pilot)."""
    models = tuple(sorted(frame["model"].unique()))
    means = frame.groupby(["benchmark", "config_id", "item_id", "model"])["item_score"].mean().unstack("model")
    means = means.dropna()  # items every model holds
    problems, scores = [], {}
    for benchmark, by_bench in means.groupby(level="benchmark"):
        ids = tuple(f"{benchmark}/w{j:03d}" for j in range(n_items))
        configs = []
        for cid, by_config in by_bench.groupby(level="config_id"):
            table = by_config.droplevel(["benchmark", "config_id"])
            pilot_ids = first[str(benchmark)]
            drawn = rng.choice(table.index.to_numpy(), n_items - len(pilot_ids))
            rows = table.loc[[*pilot_ids, *drawn]].to_numpy()
            for k, m in enumerate(models):
                scores[(str(cid), m)] = dict(zip(ids, rows[:, k], strict=True))
            configs.append(str(cid))
        problems.append(BenchmarkProblem(str(benchmark), tuple(configs), models, ids, 60))

    def oracle(benchmark, config_id, model, item_ids):
        mine = scores[(config_id, model)]
        return np.array([mine[i] for i in item_ids])

    return problems, oracle


def certified_replay(worlds: int, hours: float = 4.0) -> list[str]:
    frame = pd.read_parquet(ROOT / "study/certified/items.parquet")
    study = pd.read_parquet(ROOT / "study/items.parquet", columns=["benchmark", "item_id"])
    first = {b: sorted(g["item_id"].unique()) for b, g in study.groupby("benchmark")}
    rates = study_rates()
    lines = [
        f"{'certified-records worlds':<26} {'allocation':<15} {'pairs decided by 1 h':>20} {'2 h':>4} {'4 h':>4} "
        f"{'claims':>6}  verdicts (summed over worlds)"
    ]
    print(lines[0], flush=True)
    marks = (1.0, 2.0, hours)
    for allocation in ("flip_hunt", "reversal_first"):
        decided, claims, verdicts = np.zeros(len(marks)), [], Counter()
        for w in range(worlds):
            problems, oracle = certified_world(np.random.default_rng(w), frame, first)
            held = {k: v for p in problems for k, v in pilot(p, 24).items()}
            asked = CostedOracle(oracle, held, rates=rates)
            when: dict[tuple[str, str, str], float] = {}  # pair -> model hours when its verdict came

            def seen(result, asked=asked, when=when):
                for p in result.pairs:
                    if p.verdict != "undecided":
                        when.setdefault((p.benchmark, p.model_a, p.model_b), asked.spent() / 3600)

            options = CertifyOptions(
                allocation=allocation,
                order="subset",
                round_seconds=LIVE_ROUND_SECONDS,
                budget_seconds=hours * 3600,
            )
            r = certify(problems, asked, options, checkpoint=seen, checkpoint_seconds=0.0)
            seen(r)
            decided += [sum(h <= m for h in when.values()) for m in marks]
            claims.append(sum(c.claim != "undecided" for c in r.claims))
            verdicts.update(p.verdict for p in r.pairs)
        said = ", ".join(f"{v} {n}" for v, n in verdicts.most_common())
        per = decided / worlds
        lines.append(
            f"{f'{worlds} worlds, {hours:g} h budget':<26} {allocation:<15} {per[0]:>20.1f} {per[1]:>4.1f} "
            f"{per[2]:>4.1f} {np.mean(claims):>6.1f}  {said}"
        )
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grids", type=int, default=20, help="synthetic grids per scenario (default 20)")
    ap.add_argument("--items", type=int, default=300)
    ap.add_argument("--worlds", type=int, default=5, help="worlds drawn from the certified records (default 5)")
    ap.add_argument("--part", choices=("saves", "flips", "replays", "all"), default="all")
    args = ap.parse_args()
    if args.part in ("saves", "all"):
        saves(args.grids, args.items)
    if args.part in ("flips", "all"):
        flips(args.grids)
    if args.part in ("replays", "all"):
        study_replay()
        certified_replay(args.worlds)


if __name__ == "__main__":
    main()
