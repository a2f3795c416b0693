"""Two models' paired verdict (`safetyrepro verdict A B`): per shared configuration the paired
difference A - B over the items both answered, the exact paired sign-flip test (the analysis's own,
significance.sign_flip_p_value), Holm across the benchmark's configurations (the analysis's family: one
benchmark x pair), an interval for the difference that inverts that test at the row's Holm level (so it
excludes 0 only on a confirmed row: sign_flip.paired_interval, holm_levels), the difference those items could
detect, and one sentence.

Who is ahead and who wins read the benchmark's declared direction, as `analyze` does: for a benchmark
where higher is better the p-values are the ones `safetyrepro analyze` writes to item_tests.csv
(p_value, slice full); for CrowS-Pairs (closer to 0.5 is better) they are its p_value_better, from the
same function (significance.pair_better_test), and `diff_better` is the difference in that reading.
What the items could detect is read from each configuration's own item differences (seed means
included), under the test that was run (power.detectable_from_differences).

The interval is for A - B in scores. For CrowS-Pairs (closer to 0.5 is better) the test beside it is the
label-swap test of the better reading, a different question: its interval inverts the exact sign-flip test of
A - B at the row's Holm level, and may exclude 0 on a row whose better reading is not confirmed.

Every row says what its lead rests on (readings.py, issue 52): `rests_on` is readable, format-driven (either
model's cell has unread or empty replies, or the items both models' replies were read on do not support the
lead) or uninformative (a cell that answers one label), `rests_on_why` the cells' parse rates or reasons and
the content reading. On free-form rows the content reading is beside it: `n_both` items where both models'
replies were read, each model's mean score there (`content_a`, `content_b`) and the exact paired p-value on
them (`content_p`). The strict score (an unread reply is wrong) stays what is tested and Holm-adjusted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from safetyrepro.analysis.metrics import readings
from safetyrepro.analysis.metrics.degenerate import degenerate_cells
from safetyrepro.analysis.metrics.slices import PARSE_CLEAN_MIN
from safetyrepro.analysis.paired.power import detectable_from_differences
from safetyrepro.analysis.paired.sign_flip import Interval, holm_levels, paired_interval
from safetyrepro.analysis.paired.significance import ItemRecords, exact_mean, holm, pair_better_test, sign_flip_p_value
from safetyrepro.grid.direction import direction
from safetyrepro.grid.grid_io import Grid, model_pairs

TARGET_POWER = 0.8
COLUMNS = (
    "benchmark",
    "config_id",
    "model_a",
    "model_b",
    "n_items",
    "n_differing",
    "diff",
    "ci_low",
    "ci_high",
    "ci_level",
    "ci_method",
    "diff_better",
    "p_value",
    "p_holm",
    "winner",
    "family_size",
    "parse_a",
    "parse_b",
    "rests_on",
    "rests_on_why",
    "n_both",
    "content_a",
    "content_b",
    "content_p",
)
READING_COLUMNS = COLUMNS[COLUMNS.index("parse_a") :]  # what each row's lead rests on


@dataclass(frozen=True)
class PairedVerdict:
    model_a: str
    model_b: str
    table: pd.DataFrame  # one row per shared configuration (COLUMNS)
    detectable: dict[str, float | None]  # benchmark -> smallest difference found at 80 % power (None: none is)
    sentences: dict[str, str]  # benchmark -> the verdict in one sentence
    alpha: float
    family_size: dict[str, int] = field(default_factory=dict)  # benchmark -> K, the configurations Holm covers
    missing: dict[str, list[str]] = field(default_factory=dict)  # benchmark -> configurations not in the family


def row_intervals(
    differences: Sequence[np.ndarray], p_values: np.ndarray, alpha: float, monotone: bool
) -> tuple[np.ndarray, list[Interval]]:
    """Holm's decisions over one family's rows and each row's interval at its Holm level (sign_flip.holm_levels):
    where the benchmark is read higher-is-better the decision is the one the interval must agree with; otherwise
    (CrowS-Pairs) the test was of the better reading, so the interval of A - B answers to its own exact test."""
    reject, levels = holm_levels(p_values, alpha)
    out = [
        paired_interval(d, level, bool(r) if monotone else None)
        for d, level, r in zip(differences, levels, reject, strict=True)
    ]
    return reject, out


def interval_note(alpha: float) -> str:
    """What ci_low and ci_high are, for the printers (text, Markdown, --json)."""
    return (
        f"ci_low, ci_high: a {100 * (1 - alpha):.3g} % interval for A - B in scores that inverts its test, "
        "Holm-adjusted as the test is: each configuration's at its Holm level (ci_level; alpha/(K - r + 1) for "
        "the r-th smallest p-value confirmed, alpha/(K - s + 1) for every row from the first not confirmed, s), "
        "so it excludes 0 only where the row is confirmed; ci_method: exact Clopper-Pearson on the discordant "
        "items for 0/1 scores, the exact sign-flip test inverted for seed means and partial credit (its normal "
        "approximation above 100 items, Hoeffding's interval where every difference is equal); each interval "
        "holds for its own row, not all at once"
    )


def lead_rests_on(
    benchmark: str,
    config_id: str,
    a: str,
    b: str,
    ahead: float,
    bases: Mapping[tuple[str, str], readings.CellBasis],
    content: readings.ContentIndex | None,
) -> readings.RestsOn:
    """What A's lead over B on one configuration rests on, `ahead` being A - B in the benchmark's better
    reading (> 0: A leads, < 0: B leads, 0: a tie). The content reading (readings.content_index) is
    higher-is-better, so it is asked only where the benchmark is; a tie has no lead for it to support, so only
    the cells are read."""
    lead, trail = (b, a) if ahead < 0 else (a, b)
    known = content if direction(benchmark).monotone and ahead != 0 else None
    return readings.rests_on(config_id, lead, trail, bases, known)


def reading_columns(
    parse: Mapping[tuple[str, str], float],
    benchmark: str,
    config_id: str,
    a: str,
    b: str,
    ahead: float,
    bases: Mapping[tuple[str, str], readings.CellBasis],
    content: readings.ContentIndex,
) -> list:
    """READING_COLUMNS' values for one configuration, content oriented to the caller's A and B (the content
    table holds each pair once, names in sorted order); NaN where the configuration has no content reading.
    `parse`: parse_rates(grid); `content`: readings.content_index of the content table."""
    on = lead_rests_on(benchmark, config_id, a, b, ahead, bases, content)
    row = readings.content_row(content, config_id, a, b)
    if row is None or int(row.n_both) == 0:
        known = [0 if row is not None else np.nan, np.nan, np.nan, np.nan]
    else:
        ca, cb = (row.content_a, row.content_b) if str(row.model_a) == a else (row.content_b, row.content_a)
        known = [int(row.n_both), float(ca), float(cb), float(row.content_p)]
    nan = float("nan")
    return [parse.get((a, config_id), nan), parse.get((b, config_id), nan), on.basis, on.why, *known]


def parse_rates(grid: Grid) -> dict[tuple[str, str], float]:
    """(model, config_id) -> the grid's parse rate (NaN where the grid does not record one)."""
    cells = grid.cells
    rates = pd.to_numeric(cells["parse_rate"], errors="coerce").astype(float)
    return dict(zip(zip(cells["model"].astype(str), cells["config_id"].astype(str), strict=True), rates, strict=True))


