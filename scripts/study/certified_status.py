"""The certified study's status, written into study/certified/README.md from the files beside it,
so that the README never says more (or less) than certificate.csv, claims.csv and cost.json do.

    python scripts/study/certified_status.py [--dir study/certified] [--first study/grid.csv]

It fills the block between `<!-- status -->` and `<!-- /status -->`: how many verdicts and claims are
decided, the evaluations and model hours spent against the full grid's, and, for every decided
claim, what the 24-item study read on the same configuration (its score difference at 24 items):
confirmed when the sign agrees with the certified claim, overturned when it points the other way (or
reads a difference where the claim is within delta), and a tie at 24 items counted apart. Pairs the
24-item study called a flip (a win each way among its 48 configurations) are checked against the
certified verdict: a certified flip confirms, a certified stable verdict overturns, an open one
neither. `scripts/study/certified_study.sh --save` runs it after copying the run's files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BEGIN, END = "<!-- status -->", "<!-- /status -->"


def first_study_differences(grid_csv: Path):
    """(benchmark, model_a, model_b, config_id) -> score(model_a) - score(model_b) at 24 items."""
    import pandas as pd

    g = pd.read_csv(grid_csv)
    g = g[g["status"] == "ok"]
    wide = g.pivot_table(index=["benchmark", "config_id"], columns="model", values="score", aggfunc="first")
    return wide


def first_study_flips(rho_csv: Path) -> dict[tuple[str, str, str], str]:
    import pandas as pd

    r = pd.read_csv(rho_csv)
    r = r[r["slice"] == "full"]
    out = {}
    for row in r.itertuples():
        if row.n_plus and row.n_minus:
            out[(row.benchmark, row.model_a, row.model_b)] = "flip"
        elif row.n_minus == 0 and row.n_plus:
            out[(row.benchmark, row.model_a, row.model_b)] = "stable_a"
        elif row.n_plus == 0 and row.n_minus:
            out[(row.benchmark, row.model_a, row.model_b)] = "stable_b"
        else:
            out[(row.benchmark, row.model_a, row.model_b)] = "tied"
    return out


def compare_claim(claim: str, diff24: float) -> str:
    """What the 24-item reading on one configuration is, given the certified claim there."""
    if diff24 != diff24:  # NaN: a cell the first study did not finish
        return "not read"
    if claim == "a_better":
        return "confirmed" if diff24 > 0 else ("tie at 24" if diff24 == 0 else "overturned")
    if claim == "b_better":
        return "confirmed" if diff24 < 0 else ("tie at 24" if diff24 == 0 else "overturned")
    if claim == "within_delta":
        return "tie at 24" if diff24 == 0 else "a difference at 24, within delta on 300"
    return "open"


def status_block(folder: Path, grid_csv: Path, rho_csv: Path) -> str:
    import pandas as pd

    cert = pd.read_csv(folder / "certificate.csv")
    claims = pd.read_csv(folder / "claims.csv")
    cost = json.loads((folder / "cost.json").read_text())
    wide = first_study_differences(grid_csv)
    flips24 = first_study_flips(rho_csv)
    decided = claims[claims["claim"] != "undecided"]
    lines = []
    verdicts = cert["verdict"].value_counts().to_dict()
    v_text = ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items()))
    c_text = ", ".join(f"{n} {c}" for c, n in sorted(decided["claim"].value_counts().to_dict().items())) or "none"
    full_h = cost.get("measured_seconds_full_grid", float("nan")) / 3600
    spent_h = cost.get("seconds_model_work_all_pieces", cost.get("seconds_model_work", 0.0)) / 3600
    live_n = cost.get("model_evaluations_live_all_pieces", cost.get("model_evaluations_live", 0))
    lines.append(
        f"**Status:** {len(cert)} benchmark x pair verdicts: {v_text}. {len(decided)} of {len(claims)} pair x "
        f"configuration claims decided ({c_text}). Spent {cost['paired_evaluations']:,} of the full grid's "
        f"{cost['full_paired_evaluations']:,} paired evaluations ({cost['share_of_full_paired']:.0%}; most are "
        f"the 24-item study's records and earlier runs', free), {live_n:,} model "
        f"evaluations run live by certify, {spent_h:.1f} h of model work. Stopped by: {cost['stopped_by']}."
    )
    lines.append("")
    lines.append(
        f"**What it can reach.** The full grid at 300 items is about {full_h:,.0f} h of model time on the machines "
        "this project gets (`measured_seconds_full_grid` in cost.json, each cell at its measured seconds per item)."
    )
    lines.append("")
    rows = []
    tally: dict[str, int] = {}
    for c in decided.itertuples():
        try:
            d24 = float(
                wide.loc[(c.benchmark, c.config_id), c.model_a] - wide.loc[(c.benchmark, c.config_id), c.model_b]
            )
        except KeyError:
            d24 = float("nan")
        word = compare_claim(c.claim, d24)
        tally[word] = tally.get(word, 0) + 1
        rows.append(
            f"| {c.benchmark} | {c.model_a} | {c.model_b} | {c.config_id} | {c.claim} | "
            f"{c.lower:+.3f} | {c.upper:+.3f} | {c.items_used} | {d24:+.3f} | {word} |"
        )
    pair_words = []
    for v in cert.itertuples():
        old = flips24.get((v.benchmark, v.model_a, v.model_b), "not read")
        if v.verdict == "undecided":
            continue
        agree = (old == v.verdict) or (old == "flip" and v.verdict == "flip")
        pair_words.append(
            f"{v.benchmark} {v.model_a} vs {v.model_b}: 24 items read {old}, certified {v.verdict} "
            f"({'confirmed' if agree else 'overturned'})"
        )
    open_pairs = int((cert["verdict"] == "undecided").sum())
    text = (
        f"**Against the 24-item study.** Of the {len(decided)} decided claims, "
        + (", ".join(f"{n} {w}" for w, n in sorted(tally.items())) if tally else "none yet")
        + f". Pair verdicts: {open_pairs} of {len(cert)} still open, so the 24-item study's rank-flip readings "
        "(rho_flip.csv) are neither confirmed nor overturned for those"
    )
    text += ("; " + "; ".join(pair_words) + ".") if pair_words else "."
    lines.append(text)
    lines += ["", *pair_table(cert, claims, cost)]
    if rows:
        lines += [
            "",
            "| benchmark | model_a | model_b | config_id | claim | lower | upper | items | 24-item diff | 24-item "
            "reading |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    return "\n".join(lines)


def pair_hours(claims, cost: dict) -> dict[tuple[str, str, str], tuple[float, float]]:
    """(benchmark, model_a, model_b) -> (model hours its items cost, model hours of the full subset), each
    configuration's items at both models' measured seconds per item there (cost.json's by-cell rates, else
    the benchmark's mean). An item a model was scored on serves every pair it is in, so pairs share hours."""
    by_cell = cost.get("seconds_per_model_evaluation_by_cell") or {}
    by_bench = cost.get("seconds_per_model_evaluation") or {}
    out: dict[tuple[str, str, str], list[float]] = {}
    for c in claims.itertuples():
        rates = [by_cell.get(f"{m}|{c.config_id}", by_bench.get(c.benchmark)) for m in (c.model_a, c.model_b)]
        if any(r is None for r in rates):
            continue
        per_item = sum(rates) / 3600
        got = out.setdefault((c.benchmark, c.model_a, c.model_b), [0.0, 0.0])
        got[0] += c.items_used * per_item
        got[1] += c.n_full * per_item
    return {k: (v[0], v[1]) for k, v in out.items()}


def pair_table(cert, claims, cost: dict) -> list[str]:
    """Each pair's verdict, its paired evaluations and model hours against the full grid's."""
    hours = pair_hours(claims, cost)
    lines = [
        "| benchmark | model_a | model_b | verdict | paired evaluations | of the full grid's | model hours | "
        "of the full grid's | configurations decided |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in cert.itertuples():
        mine = claims[
            (claims["benchmark"] == v.benchmark) & (claims["model_a"] == v.model_a) & (claims["model_b"] == v.model_b)
        ]
        used, full = hours.get((v.benchmark, v.model_a, v.model_b), (float("nan"), float("nan")))
        lines.append(
            f"| {v.benchmark} | {v.model_a} | {v.model_b} | {v.verdict} | {v.n_evaluations:,} | "
            f"{v.n_full:,} | {used:.2f} | {full:.1f} | {int((mine['claim'] != 'undecided').sum())} of "
            f"{len(mine)} |"
        )
    return lines


def fill(readme: Path, block: str) -> str:
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{readme} has no {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{block}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    from safetyrepro.atomic import atomic_write

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path("study/certified"))
    ap.add_argument("--first", type=Path, default=Path("study"), help="the 24-item study's folder")
    a = ap.parse_args(argv)
    block = status_block(a.dir, a.first / "grid.csv", a.first / "analysis" / "rho_flip.csv")
    readme = a.dir / "README.md"
    atomic_write(readme, fill(readme, block), root=a.dir)
    print(f"wrote the status block of {readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
