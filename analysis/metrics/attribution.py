"""Axis attribution with surrogate models (paper §5.1, App. S): a LightGBM regressor (axes + model +
benchmark -> score) and, per benchmark and pair, a classifier (axes -> does A beat B strictly),
each read through mean |SHAP| per feature (shap's TreeExplainer).

The surrogates only localise which axis moves scores or verdicts; rho_flip and the orderings are
exact counts on the observed grid and do not depend on them. Models are kept small and
deterministic (fixed seed, one thread, few shallow trees) so that a rerun gives the same bars.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from safetyrepro.grid.grid_io import Grid, model_pairs
from safetyrepro.tasks.envelope import AXES, Rules

MIN_ROWS_REGRESSOR = 20
MIN_ROWS_CLASSIFIER = 8
MIN_PER_CLASS = 2
PAIR_CLASSIFIERS_MAX = 200  # pair classifiers fitted per benchmark, the most reversed pairs first
NOTES_PER_KIND_MAX = 10  # more skipped pairs of one kind than this are named in one note


@dataclass(frozen=True)
class Attribution:
    regressor: pd.DataFrame  # feature, mean_abs_shap, share, r2_in_sample, n_rows
    classifier: pd.DataFrame  # benchmark, model_a, model_b, axis, mean_abs_shap, share, ...
    notes: tuple[str, ...]


def encode_axes(cells: pd.DataFrame, rules: Rules) -> pd.DataFrame:
    """Axis values as integer codes in the rules file's order (shots as the count itself), so that
    decoding codes follow temperature and template codes follow T1..T4."""
    out = pd.DataFrame(index=cells.index)
    for a in AXES:
        if a == "shots":
            out[a] = cells[a].astype(int)
        else:
            rank = {v: i for i, v in enumerate(rules.axes[a])}
            out[a] = cells[a].map(rank).astype(int)
    return out


def _lgbm_params(n_rows: int, seed: int, n_estimators: int, num_leaves: int) -> dict:
    return dict(
        n_estimators=n_estimators,
        learning_rate=0.1,
        num_leaves=num_leaves,
        min_child_samples=max(2, min(20, n_rows // 30)),
        min_data_in_bin=1,
        random_state=seed,
        deterministic=True,
        force_row_wise=True,
        n_jobs=1,
        verbose=-1,
    )


def shap_values(model, x: pd.DataFrame) -> np.ndarray:
    """What `shap.TreeExplainer(model).shap_values(x)` returns for a LightGBM model (path-dependent
    TreeSHAP, no background data): shap hands that case to LightGBM's own TreeSHAP,
    `booster.predict(x, num_iteration=-1, pred_contrib=True)`, less the expected-value column (here on
    one thread, as the fit: rows are explained independently). Called here directly, because building
    shap's own copy of the trees first (dump_model, parsed per tree) cost several times the fit, once
    per pair (tests/analysis/test_analysis_scaling.py holds the two equal)."""
    values = np.asarray(model.booster_.predict(x, num_iteration=-1, pred_contrib=True, num_threads=1))
    return values[:, :-1]


def _mean_abs_shap(model, x: pd.DataFrame) -> np.ndarray:
    return np.abs(shap_values(model, x)).mean(axis=0)


def _share(values: np.ndarray) -> np.ndarray:
    total = values.sum()
    return values / total if total > 0 else np.zeros_like(values)


def score_regressor(grid: Grid, rules: Rules, seed: int) -> tuple[pd.DataFrame, str | None]:
    cells = grid.cells
    if len(cells) < MIN_ROWS_REGRESSOR:
        return pd.DataFrame(), f"regressor skipped: {len(cells)} cells, fewer than {MIN_ROWS_REGRESSOR}"
    import lightgbm as lgb

    x = encode_axes(cells, rules)
    x.insert(0, "benchmark", cells["benchmark"].map({b: i for i, b in enumerate(grid.benchmarks)}).astype(int))
    x.insert(0, "model", cells["model"].map({m: i for i, m in enumerate(grid.models)}).astype(int))
    y = cells["score"].to_numpy(dtype=float)
    model = lgb.LGBMRegressor(**_lgbm_params(len(x), seed, n_estimators=100, num_leaves=8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(x, y)
    fitted = model.predict(x)
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1 - float(((y - fitted) ** 2).sum()) / total if total > 0 else float("nan")
    shap_abs = _mean_abs_shap(model, x)
    return pd.DataFrame(
        {
            "feature": list(x.columns),
            "mean_abs_shap": shap_abs,
            "share": _share(shap_abs),
            "r2_in_sample": r2,
            "n_rows": len(x),
        }
    ), None


def _fit_classifier(x: pd.DataFrame, y: np.ndarray, seed: int) -> tuple[float, np.ndarray]:
    """(in-sample accuracy, mean |SHAP| per axis) of one pair's classifier."""
    import lightgbm as lgb

    clf = lgb.LGBMClassifier(**_lgbm_params(len(x), seed, n_estimators=50, num_leaves=4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(x, y)
    return float(np.mean(clf.predict(x) == y)), _mean_abs_shap(clf, x)


def _pair_notes(benchmark: str, skipped: list[tuple[str, str, str]]) -> list[str]:
    """One note per skipped pair (kind, pair, words), in pair order; a kind with more than
    NOTES_PER_KIND_MAX pairs is said in one note that names the first of them."""
    counts: dict[str, list[str]] = {}
    for kind, pair, _ in skipped:
        counts.setdefault(kind, []).append(pair)
    notes = [words for kind, _, words in skipped if len(counts[kind]) <= NOTES_PER_KIND_MAX]
    for kind, pairs in counts.items():
        if len(pairs) > NOTES_PER_KIND_MAX:
            notes.append(
                f"classifier {benchmark}: {len(pairs)} pairs {kind} ({', '.join(pairs[:NOTES_PER_KIND_MAX])}, ...)"
            )
    return notes


def pair_classifiers(grid: Grid, rules: Rules, seed: int) -> tuple[pd.DataFrame, list[str]]:
    """Per benchmark x pair on the benchmark's common configurations; ties are left out (no sign).

    A grid of many models has M(M-1)/2 pairs per benchmark (4,950 at 100 models, a LightGBM fit and
    its SHAP values each), so at most PAIR_CLASSIFIERS_MAX pairs are fitted per benchmark: those whose
    verdict reverses most (the most wins of the smaller side, then pair order); the rest are named in
    one note. Pairs with the same untied configurations and the same winners pose the same problem
    and share one fit (the fit is deterministic, so the rows are what separate fits would give)."""
    rows, notes = [], []
    for benchmark in grid.benchmarks:
        ids = grid.config_ids(benchmark)
        m = grid.matrix(benchmark, config_ids=ids)
        axes_frame = (
            grid.cells[grid.cells["benchmark"] == benchmark]
            .drop_duplicates("config_id")
            .set_index("config_id")
            .loc[list(ids)]
        )
        x_all = encode_axes(axes_frame, rules)
        values = m.to_numpy(dtype=float)
        column = {model: i for i, model in enumerate(m.columns)}
        candidates, skipped = [], []
        for a, b in model_pairs(grid.models):
            va, vb = values[:, column[a]], values[:, column[b]]
            strict = va != vb
            y = (va[strict] > vb[strict]).astype(int)
            wins_a, wins_b = int(y.sum()), int(len(y) - y.sum())
            where = f"{benchmark} {a} vs {b}"
            if min(wins_a, wins_b) == 0:
                skipped.append(
                    (
                        "without a strict reversal, nothing to localise",
                        f"{a} vs {b}",
                        f"classifier {where}: no strict reversal, nothing to localise",
                    )
                )
                continue
            if len(y) < MIN_ROWS_CLASSIFIER or min(wins_a, wins_b) < MIN_PER_CLASS:
                skipped.append(
                    (
                        f"skipped: too few wins on one side to fit (needs {MIN_ROWS_CLASSIFIER} untied configs, "
                        f"{MIN_PER_CLASS} per side)",
                        f"{a} vs {b}",
                        f"classifier {where}: skipped, {wins_a} wins for {a} and {wins_b} for {b} are too "
                        f"few to fit (needs {MIN_ROWS_CLASSIFIER} untied configs, {MIN_PER_CLASS} per side)",
                    )
                )
                continue
            candidates.append((a, b, strict, y, wins_a, wins_b))
        notes += _pair_notes(benchmark, skipped)
        chosen = candidates
        if len(candidates) > PAIR_CLASSIFIERS_MAX:
            order = sorted(range(len(candidates)), key=lambda i: -min(candidates[i][4], candidates[i][5]))
            keep = set(order[:PAIR_CLASSIFIERS_MAX])
            chosen = [c for i, c in enumerate(candidates) if i in keep]
            left = [c for i, c in enumerate(candidates) if i not in keep]
            floor = min((min(c[4], c[5]) for c in chosen), default=0)
            notes.append(
                f"classifier {benchmark}: {len(left)} of {len(candidates)} pairs with a strict reversal not "
                f"fitted (at most {PAIR_CLASSIFIERS_MAX} per benchmark, those that reverse most: at least "
                f"{floor} wins on the smaller side); not fitted: "
                + ", ".join(f"{a} vs {b}" for a, b, *_ in left[:NOTES_PER_KIND_MAX])
                + (", ..." if len(left) > NOTES_PER_KIND_MAX else "")
            )
        fitted: dict[tuple[bytes, bytes], tuple[float, np.ndarray]] = {}
        for a, b, strict, y, wins_a, wins_b in chosen:
            key = (strict.tobytes(), y.tobytes())
            x = x_all[strict]
            if key not in fitted:
                fitted[key] = _fit_classifier(x, y, seed)
            accuracy, shap_abs = fitted[key]
            for axis, value, share in zip(x.columns, shap_abs, _share(shap_abs), strict=True):
                rows.append(
                    {
                        "benchmark": benchmark,
                        "model_a": a,
                        "model_b": b,
                        "axis": axis,
                        "mean_abs_shap": float(value),
                        "share": float(share),
                        "n_configs": len(x),
                        "n_a_wins": wins_a,
                        "n_b_wins": wins_b,
                        "accuracy_in_sample": accuracy,
                    }
                )
    return pd.DataFrame(rows), notes


def axis_attribution(grid: Grid, rules: Rules, seed: int) -> Attribution:
    regressor, note = score_regressor(grid, rules, seed)
    classifier, notes = pair_classifiers(grid, rules, seed)
    return Attribution(regressor, classifier, tuple(([note] if note else []) + notes))