def paired_verdict(
    items: ItemRecords,
    grid: Grid,
    a: str,
    b: str,
    alpha: float = 0.05,
    declared: dict[str, list[str]] | None = None,
    bases: Mapping[tuple[str, str], readings.CellBasis] | None = None,
) -> PairedVerdict:
    """A's and B's verdict over every configuration both have item records for, in the user's order.
    `declared`: per benchmark, the configurations the inputs named for either model (default: the
    grid's); those without paired records are listed as missing from the Holm family, never dropped
    without a word. `bases`: the cells' bases (readings.cell_bases); by default the degenerate screen's,
    from the grid and the items' empty outputs and answers, as `analyze` screens them."""
    if bases is None:
        bases = readings.cell_bases(degenerate_cells(grid, items.empty_outputs, items.option_bias))
    ca, cb = items.column(a), items.column(b)
    parse, index = parse_rates(grid), readings.content_index(items.content)
    rows, missing = [], {}
    for benchmark in grid.benchmarks:
        better = direction(benchmark)
        ids = [c for c in grid.config_ids(benchmark) if c in items.by_config and len(items.by_config[c])]
        named = (declared or {}).get(benchmark, grid.config_ids(benchmark))
        missing[benchmark] = [c for c in dict.fromkeys([*grid.config_ids(benchmark), *named]) if c not in ids]
        for cid in ids:
            x = items.by_config[cid]
            d = x[:, ca] - x[:, cb]
            raw = exact_mean(d)
            read = (
                (raw, sign_flip_p_value(d))
                if better.monotone
                else pair_better_test(x[:, ca], x[:, cb], better, cid, a, b)
            )
            on = reading_columns(parse, benchmark, cid, a, b, read[0], bases, index)
            rows.append([benchmark, cid, a, b, len(d), int(np.count_nonzero(d)), raw, *read, *on])
    for benchmark, named in (declared or {}).items():
        if benchmark not in grid.benchmarks and named:
            missing[benchmark] = list(named)
    later = ("ci_low", "ci_high", "ci_level", "ci_method", "p_holm", "winner", "family_size")
    table = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in later])
    parts, detectable, sentences, sizes = [], {}, {}, {}
    for benchmark, g in table.groupby("benchmark", sort=False):
        p = g["p_value"].to_numpy(dtype=float)
        _, held = holm(p, alpha)
        diffs = [items.by_config[c][:, ca] - items.by_config[c][:, cb] for c in g["config_id"]]
        reject, intervals = row_intervals(diffs, p, alpha, direction(str(benchmark)).monotone)
        ahead = g["diff_better"]
        winner = np.where(reject & (ahead > 0), a, np.where(reject & (ahead < 0), b, "n.s."))
        g = g.assign(
            ci_low=[i.low for i in intervals],
            ci_high=[i.high for i in intervals],
            ci_level=[i.confidence for i in intervals],
            ci_method=[i.method for i in intervals],
            p_holm=held,
            winner=winner,
            family_size=len(g),
        )
        parts.append(g)
        sizes[benchmark] = len(g)
        found = None
        if direction(benchmark).monotone:
            found = [
                detectable_from_differences(
                    items.by_config[c][:, ca] - items.by_config[c][:, cb], len(g), alpha, TARGET_POWER
                ).effect
                for c in g["config_id"]
            ]
            detectable[benchmark] = min((f for f in found if f is not None), default=None)
        else:
            detectable[benchmark] = None
        sentences[benchmark] = verdict_sentence(g, a, b, found, alpha, missing.get(benchmark, []))
    table = pd.concat(parts, ignore_index=True)[list(COLUMNS)] if parts else pd.DataFrame(columns=list(COLUMNS))
    missing = {k: v for k, v in missing.items() if v}
    for benchmark, gone in missing.items():
        if benchmark not in sentences:  # not one configuration to test: said, not left out silently
            sentences[benchmark] = (
                f"{benchmark}: no verdict: none of its {len(gone)} configurations has paired item records for both "
                f"{a} and {b} ({', '.join(gone[:3])}{' ...' if len(gone) > 3 else ''})."
            )
    return PairedVerdict(a, b, table, detectable, sentences, alpha, sizes, missing)


