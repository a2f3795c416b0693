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

from safetyrepro.tasks.envelope import AXES, Rules

from .grid_io import Grid
from .rank_flip import model_pairs

MIN_ROWS_REGRESSOR = 20
MIN_ROWS_CLASSIFIER = 8
MIN_PER_CLASS = 2


@dataclass(frozen=True)
class Attribution:
    regressor: pd.DataFrame   # feature, mean_abs_shap, share, r2_in_sample, n_rows
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
    return dict(n_estimators=n_estimators, learning_rate=0.1, num_leaves=num_leaves,
                min_child_samples=max(2, min(20, n_rows // 30)), min_data_in_bin=1, random_state=seed,
                deterministic=True, force_row_wise=True, n_jobs=1, verbose=-1)


def _mean_abs_shap(model, x: pd.DataFrame) -> np.ndarray:
    with warnings.catch_warnings():
        # shap warns about matplotlib colour-map APIs on import and about its binary-LightGBM output
        # format on every call; neither concerns the numbers read here
        warnings.simplefilter("ignore")
        import shap

        values = shap.TreeExplainer(model).shap_values(x)
    if isinstance(values, list):  # older shap: one array per class
        values = values[-1]
    values = np.asarray(values)
    if values.ndim == 3:
        values = values[:, :, -1]
    return np.abs(values).mean(axis=0)


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
    return pd.DataFrame({"feature": list(x.columns), "mean_abs_shap": shap_abs, "share": _share(shap_abs),
                         "r2_in_sample": r2, "n_rows": len(x)}), None


def pair_classifiers(grid: Grid, rules: Rules, seed: int) -> tuple[pd.DataFrame, list[str]]:
    """Per benchmark x pair on the benchmark's common configurations; ties are left out (no sign)."""
    import lightgbm as lgb

    rows, notes = [], []
    for benchmark in grid.benchmarks:
        ids = grid.config_ids(benchmark)
        m = grid.matrix(benchmark, config_ids=ids)
        axes_frame = grid.cells[grid.cells["benchmark"] == benchmark].drop_duplicates("config_id") \
            .set_index("config_id").loc[list(ids)]
        x_all = encode_axes(axes_frame, rules)
        for a, b in model_pairs(grid.models):
            diff = (m[a] - m[b]).to_numpy()
            strict = diff != 0
            y = (diff[strict] > 0).astype(int)
            wins_a, wins_b = int(y.sum()), int(len(y) - y.sum())
            where = f"{benchmark} {a} vs {b}"
            if min(wins_a, wins_b) == 0:
                notes.append(f"classifier {where}: no strict reversal, nothing to localise")
                continue
            if len(y) < MIN_ROWS_CLASSIFIER or min(wins_a, wins_b) < MIN_PER_CLASS:
                notes.append(f"classifier {where}: skipped, {wins_a} wins for {a} and {wins_b} for {b} are too "
                             f"few to fit (needs {MIN_ROWS_CLASSIFIER} untied configs, {MIN_PER_CLASS} per side)")
                continue
            x = x_all[strict]
            clf = lgb.LGBMClassifier(**_lgbm_params(len(x), seed, n_estimators=50, num_leaves=4))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                clf.fit(x, y)
            accuracy = float((clf.predict(x) == y).mean())
            shap_abs = _mean_abs_shap(clf, x)
            for axis, value, share in zip(x.columns, shap_abs, _share(shap_abs), strict=True):
                rows.append({"benchmark": benchmark, "model_a": a, "model_b": b, "axis": axis,
                             "mean_abs_shap": float(value), "share": float(share), "n_configs": len(x),
                             "n_a_wins": wins_a, "n_b_wins": wins_b, "accuracy_in_sample": accuracy})
    return pd.DataFrame(rows), notes


def axis_attribution(grid: Grid, rules: Rules, seed: int) -> Attribution:
    regressor, note = score_regressor(grid, rules, seed)
    classifier, notes = pair_classifiers(grid, rules, seed)
    return Attribution(regressor, classifier, tuple(([note] if note else []) + notes))
