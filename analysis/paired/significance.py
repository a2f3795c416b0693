"""Significant flips (beyond the paper): which strict wins the items support, with error control.

With per-item records, each configuration's A - B difference gets an exact paired sign-flip test
over items: under the null that the two models are exchangeable on every item, each item's
difference d_i is as likely to be +|d_i| as -|d_i|, so the p-value of the observed sum is read
off the exact law of sum(+-|d_i|). For 0/1 item scores this is the exact McNemar test on the
discordant items; seed-averaged item scores (multiples of 1/5) are handled exactly on their
lattice. The test is the same in every configuration and needs no resampling.

One configuration's test is one of many: a benchmark x slice x pair has |C| of them, and a flip
needs a win each way. Per such family, the p-values are adjusted with Holm (familywise error) and
with Benjamini-Hochberg (false discovery rate), and a win counts as significant only when its
adjusted p-value is at most alpha and the grid and the items agree on its sign.
rho_flip_sig = min(significant A wins, significant B wins) / |C| is reported per correction, named
in the table.

rho_flip itself gets an item-bootstrap interval (percentile, 2.5-97.5 %): the benchmark's items are
redrawn with replacement, one draw per resample for every configuration and every model (every
configuration of a benchmark scores the same items, and an item a model knows it tends to know
under every template: redrawing items per configuration made the intervals about half as wide as
they are), and rho_flip is recomputed on the resampled means.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from safetyrepro.analysis.metrics.chance import chance_rho_flip
from safetyrepro.analysis.metrics.readings import content_table
from safetyrepro.analysis.metrics.slices import slice_config_ids
from safetyrepro.analysis.paired.sign_flip import exact_mean, sign_flip_p_value  # noqa: F401  (read from here by paired and two_runs)
from safetyrepro.errors import UserError
from safetyrepro.grid.direction import direction
from safetyrepro.grid.exact import as_integers, snap_items
from safetyrepro.grid.grid_io import Grid, model_pairs, plain, read_table
from safetyrepro.grid.item_validation import ITEM_COLUMNS
from safetyrepro.tasks.envelope import Config, Rules

TEST_NAME = "exact paired sign-flip test over items (two-sided)"
CORRECTIONS = {
    "holm": "Holm (familywise error; confirmatory)",
    "fdr_bh": "Benjamini-Hochberg (false discovery rate; exploratory)",
}
FAMILY = "one benchmark x slice x model pair (its |C| configurations)"
SCORE_TOLERANCE = 1e-6  # items averaged back to a cell should reproduce the grid's score
PAIR_NULL_MIN_DRAWS = 1000  # label swaps per benchmark for the pair's null reference, at least


@dataclass(frozen=True)
class ItemRecords:
    """Per configuration, the items x models array of item scores (each item's mean over its seeds),
    columns in `models` order; only items that every model answered."""

    models: tuple[str, ...]
    by_config: dict[str, np.ndarray]
    warnings: tuple[str, ...]
    source: str
    empty_outputs: pd.DataFrame | None = (
        None  # model, config_id, n_outputs, n_empty (free-form; None without raw_output)
    )
    item_ids: dict[str, np.ndarray] | None = None  # per configuration, the item id of each row of by_config
    option_bias: pd.DataFrame | None = None  # per cell: what its parsed answers carry (None without predictions)
    content: pd.DataFrame | None = None  # per free-form configuration and pair: form and content (readings.py)

    def column(self, model: str) -> int:
        return self.models.index(model)


def load_items(path: str, grid: Grid) -> ItemRecords:
    return items_from_frame(read_table(path, what="items"), grid, path)


def items_from_frame(frame: pd.DataFrame, grid: Grid, source: str) -> ItemRecords:
    """Item records from a table in items.parquet's format (a file's, or a DataFrame's)."""
    path = source
    missing = [c for c in ITEM_COLUMNS if c not in frame.columns]
    if missing:
        raise UserError(
            f"items file {path} lacks column(s) {', '.join(missing)}; item records need: {', '.join(ITEM_COLUMNS)}"
        )
    for column, value in (("precision", grid.precision), ("package", grid.package)):
        if column in frame.columns:  # optional: keep the grid's own group when the records say
            frame = frame[frame[column].astype(str) == value]
    return item_records(frame, grid, path)


def _empty_outputs(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Free-form records whose raw output is empty (or only whitespace), per cell."""
    if "raw_output" not in frame.columns:
        return None
    # a record without an output (an import that kept none) is unknown, not empty
    free = frame[frame["config_id"].str.endswith("/free_form") & frame["raw_output"].notna()]
    if free.empty:
        return None
    text = free["raw_output"].astype(str).str.strip()
    counts = free.assign(empty=(text == "")).groupby(["model", "config_id"])["empty"].agg(["size", "sum"])
    return (
        counts.rename(columns={"size": "n_outputs", "sum": "n_empty"})
        .reset_index()
        .astype({"n_outputs": int, "n_empty": int})
    )


def _option_bias(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Per cell (model, config_id), what its parsed answers say about its items: how many parsed
    answers there are (item x seed records with a prediction), the most frequent label (its index)
    and its share, the share of parsed answers that agree with gold (`agreement`), and the share the
    most frequent gold label has among the same answers (`majority_share`: the agreement of always
    answering that label), plus the most frequent gold label's share over the cell's items
    (`gold_top_share`). None when the records carry no `prediction` and `gold` columns."""
    if "prediction" not in frame.columns or "gold" not in frame.columns:
        return None
    pred = frame.dropna(subset=["prediction"])
    if pred.empty:
        return None
    key = ["model", "config_id"]
    counts = pred.groupby(key)["prediction"].value_counts()
    top = counts.groupby(level=[0, 1]).head(1).reset_index(name="n_top").rename(columns={"prediction": "top_label"})
    n = pred.groupby(key).size().rename("n_predictions").reset_index()
    gold = pd.to_numeric(pred["gold"], errors="coerce")
    agree = (pd.to_numeric(pred["prediction"], errors="coerce") == gold).groupby([pred["model"], pred["config_id"]])
    majority = gold.groupby([pred["model"], pred["config_id"]]).agg(
        lambda g: g.value_counts(normalize=True).iloc[0] if g.notna().any() else np.nan
    )
    read = pd.DataFrame({"agreement": agree.mean(), "majority_share": majority}).rename_axis(key).reset_index()
    items = frame.drop_duplicates(["model", "config_id", "item_id"]).groupby(key)["gold"]
    # a cell without gold labels (a generated answer checked against text) has no majority label
    gold_top = items.agg(lambda g: g.value_counts(normalize=True).iloc[0] if g.notna().any() else np.nan).rename(
        "gold_top_share"
    )
    out = top.merge(n, on=key).merge(read, on=key).merge(gold_top.reset_index(), on=key)
    out["top_share"] = out["n_top"] / out["n_predictions"]
    out["top_label"] = out["top_label"].astype(int)
    return out[[*key, "n_predictions", "top_label", "top_share", "agreement", "majority_share", "gold_top_share"]]


def item_records(frame: pd.DataFrame, grid: Grid, source: str) -> ItemRecords:
    scores = pd.to_numeric(frame["item_score"], errors="coerce")
    bad = scores.isna() | (scores < 0) | (scores > 1)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise UserError(
            f"items file {source} row {i + 1}: item_score {plain(frame['item_score'].iloc[i])!r} is not a "
            f"number in [0, 1]"
        )
    frame = frame.assign(
        item_score=scores.astype(float),
        model=frame["model"].astype(str),
        config_id=frame["config_id"].astype(str),
        item_id=frame["item_id"].astype(str),
    )
    for cid in frame["config_id"].unique():
        Config.from_id(cid)  # a malformed id is a one-line error
    warnings = check_items_agree(frame, grid, source)
    known = set(grid.cells["config_id"])
    outside = ~frame["config_id"].isin(known)
    if outside.any():
        warnings.append(
            f"items: {int(outside.sum())} records are for configurations this grid does not analyse "
            f"(e.g. {frame.loc[outside, 'config_id'].iloc[0]}); they were left out"
        )
    frame = frame[frame["config_id"].isin(known) & frame["model"].isin(grid.models)]
    # Seeds first, then items: an item's score is its mean over the seeds it was run with.
    cell_means = frame.groupby(["config_id", "model", "seed"])["item_score"].mean().groupby(level=[0, 1]).mean()
    grid_scores = grid.cells.set_index(["config_id", "model"])["score"].reindex(cell_means.index)
    mismatched = cell_means.index[(cell_means - grid_scores).abs().to_numpy() > SCORE_TOLERANCE]
    wide = frame.groupby(["config_id", "item_id", "model"])["item_score"].mean().unstack("model")
    wide = wide.reindex(columns=list(grid.models))
    present = frame.groupby("config_id")["model"].nunique()
    wide = wide[wide.index.get_level_values(0).isin(present.index[present == len(grid.models)])]
    complete = wide.dropna()
    partial = len(wide) - len(complete)
    ids = complete.index.get_level_values(0).to_numpy()
    item_of = complete.index.get_level_values(1).to_numpy()
    values = complete.to_numpy(dtype=float)
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else np.array([], dtype=int)
    spans = list(zip(starts, np.r_[starts[1:], len(ids)], strict=True)) if len(ids) else []
    # seed means as the exact floats of their fractions, so equal items tie exactly (exact.py)
    by_config = {str(ids[s]): snap_items(values[s:e]) for s, e in spans}
    item_ids = {str(ids[s]): item_of[s:e].astype(str) for s, e in spans}
    if partial:
        warnings.append(
            f"items: {partial} (config, item) records lack some model and were left out of the paired tests"
        )
    if len(mismatched):
        cid, model = mismatched[0]
        warnings.append(
            f"items: {len(mismatched)} cells' item means differ from the grid score by more than "
            f"{SCORE_TOLERANCE:g} (first: {model} on {cid}); the tests use the items, the counts the grid"
        )
    if not by_config:
        warnings.append(f"items: {source} holds no records for this grid's models and configurations")
    return ItemRecords(
        tuple(grid.models),
        by_config,
        tuple(warnings),
        source,
        _empty_outputs(frame),
        item_ids,
        _option_bias(frame),
        content_table(frame, model_pairs(grid.models)),
    )


def check_items_agree(frame: pd.DataFrame, grid: Grid, source: str) -> list[str]:
    """The records and the grid describe the same runs: every record's model is one of the grid's, and
    in every configuration the grid analyses, each model has exactly the grid's n_items items, the
    same item ids as the other models. Each mismatch is one line (UserError) with its count and an
    example. Returns warnings: cells whose records cover fewer items than n_items (a sample)."""
    known_models = (
        set(grid.models) | set(grid.excluded["model"].astype(str)) if len(grid.excluded) else set(grid.models)
    )
    stray = frame.loc[~frame["model"].isin(known_models), "model"]
    if len(stray):
        raise UserError(
            f"items file {source}: {len(stray)} records are for model(s) the grid does not have "
            f"({', '.join(map(repr, sorted(stray.unique())[:3]))}); the grid's models are "
            f"{', '.join(grid.models)}"
        )
    rows = frame[frame["config_id"].isin(set(grid.cells["config_id"])) & frame["model"].isin(grid.models)]
    if rows.empty:
        return []
    ids = rows.groupby(["config_id", "model"])["item_id"].agg(lambda v: frozenset(v))
    expected = grid.cells.set_index(["config_id", "model"])["n_items"].reindex(ids.index)
    counts = ids.map(len)
    wrong = counts.index[(counts > expected).to_numpy() & expected.notna().to_numpy()]
    if len(wrong):  # fewer is a sample of the cell's items (said as a warning by item_records); more cannot be
        cid, model = wrong[0]
        raise UserError(
            f"items file {source}: {len(wrong)} cells' records hold more items than the grid's n_items "
            f"(e.g. {model} on {cid}: {counts[(cid, model)]} item ids, the grid says "
            f"{int(expected[(cid, model)])})"
        )
    differ = [cid for cid, sets in ids.groupby(level=0) if len(set(sets)) > 1]
    if differ:
        sets = ids.loc[differ[0]]
        odd = sorted(set.union(*map(set, sets)) - set.intersection(*map(set, sets)))
        raise UserError(
            f"items file {source}: in {len(differ)} configurations the models' records hold different "
            f"item ids (e.g. {differ[0]}: {odd[0]!r} is not in every model's records)"
        )
    fewer = counts.index[(counts < expected).to_numpy() & expected.notna().to_numpy()]
    if len(fewer):
        cid, model = fewer[0]
        return [
            f"items: {len(fewer)} cells' records cover fewer items than the grid's n_items (e.g. {model} on "
            f"{cid}: {counts[(cid, model)]} of {int(expected[(cid, model)])}); the item tests use the records"
        ]
    return []


# -- the per-configuration test -------------------------------------------------------------------
TEST_COLUMNS = (
    "benchmark",
    "config_id",
    "model_a",
    "model_b",
    "n_items",
    "n_differing",
    "diff_grid",
    "diff_items",
    "p_value",
    "diff_grid_better",
    "diff_items_better",
    "p_value_better",
)
BETTER_TEST = (
    "the same items, labels swapped item by item at random (Monte Carlo, {n} seeded draws, two-sided, "
    "(k + 1) / (n + 1)), on the difference in the better reading"
)
BETTER_DRAWS = 2000


def better_p_value(xa: np.ndarray, xb: np.ndarray, better, seed: int) -> float:
    """Two-sided Monte Carlo p-value of the better-reading difference better(mean a) - better(mean b)
    (for CrowS-Pairs: |mean b - 0.5| - |mean a - 0.5|) under "the two models are interchangeable item
    by item": each draw swaps the two models' scores on a random half of the items."""
    n = len(xa)
    observed = float(better.better_value(xa.mean()) - better.better_value(xb.mean()))
    swap = np.random.default_rng(seed).random((BETTER_DRAWS, n)) < 0.5
    ma = np.where(swap, xb, xa).mean(axis=1)
    mb = np.where(swap, xa, xb).mean(axis=1)
    draws = better.better_value(ma) - better.better_value(mb)
    k = int((np.abs(draws) >= abs(observed) - 1e-12).sum())
    return (k + 1) / (BETTER_DRAWS + 1)


def pair_better_test(xa: np.ndarray, xb: np.ndarray, better, cid: str, a: str, b: str) -> tuple[float, float]:
    """One configuration's items read in the benchmark's better direction: (the difference A - B in
    that reading, its p-value by better_p_value). The draws are seeded by the configuration and the
    pair in alphabetical order, so `analyze` and `verdict` give the same p-value whichever model is
    named first."""
    diff = float(better.better_value(exact_mean(xa)) - better.better_value(exact_mean(xb)))
    first, second = (xa, xb) if a <= b else (xb, xa)
    lo, hi = sorted((a, b))
    return diff, better_p_value(first, second, better, zlib.crc32(f"{cid}|{lo}|{hi}".encode()))


def paired_item_tests(items: ItemRecords, grid: Grid) -> pd.DataFrame:
    """One row per configuration x pair: the grid's difference, the items' difference, the raw p-value."""
    rows = []
    grid_scores = dict(
        zip(zip(grid.cells["config_id"], grid.cells["model"], strict=True), grid.cells["score"], strict=True)
    )
    for cid in sorted(items.by_config):
        block = items.by_config[cid]
        if len(block) == 0:
            continue
        benchmark = Config.from_id(cid).benchmark
        better = direction(benchmark)
        for a, b in model_pairs(grid.models):
            xa, xb = block[:, items.column(a)], block[:, items.column(b)]
            d = xa - xb
            raw = (float(grid_scores[(cid, a)] - grid_scores[(cid, b)]), exact_mean(d), sign_flip_p_value(d))
            if better.monotone:  # better is higher: the same test
                read = raw
            else:
                read = (
                    float(better.better_value(grid_scores[(cid, a)]) - better.better_value(grid_scores[(cid, b)])),
                    *pair_better_test(xa, xb, better, cid, a, b),
                )
            rows.append((benchmark, cid, a, b, len(d), int(np.count_nonzero(d)), *raw, *read))
    return pd.DataFrame(rows, columns=list(TEST_COLUMNS))


def _winner(reject: np.ndarray, diff_grid: np.ndarray, diff_items: np.ndarray, a: str, b: str) -> np.ndarray:
    """a or b where the adjusted test rejects and grid and items agree on the sign; else tie / n.s."""
    out = np.where(diff_grid == 0, "tie", "n.s.").astype(object)
    out[reject & (diff_grid > 0) & (diff_items > 0)] = a
    out[reject & (diff_grid < 0) & (diff_items < 0)] = b
    return out


def holm(p_values, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down adjustment: (reject, adjusted p). The k-th smallest p-value is multiplied by
    m - k + 1 and made monotone. Same numbers as statsmodels' multipletests(method="holm") (tested),
    whose Holm branch calls gc.collect() on every call: 0.4 s each inside a full analysis."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    m = len(p)
    adjusted_sorted = np.minimum(np.maximum.accumulate(p[order] * np.arange(m, 0, -1)), 1.0)
    adjusted = np.empty(m)
    adjusted[order] = adjusted_sorted
    return adjusted <= alpha, adjusted


def benjamini_hochberg(p_values, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Benjamini-Hochberg step-up adjustment (statsmodels' fdrcorrection): (reject, adjusted p)."""
    from statsmodels.stats.multitest import fdrcorrection

    reject, adjusted = fdrcorrection(np.asarray(p_values, dtype=float), alpha=alpha, method="indep")
    return reject, np.minimum(adjusted, 1.0)


ADJUST = {"holm": holm, "fdr_bh": benjamini_hochberg}


def adjusted_item_tests(
    tests: pd.DataFrame, grid: Grid, rules: Rules, slices: Sequence[str], alpha: float
) -> pd.DataFrame:
    """The per-configuration tests once per slice, with Holm and BH p-values adjusted within each
    benchmark x slice x pair (the family) and the significant winner under each."""
    parts = []
    for benchmark in grid.benchmarks:
        mine = tests[tests["benchmark"] == benchmark]
        for name in slices:
            ids = set(slice_config_ids(grid, rules, benchmark, name))
            for (a, b), g in mine[mine["config_id"].isin(ids)].groupby(["model_a", "model_b"], sort=True):
                g = g.assign(slice=name, family_size=len(g))
                for method in CORRECTIONS:
                    reject, adjusted = ADJUST[method](g["p_value"].to_numpy(), alpha)
                    g[f"p_{method}"] = adjusted
                    g[f"winner_{method}"] = _winner(reject, g["diff_grid"].to_numpy(), g["diff_items"].to_numpy(), a, b)
                    reject, adjusted = ADJUST[method](g["p_value_better"].to_numpy(), alpha)
                    g[f"p_{method}_better"] = adjusted
                    g[f"winner_{method}_better"] = _winner(
                        reject, g["diff_grid_better"].to_numpy(), g["diff_items_better"].to_numpy(), a, b
                    )
                parts.append(g)
    columns = [
        "benchmark",
        "slice",
        "config_id",
        "model_a",
        "model_b",
        "n_items",
        "n_differing",
        "diff_grid",
        "diff_items",
        "p_value",
        "family_size",
        *(f"p_{m}" for m in CORRECTIONS),
        *(f"winner_{m}" for m in CORRECTIONS),
        "diff_grid_better",
        "diff_items_better",
        "p_value_better",
        *(f"p_{m}_better" for m in CORRECTIONS),
        *(f"winner_{m}_better" for m in CORRECTIONS),
    ]
    if not parts:
        return pd.DataFrame(columns=columns)
    return pd.concat(parts, ignore_index=True)[columns]


# -- item bootstrap of rho_flip -------------------------------------------------------------------
def _items_of(items: ItemRecords, config_ids: Sequence[str]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(per configuration, its rows' item ids; the benchmark's item ids, sorted): what one draw over the
    benchmark's items is made on (configurations index into it with searchsorted)."""
    ids_of = items.item_ids or {c: np.array([str(k) for k in range(len(items.by_config[c]))]) for c in config_ids}
    return ids_of, np.unique(np.concatenate([ids_of[c] for c in config_ids]))


def _min_of_counts(diffs: np.ndarray) -> np.ndarray:
    """rho_flip along the last axis (configurations) of A - B differences."""
    return np.minimum((diffs > 0).sum(axis=-1), (diffs < 0).sum(axis=-1)) / diffs.shape[-1]


def _configs_with_items(items: ItemRecords, grid: Grid, benchmark: str) -> list[str]:
    return [c for c in grid.config_ids(benchmark) if c in items.by_config and len(items.by_config[c])]


def resampled_means(
    items: ItemRecords, config_ids: Sequence[str], n_resamples: int, seed: int, stream: str = ""
) -> np.ndarray:
    """resamples x configs x models: one draw of item ids with replacement per resample, applied to
    every configuration and every model (paired across models and configurations: an item that one
    model knows counts under every template it was drawn for, as in the data). A configuration
    that lacks some drawn items averages over the ones it has. The random stream is seeded by
    `seed` and `stream` (the benchmark), so the draws do not depend on which configurations are
    present, only on the benchmark's items."""
    ids_of, universe = _items_of(items, config_ids)
    rng = np.random.default_rng([seed, zlib.crc32(stream.encode())])
    counts = rng.multinomial(len(universe), np.full(len(universe), 1.0 / len(universe)), size=n_resamples)
    out = []
    for cid in config_ids:
        w = counts[:, np.searchsorted(universe, ids_of[cid])].astype(float)  # resamples x the config's items
        total = w.sum(axis=1, keepdims=True)
        ints, lattice = as_integers(items.by_config[cid])  # whole-number sums: models that tie, tie exactly
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append((w @ ints) / (total * lattice))  # a resample that drew none of its items: NaN
    return np.stack(out, axis=1)


def rho_flip_item_bootstrap(
    items: ItemRecords, grid: Grid, rules: Rules, slices: Sequence[str], n_resamples: int, seed: int
) -> pd.DataFrame:
    """Per benchmark x slice x pair: the 2.5-97.5 % range of rho_flip over item resamples."""
    columns = ["benchmark", "slice", "model_a", "model_b", "rho_flip_lo", "rho_flip_hi"]
    rows = []
    col = {m: items.column(m) for m in grid.models}
    for benchmark in grid.benchmarks:
        ids = _configs_with_items(items, grid, benchmark)
        if not ids or n_resamples < 1:
            continue
        means = resampled_means(items, ids, n_resamples, seed, benchmark)
        where = {c: i for i, c in enumerate(ids)}
        for name in slices:
            keep = [where[c] for c in slice_config_ids(grid, rules, benchmark, name) if c in where]
            if not keep:
                continue
            sample = means[:, keep, :]
            for a, b in model_pairs(grid.models):
                lo, hi = np.percentile(_min_of_counts(sample[:, :, col[a]] - sample[:, :, col[b]]), [2.5, 97.5])
                rows.append((benchmark, name, a, b, float(lo), float(hi)))
    return pd.DataFrame(rows, columns=columns)


# -- a null reference for each pair, from its own items -------------------------------------------
PAIR_NULL = (
    "the two models' labels swapped item by item at random, the same swap in every configuration "
    "(the two models interchangeable item by item, their items' correlation across configurations kept)"
)


NULL_COLUMNS = (
    "rho_flip_null_mean",
    "rho_flip_null_share_le",
    "p_consistent",
    "rho_flip_null_mean_better",
    "p_consistent_better",
)


def pair_null_reference(
    items: ItemRecords, grid: Grid, rules: Rules, slices: Sequence[str], n_draws: int, seed: int
) -> pd.DataFrame:
    """Per benchmark x slice x pair: rho_flip under PAIR_NULL (Monte Carlo, `n_draws` seeded swaps of
    the benchmark's items): its mean, the share of draws at or below the observed rho_flip, and from
    it `p_consistent`, the Monte Carlo p-value (k + 1) / (n + 1) of "these two models differ
    consistently" (fewer reversals than two interchangeable models would show on these items).
    Swapping the labels of item i flips the sign of its A - B difference in every configuration at
    once. The `_better` columns read the benchmark's direction (for CrowS-Pairs, closer to 0.5;
    identical where higher is better). Sums are on the items' whole-number lattice (exact.py), so a
    draw whose difference is 0 as a fraction counts as a tie."""
    columns = ["benchmark", "slice", "model_a", "model_b", *NULL_COLUMNS]
    rows = []
    col = {m: items.column(m) for m in grid.models}
    for benchmark in grid.benchmarks:
        cids = _configs_with_items(items, grid, benchmark)
        if not cids or n_draws < 1:
            continue
        better = direction(benchmark)
        ids_of, universe = _items_of(items, cids)
        rng = np.random.default_rng([seed, zlib.crc32(("pair-null " + benchmark).encode())])
        signs = rng.choice(np.array([-1.0, 1.0]), size=(n_draws, len(universe)))
        where = {c: i for i, c in enumerate(cids)}
        for a, b in model_pairs(grid.models):
            obs, null, obs_b, null_b = [], [], [], []
            for c in cids:
                ints, lattice = as_integers(items.by_config[c][:, [col[a], col[b]]])
                ka, kb = ints[:, 0], ints[:, 1]
                s = signs[:, np.searchsorted(universe, ids_of[c])]
                obs.append(float((ka - kb).sum()))
                null.append(s @ (ka - kb))
                if not better.monotone:  # each model's mean under the swap, then the better reading of each
                    moved = ((1 - s) / 2) @ (ka - kb)
                    n = len(ka) * lattice
                    obs_b.append(better.better_value(ka.sum() / n) - better.better_value(kb.sum() / n))
                    null_b.append(
                        better.better_value((ka.sum() - moved) / n) - better.better_value((kb.sum() + moved) / n)
                    )
            obs_a, null_a = np.array(obs), np.stack(null, axis=1)  # configs; draws x configs
            if not better.monotone:
                obs_ab, null_ab = np.array(obs_b), np.stack(null_b, axis=1)
            for name in slices:
                keep = [where[c] for c in slice_config_ids(grid, rules, benchmark, name) if c in where]
                if not keep:
                    continue
                rho = float(_min_of_counts(obs_a[keep]))
                draws = _min_of_counts(null_a[:, keep])
                below = int((draws <= rho).sum())
                if better.monotone:
                    mean_b, p_b = float(draws.mean()), (below + 1) / (n_draws + 1)
                else:
                    rho_b = float(_min_of_counts(obs_ab[keep]))
                    draws_b = _min_of_counts(null_ab[:, keep])
                    mean_b, p_b = float(draws_b.mean()), (int((draws_b <= rho_b).sum()) + 1) / (n_draws + 1)
                rows.append(
                    (
                        benchmark,
                        name,
                        a,
                        b,
                        float(draws.mean()),
                        below / n_draws,
                        (below + 1) / (n_draws + 1),
                        mean_b,
                        p_b,
                    )
                )
    return pd.DataFrame(rows, columns=columns)


# -- the table -----------------------------------------------------------------------------------
def significant_flips(
    adjusted: pd.DataFrame,
    intervals: pd.DataFrame | None,
    grid: Grid,
    rules: Rules,
    slices: Sequence[str],
    alpha: float,
    n_resamples: int,
    pair_null: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per benchmark x slice x pair x correction: plain and significance-filtered rho_flip on the
    configurations that have item records (the plain one is recomputed there, so both sit on the
    same |C|), with the item-bootstrap range of the plain one."""
    rows = []
    for (benchmark, name, a, b), g in adjusted.groupby(["benchmark", "slice", "model_a", "model_b"], sort=False):
        n = len(g)
        plus, minus = int((g["diff_grid"] > 0).sum()), int((g["diff_grid"] < 0).sum())
        n_slice = len(slice_config_ids(grid, rules, benchmark, name))
        for method, label in CORRECTIONS.items():
            plus_sig = int((g[f"winner_{method}"] == a).sum())
            minus_sig = int((g[f"winner_{method}"] == b).sum())
            plus_b, minus_b = (
                int((g[f"winner_{method}_better"] == a).sum()),
                int((g[f"winner_{method}_better"] == b).sum()),
            )
            rows.append(
                {
                    "benchmark": benchmark,
                    "slice": name,
                    "model_a": a,
                    "model_b": b,
                    "n_configs": n,
                    "n_configs_slice": n_slice,
                    "n_plus": plus,
                    "n_minus": minus,
                    "rho_flip": min(plus, minus) / n,
                    "chance": chance_rho_flip(n),
                    "correction": method,
                    "correction_controls": label,
                    "n_plus_sig": plus_sig,
                    "n_minus_sig": minus_sig,
                    "rho_flip_sig": min(plus_sig, minus_sig) / n,
                    "n_plus_sig_better": plus_b,
                    "n_minus_sig_better": minus_b,
                    "rho_flip_sig_better": min(plus_b, minus_b) / n,
                    "test": TEST_NAME
                    if direction(benchmark).monotone
                    else f"{TEST_NAME}; better reading: {BETTER_TEST.format(n=BETTER_DRAWS)}",
                    "alpha": alpha,
                }
            )
    flips = pd.DataFrame(rows)
    if flips.empty:
        return flips
    if intervals is not None and not intervals.empty:
        flips = flips.merge(intervals, on=["benchmark", "slice", "model_a", "model_b"], how="left")
    else:
        flips = flips.assign(rho_flip_lo=np.nan, rho_flip_hi=np.nan)
    flips["n_resamples"] = n_resamples
    if pair_null is not None and not pair_null.empty:
        flips = flips.merge(pair_null, on=["benchmark", "slice", "model_a", "model_b"], how="left")
    else:
        flips = flips.assign(**{c: np.nan for c in NULL_COLUMNS})
    order = [
        "benchmark",
        "slice",
        "model_a",
        "model_b",
        "n_configs",
        "n_configs_slice",
        "n_plus",
        "n_minus",
        "rho_flip",
        "chance",
        "rho_flip_lo",
        "rho_flip_hi",
        *NULL_COLUMNS,
        "correction",
        "correction_controls",
        "n_plus_sig",
        "n_minus_sig",
        "rho_flip_sig",
        "n_plus_sig_better",
        "n_minus_sig_better",
        "rho_flip_sig_better",
        "test",
        "alpha",
        "n_resamples",
    ]
    return flips[order]


@dataclass(frozen=True)
class ItemAnalysis:
    tests: pd.DataFrame  # item_tests.csv: per slice x config x pair, raw and adjusted p-values
    flips: pd.DataFrame  # significant_flips.csv
    records: ItemRecords


def item_analysis(
    items: ItemRecords, grid: Grid, rules: Rules, slices: Sequence[str], alpha: float, n_resamples: int, seed: int
) -> ItemAnalysis:
    raw = paired_item_tests(items, grid)
    adjusted = adjusted_item_tests(raw, grid, rules, slices, alpha)
    intervals = rho_flip_item_bootstrap(items, grid, rules, slices, n_resamples, seed)
    null = pair_null_reference(items, grid, rules, slices, max(n_resamples, PAIR_NULL_MIN_DRAWS), seed)
    return ItemAnalysis(
        adjusted, significant_flips(adjusted, intervals, grid, rules, slices, alpha, n_resamples, null), items
    )