def _power_clause(found: list[float | None] | None, wins: int, k: int, better) -> str:
    """What the configurations' own items could detect (power.detectable_from_differences per
    configuration); a configuration that was just confirmed is never called undetectable."""
    if found is None:
        return (
            f"the power of the {better.comparative} reading (a label-swap test) is not modelled; read the "
            f"interval of each configuration"
        )
    sizes = [f for f in found if f is not None]
    if not sizes:
        if wins:
            return (
                f"at Holm's first-step level (alpha/{k}) no configuration's difference is found at 80 % power; "
                f"the confirmed ones passed a later Holm step"
            )
        return "no difference in one configuration is found at 80 % power at this size, however large"
    low, high = 100 * min(sizes), 100 * max(sizes)
    span = f"{low:.0f} points" if f"{low:.0f}" == f"{high:.0f}" else f"{low:.0f}-{high:.0f} points, by configuration"
    if len(sizes) == len(found):
        return f"a configuration's difference is found at 80 % power from {span} ({DESIGN_WORDS})"
    return (
        f"{len(sizes)} of {k} configurations can find a difference at 80 % power (from {span}), the others at no "
        f"size ({DESIGN_WORDS})"
    )


DESIGN_WORDS = (
    "the test run on its items: fractional scores at their own differences, 0/1 scores at their discordance or, "
    "where none differ, the discordance plan assumes"
)


def verdict_sentence(
    g: pd.DataFrame, a: str, b: str, found: list[float | None] | None, alpha: float, missing: Sequence[str] = ()
) -> str:
    """Winner first, with the scores' difference it rests on, the Holm family (and what is missing from
    it) and what the items could detect. Ahead and behind read the benchmark's declared direction."""
    benchmark, k, n = g["benchmark"].iloc[0], len(g), int(g["n_items"].min())
    better = direction(benchmark)
    wins_a, wins_b = int((g["winner"] == a).sum()), int((g["winner"] == b).sum())
    ahead_a, ahead_b = int((g["diff_better"] > 0).sum()), int((g["diff_better"] < 0).sum())
    could = _power_clause(found, wins_a + wins_b, k, better)
    reading = "" if better.monotone else f" ({better.comparative} is better)"
    if wins_a and wins_b:
        head = (
            f"{benchmark}{reading}: the verdict flips: {a} is confirmed ahead on {wins_a} and {b} on {wins_b} of {k} "
            f"configurations"
        )
    elif wins_a or wins_b:
        win, lose, w, behind = (a, b, wins_a, ahead_b) if wins_a else (b, a, wins_b, ahead_a)
        best = g.loc[(g["diff_better"] if win == a else -g["diff_better"]).idxmax()]
        head = (
            f"{benchmark}{reading}: {win} is better than {lose}, confirmed on {w} of {k} configurations (largest: "
            f"{abs(best['diff_better']):.3f} on {best['config_id']}); {lose} is ahead, unconfirmed, on {behind}"
        )
    else:
        head = (
            f"{benchmark}{reading}: no configuration's difference is confirmed ({a} ahead on {ahead_a}, {b} on "
            f"{ahead_b}, tied on {k - ahead_a - ahead_b} of {k})"
        )
    head += basis_clause(g, a, b)
    family = f"Holm over {k} configurations"
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        family += f" ({len(missing)} of {k + len(missing)} left out: no paired item records for both: {shown})"
    test = "exact paired test" if better.monotone else "paired label-swap test"
    return f"{head}; {test}, {family} at alpha {alpha}, {n} items: {could}."


def _claims(g: pd.DataFrame, model: str, a: str, confirmed: bool) -> pd.DataFrame:
    """The rows that carry `model`'s claim: its confirmed wins, or (none being confirmed) its leads."""
    if confirmed:
        return g[g["winner"] == model]
    return g[g["diff_better"] > 0] if model == a else g[g["diff_better"] < 0]


def _why_words(rows: pd.DataFrame, a: str, b: str) -> str:
    """The cells' side of why: each model's lowest parse rate under the parse-clean threshold on these rows,
    or the screen's words where a cell is flagged for its answers; else the content reading alone."""
    words = []
    for model, column in ((a, "parse_a"), (b, "parse_b")):
        low = rows.loc[rows[column] < PARSE_CLEAN_MIN, column]
        if len(low):
            lo, hi = float(low.min()), float(low.max())
            span = f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"
            words.append(f"{model}'s parse rate {span}")
    if not words:
        words = sorted({w.split("; ")[0] for w in rows["rests_on_why"] if w})
    return "; ".join(words)


CONTENT_ALPHA = 0.05  # a content reading's lean is called confirmed at this level (one configuration's own test)


def _content_words(rows: pd.DataFrame, a: str, b: str) -> str:
    """Who the content reading (the items both models' replies were read on) puts ahead on these rows: one
    model named when it is ahead on every one of them, else how it splits, each configuration's leader named."""
    known = rows[rows["n_both"].fillna(0) > 0]
    if known.empty:
        return ""
    sign = np.sign(known["content_a"] - known["content_b"]).to_numpy()
    n_a, n_b = int((sign > 0).sum()), int((sign < 0).sum())
    one = n_a == len(known) or n_b == len(known)
    shown = []
    for r, s in zip(known.head(3).itertuples(), sign, strict=False):
        hi, lo = max(r.content_a, r.content_b), min(r.content_a, r.content_b)
        who = "" if one else f"{a} " if s > 0 else f"{b} " if s < 0 else "a tie, "
        p = round(float(r.content_p), 12)  # as readings.content_sentence prints it
        shown.append(f"{r.config_id}: {who}{hi:.3f} vs {lo:.3f} on {int(r.n_both)} items, exact p = {p:.3g}")
    more = f" and {len(known) - 3} more" if len(known) > 3 else ""
    # a lean is not a finding: say so where no configuration's exact test on the items both read rejects
    confirmed = int((known["content_p"] <= CONTENT_ALPHA).sum())
    unconfirmed = "" if confirmed else f", none of it confirmed (every exact p > {CONTENT_ALPHA:g})"
    if one:
        head = f"names {a if n_a else b}{unconfirmed}"
    else:
        head = f"is split: {a} ahead on {n_a}, {b} on {n_b}, tied on {len(known) - n_a - n_b}{unconfirmed}"
    return f"; the content reading (the items both models' replies were read on) {head} ({'; '.join(shown)}{more})"


def _share(k: int, n: int, model: str, kind: str, basis: str) -> str:
    """'model-a's 2 leads are all format-driven', '1 of model-a's 3 confirmed wins is format-driven'."""
    if k == n:
        return f"{model}'s one {kind} is {basis}" if n == 1 else f"{model}'s {n} {kind}s are all {basis}"
    return f"{k} of {model}'s {n} {kind}s {'is' if k == 1 else 'are'} {basis}"


def basis_clause(g: pd.DataFrame, a: str, b: str) -> str:
    """Where a claim of the sentence (a model's confirmed wins, or its leads when nothing is confirmed) is not
    readable: how many of them, why (parse rates), that they are about answer format (or say nothing about
    the items), not which model is safer, and who the content reading names. '' when every claim is readable."""
    confirmed = bool(g["winner"].isin((a, b)).any())
    kind = "confirmed win" if confirmed else "lead"
    out = []
    for model in (a, b):
        rows = _claims(g, model, a, confirmed)
        bad = rows[rows["rests_on"] != readings.READABLE]
        if bad.empty:
            continue
        for basis, part in bad.groupby("rests_on", sort=False):
            share = _share(len(part), len(rows), model, kind, basis)
            it = "it is" if len(part) == 1 else "they are"
            meaning = (
                f"{it} about answer format, not which model is safer"
                if basis == readings.FORMAT
                else f"{it} about a cell that answers one label or no better than the label frequencies, not which "
                "model is safer"
            )
            out.append(
                f"{share} ({_why_words(part, a, b)}): {meaning}"
                + (_content_words(part, a, b) if basis == readings.FORMAT else "")
            )
    return "".join(f"; {o}" for o in out)


LEAD_COLUMNS = ("benchmark", "config_id", "model_a", "model_b", "score_a", "score_b", "lead", *READING_COLUMNS)


def leads_table(
    grid: Grid,
    bases: Mapping[tuple[str, str], readings.CellBasis],
    content: pd.DataFrame | None,
    pairs: Sequence[tuple[str, str]] | None = None,
) -> pd.DataFrame:
    """Per benchmark x model pair x configuration of the grid: the strict scores, who leads in the benchmark's
    better reading ('' for a tie) and what that lead rests on (READING_COLUMNS), for a table where rows name a
    pair and a configuration (the EEE export's verdict tables). Pairs: rank_flip.model_pairs by default."""
    rows, parse, index = [], parse_rates(grid), readings.content_index(content)
    for benchmark in grid.benchmarks:
        m = grid.matrix(benchmark)
        better = direction(benchmark).better_value(m)
        for a, b in pairs or model_pairs(grid.models):
            for cid in m.index:
                x, y = float(better.at[cid, a]), float(better.at[cid, b])
                ahead = (x > y) - (x < y)  # the strict comparison rank_flip counts, in the better reading
                lead = a if ahead > 0 else b if ahead < 0 else ""
                on = reading_columns(parse, benchmark, cid, a, b, ahead, bases, index)
                rows.append([benchmark, cid, a, b, float(m.at[cid, a]), float(m.at[cid, b]), lead, *on])
    return pd.DataFrame(rows, columns=list(LEAD_COLUMNS))


def pair_rests_on(leads: pd.DataFrame, config_ids: Sequence[str]) -> dict[str, object]:
    """For one pair's rows of leads_table over some configurations (a slice's): how many of their leads are
    format-driven and uninformative, and a phrase saying whose ('readable' when none is)."""
    rows = leads[leads["config_id"].isin(list(config_ids)) & (leads["lead"] != "")]
    out: dict[str, object] = {}
    words = []
    for basis in (readings.FORMAT, readings.UNINFORMATIVE):
        hit = rows[rows["rests_on"] == basis]
        out[f"n_{basis.replace('-', '_')}"] = len(hit)
        if len(hit):
            whose = ", ".join(f"{m}'s {n}" for m, n in hit["lead"].value_counts(sort=False).items())
            words.append(f"{len(hit)} of {len(rows)} configurations' leads are {basis} ({whose})")
    out["rests_on"] = "; ".join(words) if words else readings.READABLE
    return out
